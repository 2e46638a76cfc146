package ps

import "github.com/softsync/softsync/ps/sgd"

// ShardMemory is the memory, in bytes, one shard of a Server keeps
// (Config.ShardMemory), r being its range's values: its weights and the
// solver's state, and the copies of its weights the rules and the server
// make. The messages of its connections (pushes received, replies being
// sent) are the transport's, and the weights' array comes from the
// transport's allocator (ServerConfig.NewMsg): both are the caller's to
// add.
type ShardMemory struct {
	Momentum int64 // 4r: the solver's momentum
	// Acc is the pending accumulation (4r) of updates of several
	// gradients (c₀ = ⌊λ/n⌋ > 1 in some epoch, hardsync rounds of several
	// learners) and of the corrections (dc, dc-adaptive, gap), which
	// accumulate every gradient.
	Acc int64
	// RuleState is dc-adaptive's mean squares or gap's step squares (4r).
	RuleState int64
	// Pulled is the corrections' copies of the weights served to each
	// learner under softsync: one per learner, two for learners that
	// prefetch (at most λ·4r, twice that; Stats.PulledBytes counts those
	// made).
	Pulled int64
	// Snapshots are the copies of the weights the evaluator asks for
	// (ServerConfig.Snapshots): an epoch's, kept until a later one is
	// asked for, and the final weights (2·4r).
	Snapshots int64
	// Detached is the copy a shard goes on with when a reply still reads
	// the weights it lent when it is to update them (lendWait): one, while
	// the slow reader finishes (more only if several are that slow in a
	// row).
	Detached int64
}

// Total is the sum of the components.
func (m ShardMemory) Total() int64 {
	return m.Momentum + m.Acc + m.RuleState + m.Pulled + m.Snapshots + m.Detached
}

// ShardMemory returns what shard k of a server with this configuration
// keeps (see ShardMemory), for learners that prefetch or not and with
// epoch snapshots or not. The configuration must be valid.
func (c *Config) ShardMemory(k int, prefetch, snapshots bool) ShardMemory {
	r, err := RangeOf(c.totalLen(), c.Shards, k)
	if err != nil {
		return ShardMemory{}
	}
	v := 4 * int64(r.Len())
	m := ShardMemory{Momentum: v, Detached: v}
	if c.Solver.NeedsPulled() || c.quorumAbove1() {
		m.Acc = v
	}
	if c.Solver.Correction == sgd.CorrDCAdaptive || c.Solver.Correction == sgd.CorrGap {
		m.RuleState = v
	}
	if c.Solver.NeedsPulled() && c.Protocol == Softsync {
		m.Pulled = int64(c.Learners) * v
		if prefetch {
			m.Pulled *= 2
		}
	}
	if snapshots {
		m.Snapshots = 2 * v
	}
	return m
}

// totalLen is the flat vector's length of the layout.
func (c *Config) totalLen() int {
	n := 0
	for _, s := range c.Layout {
		n += s.Len
	}
	return n
}

// quorumAbove1 reports whether some update combines several gradients:
// c₀ > 1 in the first epoch or in an epoch of the n schedule.
func (c *Config) quorumAbove1() bool {
	if c.QuorumAt(0) > 1 {
		return true
	}
	for _, e := range c.NSchedule {
		if c.QuorumAt(e.From) > 1 {
			return true
		}
	}
	return false
}
