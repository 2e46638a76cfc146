package ps

import (
	"fmt"
	"slices"
	"sort"

	"github.com/softsync/softsync/ps/param"
)

// Interval is the mini-batch ids First … Last, both included (1 ≤ First
// ≤ Last).
type Interval struct{ First, Last uint64 }

// BatchSet is a set of mini-batch ids (1 … 2⁶⁴−1; 0 is never in it) kept
// as its maximal intervals, sorted: disjoint and never adjacent (an id
// that joins two intervals merges them). A job hands out consecutive or
// strided mini-batches, so the ids a shard consumes fill in behind the
// learners and the set stays a few intervals per learner. Contains and
// Add find their place by binary search, O(log n) in the n intervals;
// Add then extends or merges an interval in place, or inserts one, which
// moves the intervals after it (ids arrive nearly in order, so those are
// few). The zero value is the empty set.
type BatchSet struct{ iv []Interval }

// MakeBatchSet returns the set of the ids of iv, which must be sorted,
// disjoint and not adjacent, each with 1 ≤ First ≤ Last (the form
// Intervals returns); otherwise it returns a *param.FieldError naming the
// first bad interval. It copies iv.
func MakeBatchSet(iv []Interval) (BatchSet, error) { return makeBatchSet("Intervals", iv) }

// makeBatchSet is MakeBatchSet, its errors naming field.
func makeBatchSet(field string, iv []Interval) (BatchSet, error) {
	for i, v := range iv {
		switch {
		case v.First == 0 || v.First > v.Last:
			return BatchSet{}, param.Fieldf(fmt.Sprintf("%s[%d]", field, i), "[%d, %d] is not an interval of ids ≥ 1", v.First, v.Last)
		case i > 0 && v.First-1 <= iv[i-1].Last:
			return BatchSet{}, param.Fieldf(fmt.Sprintf("%s[%d]", field, i), "[%d, %d] overlaps or touches [%d, %d] before it",
				v.First, v.Last, iv[i-1].First, iv[i-1].Last)
		}
	}
	return BatchSet{iv: slices.Clone(iv)}, nil
}

// at returns the index of the first interval ending at or after id.
func (s *BatchSet) at(id uint64) int {
	return sort.Search(len(s.iv), func(i int) bool { return s.iv[i].Last >= id })
}

// Contains reports whether id is in the set.
func (s *BatchSet) Contains(id uint64) bool {
	i := s.at(id)
	return i < len(s.iv) && s.iv[i].First <= id
}

// Add puts id in the set and reports whether it was new; adding 0 does
// nothing and reports false.
func (s *BatchSet) Add(id uint64) bool {
	if id == 0 {
		return false
	}
	i := s.at(id)
	if i < len(s.iv) && s.iv[i].First <= id {
		return false
	}
	left := i > 0 && s.iv[i-1].Last == id-1
	right := i < len(s.iv) && s.iv[i].First == id+1
	switch {
	case left && right:
		s.iv[i-1].Last = s.iv[i].Last
		s.iv = slices.Delete(s.iv, i, i+1)
	case left:
		s.iv[i-1].Last = id
	case right:
		s.iv[i].First = id
	default:
		s.iv = slices.Insert(s.iv, i, Interval{id, id})
	}
	return true
}

// Len returns the number of intervals.
func (s *BatchSet) Len() int { return len(s.iv) }

// Count returns the number of ids.
func (s *BatchSet) Count() uint64 {
	var n uint64
	for _, v := range s.iv {
		n += v.Last - v.First + 1
	}
	return n
}

// Intervals returns a copy of the set's intervals, sorted (nil for the
// empty set).
func (s *BatchSet) Intervals() []Interval { return slices.Clone(s.iv) }

// Intersect returns the set of the ids in both s and o.
func (s *BatchSet) Intersect(o *BatchSet) BatchSet {
	var out []Interval
	a, b := s.iv, o.iv
	for len(a) > 0 && len(b) > 0 {
		lo, hi := max(a[0].First, b[0].First), min(a[0].Last, b[0].Last)
		if lo <= hi {
			out = append(out, Interval{lo, hi})
		}
		if a[0].Last < b[0].Last {
			a = a[1:]
		} else {
			b = b[1:]
		}
	}
	return BatchSet{iv: out}
}
