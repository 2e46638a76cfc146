package sgd

import (
	"fmt"
	"math"
	"slices"

	"github.com/softsync/softsync/ps/param"
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
	bounds bounds    // of the magnitudes the next update reads
	coefs  []coefs   // per span, the factors of the update being applied
	m      float32   // the momentum of the update being applied
	ws, vs []float32 // scratch of a checked update; allocated on first need
	// The rules' running statistics (see State), allocated by NewSolver
	// for the rules that keep them.
	meanSq []float32 // CorrDCAdaptive: mean square of the gradients
	stepSq []float32 // CorrGap: mean of the squared steps
	steps  uint64    // CorrGap: updates applied
	window tauWindow // MomentumComp: τ of the recent gradients
	poly   []float64 // LRPoly: the factors of τ = 0 … polyTable−1
	// runs are the maximal ranges of learnable spans and states the
	// state spans, offsets relative to lo: the accumulation passes run
	// over each run, state values are summed apart (see "State
	// segments" in the package doc).
	runs, states [][2]int
	stateNew     []float32 // scratch of an update's new state values
	par          Parallel  // spreads the long passes (SetParallel); nil: serial
}

// polyTable is the number of LRPoly factors a solver computes ahead, so
// that the common staleness costs a load rather than a power.
const polyTable = 64

// Grad is one gradient as the solver takes it.
type Grad struct {
	G   []float32 // hi−lo floats, averaged over its mini-batch; read once, not retained
	Max float32   // a bound of its magnitudes, ≥ |G[k]| for every k: MaxAbs(G), which the caller's finite check computes (+Inf: unknown)
	Tau int       // its staleness τ ≥ 0
	// Pulled holds the weights of the solver's range that G was computed
	// on (hi−lo floats, read, not retained), for the rules that compare
	// them with the current weights (Config.NeedsPulled); nil otherwise.
	Pulled []float32
}

// bounds are upper bounds of the magnitudes an update reads (see "Finite
// updates" in the package doc); +Inf where unknown.
type bounds struct {
	w, v  float64  // of |θ_k| and |v_k|
	acc   float64  // of |acc_k|: Σ s_l·(the gradients' MaxAbs), rounding aside
	exact bool     // w and v were measured (MaxAbs) since the last fast update
	at    *float32 // &θ[0] of the weights w bounds
}

// coefs are the factors of one span's pass, v = m·v + a1·g1 + a2·g2 + b·θ.
type coefs struct {
	a1, a2, b  float32
	g1, g2     []float32 // the two gradient streams over [lo, hi): the accumulator or the last gradient
	acc1, acc2 bool      // g1, g2 is the accumulator
}

type span struct {
	off, end          int
	lrMult, decayMult float64
	state             bool // a param.State segment
}

// UpdateInfo describes one applied update.
type UpdateInfo struct {
	Gradients     int     // c, the number of gradients combined
	Rate          float64 // η, the scheduled base rate
	Alpha         float64 // ᾱ·η: the mean effective rate α(τ_l) of the update's gradients, times c/c₀ for a partial update
	MeanStaleness float64 // mean τ_l of the update's gradients
	MaxStaleness  int     // max τ_l of the update's gradients
	Momentum      float64 // the momentum of the update: Config.Momentum, lowered under MomentumComp
	// Refused: the update would have made a weight or a momentum value
	// NaN or ±Inf, so it was not applied: the weights and the momentum
	// are as they were, bit for bit, and its gradients are discarded.
	Refused bool
}

// NewSolver returns a solver for [lo, hi) of a vector laid out by layout (nil:
// one segment with multipliers 1, covering [0, hi)). It validates cfg and
// layout and returns a *param.FieldError on failure.
func NewSolver(cfg Config, layout []param.Segment, lo, hi int) (*Solver, error) {
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
	if err := param.ValidateLayout(layout, total); err != nil {
		return nil, err
	}
	if lo < 0 || lo >= hi || hi > total {
		return nil, param.Fieldf("range", "[%d, %d) is not a non-empty range inside [0, %d)", lo, hi, total)
	}
	cfg.LRSteps = slices.Clone(cfg.LRSteps)
	s := &Solver{cfg: cfg, lo: lo, hi: hi, mom: make([]float32, hi-lo), bounds: bounds{w: math.Inf(1)}}
	switch cfg.Correction {
	case CorrDCAdaptive:
		s.meanSq = make([]float32, hi-lo)
	case CorrGap:
		s.stepSq = make([]float32, hi-lo)
	}
	if cfg.MomentumComp {
		s.window.taus = make([]int64, 0, MomentumWindow)
	}
	if cfg.LRMode == LRPoly {
		s.poly = make([]float64, polyTable)
		for tau := range s.poly {
			s.poly[tau] = cfg.factor(tau)
		}
	}
	if layout == nil {
		layout = []param.Segment{{Name: "all", Len: total, LRMult: 1, DecayMult: 1}}
	}
	for _, seg := range layout {
		a, b := max(seg.Offset, lo), min(seg.Offset+seg.Len, hi)
		if a >= b {
			continue
		}
		st := seg.Kind == param.State
		s.spans = append(s.spans, span{a - lo, b - lo, float64(seg.LRMult), float64(seg.DecayMult), st})
		runs := &s.runs
		if st {
			runs = &s.states
		}
		if k := len(*runs); k > 0 && (*runs)[k-1][1] == a-lo {
			(*runs)[k-1][1] = b - lo
		} else {
			*runs = append(*runs, [2]int{a - lo, b - lo})
		}
	}
	if n := 0; len(s.states) > 0 {
		for _, r := range s.states {
			n += r[1] - r[0]
		}
		s.stateNew = make([]float32, n)
	}
	return s, nil
}

// SetParallel makes the solver spread its passes over long spans through
// p (nil: serial, as after NewSolver): the accumulations, the corrections,
// the fused update pass and the measurements of a checked update. The
// results are the same bits either way (see Parallel); p is called from
// AddGrad and UpdateGrad only.
func (s *Solver) SetParallel(p Parallel) { s.par = p }

// Config returns the solver's configuration.
func (s *Solver) Config() Config { return s.cfg }

// Range returns [lo, hi), the part of the flat vector the solver updates.
func (s *Solver) Range() (lo, hi int) { return s.lo, s.hi }

// Pending returns the number of gradients added since the last Update.
func (s *Solver) Pending() int { return s.n }

// SetQuorum sets c₀ (Config.Quorum) for the updates from now on, for a
// full-update size that changes during a job (an NSchedule at an epoch
// boundary); the pending gradients are kept. A negative c₀ panics.
func (s *Solver) SetQuorum(c0 int) {
	if c0 < 0 {
		panic(fmt.Sprintf("sgd: negative quorum %d", c0))
	}
	s.cfg.Quorum = c0
}

// factor returns s_l for a gradient of staleness tau.
func (s *Solver) factor(tau int) float64 {
	if tau < len(s.poly) {
		return s.poly[tau]
	}
	return s.cfg.factor(tau)
}

func (s *Solver) checkGrad(g []float32, tau int) {
	if len(g) != s.hi-s.lo {
		panic(fmt.Sprintf("sgd: gradient has %d elements, solver range [%d, %d) has %d", len(g), s.lo, s.hi, s.hi-s.lo))
	}
	if tau < 0 {
		panic(fmt.Sprintf("sgd: negative staleness %d", tau))
	}
}

// Add is AddGrad(nil, Grad{G: g, Max: gmax, Tau: tau}), for the rules
// that need no pulled weights.
func (s *Solver) Add(g []float32, gmax float32, tau int) {
	s.AddGrad(nil, Grad{G: g, Max: gmax, Tau: tau})
}

// AddGrad accumulates g into the pending update: one pass over g.G (and,
// for the rules of Config.NeedsPulled, over g.Pulled and w, the current
// weights of the solver's range: what the next Update receives; nil for
// the other rules). A wrong length, a negative τ or missing pulled
// weights panic.
func (s *Solver) AddGrad(w []float32, g Grad) {
	s.checkGrad(g.G, g.Tau)
	f := s.factor(g.Tau)
	if s.acc == nil {
		s.acc = make([]float32, len(g.G))
	}
	gmax := g.Max
	switch {
	case s.cfg.NeedsPulled():
		gmax = s.correct(w, g, float32(f))
	case s.n == 0:
		for _, r := range s.runs {
			s.par.scaleTo(s.acc[r[0]:r[1]], g.G[r[0]:r[1]], float32(f))
		}
	default:
		for _, r := range s.runs {
			s.par.axpy(s.acc[r[0]:r[1]], g.G[r[0]:r[1]], float32(f))
		}
	}
	for _, r := range s.states {
		if s.n == 0 {
			copy(s.acc[r[0]:r[1]], g.G[r[0]:r[1]])
		} else {
			addTo(s.acc[r[0]:r[1]], g.G[r[0]:r[1]])
		}
	}
	s.record(f, g.Tau)
	s.bounds.acc += float64(float32(f)) * float64(gmax)
}

// record counts one more gradient of factor f and staleness tau.
func (s *Solver) record(f float64, tau int) {
	s.n++
	s.sumS += f
	s.sumTau += int64(tau)
	s.maxTau = max(s.maxTau, tau)
	if s.cfg.MomentumComp {
		s.window.add(tau)
	}
}

// correct adds f·g' to the accumulator, g' the gradient corrected by the
// rule, and returns a bound of |g'|.
func (s *Solver) correct(w []float32, g Grad, f float32) float32 {
	n := s.hi - s.lo
	if len(w) != n || len(g.Pulled) != n {
		panic(fmt.Sprintf("sgd: rule %s needs the current and the pulled weights of the range (%d elements), got %d and %d", s.cfg.RuleString(), n, len(w), len(g.Pulled)))
	}
	var m uint32
	for _, r := range s.runs {
		a := r[0]
		if !s.par.spreads(r[1] - a) {
			m = max(m, s.correctRange(w, g, f, a, r[1]))
			continue
		}
		m = max(m, s.par.maxBits(r[1]-a, func(lo, hi int) uint32 { return s.correctRange(w, g, f, a+lo, a+hi) }))
	}
	return math.Float32frombits(m)
}

// correctRange is correct over the elements [a, b) of one run, returning
// the absBits of its bound.
func (s *Solver) correctRange(w []float32, g Grad, f float32, a, b int) uint32 {
	acc := s.acc[a:b]
	if s.n == 0 {
		clear(acc)
	}
	switch s.cfg.Correction {
	case CorrDC:
		return math.Float32bits(dcInto(acc, g.G[a:b], w[a:b], g.Pulled[a:b], f, s.cfg.DCLambda))
	case CorrDCAdaptive:
		return math.Float32bits(dcAdaptiveInto(acc, s.meanSq[a:b], g.G[a:b], w[a:b], g.Pulled[a:b], f, float32(s.cfg.DCLambda)))
	}
	gapInto(acc, s.stepSq[a:b], g.G[a:b], w[a:b], g.Pulled[a:b], f, gapCorrection(s.steps))
	return math.Float32bits(g.Max)
}

// addTo adds x to dst.
func addTo(dst, x []float32) {
	x = x[:len(dst)]
	for k := range dst {
		dst[k] += x[k]
	}
}

// Update is UpdateGrad with last given as a slice (nil for none), its
// bound and its staleness, for the rules that need no pulled weights.
func (s *Solver) Update(w, last []float32, lastMax float32, tau, epoch int) UpdateInfo {
	return s.UpdateGrad(w, Grad{G: last, Max: lastMax, Tau: tau}, epoch)
}

// UpdateGrad applies the pending gradients plus last (last.G nil for
// none; otherwise one more gradient, folded into the same pass) to w, the
// hi−lo weights of the solver's range, with the schedule at epoch. w must
// hold what the previous Update left in it (the solver bounds its
// magnitudes from what it wrote; other weights are measured first). An
// update that would make a weight or a momentum value NaN or ±Inf is
// refused (UpdateInfo.Refused): w and the momentum keep their values and
// the pending gradients are discarded. It panics if there is no gradient
// at all or w has the wrong length, and on the misuse AddGrad panics on.
func (s *Solver) UpdateGrad(w []float32, last Grad, epoch int) UpdateInfo {
	if len(w) != s.hi-s.lo {
		panic(fmt.Sprintf("sgd: weights have %d elements, solver range [%d, %d) has %d", len(w), s.lo, s.hi, s.hi-s.lo))
	}
	if last.G != nil && s.cfg.NeedsPulled() {
		s.AddGrad(w, last) // the correction's own pass, then the update of the accumulator
		last = Grad{}
	}
	c, sumS, sumTau, maxTau := s.n, s.sumS, s.sumTau, s.maxTau
	var fl float64
	if last.G != nil {
		s.checkGrad(last.G, last.Tau)
		fl = s.factor(last.Tau)
		c, sumS, sumTau, maxTau = c+1, sumS+fl, sumTau+int64(last.Tau), max(maxTau, last.Tau)
		if s.cfg.MomentumComp {
			s.window.add(last.Tau)
		}
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
	s.coefs = s.coefs[:0]
	for _, sp := range s.spans {
		k := eta * sp.lrMult
		aAcc := float32(k * u / d)
		aLast := float32(k * u * fl / d)
		b := float32(k * abar * s.cfg.WeightDecay * sp.decayMult)
		// Two gradient streams: the accumulator and the last gradient, or
		// one of them twice with factor 0 for the second (an exact +0).
		cf := coefs{a1: aLast, b: b, g1: last.G, g2: last.G}
		if s.n > 0 {
			cf.a1, cf.g1, cf.g2, cf.acc1, cf.acc2 = aAcc, s.acc, s.acc, true, true
			if last.G != nil {
				cf.a2, cf.g2, cf.acc2 = aLast, last.G, false
			}
		}
		s.coefs = append(s.coefs, cf)
	}
	m := s.cfg.Momentum
	if s.cfg.MomentumComp {
		m = compensated(m, s.window.mean())
	}
	s.m = float32(m)
	info := UpdateInfo{Gradients: c, Rate: eta, Alpha: eta * abar,
		MeanStaleness: float64(sumTau) / float64(c), MaxStaleness: maxTau, Momentum: m}
	info.Refused = !s.apply(w, last.G, float64(last.Max), c)
	if !info.Refused && s.stepSq != nil {
		s.par.observeSteps(s.stepSq, s.mom)
		s.steps++
	}
	clear(s.coefs) // the gradients are not retained
	s.n, s.sumS, s.sumTau, s.maxTau, s.bounds.acc = 0, 0, 0, 0, 0
	return info
}

// limit is the bound below which an update takes the fast path: half the
// largest float32, a margin over the rounding the slack already covers.
const limit = math.MaxFloat32 / 2

// apply runs the update's passes over w and the momentum (coefs set) and
// reports whether it was applied: on the fast path in place, when the
// bounds prove every result finite; otherwise checked, into scratch
// copies that replace w and the momentum only if every value is finite.
// c is the number of gradients, which sets the rounding slack.
func (s *Solver) apply(w, last []float32, lastMax float64, c int) bool {
	if len(w) > 0 && &w[0] != s.bounds.at {
		s.bounds.w, s.bounds.exact, s.bounds.at = math.Inf(1), false, &w[0]
	}
	// Each value an update writes is a sum of at most 2c+8 rounded
	// operations on the bounded terms; (1+2⁻²⁴)^(2c+8) bounds their
	// relative growth.
	slack := math.Exp(float64(2*c+8) * 0x1p-24)
	t := s.stepBound(lastMax)
	if !((s.bounds.w+t)*slack < limit) && !s.bounds.exact {
		s.measure(w)
		t = s.stepBound(lastMax)
	}
	stateMax, ok := s.foldState(w, last, c)
	if !ok {
		return false
	}
	if (s.bounds.w+t)*slack < limit {
		for i, sp := range s.spans {
			if sp.state {
				continue
			}
			cf := &s.coefs[i]
			s.par.step(w[sp.off:sp.end], s.mom[sp.off:sp.end], cf.g1[sp.off:sp.end], cf.g2[sp.off:sp.end], s.m, cf.a1, cf.a2, cf.b)
		}
		s.commitState(w)
		s.bounds.w, s.bounds.v, s.bounds.exact = max((s.bounds.w+t)*slack, float64(stateMax)), t*slack, false
		return true
	}
	if !s.applyChecked(w) {
		return false
	}
	s.commitState(w)
	s.bounds.w = max(s.bounds.w, float64(stateMax))
	return true
}

// foldState computes into stateNew the state values the update gives:
// for each state value θ, with the c measurements of the update (the
// accumulator's sum and last, the last gradient, or nil), θ' = (1 − m)·θ
// + m·(their mean), m = param.StateMomentum. It returns their largest
// magnitude and whether all are finite.
func (s *Solver) foldState(w, last []float32, c int) (float32, bool) {
	const m = param.StateMomentum
	j, big := 0, float32(0)
	for _, r := range s.states {
		for k := r[0]; k < r[1]; k++ {
			var sum float64
			if s.n > 0 {
				sum += float64(s.acc[k])
			}
			if last != nil {
				sum += float64(last[k])
			}
			v := float32((1-m)*float64(w[k]) + m*sum/float64(c))
			if !(math.Abs(float64(v)) <= math.MaxFloat32) {
				return 0, false
			}
			s.stateNew[j] = v
			big = max(big, float32(math.Abs(float64(v))))
			j++
		}
	}
	return big, true
}

// commitState writes stateNew into w's state values.
func (s *Solver) commitState(w []float32) {
	j := 0
	for _, r := range s.states {
		j += copy(w[r[0]:r[1]], s.stateNew[j:])
	}
}

// stepBound returns a bound of |m·v + a1·g1 + a2·g2 + b·θ| over every span
// before rounding, lastMax bounding the last gradient: +Inf or NaN when a
// bound or a factor is not finite.
func (s *Solver) stepBound(lastMax float64) float64 {
	m := float64(s.m)
	stream := func(acc bool) float64 {
		switch {
		case !acc:
			return lastMax
		case s.bounds.acc > math.MaxFloat32:
			// The accumulator is a float32 sum: past the largest float32
			// it may hold ±Inf, whatever its factor makes of the bound.
			return math.Inf(1)
		}
		return s.bounds.acc
	}
	var t float64
	for i := range s.coefs {
		if s.spans[i].state {
			continue
		}
		cf := &s.coefs[i]
		sum := m*s.bounds.v + math.Abs(float64(cf.a1))*stream(cf.acc1) + math.Abs(float64(cf.a2))*stream(cf.acc2) + math.Abs(float64(cf.b))*s.bounds.w
		if !(sum <= t) {
			t = sum // also takes a NaN
		}
	}
	return t
}

// measure replaces the bounds of the weights, the momentum and the
// accumulator by their magnitudes: three read passes.
func (s *Solver) measure(w []float32) {
	s.bounds.w, s.bounds.v, s.bounds.exact = float64(s.par.MaxAbs(w)), float64(s.par.MaxAbs(s.mom)), true
	if s.n > 0 {
		s.bounds.acc = float64(s.par.MaxAbs(s.acc))
	}
}

// applyChecked runs the update on copies of w and the momentum and keeps
// the result only if all of it is finite: the same passes as the fast
// path, so both give the same bits.
func (s *Solver) applyChecked(w []float32) bool {
	if s.ws == nil {
		s.ws, s.vs = make([]float32, len(w)), make([]float32, len(w))
	}
	s.par.copy2(s.ws, s.vs, w, s.mom)
	for i, sp := range s.spans {
		if sp.state {
			continue
		}
		cf := &s.coefs[i]
		s.par.step(s.ws[sp.off:sp.end], s.vs[sp.off:sp.end], cf.g1[sp.off:sp.end], cf.g2[sp.off:sp.end], s.m, cf.a1, cf.a2, cf.b)
	}
	wm, vm := s.par.MaxAbs(s.ws), s.par.MaxAbs(s.vs)
	if !(wm <= math.MaxFloat32 && vm <= math.MaxFloat32) {
		return false
	}
	s.par.copy2(w, s.mom, s.ws, s.vs)
	s.bounds.w, s.bounds.v, s.bounds.exact = float64(wm), float64(vm), true
	return true
}

// State is the solver's mutable state, for checkpoints: the momentum
// history, the pending accumulation and the rules' running statistics.
// Slices are copies. A statistic is nil when the rule keeps none; given
// to SetState, an empty one starts afresh (as NewSolver does) and one the
// solver's rule does not keep is ignored, so that a job can resume under
// another rule.
type State struct {
	Momentum []float32 // v for [lo, hi)
	Acc      []float32 // Σ s_l·Δθ_l of the pending gradients; nil when Pending is 0
	Pending  int       // gradients in Acc
	SumS     float64   // Σ s_l of the pending gradients
	SumTau   int64     // Σ τ_l of the pending gradients
	MaxTau   int       // max τ_l of the pending gradients
	// MeanSquare is CorrDCAdaptive's running mean square of the
	// gradients, per element of [lo, hi).
	MeanSquare []float32
	// StepSquare is CorrGap's running mean of the squared steps, per
	// element of [lo, hi), and Steps the updates folded into it.
	StepSquare []float32
	Steps      uint64
	// RecentTau holds, under MomentumComp, the staleness of the last
	// gradients received (at most MomentumWindow), oldest first.
	RecentTau []int64
}

// State returns a deep copy of the solver's mutable state.
func (s *Solver) State() State {
	st := State{Momentum: slices.Clone(s.mom), Pending: s.n, SumS: s.sumS, SumTau: s.sumTau, MaxTau: s.maxTau,
		MeanSquare: slices.Clone(s.meanSq), StepSquare: slices.Clone(s.stepSq), Steps: s.steps}
	if s.n > 0 {
		st.Acc = slices.Clone(s.acc)
	}
	if s.cfg.MomentumComp {
		st.RecentTau = s.window.ordered()
	}
	return st
}

// SetState restores a state taken with State from a solver of the same
// range. It returns a *param.FieldError if a length does not match or a
// statistic is out of its range (negative, NaN or infinite).
func (s *Solver) SetState(st State) error {
	n := s.hi - s.lo
	switch {
	case len(st.Momentum) != n:
		return param.Fieldf("State.Momentum", "has %d elements, want %d", len(st.Momentum), n)
	case st.Pending < 0 || (st.Pending > 0 && len(st.Acc) != n) || (st.Pending == 0 && len(st.Acc) != 0):
		return param.Fieldf("State.Acc", "has %d elements with %d pending gradients, want %d (or none with 0 pending)", len(st.Acc), st.Pending, n)
	}
	for _, f := range []struct {
		name string
		v    []float32
		kept bool
	}{{"State.MeanSquare", st.MeanSquare, s.meanSq != nil}, {"State.StepSquare", st.StepSquare, s.stepSq != nil}} {
		if err := checkStatistic(f.name, f.v, n); f.kept && err != nil {
			return err
		}
	}
	if s.cfg.MomentumComp {
		if len(st.RecentTau) > MomentumWindow {
			return param.Fieldf("State.RecentTau", "has %d entries, at most %d", len(st.RecentTau), MomentumWindow)
		}
		if k := slices.IndexFunc(st.RecentTau, func(t int64) bool { return t < 0 }); k >= 0 {
			return param.Fieldf("State.RecentTau", "entry %d is %d, staleness is ≥ 0", k, st.RecentTau[k])
		}
		s.window.set(st.RecentTau)
	}
	restore(s.meanSq, st.MeanSquare)
	restore(s.stepSq, st.StepSquare)
	if s.steps = 0; len(s.stepSq) > 0 && len(st.StepSquare) > 0 {
		s.steps = st.Steps
	}
	copy(s.mom, st.Momentum)
	if st.Pending > 0 {
		if s.acc == nil {
			s.acc = make([]float32, n)
		}
		copy(s.acc, st.Acc)
	}
	s.n, s.sumS, s.sumTau, s.maxTau = st.Pending, st.SumS, st.SumTau, st.MaxTau
	s.bounds = bounds{w: math.Inf(1), v: math.Inf(1)} // measured by the next update
	if s.n > 0 {
		s.bounds.acc = math.Inf(1)
	}
	return nil
}

// checkStatistic returns a *param.FieldError unless v is empty or holds
// n finite values ≥ 0.
func checkStatistic(name string, v []float32, n int) error {
	switch {
	case len(v) == 0:
		return nil
	case len(v) != n:
		return param.Fieldf(name, "has %d elements, want %d", len(v), n)
	}
	if k := slices.IndexFunc(v, func(x float32) bool { return !(x >= 0 && x <= math.MaxFloat32) }); k >= 0 {
		return param.Fieldf(name, "element %d is %g: a mean of squares is finite and ≥ 0", k, v[k])
	}
	return nil
}

// restore sets dst (a statistic the solver keeps, or nil) to src, or to
// zeros when src is empty.
func restore(dst, src []float32) {
	if len(src) == 0 {
		clear(dst)
	}
	copy(dst, src)
}
