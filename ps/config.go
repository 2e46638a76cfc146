package ps

import (
	"fmt"

	"github.com/softsync/softsync/ps/sgd"
)

// ErrInvalidConfig is wrapped by every configuration error of ps (the same
// value as sgd.ErrInvalidConfig); errors name the field (*sgd.FieldError).
var ErrInvalidConfig = sgd.ErrInvalidConfig

// Protocol selects when a shard updates.
type Protocol uint8

const (
	// Hardsync waits for one gradient from every active learner, then
	// updates with their average; staleness is always 0.
	Hardsync Protocol = iota
	// Softsync updates as soon as c = max(1, ⌊λ/n⌋) gradients are pending,
	// from any learners; n = λ is fully asynchronous. λ is the configured
	// number of learners (Config.Quorum).
	Softsync
)

var protocolNames = [...]string{Hardsync: "hardsync", Softsync: "softsync"}

// String returns the flag spelling of p: "hardsync" or "softsync".
func (p Protocol) String() string {
	if int(p) < len(protocolNames) {
		return protocolNames[p]
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// ParseProtocol parses the flag spelling of a protocol.
func ParseProtocol(s string) (Protocol, error) {
	for p, name := range protocolNames {
		if s == name {
			return Protocol(p), nil
		}
	}
	return 0, sgd.Fieldf("Protocol", "unknown protocol %q (want hardsync or softsync)", s)
}

// Config describes a parameter server: the protocol and solver that every
// shard applies, and the sharding. One Config serves all shards.
type Config struct {
	Job          uint32        // job id that every message must carry
	Learners     int           // λ ≥ 1; learner ids are 0 … λ−1
	Protocol     Protocol      // Hardsync or Softsync
	N            int           // softsync's n, 1 ≤ N ≤ Learners; ignored by hardsync
	MaxStaleness int           // softsync only: S ≥ 1 bounds staleness; 0 is unbounded
	Shards       int           // number of shards ≥ 1
	Batch        int           // μ ≥ 1, samples per pushed gradient (for the epoch count)
	DataSize     int           // samples per epoch ≥ 0; 0 keeps the epoch at 0
	Layout       []sgd.Segment // segment multipliers of the flat vector; nil: all 1
	Solver       sgd.Config    // the update rule
}

// Validate returns a *sgd.FieldError for the first invalid field, or nil.
// The layout is checked against the vector length by NewShard.
func (c *Config) Validate() error {
	switch {
	case c.Learners < 1:
		return sgd.Fieldf("Learners", "must be ≥ 1, got %d", c.Learners)
	case int(c.Protocol) >= len(protocolNames):
		return sgd.Fieldf("Protocol", "unknown protocol %d", c.Protocol)
	case c.Protocol == Softsync && (c.N < 1 || c.N > c.Learners):
		return sgd.Fieldf("N", "softsync needs 1 ≤ n ≤ learners (%d), got %d", c.Learners, c.N)
	case c.MaxStaleness < 0:
		return sgd.Fieldf("MaxStaleness", "must be ≥ 0 (0: unbounded), got %d", c.MaxStaleness)
	case c.MaxStaleness > 0 && c.Protocol == Hardsync:
		return sgd.Fieldf("MaxStaleness", "applies to softsync only (hardsync staleness is always 0), got %d", c.MaxStaleness)
	case c.Shards < 1:
		return sgd.Fieldf("Shards", "must be ≥ 1, got %d", c.Shards)
	case c.Batch < 1:
		return sgd.Fieldf("Batch", "must be ≥ 1, got %d", c.Batch)
	case c.DataSize < 0:
		return sgd.Fieldf("DataSize", "must be ≥ 0, got %d", c.DataSize)
	case c.DataSize == 0 && len(c.Solver.LRSteps) > 0:
		return sgd.Fieldf("DataSize", "the schedule (Solver.LRSteps %v) needs the data-set size to count epochs", c.Solver.LRSteps)
	}
	if err := c.Solver.Validate(); err != nil {
		if fe, ok := err.(*sgd.FieldError); ok {
			return &sgd.FieldError{Field: "Solver." + fe.Field, Reason: fe.Reason}
		}
		return err
	}
	return nil
}

// Quorum returns c₀, the number of gradients a full update combines:
// ⌊Learners/N⌋ (at least 1) under softsync, Learners under hardsync. It
// depends on the configured learners only, never on how many are active,
// so that a learner that leaves (at the end of its data, or lost) does not
// change the update rule of the others (see the package doc).
func (c *Config) Quorum() int {
	if c.Protocol == Hardsync {
		return c.Learners
	}
	return max(1, c.Learners/max(c.N, 1))
}

// Range is the part [Lo, Hi) of the flat vector that one shard owns.
type Range struct{ Lo, Hi int }

// Len returns Hi − Lo.
func (r Range) Len() int { return r.Hi - r.Lo }

// Ranges splits a vector of total floats over shards contiguous ranges:
// shard k owns [b_k, b_{k+1}) with b_k = ⌊k·total/shards⌋, rounded down to a
// multiple of 16 when total ≥ 16·shards, and b_shards = total. Every range
// is non-empty; shards > total is an error.
func Ranges(total, shards int) ([]Range, error) {
	if shards < 1 || shards > total {
		return nil, sgd.Fieldf("Shards", "need 1 ≤ shards ≤ vector length %d, got %d", total, shards)
	}
	align := 16
	if total < align*shards {
		align = 1
	}
	rs := make([]Range, shards)
	for k := range rs {
		rs[k].Lo = k * total / shards / align * align
		if k > 0 {
			rs[k-1].Hi = rs[k].Lo
		}
	}
	rs[shards-1].Hi = total
	return rs, nil
}
