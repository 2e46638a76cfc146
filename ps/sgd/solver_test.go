package sgd

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/ps/param"
)

// testLayout has three segments with distinct multipliers, like a layer's
// weights and bias followed by another layer's weights.
var testLayout = []param.Segment{
	{Name: "fc1.weight", Offset: 0, Len: 37, LRMult: 1, DecayMult: 1},
	{Name: "fc1.bias", Offset: 37, Len: 5, LRMult: 2, DecayMult: 0},
	{Name: "fc2.weight", Offset: 42, Len: 29, LRMult: 1, DecayMult: 250},
}

const testTotal = 71

// multipliers returns lr_mult and decay_mult of element k of testLayout.
func multipliers(k int) (float64, float64) {
	for _, s := range testLayout {
		if k >= s.Offset && k < s.Offset+s.Len {
			return float64(s.LRMult), float64(s.DecayMult)
		}
	}
	panic("outside layout")
}

func testConfig(mode LRMode) Config {
	return Config{LR: 0.05, Momentum: 0.9, WeightDecay: 0.004, LRSteps: []int{2, 4}, LRGamma: 0.1, LRMode: mode}
}

// TestCaffeSingleLearner runs several single-gradient updates (λ = 1, τ = 0)
// on a range that cuts through segments and compares them with Caffe's
// SGDSolver written out in float64: diff = g + decay·decay_mult·w;
// v = momentum·v + lr·lr_mult·diff; w −= v, with the step schedule.
func TestCaffeSingleLearner(t *testing.T) {
	for _, mode := range []LRMode{LRConstant, LRStaleness, LRAverage} {
		cfg := testConfig(mode)
		lo, hi := 30, 60
		s, err := NewSolver(cfg, testLayout, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(3, 4))
		w := randVec(r, hi-lo)
		ref := make([]float64, len(w))
		vref := make([]float64, len(w))
		for i, x := range w {
			ref[i] = float64(x)
		}
		for epoch := range 6 {
			g := randVec(r, hi-lo)
			info := update(s, w, g, 0, epoch)
			lr := 0.05 * math.Pow(0.1, float64(min(epoch/2, 2)))
			if info.Gradients != 1 || math.Abs(info.Rate-lr) > 1e-15 || math.Abs(info.Alpha-lr) > 1e-15 {
				t.Fatalf("%v epoch %d: info %+v, want 1 gradient at rate %g", mode, epoch, info, lr)
			}
			for i := range ref {
				lm, dm := multipliers(lo + i)
				diff := float64(g[i]) + 0.004*dm*ref[i]
				vref[i] = 0.9*vref[i] + lr*lm*diff
				ref[i] -= vref[i]
			}
			for i := range w {
				if !near(w[i], ref[i], 1e-5) {
					t.Fatalf("%v epoch %d: w[%d] = %g, Caffe gives %g", mode, epoch, i, w[i], ref[i])
				}
			}
		}
	}
}

// TestStalenessModes applies one update of three gradients of staleness
// 0, 2 and 5 from zero momentum and checks g = (1/c)·Σ α(τ_l)·Δθ_l and the
// decay weight ᾱ against the paper's formulas written out here.
func TestStalenessModes(t *testing.T) {
	taus := []int{0, 2, 5}
	const eta, decay, mom = 0.05, 0.004, 0.9
	alphas := map[LRMode][]float64{
		LRConstant:  {eta, eta, eta},
		LRStaleness: {eta, eta / 2, eta / 5},
		LRAverage:   {eta / (7.0 / 3), eta / (7.0 / 3), eta / (7.0 / 3)},
	}
	for mode, alpha := range alphas {
		for _, fused := range []bool{false, true} {
			s, err := NewSolver(testConfig(mode), testLayout, 0, testTotal)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(5, 6))
			w0 := randVec(r, testTotal)
			grads := [][]float32{randVec(r, testTotal), randVec(r, testTotal), randVec(r, testTotal)}
			// A first update gives the momentum a history, so that the
			// momentum term is checked too.
			w := clone(w0)
			prev := randVec(r, testTotal)
			update(s, w, prev, 0, 0)
			wMid := clone(w)
			for l := range 2 {
				add(s, grads[l], taus[l])
			}
			var info UpdateInfo
			if fused {
				info = update(s, w, grads[2], taus[2], 1)
			} else {
				add(s, grads[2], taus[2])
				info = update(s, w, nil, 0, 1)
			}
			abar := (alpha[0] + alpha[1] + alpha[2]) / 3
			if info.Gradients != 3 || math.Abs(info.Alpha-abar) > 1e-12 || info.MeanStaleness != 7.0/3 || info.MaxStaleness != 5 {
				t.Fatalf("%v: info %+v, want 3 gradients, mean rate %g", mode, info, abar)
			}
			for i := range w {
				lm, dm := multipliers(i)
				v1 := eta * lm * (float64(prev[i]) + decay*dm*float64(w0[i]))
				var g float64
				for l := range 3 {
					g += alpha[l] * float64(grads[l][i]) / 3
				}
				v2 := mom*v1 + lm*(g+abar*decay*dm*float64(wMid[i]))
				if want := float64(wMid[i]) - v2; !near(w[i], want, 1e-5) {
					t.Fatalf("%v fused=%v: w[%d] = %g, want %g", mode, fused, i, w[i], want)
				}
			}
		}
	}
}

// TestQuorumPartialUpdate checks the partial update: with Quorum c₀ = 4,
// two gradients give the update of those two at the rate η·2/4 without a
// quorum, in every mode, the reported mean rate scaled likewise; SetQuorum
// changes c₀ for the updates that follow; and a full update with Quorum
// set is bit for bit the update without it.
func TestQuorumPartialUpdate(t *testing.T) {
	for _, mode := range []LRMode{LRConstant, LRStaleness, LRAverage} {
		partial, half := testConfig(mode), testConfig(mode)
		partial.Quorum = 4
		half.LR /= 2
		a, err := NewSolver(partial, testLayout, 0, testTotal)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewSolver(half, testLayout, 0, testTotal)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(9, 10))
		wa := randVec(r, testTotal)
		// A full update first gives the momentum a history.
		for range 3 {
			add(a, randVec(r, testTotal), 0)
		}
		update(a, wa, randVec(r, testTotal), 0, 0)
		wb := clone(wa)
		if err := b.SetState(a.State()); err != nil {
			t.Fatal(err)
		}
		g1, g2 := randVec(r, testTotal), randVec(r, testTotal)
		add(a, g1, 1)
		info := update(a, wa, g2, 3, 1)
		add(b, g1, 1)
		ref := update(b, wb, g2, 3, 1)
		for i := range wa {
			if !near(wa[i], float64(wb[i]), 1e-6) {
				t.Fatalf("%v: w[%d] = %g, at half the rate %g", mode, i, wa[i], wb[i])
			}
		}
		if info.Gradients != 2 || math.Abs(info.Alpha-ref.Alpha) > 1e-15 {
			t.Fatalf("%v: info %+v, want 2 gradients and mean rate %g", mode, info, ref.Alpha)
		}
	}
	// SetQuorum changes c₀ for the next updates: a solver set to 4 after
	// its first update continues as one made with Quorum 4.
	set, made := testConfig(LRStaleness), testConfig(LRStaleness)
	made.Quorum = 4
	var sw [2][]float32
	for k, cfg := range []Config{set, made} {
		s, err := NewSolver(cfg, testLayout, 0, testTotal)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(13, 12))
		sw[k] = randVec(r, testTotal)
		for range 3 {
			add(s, randVec(r, testTotal), 1)
		}
		update(s, sw[k], randVec(r, testTotal), 2, 0)
		if k == 0 {
			s.SetQuorum(4)
		}
		add(s, randVec(r, testTotal), 1)
		if info := update(s, sw[k], randVec(r, testTotal), 0, 0); s.Config().Quorum != 4 || info.Gradients != 2 {
			t.Fatalf("after SetQuorum: quorum %d, %+v", s.Config().Quorum, info)
		}
	}
	if !sameBits(sw[0], sw[1]) {
		t.Fatal("SetQuorum(4) differs from a solver made with Quorum 4")
	}
	// A full update is unchanged by the quorum, bit for bit.
	q := testConfig(LRStaleness)
	q.Quorum = 3
	ws := [2][]float32{}
	for k, cfg := range []Config{testConfig(LRStaleness), q} {
		s, err := NewSolver(cfg, testLayout, 0, testTotal)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(11, 12))
		ws[k] = randVec(r, testTotal)
		add(s, randVec(r, testTotal), 2)
		add(s, randVec(r, testTotal), 0)
		update(s, ws[k], randVec(r, testTotal), 1, 0)
	}
	for i := range ws[0] {
		if ws[0][i] != ws[1][i] {
			t.Fatalf("full update with Quorum differs at %d: %g vs %g", i, ws[1][i], ws[0][i])
		}
	}
}

// TestAverageModeCap checks that a mean staleness below 1 does not raise the
// rate above α0: τ = {0, 1} gives ⟨τ⟩ = 0.5 and factor 1.
func TestAverageModeCap(t *testing.T) {
	s, err := NewSolver(Config{LR: 0.1, LRMode: LRAverage}, nil, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	w := []float32{1, 1, 1, 1}
	add(s, []float32{1, 2, 3, 4}, 0)
	info := update(s, w, []float32{1, 2, 3, 4}, 1, 0)
	if info.Alpha != 0.1 {
		t.Fatalf("mean rate %g, want 0.1", info.Alpha)
	}
	for i, want := range []float32{0.9, 0.8, 0.7, 0.6} {
		if !near(w[i], float64(want), 1e-6) {
			t.Fatalf("w[%d] = %g, want %g", i, w[i], want)
		}
	}
}

// add and update call Add and Update with the gradient's MaxAbs as its
// bound, as a shard does.
func add(s *Solver, g []float32, tau int) { s.Add(g, MaxAbs(g), tau) }

func update(s *Solver, w, last []float32, tau, epoch int) UpdateInfo {
	return s.Update(w, last, MaxAbs(last), tau, epoch)
}

func TestRateSchedule(t *testing.T) {
	c := Config{LR: 0.001, LRSteps: []int{120, 130}, LRGamma: 0.1}
	for _, tc := range []struct {
		epoch int
		want  float64
	}{{0, 0.001}, {119, 0.001}, {120, 0.0001}, {129, 0.0001}, {130, 0.00001}, {139, 0.00001}} {
		if got := c.Rate(tc.epoch); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Rate(%d) = %g, want %g", tc.epoch, got, tc.want)
		}
	}
}

func TestStateRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	mk := func() *Solver {
		s, err := NewSolver(testConfig(LRStaleness), testLayout, 10, 50)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := mk()
	w := randVec(r, 40)
	update(a, w, randVec(r, 40), 0, 0)
	g1, g2 := randVec(r, 40), randVec(r, 40)
	add(a, g1, 3)
	st := a.State()
	b := mk()
	if err := b.SetState(st); err != nil {
		t.Fatal(err)
	}
	wa, wb := clone(w), clone(w)
	update(a, wa, g2, 1, 1)
	update(b, wb, g2, 1, 1)
	for i := range wa {
		if wa[i] != wb[i] {
			t.Fatalf("restored solver diverges at %d: %g vs %g", i, wb[i], wa[i])
		}
	}
	st.Acc = st.Acc[:5]
	if err := b.SetState(st); !errors.Is(err, param.ErrInvalidConfig) {
		t.Fatalf("short accumulator: err %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	good := testConfig(LRStaleness)
	for _, tc := range []struct {
		field string
		mut   func(*Config)
	}{
		{"LR", func(c *Config) { c.LR = 0 }},
		{"LR", func(c *Config) { c.LR = math.NaN() }},
		{"Momentum", func(c *Config) { c.Momentum = 1 }},
		{"Momentum", func(c *Config) { c.Momentum = -0.1 }},
		{"WeightDecay", func(c *Config) { c.WeightDecay = -1 }},
		{"WeightDecay", func(c *Config) { c.WeightDecay = math.Inf(1) }},
		{"LRMode", func(c *Config) { c.LRMode = 7 }},
		{"LRSteps[1]", func(c *Config) { c.LRSteps = []int{5, 5} }},
		{"LRSteps[0]", func(c *Config) { c.LRSteps = []int{0} }},
		{"LRGamma", func(c *Config) { c.LRGamma = 0 }},
		{"Quorum", func(c *Config) { c.Quorum = -1 }},
	} {
		c := good
		tc.mut(&c)
		err := c.Validate()
		var fe *param.FieldError
		if !errors.Is(err, param.ErrInvalidConfig) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("want error on %s, got %v", tc.field, err)
		}
		if _, err := NewSolver(c, nil, 0, 4); !errors.Is(err, param.ErrInvalidConfig) {
			t.Errorf("NewSolver accepted bad %s: %v", tc.field, err)
		}
	}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	c := good
	c.LRSteps, c.LRGamma = nil, 0
	if err := c.Validate(); err != nil {
		t.Fatalf("no schedule needs no gamma: %v", err)
	}
	if m, err := ParseLRMode("average"); err != nil || m != LRAverage || m.String() != "average" {
		t.Fatalf("ParseLRMode: %v %v", m, err)
	}
	if _, err := ParseLRMode("fast"); !errors.Is(err, param.ErrInvalidConfig) || !strings.Contains(err.Error(), `"fast"`) {
		t.Fatalf("ParseLRMode(fast): %v", err)
	}
}

func TestRangeErrors(t *testing.T) {
	for _, r := range [][2]int{{-1, 5}, {5, 5}, {0, testTotal + 1}} {
		if _, err := NewSolver(testConfig(LRConstant), testLayout, r[0], r[1]); !errors.Is(err, param.ErrInvalidConfig) {
			t.Errorf("range %v accepted: %v", r, err)
		}
	}
}

func TestMisusePanics(t *testing.T) {
	s, err := NewSolver(testConfig(LRConstant), nil, 0, 8)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"short gradient": func() { add(s, make([]float32, 7), 0) },
		"negative tau":   func() { add(s, make([]float32, 8), -1) },
		"no gradient":    func() { update(s, make([]float32, 8), nil, 0, 0) },
		"short weights":  func() { update(s, make([]float32, 4), make([]float32, 8), 0, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// sameBits reports whether a and b hold the same float32 bit patterns.
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// TestUpdateRefused drives weights to the edge of the float32 range and
// past it, on every kernel path and under the rules without a per-gradient
// statistic: an update whose results are finite is applied, however large
// they are; one that would make a weight or a momentum value infinite is
// refused as a whole (the weights, the momentum and gap's step statistic
// keep their bits) and its pending gradients are discarded: the next
// update is the one a solver that never saw them makes.
func TestUpdateRefused(t *testing.T) { forImpls(t, testUpdateRefused) }

func testUpdateRefused(t *testing.T) {
	const big = 40 // in fc1.bias: lr_mult 2, no decay
	for _, rule := range []string{"constant", "staleness", "average", "poly:0.5", "hinge:0,2", "dc:0.5", "gap"} {
		cfg := Config{LR: 0.5, Momentum: 0.5, WeightDecay: 0.004}
		if err := cfg.ParseRule(rule); err != nil {
			t.Fatal(err)
		}
		s, err := NewSolver(cfg, testLayout, 0, testTotal)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(13, 14))
		w := randVec(r, testTotal)
		w[big] = -3e38
		for range 3 { // finite, the largest weight within 1% of the float32 maximum
			if info := pushUpdate(s, w, randVec(r, testTotal), 0, 0); info.Refused {
				t.Fatalf("%s: an update with finite results was refused: %+v", rule, info)
			}
		}
		if w[big] > -3e38 || w[big] < -math.MaxFloat32 {
			t.Fatalf("%s: w[%d] = %g after small steps from -3e38", rule, big, w[big])
		}
		w0, st0 := clone(w), s.State()
		ref, err := NewSolver(cfg, testLayout, 0, testTotal)
		if err != nil {
			t.Fatal(err)
		}
		if err := ref.SetState(st0); err != nil {
			t.Fatal(err)
		}
		huge := randVec(r, testTotal)
		huge[big] = 3e38 // a step of lr·lr_mult·3e38 = 3e38 further down: −Inf
		push(s, w, randVec(r, testTotal), 1)
		if info := pushUpdate(s, w, huge, 0, 0); !info.Refused || info.Gradients != 2 {
			t.Fatalf("%s: an update to −Inf: %+v, want refused", rule, info)
		}
		if !sameBits(w, w0) || !sameState(s.State(), st0) {
			t.Fatalf("%s: a refused update changed the weights, the momentum or the statistics, or left %d pending", rule, s.Pending())
		}
		g := randVec(r, testTotal)
		wr := clone(w0)
		a, b := pushUpdate(s, w, g, 0, 1), pushUpdate(ref, wr, g, 0, 1)
		if a.Refused || b.Refused || !sameBits(w, wr) || !sameState(s.State(), ref.State()) {
			t.Fatalf("%s: after a refused update: %+v; the solver that never saw it: %+v, weights differ: %t", rule, a, b, !sameBits(w, wr))
		}
	}
}

// push and pushUpdate call AddGrad and UpdateGrad as a shard does, with
// the gradient's MaxAbs as its bound, for a gradient computed on the
// current weights w: its pulled weights.
func push(s *Solver, w, g []float32, tau int) {
	s.AddGrad(w, Grad{G: g, Max: MaxAbs(g), Tau: tau, Pulled: w})
}

func pushUpdate(s *Solver, w, last []float32, tau, epoch int) UpdateInfo {
	return s.UpdateGrad(w, Grad{G: last, Max: MaxAbs(last), Tau: tau, Pulled: w}, epoch)
}

// TestCheckedSameBits runs the same updates on the fast path (gradients
// with their MaxAbs) and on the checked one (bounds unknown: +Inf), under
// rules with and without corrections: both give the same bits, and
// neither refuses.
func TestCheckedSameBits(t *testing.T) { forImpls(t, testCheckedSameBits) }

func testCheckedSameBits(t *testing.T) {
	for _, rule := range []string{"staleness", "gap+staleness", "dc-adaptive:2"} {
		cfg := testConfig(LRConstant)
		if err := cfg.ParseRule(rule); err != nil {
			t.Fatal(err)
		}
		var ss [2]*Solver
		for i := range ss {
			var err error
			if ss[i], err = NewSolver(cfg, testLayout, 0, testTotal); err != nil {
				t.Fatal(err)
			}
		}
		r := rand.New(rand.NewPCG(15, 16))
		w0 := randVec(r, testTotal)
		ws := [2][]float32{clone(w0), clone(w0)}
		inf := float32(math.Inf(1))
		for u := range 6 {
			grads := [][]float32{randVec(r, testTotal), randVec(r, testTotal), randVec(r, testTotal)}
			c := 1 + u%3
			for i, s := range ss {
				// Each gradient was computed on the initial weights.
				grad := func(g []float32, tau int) Grad {
					return Grad{G: g, Max: [2]float32{MaxAbs(g), inf}[i], Tau: tau, Pulled: w0}
				}
				for _, g := range grads[:c-1] {
					s.AddGrad(ws[i], grad(g, u%2))
				}
				if info := s.UpdateGrad(ws[i], grad(grads[c-1], 1), u); info.Refused {
					t.Fatalf("%s: update %d (path %d) refused: %+v", rule, u, i, info)
				}
			}
			if !sameBits(ws[0], ws[1]) || !sameState(ss[0].State(), ss[1].State()) {
				t.Fatalf("%s: update %d of %d gradients: the fast and the checked path differ", rule, u, c)
			}
		}
	}
}
