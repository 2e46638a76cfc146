package data

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestDispatcherDelivered: a learner lost after delivering part of a
// chunk gives back only the rest; counts cannot go backwards or beyond
// the chunk.
func TestDispatcherDelivered(t *testing.T) {
	d, err := NewDispatcher(Plan{Images: 40, Batch: 2, Chunk: 5, Epochs: 1}) // 20 batches, 4 chunks
	if err != nil {
		t.Fatal(err)
	}
	c, _ := d.Next(0)
	if err := d.Delivered(0, c, 3); err != nil {
		t.Fatal(err)
	}
	if err := d.Delivered(0, c, 2); err != nil { // late and lower: nothing
		t.Fatal(err)
	}
	if err := d.Delivered(0, c, 6); !errors.Is(err, ErrChunk) {
		t.Errorf("6 of 5 delivered: %v, want ErrChunk", err)
	}
	if err := d.Delivered(1, c, 4); !errors.Is(err, ErrChunk) {
		t.Errorf("delivered by another learner: %v, want ErrChunk", err)
	}
	if got := d.Stats().Batches; got != 3 {
		t.Errorf("batches %d, want 3", got)
	}
	d.Release(0)
	r, _ := d.Next(1)
	if want := (Chunk{Epoch: 0, First: 3, Count: 2, Stride: 1}); r != want {
		t.Errorf("released rest %+v, want %+v", r, want)
	}
	if err := d.Complete(1, r); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Batches != 5 || st.Completed != 1 {
		t.Errorf("stats %+v, want 5 batches, 1 chunk", st)
	}
}

// handOut returns the ids of the mini-batches d hands learner 0 until
// it has none for it, each chunk completed at once.
func handOut(t *testing.T, d *Dispatcher) []uint64 {
	t.Helper()
	var ids []uint64
	for {
		c, err := d.Next(0)
		if errors.Is(err, ErrEnd) || errors.Is(err, ErrIdle) {
			return ids
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.Count {
			ids = append(ids, d.id(c, i))
		}
		if err := d.Complete(0, c); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDispatcherRebuild: after a rebuild from what the shards have and
// what learners hold, the job hands out exactly the other mini-batches,
// each once, and ends once the holdings are complete, for softsync and
// hardsync plans and random done sets.
func TestDispatcherRebuild(t *testing.T) {
	for _, p := range []Plan{
		{Images: 103, Batch: 10, Chunk: 3, Epochs: 2},
		{Images: 200, Batch: 4, Group: 3, Chunk: 5, Epochs: 2},
	} {
		for seed := range 20 {
			t.Run(fmt.Sprintf("group%d/seed%d", p.Group, seed), func(t *testing.T) {
				d, err := NewDispatcher(p)
				if err != nil {
					t.Fatal(err)
				}
				total := p.Total()
				done := map[uint64]bool{}
				horizon := uint64(0)
				// The first half of the job, with holes; a held chunk.
				for id := uint64(1); id <= uint64(total/2); id++ {
					if (id*7+uint64(seed))%5 != 0 {
						done[id] = true
						horizon = id + 1
					}
				}
				ref, _ := NewDispatcher(p)
				var chunks []Chunk
				for {
					c, err := ref.Next(0)
					if err != nil {
						break
					}
					chunks = append(chunks, c)
				}
				h := chunks[(seed*3)%len(chunks)]
				delivered := seed % h.Count
				for i := range h.Count {
					delete(done, ref.id(h, i))
				}
				for i := range delivered {
					done[ref.id(h, i)] = true
				}
				if _, err := d.Rebuild(horizon, func(id uint64) bool { return done[id] }, []Holding{{Learner: 1, Chunk: h, Delivered: delivered}}); err != nil {
					t.Fatal(err)
				}
				got := handOut(t, d)
				if d.Done() {
					t.Fatal("done while learner 1 holds a chunk")
				}
				if err := d.Complete(1, h); err != nil {
					t.Fatal(err)
				}
				if !d.Done() {
					t.Fatalf("not done; undelivered %v", d.Undelivered())
				}
				for i := delivered; i < h.Count; i++ {
					got = append(got, ref.id(h, i))
				}
				slices.Sort(got)
				var want []uint64
				for id := uint64(1); id <= uint64(total); id++ {
					if !done[id] {
						want = append(want, id)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("handed out %v, want %v", got, want)
				}
				if st := d.Stats(); st.Batches != total {
					t.Errorf("batches %d, want %d", st.Batches, total)
				}
			})
		}
	}
}

func TestDispatcherRebuildErrors(t *testing.T) {
	p := Plan{Images: 40, Batch: 2, Chunk: 5, Epochs: 1}
	d, _ := NewDispatcher(p)
	c := Chunk{Epoch: 0, First: 0, Count: 5, Stride: 1}
	for _, held := range [][]Holding{
		{{Chunk: Chunk{Epoch: 0, First: 18, Count: 5, Stride: 1}}}, // beyond the epoch
		{{Chunk: Chunk{Epoch: 1, First: 0, Count: 1, Stride: 1}}},  // beyond the job
		{{Chunk: Chunk{Epoch: 0, First: 0, Count: 5, Stride: 2}}},  // another stride
		{{Chunk: c, Delivered: 6}},                                 // more delivered than held
	} {
		if _, err := d.Rebuild(0, func(uint64) bool { return false }, held); !errors.Is(err, ErrChunk) {
			t.Errorf("%+v: %v, want ErrChunk", held, err)
		}
	}
}

// TestDispatcherRebuildOverlap: of two holdings with a mini-batch in
// common, the later is left out (returned); its mini-batches the earlier
// does not hold wait to be handed out, and the job is done once the
// earlier holding is complete.
func TestDispatcherRebuildOverlap(t *testing.T) {
	p := Plan{Images: 40, Batch: 2, Chunk: 5, Epochs: 1}
	d, _ := NewDispatcher(p)
	c := Chunk{Epoch: 0, First: 0, Count: 5, Stride: 1}
	later := Holding{Learner: 1, Chunk: Chunk{Epoch: 0, First: 3, Count: 5, Stride: 1}}
	dropped, err := d.Rebuild(0, func(uint64) bool { return false }, []Holding{{Chunk: c}, later})
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 1 || dropped[0] != later {
		t.Fatalf("dropped %+v, want %+v", dropped, later)
	}
	got := handOut(t, d)
	if err := d.Complete(0, c); err != nil {
		t.Fatal(err)
	}
	for i := range c.Count {
		got = append(got, d.id(c, i))
	}
	slices.Sort(got)
	if want := d.total; len(got) != want || !d.Done() {
		t.Fatalf("handed out %v with learner 0's, done %v; want the %d mini-batches, done", got, d.Done(), want)
	}
}

// TestDispatcherRedo: mini-batches delivered but missing from a shard
// server that came back are handed out again, first; those still open
// are not.
func TestDispatcherRedo(t *testing.T) {
	d, _ := NewDispatcher(Plan{Images: 40, Batch: 2, Chunk: 5, Epochs: 1}) // ids 1…20
	a, _ := d.Next(0)
	b, _ := d.Next(0)
	d.Complete(0, a)     // 1…5
	d.Delivered(0, b, 2) // 6, 7; 8…10 open
	has := func(id uint64) bool { return id <= 2 }
	if n := d.Redo(has); n != 5 {
		t.Fatalf("redo %d, want 5 (3, 4, 5, 6, 7)", n)
	}
	for _, want := range []Chunk{{Epoch: 0, First: 2, Count: 3, Stride: 1}, {Epoch: 0, First: 5, Count: 2, Stride: 1}} {
		if c, _ := d.Next(1); c != want {
			t.Errorf("next %+v, want %+v", c, want)
		}
	}
	if st := d.Stats(); st.Redone != 5 || st.Batches != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestDispatcherClaim: a rejoining learner keeps a chunk whose
// mini-batches still wait (cut or not); not one another was given.
func TestDispatcherClaim(t *testing.T) {
	d, _ := NewDispatcher(Plan{Images: 40, Batch: 2, Chunk: 5, Epochs: 1}) // ids 1…20, chunks of 5
	a, _ := d.Next(0)                                                      // 1…5
	far := Chunk{Epoch: 0, First: 15, Count: 5, Stride: 1}                 // 16…20, not cut yet
	if err := d.Claim(Holding{Learner: 1, Chunk: far, Delivered: 2}); err != nil {
		t.Fatal(err)
	}
	if err := d.Claim(Holding{Learner: 2, Chunk: a}); !errors.Is(err, ErrChunk) {
		t.Errorf("claim of a chunk learner 0 holds: %v, want ErrChunk", err)
	}
	var got []Chunk
	for {
		c, err := d.Next(0)
		if err != nil {
			break
		}
		got = append(got, c)
		d.Complete(0, c)
	}
	want := []Chunk{{Epoch: 0, First: 5, Count: 5, Stride: 1}, {Epoch: 0, First: 10, Count: 5, Stride: 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("handed out %v, want %v (the claimed chunk is learner 1's)", got, want)
	}
	if err := d.Complete(1, far); err != nil {
		t.Errorf("learner 1 completes its claimed chunk: %v", err)
	}
}
