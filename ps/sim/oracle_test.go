package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
)

// updateOracle re-derives a shard's weights from the messages the shard
// receives, written out in float64 from the update rule of the package
// docs of ps and sgd, and shares nothing with the core but the messages:
// it keeps its own clock (for τ = i − j), membership, pending gradients,
// sample count (for the schedule's epoch), momentum and weights, and
// decides itself when an update is due:
//
//   - hardsync: when every active learner has pushed in this round
//     (including a round that a leave completes), c₀ = λ;
//   - softsync: when c₀ = max(1, ⌊λ/n⌋) gradients are pending, or the
//     last active learner leaves with gradients pending.
//
// An update of c gradients with staleness τ_l, d = max(c, c₀), factors
// s_l (1/max(τ_l, 1) under LRStaleness, else 1) and u (1/max(⟨τ⟩, 1)
// under LRAverage, else 1), ᾱ = u·Σs_l/d, and η from the schedule at
// epoch ⌊samples before the update / DataSize⌋:
//
//	v ← momentum·v + η·lr_mult·((u/d)·Σ s_l·g_l + ᾱ·decay·decay_mult·w);  w ← w − v
type updateOracle struct {
	t      *testing.T
	name   string
	cfg    ps.Config
	c0     int
	layout []param.Segment
	shards []*shardOracle
}

type shardOracle struct {
	lo, hi  int
	w, v    []float64
	pending []pendingGrad
	clock   uint64
	samples int
	active  []bool
	pushed  []bool // hardsync: pushed in the current round
	updates int
	partial int
	maxDiff float64 // largest |w − core's w| seen in a reply
}

type pendingGrad struct {
	learner uint32
	g       []float64
	tau     int
}

func newUpdateOracle(t *testing.T, name string, cfg ps.Config, init []float32) *updateOracle {
	o := &updateOracle{t: t, name: name, cfg: cfg, layout: cfg.Layout, c0: cfg.Learners}
	if cfg.Protocol == ps.Softsync {
		o.c0 = max(1, cfg.Learners/cfg.N)
	}
	rs, err := ps.Ranges(len(init), cfg.Shards)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		s := &shardOracle{lo: r.Lo, hi: r.Hi, w: make([]float64, r.Len()), v: make([]float64, r.Len()),
			active: make([]bool, cfg.Learners), pushed: make([]bool, cfg.Learners)}
		for i := range s.w {
			s.w[i] = float64(init[r.Lo+i])
		}
		for l := range s.active {
			s.active[l] = true
		}
		o.shards = append(o.shards, s)
	}
	return o
}

// multipliers returns lr_mult and decay_mult of flat element i.
func (o *updateOracle) multipliers(i int) (float64, float64) {
	for _, s := range o.layout {
		if i >= s.Offset && i < s.Offset+s.Len {
			return float64(s.LRMult), float64(s.DecayMult)
		}
	}
	return 1, 1
}

// due reports whether s must update now.
func (o *updateOracle) due(s *shardOracle) bool {
	if len(s.pending) == 0 {
		return false
	}
	active, pushed := 0, 0
	for l, a := range s.active {
		if a {
			active++
			if s.pushed[l] {
				pushed++
			}
		}
	}
	if o.cfg.Protocol == ps.Hardsync {
		return pushed >= active
	}
	return len(s.pending) >= o.c0 || active == 0
}

// update applies s's pending gradients and returns their number.
func (o *updateOracle) update(s *shardOracle) int {
	c := len(s.pending)
	d := float64(max(c, o.c0))
	sumS, sumTau := 0.0, 0
	for _, p := range s.pending {
		sumTau += p.tau
	}
	u := 1.0
	if mean := float64(sumTau) / float64(c); o.cfg.Solver.LRMode == sgd.LRAverage && mean > 1 {
		u = 1 / mean
	}
	g := make([]float64, len(s.w))
	for _, p := range s.pending {
		sl := 1.0
		if o.cfg.Solver.LRMode == sgd.LRStaleness && p.tau > 1 {
			sl = 1 / float64(p.tau)
		}
		sumS += sl
		for i := range g {
			g[i] += u * sl * p.g[i] / d
		}
	}
	abar := u * sumS / d
	epoch := 0
	if o.cfg.DataSize > 0 {
		epoch = s.samples / o.cfg.DataSize
	}
	eta := o.cfg.Solver.LR
	for _, e := range o.cfg.Solver.LRSteps {
		if epoch >= e {
			eta *= o.cfg.Solver.LRGamma
		}
	}
	for i := range s.w {
		lm, dm := o.multipliers(s.lo + i)
		s.v[i] = o.cfg.Solver.Momentum*s.v[i] + eta*lm*(g[i]+abar*o.cfg.Solver.WeightDecay*dm*s.w[i])
		s.w[i] -= s.v[i]
	}
	s.samples += c * o.cfg.Batch
	s.clock++
	s.updates++
	if c < o.c0 {
		s.partial++
	}
	s.pending = s.pending[:0]
	clear(s.pushed)
	return c
}

// observe is the simulator's Observe hook: it steps the oracle with the
// message, then checks the core's outputs against it.
func (o *updateOracle) observe(k int, in ps.Msg, out ps.Ready) {
	t, s := o.t, o.shards[k]
	applied := 0
	switch in.Type {
	case ps.MsgPush:
		tau := int(s.clock - in.Clock)
		g := make([]float64, len(in.Grad))
		for i, x := range in.Grad {
			g[i] = float64(x)
		}
		s.pending = append(s.pending, pendingGrad{learner: in.Learner, g: g, tau: tau})
		s.pushed[in.Learner] = true
	case ps.MsgLeave:
		s.active[in.Learner] = false
	}
	if o.due(s) {
		applied = o.update(s)
	}
	switch {
	case applied == 0 && len(out.Updates) != 0:
		t.Fatalf("%s shard %d: the core updated (%+v) after %v of learner %d; the oracle has %d gradients pending of c₀ = %d",
			o.name, k, out.Updates[0], in.Type, in.Learner, len(s.pending), o.c0)
	case applied > 0 && (len(out.Updates) != 1 || out.Updates[0].Gradients != applied || out.Updates[0].Clock != s.clock):
		t.Fatalf("%s shard %d: after %v of learner %d the oracle applied %d gradients (clock %d); the core: %+v",
			o.name, k, in.Type, in.Learner, applied, s.clock, out.Updates)
	}
	for _, r := range out.Replies {
		if r.Err != nil {
			t.Fatalf("%s shard %d: %v", o.name, k, r.Err)
		}
		if r.Ack {
			continue
		}
		if r.Clock != s.clock {
			t.Fatalf("%s shard %d: weights stamped %d, the oracle's clock is %d", o.name, k, r.Clock, s.clock)
		}
		o.compare(k, r.Weights, fmt.Sprintf("weights sent at clock %d", r.Clock))
	}
}

// oracleTol bounds |w − core's w|: the core runs in float32 (fused
// multiply-adds where the CPU has them), the oracle in float64, on weights
// of order 1 over a few hundred updates; the runs below stay within
// 3e-6. A partial update at the full rate, the smallest error of those
// tried, moves the final weights by 4e-4.
const oracleTol = 2e-5

// compare checks the core's weights of shard k against the oracle's.
func (o *updateOracle) compare(k int, w []float32, what string) {
	s := o.shards[k]
	if len(w) != len(s.w) {
		o.t.Fatalf("%s shard %d: %s: %d weights, range has %d", o.name, k, what, len(w), len(s.w))
	}
	for i, x := range w {
		d := math.Abs(float64(x) - s.w[i])
		s.maxDiff = max(s.maxDiff, d)
		if d > oracleTol {
			o.t.Fatalf("%s shard %d: %s: w[%d] = %.7g, the oracle has %.7g", o.name, k, what, s.lo+i, x, s.w[i])
		}
	}
}

// TestUpdateOracle runs every protocol and learning-rate mode through the
// simulator (2 shards whose clocks diverge under network jitter, learners
// of spread-out speeds, a job budget that ends with partial updates, a
// step schedule, momentum, weight decay and per-segment multipliers) on a
// softmax regression, and checks every update of the core and every
// weights reply, then the final weights, against updateOracle. The runs
// reach staleness well above 1 (so α0/τ and ⟨τ⟩ matter), softsync with
// c₀ = ⌊λ/n⌋ ∈ {8, 2, 1} (n = 3 leaves a remainder) and a last update
// that is partial.
func TestUpdateOracle(t *testing.T) {
	const learners, mu, n, total = 8, 4, 64, 8*25 + 5
	prob := newSoftmaxProblem(n, 31)
	init := make([]float32, smTotal)
	r := rand.New(rand.NewPCG(32, 1))
	for i := range init {
		init[i] = float32(0.1 * r.NormFloat64())
	}
	speed := make([]float64, learners)
	for i := range speed {
		speed[i] = 1 + 0.3*float64(i)
	}
	for _, pc := range []struct {
		proto ps.Protocol
		n     int
	}{{ps.Hardsync, 0}, {ps.Softsync, 1}, {ps.Softsync, 3}, {ps.Softsync, learners}} {
		for _, mode := range []sgd.LRMode{sgd.LRConstant, sgd.LRStaleness, sgd.LRAverage} {
			name := fmt.Sprintf("%v n=%d %v", pc.proto, pc.n, mode)
			cfg := Config{
				PS: ps.Config{Learners: learners, Protocol: pc.proto, N: pc.n, Shards: 2, Batch: mu, DataSize: n, Layout: smLayout,
					Solver: sgd.Config{LR: 0.2, Momentum: 0.9, WeightDecay: 0.01, LRSteps: []int{6}, LRGamma: 0.5, LRMode: mode}},
				Init: init, TotalSteps: total, Seed: 3, Speed: speed, Latency: 0.01, Jitter: 0.2,
				Compute: Dist{Kind: LogNormal, Mean: 1, Spread: 0.5},
				Gradient: func(l, step int, w, grad []float32) {
					prob.gradient(w, grad, (step*learners+l)*mu, mu)
				},
			}
			o := newUpdateOracle(t, name, cfg.PS, init)
			cfg.Observe = o.observe
			res, err := Run(cfg)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			rs, _ := ps.Ranges(smTotal, 2)
			for k, st := range res.Shards {
				s := o.shards[k]
				o.compare(k, res.Weights[rs[k].Lo:rs[k].Hi], "final weights")
				if st.Updates != uint64(s.updates) || st.Partial != uint64(s.partial) || st.Gradients != total {
					t.Errorf("%s shard %d: %d updates (%d partial) of %d gradients; the oracle: %d (%d partial) of %d",
						name, k, st.Updates, st.Partial, st.Gradients, s.updates, s.partial, total)
				}
				// The checks must have something to catch.
				if s.partial == 0 && o.c0 > 1 {
					t.Errorf("%s shard %d: no partial update", name, k)
				}
				if pc.proto == ps.Softsync && pc.n > 1 && st.MaxStaleness < 4 {
					t.Errorf("%s shard %d: max staleness %d: α0/τ hardly matters", name, k, st.MaxStaleness)
				}
				t.Logf("%s shard %d: %d updates (%d partial), mean τ %.2f max %d, max |Δw| %.2g",
					name, k, s.updates, s.partial, st.MeanStaleness(), st.MaxStaleness, s.maxDiff)
			}
			moved := 0.0
			for i, w := range res.Weights {
				moved = max(moved, math.Abs(float64(w-init[i])))
			}
			if moved < 0.1 {
				t.Errorf("%s: training moved the weights by only %.3g", name, moved)
			}
		}
	}
}
