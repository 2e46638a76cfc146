package checkpoint

import (
	"fmt"
	"slices"
	"strings"

	"github.com/softsync/softsync/ps"
)

// ResplitInfo says what Resplit did.
type ResplitInfo struct {
	// Relaid: the layout changed. Otherwise Resplit returned the old
	// shards themselves, in shard order.
	Relaid bool
	// DroppedPending is the largest number of pending gradients an old
	// shard held when the layout changed: their accumulations were
	// dropped. 0 if nothing was pending or the layout is unchanged.
	DroppedPending int
}

// Resplit turns the shards of one version (every shard file of it, in any
// order) into the shards of a layout of shards shards over a vector of
// total floats (ps.Ranges). If the old shards already have that layout it
// returns them unchanged (the same values, sorted by index). Otherwise each
// new shard gets:
//
//   - its range of the weights and of the momentum, copied exactly;
//   - clock: the largest old clock; samples: the smallest old count (so
//     that no epoch is counted twice) and the epoch counter of that shard;
//   - per learner: the largest last sequence and incarnation of any old
//     shard, evicted if an old shard evicted that incarnation, active if
//     active in any old shard and not evicted, not pushed in the round;
//   - no pending gradients: an accumulation is a sum over one shard's
//     range of the gradients it had accepted, and shards accept different
//     numbers, so the pending gradients are dropped (ResplitInfo says how
//     many, to log) and their samples are never counted;
//   - consumed mini-batches: those every old shard whose range it takes
//     elements from had consumed (the intersection of their sets), so
//     that no mini-batch counts as consumed for elements that never got
//     its gradient (a dropped pending gradient stays consumed: its
//     mini-batch is not done again);
//   - fresh statistics: each old shard counted its own updates, gradients,
//     rejections and staleness, which do not add up across a new range;
//     only Clock, Samples and Epoch are carried (as above).
//   - no rule state: the rules' running statistics (sgd.State's
//     MeanSquare, StepSquare, Steps and RecentTau) start afresh, and the
//     copies of the weights served to the learners (ps.Checkpoint.Pulled)
//     are dropped: each old shard served its range at its own clocks (a
//     later gradient whose copy is missing is applied uncorrected).
//
// The old shards must be the shards of one layout covering [0, total)
// once, with the same number of learners; otherwise the error wraps
// ErrMismatch.
func Resplit(old []*Shard, total, shards int) ([]*Shard, ResplitInfo, error) {
	var info ResplitInfo
	if len(old) == 0 {
		return nil, info, fmt.Errorf("%w: no old shards", ErrMismatch)
	}
	if err := checkLayout(old, nil); err != nil {
		return nil, info, err
	}
	old = slices.Clone(old)
	slices.SortFunc(old, func(a, b *Shard) int { return a.Shard - b.Shard })
	if old[0].Total != total {
		return nil, info, fmt.Errorf("%w: the checkpoint holds a vector of %d floats, the job's has %d", ErrMismatch, old[0].Total, total)
	}
	ranges, err := ps.Ranges(total, shards)
	if err != nil {
		return nil, info, fmt.Errorf("%w: %w", ErrMismatch, err)
	}
	if old[0].Shards == shards {
		return old, info, nil
	}
	for _, o := range old {
		if o.dropped {
			return nil, info, fmt.Errorf("%w: shard %d of %d: its arrays were let go after it was read (Snapshot.ShardsOf)", ErrMismatch, o.Shard, o.Shards)
		}
	}
	info.Relaid = true
	learners := old[0].Learners()
	merged := &Shard{
		Checkpoint: ps.Checkpoint{Total: total, Samples: old[0].Samples, Active: make([]bool, learners),
			LastSeq: make([]uint64, learners), RoundPushed: make([]bool, learners)},
		Shards: shards, Incarnations: make([]uint32, learners), Evicted: make([]bool, learners),
	}
	epoch := old[0].Stats.Epoch
	for _, o := range old {
		info.DroppedPending = max(info.DroppedPending, o.Solver.Pending)
		merged.Clock = max(merged.Clock, o.Clock)
		if o.Samples < merged.Samples {
			merged.Samples, epoch = o.Samples, o.Stats.Epoch
		}
		for l := range learners {
			merged.LastSeq[l] = max(merged.LastSeq[l], o.LastSeq[l])
			if o.Incarnations[l] > merged.Incarnations[l] {
				merged.Incarnations[l], merged.Evicted[l] = o.Incarnations[l], false
			}
		}
	}
	for _, o := range old {
		for l := range learners {
			if o.Incarnations[l] == merged.Incarnations[l] {
				merged.Evicted[l] = merged.Evicted[l] || o.Evicted[l]
			}
			merged.Active[l] = merged.Active[l] || o.Active[l]
		}
	}
	for l := range learners {
		merged.Active[l] = merged.Active[l] && !merged.Evicted[l]
	}
	out := make([]*Shard, shards)
	for k, r := range ranges {
		s := &Shard{Checkpoint: merged.Checkpoint, Shards: shards}
		s.Shard = k
		s.Active, s.LastSeq, s.RoundPushed = slices.Clone(merged.Active), slices.Clone(merged.LastSeq), slices.Clone(merged.RoundPushed)
		s.Incarnations, s.Evicted = slices.Clone(merged.Incarnations), slices.Clone(merged.Evicted)
		s.Pending = make([]uint32, learners)
		s.Stats = ps.Stats{Shard: k, Clock: merged.Clock, Samples: merged.Samples, Epoch: epoch, RefusedGradients: make([]uint64, learners)}
		s.Weights, s.Solver.Momentum = make([]float32, r.Len()), make([]float32, r.Len())
		var consumed *ps.BatchSet
		for _, o := range old {
			or, _ := o.Range() // checked by checkLayout
			lo, hi := max(r.Lo, or.Lo), min(r.Hi, or.Hi)
			if lo < hi {
				copy(s.Weights[lo-r.Lo:hi-r.Lo], o.Weights[lo-or.Lo:hi-or.Lo])
				copy(s.Solver.Momentum[lo-r.Lo:hi-r.Lo], o.Solver.Momentum[lo-or.Lo:hi-or.Lo])
				set, _ := ps.MakeBatchSet(o.Consumed) // checked by checkLayout
				if consumed != nil {
					set = consumed.Intersect(&set)
				}
				consumed = &set
			}
		}
		s.Consumed = consumed.Intervals()
		out[k] = s
	}
	return out, info, nil
}

// checkLayout checks that shards are the shards of one layout: each
// consistent in itself (Shard.check), all with the same vector length,
// shard count and learners, each index once. names, if not nil, names the
// file of each shard for the errors.
func checkLayout(shards []*Shard, names []string) error {
	name := func(i int) string {
		if names == nil {
			return fmt.Sprintf("shard %d", shards[i].Shard)
		}
		return names[i]
	}
	first := shards[0]
	holder := make(map[int]int, len(shards))
	for i, s := range shards {
		if _, err := s.check(); err != nil {
			return fmt.Errorf("%s: %w", name(i), err)
		}
		if s.Total != first.Total || s.Shards != first.Shards || s.Learners() != first.Learners() {
			return fmt.Errorf("%w: %s is shard %d of %d of a %d-vector with %d learners, %s shard %d of %d of a %d-vector with %d learners",
				ErrMismatch, name(i), s.Shard, s.Shards, s.Total, s.Learners(), name(0), first.Shard, first.Shards, first.Total, first.Learners())
		}
		if j, dup := holder[s.Shard]; dup {
			return fmt.Errorf("%w: %s and %s both hold shard %d", ErrMismatch, name(j), name(i), s.Shard)
		}
		holder[s.Shard] = i
	}
	if len(shards) != first.Shards {
		var missing []string
		for k := range first.Shards {
			if _, ok := holder[k]; !ok {
				r, _ := ps.RangeOf(first.Total, first.Shards, k)
				missing = append(missing, fmt.Sprintf("%d [%d, %d)", k, r.Lo, r.Hi))
				if len(missing) == 8 {
					missing = append(missing, "…")
					break
				}
			}
		}
		return fmt.Errorf("%w: %d shard files of a layout of %d shards; missing shards %s", ErrMismatch, len(shards), first.Shards, strings.Join(missing, ", "))
	}
	return nil
}
