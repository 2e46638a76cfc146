package ps

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBatchSetAdd checks Add's four cases (new interval, extend left or
// right, merge two) and the ends of the id range.
func TestBatchSetAdd(t *testing.T) {
	var s BatchSet
	for _, c := range []struct {
		id   uint64
		new  bool
		want []Interval
	}{
		{5, true, []Interval{{5, 5}}},
		{5, false, []Interval{{5, 5}}},
		{0, false, []Interval{{5, 5}}}, // 0 is never an id
		{7, true, []Interval{{5, 5}, {7, 7}}},
		{6, true, []Interval{{5, 7}}}, // merges
		{4, true, []Interval{{4, 7}}}, // extends to the left
		{8, true, []Interval{{4, 8}}}, // to the right
		{1, true, []Interval{{1, 1}, {4, 8}}},
		{math.MaxUint64, true, []Interval{{1, 1}, {4, 8}, {math.MaxUint64, math.MaxUint64}}},
		{math.MaxUint64 - 1, true, []Interval{{1, 1}, {4, 8}, {math.MaxUint64 - 1, math.MaxUint64}}},
		{math.MaxUint64, false, []Interval{{1, 1}, {4, 8}, {math.MaxUint64 - 1, math.MaxUint64}}},
		{3, true, []Interval{{1, 1}, {3, 8}, {math.MaxUint64 - 1, math.MaxUint64}}},
		{2, true, []Interval{{1, 8}, {math.MaxUint64 - 1, math.MaxUint64}}},
	} {
		if got := s.Add(c.id); got != c.new || !slices.Equal(s.Intervals(), c.want) {
			t.Fatalf("Add(%d) = %v, set %v; want %v, %v", c.id, got, s.Intervals(), c.new, c.want)
		}
	}
	if s.Count() != 10 || s.Len() != 2 || s.Contains(0) || s.Contains(9) || !s.Contains(8) || !s.Contains(math.MaxUint64) {
		t.Errorf("count %d, len %d, or membership wrong: %v", s.Count(), s.Len(), s.Intervals())
	}
}

// TestBatchSetModel adds seeded random ids, strided and scattered, and
// compares the set with a map after every Add: membership, count, and
// the canonical form (sorted, disjoint, not adjacent), which
// MakeBatchSet must accept and reproduce.
func TestBatchSetModel(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 3))
		var s BatchSet
		model := map[uint64]bool{}
		for range 400 {
			var id uint64
			if r.IntN(2) == 0 {
				id = 1 + uint64(r.IntN(200)) // dense: merges
			} else {
				id = 1 + 4*uint64(r.IntN(100)) // strided, as a learner's chunks
			}
			if got := s.Add(id); got == model[id] {
				t.Fatalf("seed %d: Add(%d) = %v with the id already in: %v", seed, id, got, model[id])
			}
			model[id] = true
			for probe := uint64(0); probe <= 402; probe++ {
				if s.Contains(probe) != model[probe] {
					t.Fatalf("seed %d: Contains(%d) = %v, want %v (set %v)", seed, probe, !model[probe], model[probe], s.Intervals())
				}
			}
		}
		iv := s.Intervals()
		if _, err := MakeBatchSet(iv); err != nil {
			t.Fatalf("seed %d: the set's own intervals refused: %v", seed, err)
		}
		if s.Count() != uint64(len(model)) {
			t.Fatalf("seed %d: count %d, want %d", seed, s.Count(), len(model))
		}
	}
}

func TestMakeBatchSet(t *testing.T) {
	good := []Interval{{1, 3}, {5, 5}, {7, 100}}
	s, err := MakeBatchSet(good)
	if err != nil || !slices.Equal(s.Intervals(), good) {
		t.Fatalf("MakeBatchSet(%v) = %v, %v", good, s.Intervals(), err)
	}
	good[0].Last = 4 // a copy: the set does not change
	if !slices.Equal(s.Intervals(), []Interval{{1, 3}, {5, 5}, {7, 100}}) {
		t.Fatalf("the set shares its argument: %v", s.Intervals())
	}
	for _, bad := range [][]Interval{
		{{0, 3}},                      // id 0
		{{4, 3}},                      // empty
		{{1, 3}, {3, 5}},              // overlap
		{{1, 3}, {4, 5}},              // adjacent: not maximal
		{{5, 6}, {1, 2}},              // unsorted
		{{1, math.MaxUint64}, {2, 3}}, // after the end of the id range
	} {
		if _, err := MakeBatchSet(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("MakeBatchSet(%v): %v, want ErrInvalidConfig", bad, err)
		}
	}
}

// TestBatchSetIntersect compares Intersect with the model on seeded
// random sets, and checks the result is in canonical form.
func TestBatchSetIntersect(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 5))
		var a, b BatchSet
		for range 150 {
			a.Add(1 + uint64(r.IntN(120)))
			b.Add(1 + uint64(r.IntN(120)))
		}
		x := a.Intersect(&b)
		if _, err := MakeBatchSet(x.Intervals()); err != nil {
			t.Fatalf("seed %d: intersection not canonical: %v", seed, err)
		}
		for id := uint64(0); id <= 121; id++ {
			if want := a.Contains(id) && b.Contains(id); x.Contains(id) != want {
				t.Fatalf("seed %d: %d in the intersection: %v, want %v", seed, id, !want, want)
			}
		}
	}
	var empty BatchSet
	full, _ := MakeBatchSet([]Interval{{1, 10}})
	if x := full.Intersect(&empty); x.Len() != 0 {
		t.Errorf("intersection with the empty set: %v", x.Intervals())
	}
}

// BenchmarkBatchSetAdd checks and adds ids of 8 streams of consecutive
// mini-batches far apart, in turn: a set of 8 intervals growing at their
// ends, as a shard's consumed set grows behind its learners.
func BenchmarkBatchSetAdd(b *testing.B) {
	var s BatchSet
	id := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		id++
		x := (id%8)<<40 + id/8 + 1 // 8 streams far apart: 8 intervals
		if s.Contains(x) || !s.Add(x) {
			b.Fatal("id seen twice")
		}
	}
}
