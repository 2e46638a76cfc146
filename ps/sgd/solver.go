package sgd

import (
	"fmt"
	"slices"
)

// Solver applies the update described in the package doc to the range
// [lo, hi) of the flat parameter vector. It keeps that range's momentum and
// the accumulator of the update being collected. A Solver is not safe for
// concurrent use; shards use one Solver each.
type Solver struct {
	cfg    Config
	lo, hi int
	spans  []span    // the layout clipped to [lo, hi), offsets relative to lo
	mom    []float32 // momentum history v, hi−lo floats
	acc    []float32 // Σ s_l·Δθ_l of the pending gradients; allocated on first need
	n      int       // pending gradients in acc
	sumS   float64   // Σ s_l of the pending gradients
	sumTau int64     // Σ τ_l of the pending gradients
	maxTau int       // max τ_l of the pending gradients
}

type span struct {
	off, end          int
	lrMult, decayMult float64
}

// UpdateInfo describes one applied update.
type UpdateInfo struct {
	Gradients     int     // c, the number of gradients combined
	Rate          float64 // η, the scheduled base rate
	Alpha         float64 // ᾱ·η: the mean effective rate α(τ_l) of the update's gradients, times c/c₀ for a partial update
	MeanStaleness float64 // mean τ_l of the update's gradients
	MaxStaleness  int     // max τ_l of the update's gradients
}

// NewSolver returns a solver for [lo, hi) of a vector laid out by layout (nil:
// one segment with multipliers 1, covering [0, hi)). It validates cfg and
// layout and returns a *FieldError on failure.
func NewSolver(cfg Config, layout []Segment, lo, hi int) (*Solver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	total := hi
	if layout != nil {
		total = 0
		for _, s := range layout {
			total += s.Len
		}
	}
	if err := ValidateLayout(layout, total); err != nil {
		return nil, err
	}
	if lo < 0 || lo >= hi || hi > total {
		return nil, Fieldf("range", "[%d, %d) is not a non-empty range inside [0, %d)", lo, hi, total)
	}
	cfg.LRSteps = slices.Clone(cfg.LRSteps)
	s := &Solver{cfg: cfg, lo: lo, hi: hi, mom: make([]float32, hi-lo)}
	if layout == nil {
		layout = []Segment{{Name: "all", Len: total, LRMult: 1, DecayMult: 1}}
	}
	for _, seg := range layout {
		a, b := max(seg.Offset, lo), min(seg.Offset+seg.Len, hi)
		if a < b {
			s.spans = append(s.spans, span{a - lo, b - lo, float64(seg.LRMult), float64(seg.DecayMult)})
		}
	}
	return s, nil
}

// Config returns the solver's configuration.
func (s *Solver) Config() Config { return s.cfg }

// Range returns [lo, hi), the part of the flat vector the solver updates.
func (s *Solver) Range() (lo, hi int) { return s.lo, s.hi }

// Pending returns the number of gradients added since the last Update.
func (s *Solver) Pending() int { return s.n }

// factor returns s_l for a gradient of staleness tau.
func (s *Solver) factor(tau int) float64 {
	if s.cfg.LRMode == LRStaleness && tau > 1 {
		return 1 / float64(tau)
	}
	return 1
}

func (s *Solver) checkGrad(g []float32, tau int) {
	if len(g) != s.hi-s.lo {
		panic(fmt.Sprintf("sgd: gradient has %d elements, solver range [%d, %d) has %d", len(g), s.lo, s.hi, s.hi-s.lo))
	}
	if tau < 0 {
		panic(fmt.Sprintf("sgd: negative staleness %d", tau))
	}
}

// Add accumulates gradient g (hi−lo floats, averaged over its mini-batch)
// of staleness tau into the pending update: one pass over g, which is not
// retained. A wrong length or negative tau panics.
func (s *Solver) Add(g []float32, tau int) {
	s.checkGrad(g, tau)
	f := s.factor(tau)
	if s.n == 0 {
		if s.acc == nil {
			s.acc = make([]float32, len(g))
		}
		scaleTo(s.acc, g, float32(f))
	} else {
		axpy(s.acc, g, float32(f))
	}
	s.n++
	s.sumS += f
	s.sumTau += int64(tau)
	s.maxTau = max(s.maxTau, tau)
}

// Update applies the pending gradients plus last (nil for none; otherwise
// one more gradient of staleness tau, folded into the same pass) to w, the
// hi−lo weights of the solver's range, with the schedule at epoch. It panics
// if there is no gradient at all or w has the wrong length.
func (s *Solver) Update(w, last []float32, tau, epoch int) UpdateInfo {
	if len(w) != s.hi-s.lo {
		panic(fmt.Sprintf("sgd: weights have %d elements, solver range [%d, %d) has %d", len(w), s.lo, s.hi, s.hi-s.lo))
	}
	c, sumS, sumTau, maxTau := s.n, s.sumS, s.sumTau, s.maxTau
	var fl float64
	if last != nil {
		s.checkGrad(last, tau)
		fl = s.factor(tau)
		c, sumS, sumTau, maxTau = c+1, sumS+fl, sumTau+int64(tau), max(maxTau, tau)
	}
	if c == 0 {
		panic("sgd: Update with no gradient")
	}
	u := 1.0
	if mean := float64(sumTau) / float64(c); s.cfg.LRMode == LRAverage && mean > 1 {
		u = 1 / mean
	}
	d := float64(max(c, s.cfg.Quorum)) // the divisor: c₀ for a partial update
	eta := s.cfg.Rate(epoch)
	abar := u * sumS / d
	m := float32(s.cfg.Momentum)
	for _, sp := range s.spans {
		k := eta * sp.lrMult
		aAcc := float32(k * u / d)
		aLast := float32(k * u * fl / d)
		b := float32(k * abar * s.cfg.WeightDecay * sp.decayMult)
		// Two gradient streams: the accumulator and the last gradient, or
		// one of them twice with factor 0 for the second (an exact +0).
		g1, a1, g2, a2 := last, aLast, last, float32(0)
		if s.n > 0 {
			g1, a1, g2 = s.acc, aAcc, s.acc
			if last != nil {
				g2, a2 = last, aLast
			}
		}
		step(w[sp.off:sp.end], s.mom[sp.off:sp.end], g1[sp.off:sp.end], g2[sp.off:sp.end], m, a1, a2, b)
	}
	s.n, s.sumS, s.sumTau, s.maxTau = 0, 0, 0, 0
	return UpdateInfo{Gradients: c, Rate: eta, Alpha: eta * abar,
		MeanStaleness: float64(sumTau) / float64(c), MaxStaleness: maxTau}
}

// State is the solver's mutable state, for checkpoints: the momentum
// history and the pending accumulation. Slices are copies.
type State struct {
	Momentum []float32 // v for [lo, hi)
	Acc      []float32 // Σ s_l·Δθ_l of the pending gradients; nil when Pending is 0
	Pending  int       // gradients in Acc
	SumS     float64   // Σ s_l of the pending gradients
	SumTau   int64     // Σ τ_l of the pending gradients
	MaxTau   int       // max τ_l of the pending gradients
}

// State returns a deep copy of the solver's mutable state.
func (s *Solver) State() State {
	st := State{Momentum: slices.Clone(s.mom), Pending: s.n, SumS: s.sumS, SumTau: s.sumTau, MaxTau: s.maxTau}
	if s.n > 0 {
		st.Acc = slices.Clone(s.acc)
	}
	return st
}

// SetState restores a state taken with State from a solver of the same
// range. It returns a *FieldError if the lengths do not match.
func (s *Solver) SetState(st State) error {
	n := s.hi - s.lo
	switch {
	case len(st.Momentum) != n:
		return Fieldf("State.Momentum", "has %d elements, want %d", len(st.Momentum), n)
	case st.Pending < 0 || (st.Pending > 0 && len(st.Acc) != n) || (st.Pending == 0 && len(st.Acc) != 0):
		return Fieldf("State.Acc", "has %d elements with %d pending gradients, want %d (or none with 0 pending)", len(st.Acc), st.Pending, n)
	}
	copy(s.mom, st.Momentum)
	if st.Pending > 0 {
		if s.acc == nil {
			s.acc = make([]float32, n)
		}
		copy(s.acc, st.Acc)
	}
	s.n, s.sumS, s.sumTau, s.maxTau = st.Pending, st.SumS, st.SumTau, st.MaxTau
	return nil
}
