package bench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestPlanScale(t *testing.T) {
	seq := func(n int) []int {
		v := make([]int, n)
		for i := range v {
			v[i] = i
		}
		return v
	}
	type mask struct {
		role string
		id   int
		cpus []int
	}
	for _, c := range []struct {
		cpus       []int
		shards     int
		max        int
		learners   []int
		tooFew     bool
		sharedFrom int // the first λ that shares CPUs; 0: none
		masks      []mask
	}{
		{cpus: seq(8), shards: 1, learners: []int{1, 2, 4, 7},
			masks: []mask{{"eval", 0, []int{0}}, {"ps", 0, []int{0}}, {"learner", 0, []int{1}}, {"learner", 6, []int{7}}}},
		{cpus: seq(9), shards: 1, learners: []int{1, 2, 4, 8}},
		{cpus: seq(16), shards: 1, learners: []int{1, 2, 4, 8, 15}},
		{cpus: seq(8), shards: 2, learners: []int{1, 2, 4, 6},
			masks: []mask{{"eval", 0, []int{0, 1}}, {"ps", 1, []int{1}}, {"learner", 0, []int{2}}, {"learner", 5, []int{7}}}},
		{cpus: seq(8), shards: 1, max: 2, learners: []int{1, 2}},
		{cpus: []int{2, 5, 9, 11}, shards: 1, learners: []int{1, 2, 3},
			masks: []mask{{"eval", 0, []int{2}}, {"ps", 0, []int{2}}, {"learner", 0, []int{5}}, {"learner", 2, []int{11}}}},
		{cpus: seq(2), shards: 1, learners: []int{1, 2}, tooFew: true, sharedFrom: 2,
			masks: []mask{{"eval", 0, []int{0}}, {"ps", 0, []int{0}}, {"learner", 0, []int{1}}, {"learner", 1, []int{0}}}},
		{cpus: seq(3), shards: 2, learners: []int{1, 2, 3}, tooFew: true, sharedFrom: 2,
			masks: []mask{{"eval", 0, []int{0, 1}}, {"learner", 0, []int{2}}, {"learner", 1, []int{0}}}},
		{cpus: []int{4}, shards: 1, learners: []int{1}, tooFew: true, sharedFrom: 1,
			masks: []mask{{"eval", 0, []int{4}}, {"ps", 0, []int{4}}, {"learner", 0, []int{4}}}},
	} {
		p := PlanScale(c.cpus, c.shards, c.max)
		name := fmt.Sprintf("CPUs %v, S = %d", c.cpus, c.shards)
		if !slices.Equal(p.Learners, c.learners) {
			t.Errorf("%s: λ %v, want %v", name, p.Learners, c.learners)
		}
		if got := strings.Contains(p.Note, "too few CPUs"); got != c.tooFew {
			t.Errorf("%s: note %q", name, p.Note)
		}
		for _, l := range p.Learners {
			if want := c.sharedFrom > 0 && l >= c.sharedFrom; p.Shared(l) != want {
				t.Errorf("%s: λ = %d shared %v, want %v", name, l, p.Shared(l), want)
			}
		}
		for _, m := range c.masks {
			if got := p.CPUsOf(m.role, m.id); !slices.Equal(got, m.cpus) {
				t.Errorf("%s: %s %d on CPUs %v, want %v", name, m.role, m.id, got, m.cpus)
			}
		}
	}
}
