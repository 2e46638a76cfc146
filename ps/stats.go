package ps

import "slices"

// HistogramLen is the number of buckets of Stats.Histogram: bucket τ counts
// gradients of staleness τ, the last bucket those of staleness ≥
// HistogramLen−1 (so a peer cannot grow it without bound).
const HistogramLen = 1024

// Rejections counts rejected messages per reason (see the Err* values).
type Rejections struct {
	WrongJob, WrongShard, UnknownLearner, BadType  uint64
	BadLength, FutureClock, NonFinite, AlreadyPush uint64
	Diverged                                       uint64
}

// Total returns the number of rejected messages.
func (r Rejections) Total() uint64 {
	var t uint64
	for _, n := range r.counters() {
		t += *n
	}
	return t
}

// counters returns the counters in the order of rejectionReasons.
func (r *Rejections) counters() []*uint64 {
	return []*uint64{&r.WrongJob, &r.WrongShard, &r.UnknownLearner, &r.BadType, &r.BadLength,
		&r.FutureClock, &r.NonFinite, &r.AlreadyPush, &r.Diverged}
}

// Stats are the counters of one shard.
type Stats struct {
	Shard   int    // shard index
	Clock   uint64 // current clock i
	Updates uint64 // updates applied
	Partial uint64 // updates of fewer than c₀ gradients, at a rate scaled by c/c₀ (Config.Quorum)
	Refused uint64 // updates refused: each would have made a weight or its momentum NaN or infinite
	// RefusedGradients counts, per learner id, the learner's gradients
	// that refused updates discarded.
	RefusedGradients []uint64
	Gradients        uint64 // accepted gradients (applied, pending in the next update, or discarded with a refused one)
	Dropped          uint64 // gradients dropped as too stale
	Duplicates       uint64 // pushes ignored as duplicates (a sequence already seen)
	Redone           uint64 // pushes ignored as redone (a mini-batch already consumed)
	StaleLife        uint64 // pushes given up: computed on weights of another life of the shard
	// EmptyRounds counts hardsync rounds that ended without a gradient
	// (every push of the round redone, or, on a restored shard, claimed
	// by pushes of an earlier life): the clock advanced, nothing was
	// applied. Updates + Refused + EmptyRounds equals Clock unless the
	// shard was restored.
	EmptyRounds uint64
	Rejected    Rejections
	Samples     uint64 // samples of applied, refused and dropped gradients (Batch each)
	Epoch       int    // ⌊Samples / DataSize⌋, 0 without DataSize
	// Histogram[τ] counts accepted gradients of staleness τ; trailing
	// zero buckets are trimmed, the last of HistogramLen buckets collects
	// τ ≥ HistogramLen−1.
	Histogram    []uint64
	StalenessSum uint64 // Σ τ over accepted gradients
	MaxStaleness int    // max τ over accepted gradients
	// PulledBytes is the memory of the weights the shard keeps per
	// learner for the rules that compare a gradient with the weights it
	// was computed on (sgd.Config.NeedsPulled): 4 bytes per float of each
	// copy allocated, one copy of the shard's range per learner that
	// pulled (two for a learner that prefetches); 0 for the other rules
	// and under hardsync.
	PulledBytes uint64
}

// MeanStaleness returns the mean τ of accepted gradients (0 if none).
func (s *Stats) MeanStaleness() float64 {
	if s.Gradients == 0 {
		return 0
	}
	return float64(s.StalenessSum) / float64(s.Gradients)
}

// record counts one accepted gradient of staleness tau.
func (s *Stats) record(tau int) {
	b := min(tau, HistogramLen-1)
	if b >= len(s.Histogram) {
		s.Histogram = append(s.Histogram, make([]uint64, b+1-len(s.Histogram))...)
	}
	s.Histogram[b]++
	s.Gradients++
	s.StalenessSum += uint64(tau)
	s.MaxStaleness = max(s.MaxStaleness, tau)
}

// clone returns a deep copy.
func (s Stats) clone() Stats {
	s.Histogram = slices.Clone(s.Histogram)
	s.RefusedGradients = slices.Clone(s.RefusedGradients)
	return s
}
