package sgd

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/kernels/isa"
)

// BenchmarkUpdate measures the solver on one core: c gradients per update
// (c−1 Adds and one fused Update), reported as bytes of gradient per second
// (SetBytes = c·n·4). Sizes: LeNet's 431,080 parameters and a 16 MB vector.
// The kernels sub-benchmarks run the assembly of each level and the Go
// loops side by side, and memmove of the same bytes as the memory
// reference.
func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{431080, 4 << 20} {
		for _, c := range []int{1, 4} {
			for _, impl := range kernelImpls(b) {
				b.Run(fmt.Sprintf("n=%d/c=%d/%s", n, c, impl.name), func(b *testing.B) {
					defer impl.use()()
					s, err := NewSolver(Config{LR: 0.01, Momentum: 0.9, WeightDecay: 0.004, LRMode: LRStaleness}, nil, 0, n)
					if err != nil {
						b.Fatal(err)
					}
					r := rand.New(rand.NewPCG(1, 1))
					w, g := randVec(r, n), randVec(r, n)
					gm := MaxAbs(g) // the bound the shard's check computes on arrival
					s.Add(g, gm, 0) // allocate the accumulator before timing
					s.Update(w, g, gm, 0, 0)
					b.SetBytes(int64(4 * n * c))
					b.ReportAllocs()
					for b.Loop() {
						for l := 1; l < c; l++ {
							s.Add(g, gm, l)
						}
						s.Update(w, g, gm, 0, 0)
					}
				})
			}
		}
		b.Run(fmt.Sprintf("n=%d/memmove", n), func(b *testing.B) {
			x, y := make([]float32, n), make([]float32, n)
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				copy(x, y)
			}
		})
	}
}

// BenchmarkUpdateThreads measures a shard's part of a hardsync step of
// one learner on about AlexNet's 61 M parameters, on the best kernel
// path: the check of the gradient (Parallel.MaxAbs) and an update of that
// one gradient, serially and spread over 2 goroutines (Spread), reported
// as bytes of gradient per second. Everything is allocated inside the
// sub-benchmarks, so that a -bench pattern that leaves them out costs
// nothing.
func BenchmarkUpdateThreads(b *testing.B) {
	const n = 61_000_000
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("n=%d/threads=%d", n, threads), func(b *testing.B) {
			p := Spread(threads)
			s, err := NewSolver(Config{LR: 1e-6, Momentum: 0.9, WeightDecay: 0.004, LRMode: LRStaleness}, nil, 0, n)
			if err != nil {
				b.Fatal(err)
			}
			s.SetParallel(p)
			r := rand.New(rand.NewPCG(1, 1))
			w, g := randVec(r, n), randVec(r, n)
			s.Update(w, g, p.MaxAbs(g), 0, 0) // first touch of the momentum before timing
			b.SetBytes(4 * n)
			for b.Loop() {
				s.Update(w, g, p.MaxAbs(g), 0, 0)
			}
		})
	}
}

// BenchmarkRules measures each rule beside the staleness rule, on the
// best kernel path, as BenchmarkUpdate does (c gradients per update,
// bytes of gradient per second), for LeNet's 431,080 parameters. The
// gradients of the correction rules come with τ = 3 and pulled weights
// that differ from the current ones, and the rate is small enough that
// the weights stay near them (no update is refused: the benchmark fails
// if one is). Besides time it reports the rule's
// memory: state-B, the solver's own statistics for the range, and
// pulled-B/learner, the pulled weights the caller keeps per learner.
func BenchmarkRules(b *testing.B) {
	const n = 431080
	for _, c := range []int{1, 4} {
		for _, rc := range []struct {
			rule string
			comp bool
		}{{"staleness", false}, {"constant", false}, {"poly:0.5", false}, {"hinge:4,10", false},
			{"dc:0.04", false}, {"dc-adaptive:2", false}, {"gap", false}, {"staleness", true}} {
			name := rc.rule
			if rc.comp {
				name += "+momentum-comp"
			}
			b.Run(fmt.Sprintf("n=%d/c=%d/rule=%s", n, c, name), func(b *testing.B) {
				cfg := Config{LR: 1e-6, Momentum: 0.9, WeightDecay: 0.004, MomentumComp: rc.comp}
				if err := cfg.ParseRule(rc.rule); err != nil {
					b.Fatal(err)
				}
				s, err := NewSolver(cfg, nil, 0, n)
				if err != nil {
					b.Fatal(err)
				}
				r := rand.New(rand.NewPCG(1, 1))
				w, pulled := randVec(r, n), randVec(r, n)
				for k := range pulled {
					pulled[k] = w[k] + 1e-3*pulled[k]
				}
				g := Grad{G: randVec(r, n), Tau: 3, Pulled: pulled}
				g.Max = MaxAbs(g.G)
				s.AddGrad(w, g) // allocate the accumulator before timing
				s.UpdateGrad(w, g, 0)
				b.SetBytes(int64(4 * n * c))
				b.ReportAllocs()
				for b.Loop() {
					for range c - 1 {
						s.AddGrad(w, g)
					}
					if s.UpdateGrad(w, g, 0).Refused {
						b.Fatal("update refused")
					}
				}
				b.ReportMetric(float64(4*(len(s.meanSq)+len(s.stepSq))+8*cap(s.window.taus)), "state-B")
				pulledBytes := 0
				if cfg.NeedsPulled() {
					pulledBytes = 4 * n
				}
				b.ReportMetric(float64(pulledBytes), "pulled-B/learner")
			})
		}
	}
}

// BenchmarkRateFactor measures what the stateless rates add per gradient
// beside their common passes: the factor s(τ), for τ cycling through 0 …
// 127 (LRPoly's table covers τ < 64, a power beyond).
func BenchmarkRateFactor(b *testing.B) {
	for _, rule := range []string{"staleness", "poly:0.5", "hinge:4,10"} {
		b.Run("rule="+rule, func(b *testing.B) {
			cfg := Config{LR: 1}
			if err := cfg.ParseRule(rule); err != nil {
				b.Fatal(err)
			}
			s, err := NewSolver(cfg, nil, 0, 1)
			if err != nil {
				b.Fatal(err)
			}
			var sum float64
			tau := 0
			for b.Loop() {
				sum += s.factor(tau)
				tau = (tau + 1) & 127
			}
			if !(sum > 0) {
				b.Fatal("no factor computed")
			}
		})
	}
}

// BenchmarkFirstNonFinite measures the finite check a shard runs on every
// gradient it receives.
func BenchmarkFirstNonFinite(b *testing.B) {
	const n = 431080
	x := randVec(rand.New(rand.NewPCG(1, 1)), n)
	for _, impl := range kernelImpls(b) {
		b.Run(impl.name, func(b *testing.B) {
			defer impl.use()()
			b.SetBytes(4 * n)
			for b.Loop() {
				if FirstNonFinite(x) != -1 {
					b.Fatal("finite vector reported non-finite")
				}
			}
		})
	}
}

type kernelImpl struct {
	name string
	use  func() (restore func())
}

// kernelImpls lists the kernel paths of this machine and build: the
// assembly of each level the CPU runs, best first, and the Go loops
// (named "go"); levels it cannot run are logged and left out.
func kernelImpls(t testing.TB) []kernelImpl {
	set := func(l isa.Level) func() func() {
		return func() func() {
			old := kern
			kern = asmFor(l)
			return func() { kern = old }
		}
	}
	var impls []kernelImpl
	for _, l := range []isa.Level{isa.AVX512, isa.AVX2} {
		if a := asmFor(min(l, isa.Best())); a.level != l {
			t.Logf("%v assembly not run: this build or CPU lacks it (%s)", l, isa.Reason())
			continue
		}
		impls = append(impls, kernelImpl{l.String(), set(l)})
	}
	return append(impls, kernelImpl{"go", set(isa.Generic)})
}
