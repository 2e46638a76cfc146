package sgd

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/ps/param"
)

// refSolver is the update of the package doc written out in float64, one
// gradient at a time, with every rule: the reference the rule tests hold
// the solver to. Its weights are those of [lo, lo+len(w)) of testLayout.
type refSolver struct {
	cfg    Config
	lo     int
	w, v   []float64
	ms, sq []float64 // dc-adaptive's mean square of the gradients, gap's mean of the squared steps
	steps  int       // updates applied, gap's t
	taus   []int     // every τ received
	sum    []float64 // Σ s_l·g'_l of the pending gradients
	sumS   float64
	pend   []int // τ of the pending gradients
}

func newRef(cfg Config, lo int, w []float32) *refSolver {
	n := len(w)
	r := &refSolver{cfg: cfg, lo: lo, w: make([]float64, n), v: make([]float64, n),
		ms: make([]float64, n), sq: make([]float64, n), sum: make([]float64, n)}
	for k, x := range w {
		r.w[k] = float64(x)
	}
	return r
}

// rate is s(τ) of the per-gradient modes.
func (r *refSolver) rate(tau int) float64 {
	c := r.cfg
	switch {
	case c.LRMode == LRStaleness && tau > 0:
		return 1 / float64(tau)
	case c.LRMode == LRPoly:
		return math.Pow(1+float64(tau), -c.PolyA)
	case c.LRMode == LRHinge && tau > c.HingeB:
		return 1 / (c.HingeA*float64(tau-c.HingeB) + 1)
	}
	return 1
}

// add takes gradient g of staleness tau, computed on pulled.
func (r *refSolver) add(g []float32, pulled []float64, tau int) {
	s := r.rate(tau)
	for k := range r.w {
		x, d := float64(g[k]), r.w[k]-pulled[k]
		switch r.cfg.Correction {
		case CorrDC:
			x += r.cfg.DCLambda * x * x * d
		case CorrDCAdaptive:
			r.ms[k] = 0.95*r.ms[k] + 0.05*x*x
			x += r.cfg.DCLambda / math.Sqrt(r.ms[k]+1e-7) * x * x * d
		case CorrGap:
			c := 1e-8
			if r.steps > 0 {
				c += math.Sqrt(r.sq[k] / (1 - math.Pow(0.999, float64(r.steps))))
			}
			x /= 1 + math.Abs(d)/c
		}
		r.sum[k] += s * x
	}
	r.sumS += s
	r.pend = append(r.pend, tau)
	r.taus = append(r.taus, tau)
}

// update applies the pending gradients and returns the momentum it used.
func (r *refSolver) update(epoch int) float64 {
	c, sumTau := len(r.pend), 0
	for _, tau := range r.pend {
		sumTau += tau
	}
	u := 1.0
	if mean := float64(sumTau) / float64(c); r.cfg.LRMode == LRAverage && mean > 1 {
		u = 1 / mean
	}
	d := float64(max(c, r.cfg.Quorum))
	eta, abar := r.cfg.Rate(epoch), u*r.sumS/d
	m := r.cfg.Momentum
	if r.cfg.MomentumComp {
		recent, sum := r.taus[max(0, len(r.taus)-1024):], 0
		for _, tau := range recent {
			sum += tau
		}
		mean := float64(sum) / float64(len(recent))
		m = max(0, m-(1-1/(mean+1)))
	}
	for k := range r.w {
		lm, dm := multipliers(r.lo + k)
		r.v[k] = m*r.v[k] + eta*lm*(u/d*r.sum[k]+abar*r.cfg.WeightDecay*dm*r.w[k])
		r.w[k] -= r.v[k]
		r.sq[k] = 0.999*r.sq[k] + 0.001*r.v[k]*r.v[k]
		r.sum[k] = 0
	}
	r.steps++
	r.sumS, r.pend = 0, r.pend[:0]
	return m
}

// ruleConfig is the base configuration of the rule tests with the rule
// spelled s (and momentum compensation when comp is set).
func ruleConfig(t *testing.T, s string, comp bool) Config {
	t.Helper()
	cfg := Config{LR: 0.05, Momentum: 0.9, WeightDecay: 0.004, LRSteps: []int{2}, LRGamma: 0.5, Quorum: 3, MomentumComp: comp}
	if err := cfg.ParseRule(s); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ruleRun drives a solver for [ruleLo, testTotal) and, with ref set, the
// float64 reference through updates of c = 1, 2, 3 gradients (c < 3 a
// partial update) of random staleness up to 5, each computed on the
// weights of its stamp, pulled from the history of each. Odd updates
// fold their last gradient into the update's pass. It returns the
// solver's weights after every update.
type ruleRun struct {
	s       *Solver
	ref     *refSolver
	r       *rand.Rand
	w       []float32
	hist    [][]float32 // the solver's weights at each clock
	refHist [][]float64
}

const ruleLo = 20

func newRuleRun(t *testing.T, cfg Config, withRef bool, seed uint64) *ruleRun {
	s, err := NewSolver(cfg, testLayout, ruleLo, testTotal)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 77))
	run := &ruleRun{s: s, r: r, w: randVec(r, testTotal-ruleLo)}
	run.hist = append(run.hist, clone(run.w))
	if withRef {
		run.ref = newRef(cfg, ruleLo, run.w)
		run.refHist = append(run.refHist, slicesClone64(run.ref.w))
	}
	return run
}

func slicesClone64(x []float64) []float64 { return append([]float64(nil), x...) }

// step runs update number u and returns its info and the reference's
// momentum (0 without a reference).
func (run *ruleRun) step(u int) (UpdateInfo, float64) {
	clock := len(run.hist) - 1
	c, epoch := 1+u%3, u/4
	var last Grad
	for l := range c {
		tau := run.r.IntN(min(clock, 5) + 1)
		g := Grad{G: randVec(run.r, len(run.w)), Tau: tau, Pulled: run.hist[clock-tau]}
		g.Max = MaxAbs(g.G)
		if run.ref != nil {
			run.ref.add(g.G, run.refHist[clock-tau], tau)
		}
		if l == c-1 && u%2 == 1 {
			last = g
			break
		}
		run.s.AddGrad(run.w, g)
	}
	info := run.s.UpdateGrad(run.w, last, epoch)
	run.hist = append(run.hist, clone(run.w))
	var m float64
	if run.ref != nil {
		m = run.ref.update(epoch)
		run.refHist = append(run.refHist, slicesClone64(run.ref.w))
	}
	return info, m
}

// ruleCases are the rules the tests run: every rate and correction, some
// combined, and momentum compensation.
var ruleCases = []struct {
	rule string
	comp bool
}{
	{"staleness", false}, {"average", false}, {"poly:0.5", false}, {"hinge:1,2", false},
	{"dc:0.5", false}, {"dc-adaptive:0.5", false}, {"gap", false},
	{"dc:0.5+staleness", false}, {"dc-adaptive:0.5+hinge:1,2", false}, {"gap+poly:0.5", false}, {"average+gap", false},
	{"staleness", true}, {"gap", true},
}

// TestRulesAgainstFloat64 runs every rule through twelve updates on every
// kernel path and compares the weights, and the momentum each update
// used, with the float64 reference after every update. That the rule
// matters is checked too: each differs from the same run without it (the
// constant rate, no correction, no compensation) by far more than the
// tolerance.
func TestRulesAgainstFloat64(t *testing.T) { forImpls(t, testRulesAgainstFloat64) }

func testRulesAgainstFloat64(t *testing.T) {
	const updates, tol = 12, 1e-5
	plain := newRuleRun(t, ruleConfig(t, "constant", false), false, 1)
	for u := range updates {
		plain.step(u)
	}
	for _, rc := range ruleCases {
		cfg := ruleConfig(t, rc.rule, rc.comp)
		run := newRuleRun(t, cfg, true, 1)
		for u := range updates {
			info, m := run.step(u)
			if info.Refused || math.Abs(info.Momentum-m) > 1e-12 {
				t.Fatalf("%s comp=%v update %d: %+v, want momentum %g", rc.rule, rc.comp, u, info, m)
			}
			for k := range run.w {
				if !near(run.w[k], run.ref.w[k], tol) {
					t.Fatalf("%s comp=%v update %d: w[%d] = %g, the reference gives %g", rc.rule, rc.comp, u, k, run.w[k], run.ref.w[k])
				}
			}
		}
		var diff float64
		for k := range run.w {
			diff = max(diff, math.Abs(float64(run.w[k])-float64(plain.w[k])))
		}
		if diff < 1000*tol {
			t.Errorf("%s comp=%v: weights within %g of the constant rate's: the rule did not act", rc.rule, rc.comp, diff)
		}
	}
}

// TestCorrectionsAtZeroStaleness checks that the corrections change
// nothing when every gradient was computed on the current weights (τ = 0,
// as under hardsync): each correction pass adds the gradient itself, bit
// for bit, and the solver with a correction gives the weights of the one
// without, to float32 rounding (the passes that accumulate differ).
func TestCorrectionsAtZeroStaleness(t *testing.T) { forImpls(t, testCorrectionsAtZeroStaleness) }

func testCorrectionsAtZeroStaleness(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	g, w, ms := randVec(r, 37), randVec(r, 37), randVec(r, 37)
	for k, x := range ms {
		ms[k] = x * x
	}
	passes := map[string]func(acc []float32){
		"dc":          func(acc []float32) { dcInto(acc, g, w, w, 1, 0.5) },
		"dc-adaptive": func(acc []float32) { dcAdaptiveInto(acc, ms, g, w, w, 1, 2) },
		"gap":         func(acc []float32) { gapInto(acc, make([]float32, 37), g, w, w, 1, 0) },
	}
	for name, pass := range passes {
		acc := make([]float32, len(g))
		if pass(acc); !sameBits(acc, g) {
			t.Errorf("%s pass at τ = 0 does not add the gradient itself", name)
		}
	}
	for _, rule := range []string{"dc:0.5+staleness", "dc-adaptive:2+staleness", "gap+staleness"} {
		var ws [2][]float32
		for i, spelling := range []string{"staleness", rule} {
			s, err := NewSolver(ruleConfig(t, spelling, false), testLayout, ruleLo, testTotal)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(23, 24))
			ws[i] = randVec(r, testTotal-ruleLo)
			for u := range 6 {
				for range u % 3 {
					g := randVec(r, len(ws[i]))
					s.AddGrad(ws[i], Grad{G: g, Max: MaxAbs(g), Pulled: clone(ws[i])})
				}
				g := randVec(r, len(ws[i]))
				s.UpdateGrad(ws[i], Grad{G: g, Max: MaxAbs(g), Pulled: clone(ws[i])}, u)
			}
		}
		for k := range ws[0] {
			if !near(ws[1][k], float64(ws[0][k]), 1e-6) {
				t.Fatalf("%s at τ = 0: w[%d] = %g, staleness alone gives %g", rule, k, ws[1][k], ws[0][k])
			}
		}
	}
}

// TestRuleStateResume checkpoints every rule's solver in the middle of
// an update being collected, restores the state into a new solver and
// runs both on: the weights and the whole state stay the same, bit for
// bit.
func TestRuleStateResume(t *testing.T) { forImpls(t, testRuleStateResume) }

func testRuleStateResume(t *testing.T) {
	for _, rc := range ruleCases {
		cfg := ruleConfig(t, rc.rule, rc.comp)
		a := newRuleRun(t, cfg, false, 5)
		for u := range 7 {
			a.step(u)
		}
		g := randVec(a.r, len(a.w)) // pending at the checkpoint
		a.s.AddGrad(a.w, Grad{G: g, Max: MaxAbs(g), Tau: 2, Pulled: a.hist[len(a.hist)-3]})
		st := a.s.State()
		b := *a // the same weights, history and random stream from here on
		b.r = rand.New(rand.NewPCG(9, 9))
		a.r = rand.New(rand.NewPCG(9, 9))
		b.w, b.hist = clone(a.w), append([][]float32(nil), a.hist...)
		var err error
		if b.s, err = NewSolver(cfg, testLayout, ruleLo, testTotal); err != nil {
			t.Fatal(err)
		}
		if err := b.s.SetState(st); err != nil {
			t.Fatalf("%s: %v", rc.rule, err)
		}
		if !sameState(a.s.State(), b.s.State()) {
			t.Fatalf("%s comp=%v: the restored state differs from the checkpoint", rc.rule, rc.comp)
		}
		for u := 7; u < 14; u++ {
			ia, _ := a.step(u)
			ib, _ := b.step(u)
			if ia != ib || !sameBits(a.w, b.w) || !sameState(a.s.State(), b.s.State()) {
				t.Fatalf("%s comp=%v: update %d after the restore differs: %+v vs %+v, weights equal %t", rc.rule, rc.comp, u, ib, ia, sameBits(a.w, b.w))
			}
		}
	}
}

// sameState reports whether two states hold the same values, bit for bit.
func sameState(a, b State) bool {
	return sameBits(a.Momentum, b.Momentum) && sameBits(a.Acc, b.Acc) && a.Pending == b.Pending &&
		math.Float64bits(a.SumS) == math.Float64bits(b.SumS) && a.SumTau == b.SumTau && a.MaxTau == b.MaxTau &&
		sameBits(a.MeanSquare, b.MeanSquare) && sameBits(a.StepSquare, b.StepSquare) && a.Steps == b.Steps &&
		slicesEqual(a.RecentTau, b.RecentTau)
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMomentumCompWindow runs 2,000 gradients through momentum
// compensation, so that the window of the last 1,024 turns over, and
// checks every update's momentum against max(0, m − (1 − 1/(⟨τ⟩+1)))
// computed here from every τ sent: 0.9 at τ = 0, lowered as staleness
// grows, 0 once the implicit momentum reaches 0.9 (⟨τ⟩ ≥ 9). A solver
// restored from a checkpoint taken with the window full and turned over
// continues with the same momentum and weights, bit for bit.
func TestMomentumCompWindow(t *testing.T) {
	cfg := Config{LR: 0.01, Momentum: 0.9, LRMode: LRStaleness, MomentumComp: true}
	a, err := NewSolver(cfg, nil, 0, 8)
	if err != nil {
		t.Fatal(err)
	}
	var b *Solver
	r := rand.New(rand.NewPCG(31, 32))
	w := randVec(r, 8)
	var wb []float32
	var taus []int
	zero, between := 0, 0 // updates at momentum 0, and in (0, 0.9)
	for sent := 0; sent < 2000; {
		// τ grows from 0 to about 20 over the run, with noise.
		c := 1 + r.IntN(3)
		for l := range c {
			tau := sent/100 + r.IntN(3)
			taus = append(taus, tau)
			g := randVec(r, 8)
			if l < c-1 {
				a.Add(g, MaxAbs(g), tau)
				if b != nil {
					b.Add(g, MaxAbs(g), tau)
				}
				continue
			}
			info := a.Update(w, g, MaxAbs(g), tau, 0)
			recent, sum := taus[max(0, len(taus)-1024):], 0
			for _, x := range recent {
				sum += x
			}
			mean := float64(sum) / float64(len(recent))
			if want := max(0, 0.9-(1-1/(mean+1))); math.Abs(info.Momentum-want) > 1e-12 {
				t.Fatalf("after %d gradients, ⟨τ⟩ = %g: momentum %g, want %g", len(taus), mean, info.Momentum, want)
			}
			if info.Momentum == 0 {
				zero++
			} else if info.Momentum < 0.9 {
				between++
			}
			if b != nil {
				ib := b.Update(wb, g, MaxAbs(g), tau, 0)
				if ib != info || !sameBits(w, wb) || !sameState(a.State(), b.State()) {
					t.Fatalf("after %d gradients the restored solver differs: %+v vs %+v", len(taus), ib, info)
				}
			}
		}
		sent += c
		if b == nil && sent >= 1300 {
			if b, err = NewSolver(cfg, nil, 0, 8); err != nil {
				t.Fatal(err)
			}
			if err := b.SetState(a.State()); err != nil {
				t.Fatal(err)
			}
			wb = clone(w)
		}
	}
	if zero == 0 || between == 0 {
		t.Fatalf("%d updates at momentum 0, %d between 0 and 0.9: want both", zero, between)
	}
	if m := a.State().RecentTau; len(m) != 1024 || int(m[1023]) != taus[len(taus)-1] || int(m[0]) != taus[len(taus)-1024] {
		t.Fatalf("State.RecentTau has %d entries, want the last 1024 τ oldest first", len(m))
	}
}

func TestRuleMisusePanics(t *testing.T) {
	for _, rule := range []string{"dc", "dc-adaptive", "gap"} {
		s, err := NewSolver(ruleConfig(t, rule, false), nil, 0, 8)
		if err != nil {
			t.Fatal(err)
		}
		w, g := make([]float32, 8), make([]float32, 8)
		for name, f := range map[string]func(){
			"Add without pulled weights":    func() { s.Add(g, 0, 1) },
			"Update without pulled weights": func() { s.Update(w, g, 0, 1, 0) },
			"short pulled weights":          func() { s.AddGrad(w, Grad{G: g, Tau: 1, Pulled: w[:7]}) },
			"no current weights":            func() { s.AddGrad(nil, Grad{G: g, Tau: 1, Pulled: w}) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s: %s: no panic", rule, name)
					}
				}()
				f()
			}()
		}
	}
}

// TestRuleStateErrors checks SetState on the rules' statistics: a wrong
// length or a value that no mean of squares takes is an error naming the
// field, and leaves the solver as it was; an empty statistic starts
// afresh; one the rule does not keep is ignored.
func TestRuleStateErrors(t *testing.T) {
	mk := func(rule string, comp bool) *Solver {
		s, err := NewSolver(ruleConfig(t, rule, comp), nil, 0, 4)
		if err != nil {
			t.Fatal(err)
		}
		w := []float32{1, 2, 3, 4}
		for tau := range 3 {
			s.UpdateGrad(w, Grad{G: []float32{1, -1, 2, 0.5}, Max: 2, Tau: tau, Pulled: []float32{0, 2, 3, 5}}, 0)
		}
		return s
	}
	for _, tc := range []struct {
		rule  string
		comp  bool
		field string
		mut   func(*State)
	}{
		{"dc-adaptive", false, "State.MeanSquare", func(st *State) { st.MeanSquare = st.MeanSquare[:3] }},
		{"dc-adaptive", false, "State.MeanSquare", func(st *State) { st.MeanSquare[1] = float32(math.NaN()) }},
		{"dc-adaptive", false, "State.MeanSquare", func(st *State) { st.MeanSquare[1] = -1 }},
		{"gap", false, "State.StepSquare", func(st *State) { st.StepSquare = append(st.StepSquare, 0) }},
		{"gap", false, "State.StepSquare", func(st *State) { st.StepSquare[0] = float32(math.Inf(1)) }},
		{"staleness", true, "State.RecentTau", func(st *State) { st.RecentTau = make([]int64, MomentumWindow+1) }},
		{"staleness", true, "State.RecentTau", func(st *State) { st.RecentTau[2] = -1 }},
	} {
		s := mk(tc.rule, tc.comp)
		before := s.State()
		st := s.State()
		tc.mut(&st)
		err := s.SetState(st)
		var fe *param.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, param.ErrInvalidConfig) {
			t.Errorf("%s: want an error on %s, got %v", tc.rule, tc.field, err)
		}
		if !sameState(s.State(), before) {
			t.Errorf("%s: a refused state changed the solver", tc.rule)
		}
	}
	fresh := func(rule string) State {
		s, err := NewSolver(ruleConfig(t, rule, true), nil, 0, 4)
		if err != nil {
			t.Fatal(err)
		}
		return s.State()
	}
	for _, rule := range []string{"dc-adaptive", "gap"} {
		s := mk(rule, true)
		st := s.State()
		st.MeanSquare, st.StepSquare, st.RecentTau = nil, nil, nil
		err := s.SetState(st)
		got, want := s.State(), fresh(rule)
		got.Momentum = want.Momentum
		if err != nil || !sameState(got, want) {
			t.Errorf("%s: empty statistics do not start afresh (%v): %+v", rule, err, got)
		}
	}
	s := mk("staleness", false)
	st := mk("gap", true).State()
	if err := s.SetState(st); err != nil || s.State().StepSquare != nil || s.State().RecentTau != nil {
		t.Errorf("a staleness solver restored from a gap state: %v, %+v", err, s.State())
	}
}

// TestRateFactors checks s(τ) of every per-gradient rate against the
// reference's formulas for τ = 0 … 199, inside LRPoly's table and beyond.
func TestRateFactors(t *testing.T) {
	for _, rule := range []string{"staleness", "constant", "average", "poly:0.5", "poly:2", "hinge:4,10", "hinge:0,0.5"} {
		cfg := ruleConfig(t, rule, false)
		s, err := NewSolver(cfg, nil, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref := refSolver{cfg: cfg}
		for tau := range 200 {
			if got, want := s.factor(tau), ref.rate(tau); math.Abs(got-want) > 1e-15*want {
				t.Fatalf("%s: s(%d) = %g, want %g", rule, tau, got, want)
			}
		}
	}
}
