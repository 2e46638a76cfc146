package kerneltest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/softsync/softsync/kernels"
)

// ThreadsAgree checks that two engines of one implementation and level,
// which differ in their thread counts, compute the same results on the
// suite's convolution, pooling, LRN, batch normalisation, ReLU, Add and
// dropout cases, one after the other
// and while both run at once. The results must be the same bits, except
// those of convolutions that run on OpenBLAS's GEMMs (every convolution
// but the native engine's direct ones): OpenBLAS splits a GEMM differently
// for another thread count, and two engines running at once may each run
// a GEMM with the other's count, so those agree to the suite's rounding
// tolerance.
func ThreadsAgree(t *testing.T, a, b kernels.Engine) {
	t.Helper()
	cases := threadCases(a)
	alone := make([][][]float32, len(cases))
	for i, c := range cases {
		alone[i] = c.run(a, false)
		agree(t, c, a, alone[i], c.run(b, false), fmt.Sprintf("%s with %d threads, then %d", c.name,
			kernels.ThreadsOf(a), kernels.ThreadsOf(b)))
	}
	// Both at once, a few times over, each engine from its own goroutine.
	got := [2][][][]float32{make([][][]float32, len(cases)), make([][][]float32, len(cases))}
	done := make(chan struct{})
	for k, e := range []kernels.Engine{a, b} {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 3 {
				for i, c := range cases {
					got[k][i] = c.run(e, false)
				}
			}
		}()
	}
	<-done
	<-done
	for k, e := range []kernels.Engine{a, b} {
		for i, c := range cases {
			agree(t, c, a, alone[i], got[k][i], fmt.Sprintf("%s with %d threads while another engine ran",
				c.name, kernels.ThreadsOf(e)))
		}
	}
}

// threadCase is one computation of ThreadsAgree: run returns its outputs
// (on the absolute values of its inputs when abs is set, which gives the
// magnitudes the tolerances scale), exact whether they must agree bit for
// bit, and tols their tolerances otherwise, one per output.
type threadCase struct {
	name  string
	outs  []string
	run   func(e kernels.Engine, abs bool) [][]float32
	exact bool
	tols  []float64
}

// agree compares got with want, computed by engine a, as c requires.
func agree(t *testing.T, c threadCase, a kernels.Engine, want, got [][]float32, what string) {
	t.Helper()
	if c.exact {
		for k := range want {
			if !slices.Equal(got[k], want[k]) {
				t.Errorf("%s: %s differs from the first engine's alone", what, c.outs[k])
			}
		}
		return
	}
	mag := c.run(a, true)
	for k := range want {
		approx(t, what+": "+c.outs[k], got[k], sliceTo64(want[k]), sliceTo64(mag[k]), c.tols[k])
	}
}

// absIf returns |x| when abs is set, else x.
func absIf(abs bool, x []float32) []float32 {
	if abs {
		return abs32(x)
	}
	return x
}

func threadCases(e kernels.Engine) []threadCase {
	var cases []threadCase
	for _, layout := range []kernels.Layout{kernels.NCHW, kernels.CNHW} {
		for i, s := range convShapes {
			s.Layout = layout
			r := newRand(uint64(700 + i))
			x, w, b, dy := uniform(r, s.InputLen()), uniform(r, s.WeightLen()), uniform(r, s.OC), uniform(r, s.OutputLen())
			p := s.OutH() * s.OutW()
			cases = append(cases, threadCase{
				name: fmt.Sprintf("conv %+v", s), outs: []string{"y", "dx", "dw", "db"},
				exact: kernels.ConvOwnKernels(e, s),
				tols:  []float64{sumTol(s.C * s.KH * s.KW), sumTol(s.OC * s.KH * s.KW), sumTol(s.N * p), sumTol(s.N * p)},
				run: func(e kernels.Engine, abs bool) [][]float32 {
					ws := &kernels.Workspace{}
					y, dx, dw, db := make([]float32, s.OutputLen()), make([]float32, s.InputLen()),
						make([]float32, s.WeightLen()), make([]float32, s.OC)
					x, w, dy := absIf(abs, x), absIf(abs, w), absIf(abs, dy)
					e.ConvForward(s, x, w, absIf(abs, b), y, ws)
					e.ConvBackward(s, x, w, dy, dx, dw, db, ws)
					return [][]float32{y, dx, dw, db}
				},
			})
		}
	}
	for i, s0 := range poolShapes {
		for _, mode := range []kernels.PoolMode{kernels.MaxPool, kernels.AvgPool} {
			s := withMode(s0, mode)
			r := newRand(uint64(800 + i))
			x, dy := uniform(r, s.InputLen()), uniform(r, s.OutputLen())
			cases = append(cases, threadCase{
				name: fmt.Sprintf("pool %+v", s), outs: []string{"y", "dx", "mask"}, exact: true,
				run: func(e kernels.Engine, _ bool) [][]float32 { return PoolPasses(e, s, x, dy) },
			})
		}
	}
	for i, s := range lrnShapes {
		r := newRand(uint64(900 + i))
		x, dy := uniform(r, s.Len()), uniform(r, s.Len())
		cases = append(cases, threadCase{
			name: fmt.Sprintf("LRN %+v", s), outs: []string{"y", "scale", "dx"}, exact: true,
			run: func(e kernels.Engine, _ bool) [][]float32 {
				ws := &kernels.Workspace{}
				y, scale, dx := make([]float32, s.Len()), make([]float32, s.Len()), make([]float32, s.Len())
				e.LRNForward(s, x, y, scale, ws)
				e.LRNBackward(s, x, y, scale, dy, dx, ws)
				return [][]float32{y, scale, dx}
			},
		})
	}
	for i, s := range bnShapes {
		x, gamma, beta, dy := bnInputs(s, uint64(950+i))
		cases = append(cases, threadCase{
			name: fmt.Sprintf("BN %+v", s), outs: []string{"y", "mean", "variance", "y (infer)", "dx", "dgamma", "dbeta"},
			exact: true,
			run:   func(e kernels.Engine, _ bool) [][]float32 { return BNPasses(e, s, x, gamma, beta, dy) },
		})
	}
	r := newRand(1000)
	x, dy := uniform(r, 4099), uniform(r, 4099)
	cases = append(cases, threadCase{
		name: "ReLU, Add, Dropout", outs: []string{"y", "dx", "a+b", "dropout y", "dropout dx"}, exact: true,
		run: func(e kernels.Engine, _ bool) [][]float32 {
			y, dx, sum := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
			e.ReLUForward(x, y)
			e.ReLUBackward(y, dy, dx)
			e.Add(x, dy, sum)
			d := kernels.Dropout{Ratio: 0.3, Seed: 77, Offset: 1<<32 - 2000}
			dy1, dx1 := make([]float32, len(x)), make([]float32, len(x))
			e.DropoutForward(d, x, dy1)
			e.DropoutBackward(d, dy, dx1)
			return [][]float32{y, dx, sum, dy1, dx1}
		},
	})
	return cases
}

// BNPasses runs BNForwardTrain, BNForwardInfer (with the batch's
// statistics) and BNBackward with e and returns y, mean, variance, the
// inference y, dx, dgamma and dbeta, for tests that compare engines.
func BNPasses(e kernels.Engine, s kernels.BNShape, x, gamma, beta, dy []float32) [][]float32 {
	y, mean, variance := make([]float32, s.Len()), make([]float32, s.C), make([]float32, s.C)
	yi, dx, dgamma, dbeta := make([]float32, s.Len()), make([]float32, s.Len()), make([]float32, s.C), make([]float32, s.C)
	e.BNForwardTrain(s, x, gamma, beta, y, mean, variance)
	e.BNForwardInfer(s, x, gamma, beta, mean, variance, yi)
	e.BNBackward(s, x, gamma, mean, variance, dy, dx, dgamma, dbeta)
	return [][]float32{y, mean, variance, yi, dx, dgamma, dbeta}
}

// PoolPasses runs PoolForward on x and PoolBackward on dy with e and
// returns y, dx and the mask (as floats), for tests that compare engines.
func PoolPasses(e kernels.Engine, s kernels.PoolShape, x, dy []float32) [][]float32 {
	y, dx, mask := make([]float32, s.OutputLen()), make([]float32, s.InputLen()), make([]int32, s.OutputLen())
	e.PoolForward(s, x, y, mask)
	e.PoolBackward(s, dy, mask, dx)
	m := make([]float32, len(mask))
	for k, v := range mask {
		m[k] = float32(v)
	}
	return [][]float32{y, dx, m}
}
