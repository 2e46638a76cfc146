package ps

import (
	"errors"
	"fmt"

	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
)

// ErrInvalidConfig is wrapped by every configuration error of ps (the same
// value as param.ErrInvalidConfig); errors name the field (*param.FieldError).
var ErrInvalidConfig = param.ErrInvalidConfig

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
	return 0, param.Fieldf("Protocol", "unknown protocol %q (want hardsync or softsync)", s)
}

// Config describes a parameter server: the protocol and solver that every
// shard applies, and the sharding. One Config serves all shards.
type Config struct {
	Job      uint32   // job id that every message must carry
	Learners int      // λ ≥ 1; learner ids are 0 … λ−1
	Protocol Protocol // Hardsync or Softsync
	N        int      // softsync's n, 1 ≤ N ≤ Learners; ignored by hardsync
	// NSchedule, if set, is softsync's n by epoch (see the package doc:
	// c₀ follows it at epoch boundaries); N is then its first entry's n.
	// Ignored by hardsync.
	NSchedule    sgd.NSchedule
	MaxStaleness int             // softsync only: S ≥ 1 bounds staleness; 0 is unbounded
	Shards       int             // number of shards ≥ 1
	Batch        int             // μ ≥ 1, samples per pushed gradient (for the epoch count)
	DataSize     int             // samples per epoch ≥ 0; 0 keeps the epoch at 0
	Layout       []param.Segment // segment multipliers of the flat vector; nil: all 1
	Solver       sgd.Config      // the update rule
}

// Validate returns a *param.FieldError for the first invalid field, or nil.
// The layout is checked against the vector length by NewShard.
func (c *Config) Validate() error {
	switch {
	case c.Learners < 1:
		return param.Fieldf("Learners", "must be ≥ 1, got %d", c.Learners)
	case int(c.Protocol) >= len(protocolNames):
		return param.Fieldf("Protocol", "unknown protocol %d", c.Protocol)
	case c.Protocol == Softsync && (c.N < 1 || c.N > c.Learners):
		return param.Fieldf("N", "softsync needs 1 ≤ n ≤ learners (%d), got %d", c.Learners, c.N)
	case c.Protocol == Softsync && len(c.NSchedule) > 0 && c.NSchedule.Validate(c.Learners) != nil:
		var fe *param.FieldError
		errors.As(c.NSchedule.Validate(c.Learners), &fe)
		return param.Fieldf("NSchedule", "%s", fe.Reason)
	case c.Protocol == Softsync && len(c.NSchedule) > 0 && c.N != c.NSchedule[0].N:
		return param.Fieldf("N", "must be the n schedule's first n (%d), got %d", c.NSchedule[0].N, c.N)
	case c.MaxStaleness < 0:
		return param.Fieldf("MaxStaleness", "must be ≥ 0 (0: unbounded), got %d", c.MaxStaleness)
	case c.MaxStaleness > 0 && c.Protocol == Hardsync:
		return param.Fieldf("MaxStaleness", "applies to softsync only (hardsync staleness is always 0), got %d", c.MaxStaleness)
	case c.Shards < 1:
		return param.Fieldf("Shards", "must be ≥ 1, got %d", c.Shards)
	case c.Batch < 1:
		return param.Fieldf("Batch", "must be ≥ 1, got %d", c.Batch)
	case c.DataSize < 0:
		return param.Fieldf("DataSize", "must be ≥ 0, got %d", c.DataSize)
	case c.DataSize == 0 && len(c.Solver.LRSteps) > 0:
		return param.Fieldf("DataSize", "the schedule (Solver.LRSteps %v) needs the data-set size to count epochs", c.Solver.LRSteps)
	}
	if err := c.Solver.Validate(); err != nil {
		if fe, ok := err.(*param.FieldError); ok {
			return &param.FieldError{Field: "Solver." + fe.Field, Reason: fe.Reason}
		}
		return err
	}
	return nil
}

// QuorumAt returns c₀ in epoch, the number of gradients a full update
// combines: ⌊Learners/n⌋ (at least 1) under softsync, n = N or
// NSchedule's n in epoch; Learners under hardsync. It depends on the
// configured learners only, never on how many are active, so that a
// learner that leaves (at the end of its data, or lost) does not change
// the update rule of the others (see the package doc).
func (c *Config) QuorumAt(epoch int) int {
	if c.Protocol == Hardsync {
		return c.Learners
	}
	n := c.N
	if len(c.NSchedule) > 0 {
		n = c.NSchedule.N(epoch)
	}
	return max(1, c.Learners/max(n, 1))
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
	if err := checkShards(total, shards); err != nil {
		return nil, err
	}
	rs := make([]Range, shards)
	for k := range rs {
		rs[k] = Range{boundary(total, shards, k), boundary(total, shards, k+1)}
	}
	return rs, nil
}
