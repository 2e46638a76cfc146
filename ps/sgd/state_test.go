package sgd

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/softsync/softsync/ps/param"
)

// stateLayout has a batch norm layer's four segments between two layers'
// weights: two of them state.
var stateLayout = []param.Segment{
	{Name: "a.weight", Offset: 0, Len: 20, LRMult: 1, DecayMult: 1},
	{Name: "bn.weight", Offset: 20, Len: 4, LRMult: 1, DecayMult: 1},
	{Name: "bn.bias", Offset: 24, Len: 4, LRMult: 2, DecayMult: 0},
	{Name: "bn.running_mean", Offset: 28, Len: 4, Kind: param.State},
	{Name: "bn.running_var", Offset: 32, Len: 4, Kind: param.State},
	{Name: "b.weight", Offset: 36, Len: 14, LRMult: 1, DecayMult: 1},
}

// TestStateSegments runs updates of three gradients of several
// staleness under every rule on a range that cuts through the state
// segments, against a solver whose layout has no state: the learnable
// values are the same up to rounding, and each state value follows θ' =
// 0.9·θ + 0.1·(the mean of the update's measurements), untouched by the
// rate, its staleness factors, the corrections, momentum and decay.
func TestStateSegments(t *testing.T) { forImpls(t, testStateSegments) }

func testStateSegments(t *testing.T) {
	plain := slices.Clone(stateLayout)
	for i := range plain {
		if plain[i].Kind == param.State {
			plain[i].Kind, plain[i].LRMult, plain[i].DecayMult = param.Learnable, 1, 1
		}
	}
	lo, hi := 10, 44
	for _, rule := range []string{"constant", "staleness", "average", "dc", "dc-adaptive", "gap", "poly:0.5"} {
		for _, comp := range []bool{false, true} {
			cfg := testConfig(LRConstant)
			if err := cfg.ParseRule(rule); err != nil {
				t.Fatal(err)
			}
			cfg.MomentumComp, cfg.Quorum = comp, 4 // the last update is a partial one of 3
			st, err := NewSolver(cfg, stateLayout, lo, hi)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := NewSolver(cfg, plain, lo, hi)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(5, 6))
			w := randVec(r, hi-lo)
			for k := 22; k < 26; k++ { // positive running variances
				w[k] = float32(math.Abs(float64(w[k]))) + 0.5
			}
			w2 := slices.Clone(w)
			state := make([]float64, hi-lo)
			for k := range state {
				state[k] = float64(w[k])
			}
			for u := range 4 {
				c := 4
				if u == 3 {
					c = 3
				}
				sum := make([]float64, hi-lo)
				for l := range c {
					g := randVec(r, hi-lo)
					pulled := slices.Clone(w)
					for k := range pulled {
						pulled[k] += float32(0.01 * r.NormFloat64())
					}
					for k := range g {
						sum[k] += float64(g[k])
					}
					gr := Grad{G: g, Max: MaxAbs(g), Tau: l, Pulled: pulled}
					if l < c-1 {
						st.AddGrad(w, gr)
						ref.AddGrad(w2, gr)
					} else {
						st.UpdateGrad(w, gr, u)
						ref.UpdateGrad(w2, gr, u)
					}
				}
				for k := range w {
					isState := lo+k >= 28 && lo+k < 36
					if !isState {
						// The accumulation passes run per range of
						// learnable values: the assembly may round an
						// element at a range's edge otherwise (FMA).
						if !near(w[k], float64(w2[k]), 1e-6) {
							t.Fatalf("%s (comp %v) update %d: learnable w[%d] = %g, %g without state segments", rule, comp, u, lo+k, w[k], w2[k])
						}
						continue
					}
					state[k] = 0.9*state[k] + 0.1*sum[k]/float64(c)
					if !near(w[k], state[k], 1e-6) {
						t.Fatalf("%s (comp %v) update %d: state w[%d] = %g, want %g", rule, comp, u, lo+k, w[k], state[k])
					}
				}
			}
			for k, v := range st.State().Momentum {
				if lo+k >= 28 && lo+k < 36 && v != 0 {
					t.Fatalf("%s: momentum of state value %d is %g", rule, lo+k, v)
				}
			}
		}
	}
}

// TestStateResume: a solver restored from State with pending
// measurements continues as the one it was taken from, bit for bit; an
// update refused for a learnable value leaves the state values too.
func TestStateResume(t *testing.T) {
	cfg := testConfig(LRStaleness)
	a, _ := NewSolver(cfg, stateLayout, 0, 50)
	r := rand.New(rand.NewPCG(7, 8))
	w := randVec(r, 50)
	g1, g2, g3 := randVec(r, 50), randVec(r, 50), randVec(r, 50)
	a.Add(g1, MaxAbs(g1), 1)
	a.Add(g2, MaxAbs(g2), 0)
	b, _ := NewSolver(cfg, stateLayout, 0, 50)
	if err := b.SetState(a.State()); err != nil {
		t.Fatal(err)
	}
	wb := slices.Clone(w)
	update(a, w, g3, 2, 0)
	update(b, wb, g3, 2, 0)
	if !slices.Equal(w, wb) {
		t.Fatal("restored solver differs")
	}
	// A learnable gradient that overflows the step: the whole update is
	// refused, the state values included.
	huge := randVec(r, 50)
	huge[3] = math.MaxFloat32
	cfg.LR = 10
	c, _ := NewSolver(cfg, stateLayout, 0, 50)
	before := slices.Clone(w)
	if info := update(c, w, huge, 0, 0); !info.Refused || !slices.Equal(w, before) {
		t.Fatalf("refused %v; weights changed: %v", info.Refused, !slices.Equal(w, before))
	}
}
