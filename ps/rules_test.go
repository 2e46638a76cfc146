package ps

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/softsync/softsync/ps/sgd"
)

// ruleRef is a float64 reference of one shard under a correcting rule
// with c₀ = 1, no momentum and no decay: w −= η·s(τ)·g', g' the gradient
// corrected with the weights of the clock it is stamped with.
type ruleRef struct {
	cfg    sgd.Config
	w      []float64
	hist   [][]float64 // weights at each clock
	ms, sq []float64   // dc-adaptive's mean square, gap's mean squared step
	steps  int
}

func newRuleRef(cfg sgd.Config, init []float32) *ruleRef {
	r := &ruleRef{cfg: cfg, ms: make([]float64, len(init)), sq: make([]float64, len(init))}
	for _, x := range init {
		r.w = append(r.w, float64(x))
	}
	r.hist = append(r.hist, append([]float64(nil), r.w...))
	return r
}

func (r *ruleRef) push(g []float32, stamp uint64) {
	clock := uint64(len(r.hist) - 1)
	tau := int(clock - stamp)
	p := r.hist[stamp]
	s := 1.0
	if r.cfg.LRMode == sgd.LRStaleness && tau > 1 {
		s = 1 / float64(tau)
	}
	l := r.cfg.DCLambda
	c := math.Sqrt(1 / (1 - math.Pow(sgd.GapDecay, float64(r.steps))))
	for k, x := range g {
		gk, d := float64(x), r.w[k]-p[k]
		switch r.cfg.Correction {
		case sgd.CorrDC:
			gk += l * gk * gk * d
		case sgd.CorrDCAdaptive:
			r.ms[k] = sgd.DCAdaptiveDecay*r.ms[k] + (1-sgd.DCAdaptiveDecay)*gk*gk
			gk += l / math.Sqrt(r.ms[k]+sgd.DCAdaptiveEpsilon) * gk * gk * d
		case sgd.CorrGap:
			ck := sgd.GapEpsilon
			if r.steps > 0 {
				ck += math.Sqrt(r.sq[k]) * c
			}
			gk /= 1 + math.Abs(d)/ck
		}
		v := r.cfg.LR * s * gk
		r.w[k] -= v
		r.sq[k] = sgd.GapDecay*r.sq[k] + (1-sgd.GapDecay)*v*v
	}
	r.steps++
	r.hist = append(r.hist, append([]float64(nil), r.w...))
}

// TestShardRulesPulled runs one shard under each correcting rule through
// pulls, re-pulls, a prefetch (a second pull before the push of the
// first), a leave and a rejoin, and compares the weights after every
// update with a float64 reference that corrects each gradient with the
// weights of the clock it is stamped with: the shard must pass each
// learner's own pulled slice.
func TestShardRulesPulled(t *testing.T) {
	for _, rule := range []string{"dc:0.5+staleness", "dc-adaptive:0.5", "gap"} {
		t.Run(rule, func(t *testing.T) {
			cfg := plainConfig(3, Softsync, 3) // c₀ = 1
			cfg.Solver = sgd.Config{LR: 0.1}
			if err := cfg.Solver.ParseRule(rule); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 1))
			init := make([]float32, 4)
			for k := range init {
				init[k] = float32(rng.NormFloat64())
			}
			h := newHarness(t, cfg, init)
			ref := newRuleRef(cfg.Solver, init)
			pull := func(l uint32, want uint64) {
				t.Helper()
				if _, stamps := served(h.pull(l, 0)); len(stamps) != 1 || stamps[0] != want {
					t.Fatalf("pull of %d served at %v, want %d", l, stamps, want)
				}
			}
			push := func(l uint32, stamp uint64) {
				t.Helper()
				g := make([]float32, len(init))
				for k := range g {
					g[k] = float32(1 + rng.Float64())
				}
				if r := h.push(l, stamp, g); len(r.Updates) != 1 {
					t.Fatalf("push of %d stamped %d: %d updates, %v", l, stamp, len(r.Updates), r.Replies)
				}
				ref.push(g, stamp)
				for k, x := range h.s.Weights() {
					if d := math.Abs(float64(x) - ref.w[k]); d > 1e-5*(1+math.Abs(ref.w[k])) {
						t.Fatalf("after the push of %d stamped %d (clock %d): weight %d is %v, reference %v", l, stamp, h.s.Clock(), k, x, ref.w[k])
					}
				}
			}
			pull(0, 0)
			pull(1, 0)
			pull(2, 0)
			push(0, 0) // τ = 0
			push(1, 0) // τ = 1: corrected with the weights of clock 0
			pull(0, 2)
			pull(1, 2)
			pull(2, 2) // a re-pull: learner 2 never pushed its gradient of clock 0
			push(0, 2)
			push(2, 2) // the copy of clock 2, not the one of clock 0
			pull(0, 4)
			h.member(MsgLeave, 1)
			push(0, 4)
			h.member(MsgJoin, 1)
			push(1, 2) // after a leave and a rejoin: τ = 3, its copy of clock 2
			pull(2, 6)
			pull(0, 6)
			push(0, 6)
			pull(2, 7) // a prefetch: learner 2 holds clock 6 and clock 7
			push(2, 6)
			push(2, 7)
			// Learners 0 and 1 kept one copy each, learner 2 two.
			if got, want := h.s.Stats().PulledBytes, uint64(4*4*len(init)); got != want {
				t.Fatalf("PulledBytes %d, want %d", got, want)
			}
		})
	}
}

// TestShardRulesNoCopies checks that the rules without a correction, and
// every rule under hardsync, keep no weights per learner.
func TestShardRulesNoCopies(t *testing.T) {
	for _, tc := range []struct {
		p    Protocol
		rule string
	}{{Softsync, "staleness"}, {Softsync, "poly:0.5"}, {Hardsync, "dc:0.04"}, {Hardsync, "gap"}} {
		cfg := plainConfig(2, tc.p, 2)
		if tc.p == Hardsync {
			cfg.N = 0
		}
		cfg.Solver = sgd.Config{LR: 0.1}
		if err := cfg.Solver.ParseRule(tc.rule); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, cfg, []float32{1, 2})
		for range 3 {
			for l := range uint32(2) {
				h.pull(l, h.s.Clock())
				h.push(l, h.s.Clock(), []float32{1, 1})
			}
		}
		if h.s.Clock() == 0 || h.s.pulled != nil || h.s.Stats().PulledBytes != 0 {
			t.Errorf("%v %s: clock %d, copies %v, PulledBytes %d", tc.p, tc.rule, h.s.Clock(), h.s.pulled != nil, h.s.Stats().PulledBytes)
		}
	}
}

// TestNSchedule checks that c₀ follows the n schedule at epoch
// boundaries: the update that completes an epoch is the last with the old
// c₀; the first update of the new epoch combines the new c₀ gradients.
func TestNSchedule(t *testing.T) {
	cfg := plainConfig(4, Softsync, 4)
	cfg.NSchedule = sgd.NSchedule{{From: 0, N: 4}, {From: 1, N: 2}, {From: 2, N: 1}}
	cfg.DataSize = 4 // 4 gradients per epoch (Batch 1)
	h := newHarness(t, cfg, []float32{0})
	var sizes []string
	for i := range 12 {
		r := h.push(uint32(i%4), h.s.Clock(), []float32{1})
		for _, u := range r.Updates {
			sizes = append(sizes, fmt.Sprintf("%d@%d", u.Gradients, u.Epoch))
		}
	}
	// Epoch 0: c₀ = 1 (4 updates); epoch 1: c₀ = 2; epoch 2: c₀ = 4.
	want := "[1@0 1@0 1@0 1@0 2@1 2@1 4@2]"
	if got := fmt.Sprint(sizes); got != want {
		t.Fatalf("updates (gradients@epoch) %s, want %s", got, want)
	}
	if st := h.s.Stats(); st.Partial != 0 {
		t.Fatalf("%d partial updates", st.Partial)
	}
	bad := cfg
	bad.N = 2
	if err := bad.Validate(); err == nil {
		t.Fatal("N other than the schedule's first n accepted")
	}
	bad = cfg
	bad.NSchedule = sgd.NSchedule{{From: 0, N: 5}}
	bad.N = 5
	if err := bad.Validate(); err == nil {
		t.Fatal("n > λ in the schedule accepted")
	}
}

// TestRestorePulled restores the copies of the pulled weights with a
// checkpoint, and refuses copies that do not fit the shard.
func TestRestorePulled(t *testing.T) {
	cfg := plainConfig(2, Softsync, 2)
	cfg.Solver = sgd.Config{LR: 0.1, Correction: sgd.CorrDC, DCLambda: 0.5}
	h := newHarness(t, cfg, []float32{1, 2})
	h.pull(0, 0)
	h.pull(1, 0)
	h.push(0, 0, []float32{1, 1}) // clock 1; learner 1 holds the weights of clock 0
	cp := h.s.Checkpoint()
	if len(cp.Pulled) != 2 || cp.Pulled[1].Learner != 1 || cp.Pulled[1].Stamp != 0 || cp.Pulled[1].Used {
		t.Fatalf("checkpointed copies %+v", cp.Pulled)
	}
	rs, err := Restore(cfg, cp, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Stats().PulledBytes != h.s.Stats().PulledBytes || rs.Stats().PulledBytes != 16 {
		t.Fatalf("PulledBytes %d restored, %d before", rs.Stats().PulledBytes, h.s.Stats().PulledBytes)
	}
	b := &harness{t: t, s: rs, seq: map[uint32]uint64{0: h.seq[0], 1: h.seq[1]}}
	h.push(1, 0, []float32{1, -1}) // τ = 1: corrected with the copy of clock 0
	b.push(1, 0, []float32{1, -1})
	if !slices.Equal(h.s.Weights(), b.s.Weights()) {
		t.Fatalf("restored shard %v, original %v", b.s.Weights(), h.s.Weights())
	}
	for name, bad := range map[string]func(p []PulledWeights) []PulledWeights{
		"learner out of range": func(p []PulledWeights) []PulledWeights { p[0].Learner = 2; return p },
		"short copy":           func(p []PulledWeights) []PulledWeights { p[0].Weights = p[0].Weights[:1]; return p },
		"third copy":           func(p []PulledWeights) []PulledWeights { return append(p, p[1], p[1]) },
		"NaN":                  func(p []PulledWeights) []PulledWeights { p[1].Weights[0] = float32(math.NaN()); return p },
	} {
		c := *cp
		c.Pulled = nil
		for _, p := range cp.Pulled {
			p.Weights = slices.Clone(p.Weights)
			c.Pulled = append(c.Pulled, p)
		}
		c.Pulled = bad(c.Pulled)
		if _, err := Restore(cfg, &c, 2); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
