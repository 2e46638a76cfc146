//go:build cgo && !noblas

package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/kernels/kerneltest"
)

// TestNativeParallel runs the suite with the C kernels split over three
// threads down to single rows and planes, so that every parallel path is
// taken even on the suite's small shapes, at every instruction-set level
// the CPU runs.
func TestNativeParallel(t *testing.T) {
	kernels.SetMinParallelFloats(1)
	defer kernels.SetMinParallelFloats(4096)
	for _, l := range isa.All {
		t.Run(l.String(), func(t *testing.T) {
			if !isa.Supported(l) {
				t.Skipf("level %v: %s", l, isa.Reason())
			}
			e, info, err := kernels.New(kernels.Config{Threads: 3, CoreType: os.Getenv("OPENBLAS_CORETYPE"), ISA: l})
			if err != nil || info.Fallback {
				t.Fatal(err, info.FallbackErr)
			}
			kerneltest.Run(t, e)
		})
	}
}

// TestNativeWgrad runs the convolution tests at level AVX2 with the weight
// gradient as one GEMM over the batch (csrc/wgrad.c) for every shape, not
// only the networks' large ones: with the default chunks, and with its
// images cut into groups of a few hundred floats and its output gradient
// into chunks of a few pixels, on one thread and on three (whose bits
// must agree), so that every boundary is crossed on the suite's shapes.
func TestNativeWgrad(t *testing.T) {
	if !isa.Supported(isa.AVX2) {
		t.Skipf("level avx2: %s", isa.Reason())
	}
	defer kernels.SetWgradTest(0, 0, false)
	kernels.SetWgradTest(0, 0, true)
	e, info, err := kernels.New(kernels.Config{Threads: 2, CoreType: os.Getenv("OPENBLAS_CORETYPE"), ISA: isa.AVX2})
	if err != nil || info.Fallback {
		t.Fatal(err, info.FallbackErr)
	}
	t.Run("default", func(t *testing.T) { kerneltest.RunConv(t, e) })
	kernels.SetWgradTest(300, 2048, true)
	var es []kernels.Engine
	for _, threads := range []int{1, 3} {
		e, info, err := kernels.New(kernels.Config{Threads: threads, CoreType: os.Getenv("OPENBLAS_CORETYPE"), ISA: isa.AVX2})
		if err != nil || info.Fallback {
			t.Fatal(err, info.FallbackErr)
		}
		es = append(es, e)
		kerneltest.RunConv(t, e)
	}
	kerneltest.ThreadsAgree(t, es[0], es[1])
}

// TestNativeConvPlans runs the convolution tests with each method forced,
// the GEMM methods with one image per GEMM and with uneven groups, the
// direct method at each level that has it (AVX2, AVX-512), space to
// depth at every level, and the Winograd methods (4×4 and 6×6 tiles) at
// every level with the default blocks of tiles and with blocks of a few
// tiles (which end inside tile rows' images), so that every path of
// csrc/conv.c, csrc/direct.c, csrc/direct512.c, csrc/s2d.c and
// csrc/winograd.c is checked whatever the shapes would choose.
func TestNativeConvPlans(t *testing.T) {
	if _, info, _ := kernels.New(kernels.Config{CoreType: os.Getenv("OPENBLAS_CORETYPE")}); info.Fallback {
		t.Fatal(info.FallbackErr)
	}
	for _, method := range []string{"chwn", "image", "direct"} {
		for _, budget := range []int{1, 4000, 57601, 0} {
			if method == "direct" && budget != 0 {
				continue // the direct method has no GEMM groups
			}
			e := kernels.NativeWith(budget, method, isa.Generic)
			t.Run(fmt.Sprintf("%s/budget=%d", method, budget), func(t *testing.T) {
				if method != "direct" {
					kerneltest.RunConv(t, e)
					return
				}
				for _, l := range []isa.Level{isa.AVX512, isa.AVX2} {
					t.Run(l.String(), func(t *testing.T) {
						if !isa.Supported(l) {
							t.Skipf("level %v: %s", l, isa.Reason())
						}
						kerneltest.RunConv(t, kernels.NativeWith(0, "direct", l))
					})
				}
			})
		}
	}
	// Space to depth runs the strided shapes (the others keep their
	// choice) at every level, its stride-1 passes on what each level
	// chooses for them.
	for _, l := range isa.All {
		t.Run(fmt.Sprintf("s2d/%v", l), func(t *testing.T) {
			if !isa.Supported(l) {
				t.Skipf("level %v: %s", l, isa.Reason())
			}
			kerneltest.RunConv(t, kernels.NativeWith(0, "s2d", l))
		})
	}
	defer kernels.SetWinogradTest(0)
	for _, method := range []string{"winograd", "winograd6"} {
		for _, tiles := range []int{0, 5} {
			kernels.SetWinogradTest(tiles)
			for _, l := range isa.All {
				t.Run(fmt.Sprintf("%s/tiles=%d/%v", method, tiles, l), func(t *testing.T) {
					if !isa.Supported(l) {
						t.Skipf("level %v: %s", l, isa.Reason())
					}
					kerneltest.RunConv(t, kernels.NativeWith(0, method, l))
				})
			}
		}
	}
}

// TestLevelsAgree runs pooling, ReLU, LRN (within and across channels),
// batch normalisation, Add and dropout, whose variants do the same
// operations in the same order, at every instruction-set level the CPU
// runs and checks that each gives the generic level's bits, on the
// networks' shapes and on shapes off the vector paths (odd sizes,
// padding, strides 1 and 3).
func TestLevelsAgree(t *testing.T) {
	var engines []kernels.Engine
	for _, l := range []isa.Level{isa.Generic, isa.AVX2, isa.AVX512} {
		if !isa.Supported(l) {
			t.Logf("level %v not run: %s", l, isa.Reason())
			continue
		}
		e, _, err := kernels.New(kernels.Config{CoreType: os.Getenv("OPENBLAS_CORETYPE"), ISA: l})
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	if len(engines) < 2 {
		t.Skipf("one level only here (%s)", isa.Reason())
	}
	r := rand.New(rand.NewPCG(9, 10))
	uniform := func(n int) []float32 { return randSlice(r, n) }
	same := func(what string, l isa.Level, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s at level %v: element %d = %g, generic %g", what, l, i, got[i], want[i])
			}
		}
	}
	for _, s := range []kernels.PoolShape{
		{N: 3, C: 4, H: 24, W: 24, KH: 2, KW: 2, StrideH: 2, StrideW: 2},
		{N: 2, C: 5, H: 32, W: 32, KH: 3, KW: 3, StrideH: 2, StrideW: 2},
		{N: 2, C: 3, H: 16, W: 16, KH: 3, KW: 3, StrideH: 2, StrideW: 2},
		{N: 2, C: 3, H: 8, W: 8, KH: 3, KW: 3, StrideH: 2, StrideW: 2},
		{N: 2, C: 3, H: 13, W: 11, KH: 3, KW: 3, StrideH: 2, StrideW: 2},
		{N: 1, C: 2, H: 9, W: 12, KH: 5, KW: 5, StrideH: 3, StrideW: 3},
		{N: 1, C: 2, H: 10, W: 10, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 2, StrideW: 2},
		{N: 1, C: 2, H: 7, W: 9, KH: 2, KW: 3, StrideH: 1, StrideW: 1},
		{N: 1, C: 1, H: 40, W: 40, KH: 4, KW: 4, StrideH: 2, StrideW: 2},
		{N: 2, C: 3, H: 28, W: 28, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 2, StrideW: 2},
		{N: 1, C: 2, H: 70, W: 61, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
		{N: 1, C: 2, H: 11, W: 9, KH: 4, KW: 5, PadH: 2, PadW: 2, StrideH: 2, StrideW: 2},
	} {
		for _, mode := range []kernels.PoolMode{kernels.MaxPool, kernels.AvgPool} {
			s.Mode = mode
			x, dy := uniform(s.InputLen()), uniform(s.OutputLen())
			var want [][]float32
			for i, e := range engines {
				got := kerneltest.PoolPasses(e, s, x, dy)
				if i == 0 {
					want = got
					continue
				}
				for k, what := range []string{"pool y", "pool dx", "pool mask"} {
					if mode == kernels.AvgPool && k == 2 {
						continue
					}
					same(fmt.Sprintf("%s %+v", what, s), kernels.ISAOf(e), got[k], want[k])
				}
			}
		}
	}
	for _, s := range []kernels.LRNShape{
		{N: 2, C: 3, H: 16, W: 16, Size: 3, Alpha: 5e-5, Beta: 0.75, K: 1},
		{N: 1, C: 2, H: 7, W: 13, Size: 5, Alpha: 0.9, Beta: 0.5, K: 2},
		{N: 1, C: 2, H: 5, W: 6, Size: 3, Alpha: 0.3, Beta: 1, K: 1},
		{N: 2, C: 9, H: 13, W: 13, Size: 5, Alpha: 1e-4, Beta: 0.75, K: 1, Region: kernels.AcrossChannels},
		{N: 1, C: 4, H: 40, W: 31, Size: 3, Alpha: 0.9, Beta: 0.5, K: 2, Region: kernels.AcrossChannels},
		{N: 1, C: 5, H: 3, W: 7, Size: 7, Alpha: 0.3, Beta: 1.3, K: 1, Region: kernels.AcrossChannels},
		// Scales on both sides of 2^120, where s^(-3/4) leaves its fast path.
		{N: 1, C: 6, H: 3, W: 7, Size: 3, Alpha: 1e36, Beta: 0.75, K: 1.2e36, Region: kernels.AcrossChannels},
		{N: 1, C: 2, H: 5, W: 5, Size: 3, Alpha: 3e35, Beta: 0.75, K: 1.2e36},
	} {
		x, dy := uniform(s.Len()), uniform(s.Len())
		var want [3][]float32
		for i, e := range engines {
			y, scale, dx := make([]float32, s.Len()), make([]float32, s.Len()), make([]float32, s.Len())
			ws := &kernels.Workspace{}
			e.LRNForward(s, x, y, scale, ws)
			e.LRNBackward(s, x, y, scale, dy, dx, ws)
			if i == 0 {
				want = [3][]float32{y, scale, dx}
				continue
			}
			same("LRN y", kernels.ISAOf(e), y, want[0])
			same("LRN scale", kernels.ISAOf(e), scale, want[1])
			same("LRN dx", kernels.ISAOf(e), dx, want[2])
		}
	}
	for _, s := range []kernels.BNShape{
		{N: 3, C: 4, HW: 13 * 13, Eps: 1e-5},
		{N: 1, C: 3, HW: 2 * 7 * 7, Eps: 1e-5},
		{N: 8, C: 5, HW: 1, Eps: 1e-3},
	} {
		x, gamma, beta, dy := uniform(s.Len()), uniform(s.C), uniform(s.C), uniform(s.Len())
		var want [][]float32
		for i, e := range engines {
			got := kerneltest.BNPasses(e, s, x, gamma, beta, dy)
			if i == 0 {
				want = got
				continue
			}
			for k := range got {
				same(fmt.Sprintf("BN output %d %+v", k, s), kernels.ISAOf(e), got[k], want[k])
			}
		}
	}
	x, dy := uniform(1001), uniform(1001)
	var want [5][]float32
	for i, e := range engines {
		y, dx, sum, dy1, dx1 := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x)),
			make([]float32, len(x)), make([]float32, len(x))
		e.ReLUForward(x, y)
		e.ReLUBackward(y, dy, dx)
		e.Add(x, dy, sum)
		d := kernels.Dropout{Ratio: 0.4, Seed: 5, Offset: 1<<32 - 333}
		e.DropoutForward(d, x, dy1)
		e.DropoutBackward(d, dy, dx1)
		if i == 0 {
			want = [5][]float32{y, dx, sum, dy1, dx1}
			continue
		}
		same("ReLU y", kernels.ISAOf(e), y, want[0])
		same("ReLU dx", kernels.ISAOf(e), dx, want[1])
		same("Add", kernels.ISAOf(e), sum, want[2])
		same("Dropout y", kernels.ISAOf(e), dy1, want[3])
		same("Dropout dx", kernels.ISAOf(e), dx1, want[4])
	}
}

// TestEnginesOwnThreads makes an engine of two threads, then one of one
// thread: each keeps its count (Info, ThreadsOf), splits its C kernels'
// jobs over that many threads, and runs its GEMMs on that many OpenBLAS
// threads, whichever engine was made or called last; both compute the
// same results (kerneltest.ThreadsAgree), alone and at once.
func TestEnginesOwnThreads(t *testing.T) {
	kernels.SetMinParallelFloats(1)
	defer kernels.SetMinParallelFloats(4096)
	core := os.Getenv("OPENBLAS_CORETYPE")
	a, ia, err := kernels.New(kernels.Config{Threads: 2, CoreType: core})
	if err != nil || ia.Fallback {
		t.Fatal(err, ia.FallbackErr)
	}
	b, ib, err := kernels.New(kernels.Config{Threads: 1, CoreType: core})
	if err != nil || ib.Fallback {
		t.Fatal(err, ib.FallbackErr)
	}
	if ia.Threads != 2 || kernels.ThreadsOf(a) != 2 || ib.Threads != 1 || kernels.ThreadsOf(b) != 1 {
		t.Fatalf("threads: first engine Info %d, ThreadsOf %d; second Info %d, ThreadsOf %d; want 2, 2, 1, 1",
			ia.Threads, kernels.ThreadsOf(a), ib.Threads, kernels.ThreadsOf(b))
	}

	// The jobs of the C kernels, as the goroutine's thread runs them.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cs := kernels.ConvShape{N: 4, C: 3, H: 10, W: 10, OC: 5, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1}
	ps := kernels.PoolShape{N: 4, C: 3, H: 10, W: 10, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
	ls := kernels.LRNShape{N: 4, C: 3, H: 10, W: 10, Size: 3, Alpha: 1e-4, Beta: 0.75, K: 1}
	r := rand.New(rand.NewPCG(11, 12))
	uniform := func(n int) []float32 { return randSlice(r, n) }
	x, w, dy := uniform(cs.InputLen()), uniform(cs.WeightLen()), uniform(cs.OutputLen())
	ws := &kernels.Workspace{}
	ops := []struct {
		name string
		run  func(e kernels.Engine)
	}{
		{"ConvForward", func(e kernels.Engine) { e.ConvForward(cs, x, w, nil, make([]float32, cs.OutputLen()), ws) }},
		{"ConvBackward", func(e kernels.Engine) {
			e.ConvBackward(cs, x, w, dy, make([]float32, cs.InputLen()), make([]float32, cs.WeightLen()),
				make([]float32, cs.OC), ws)
		}},
		{"PoolForward", func(e kernels.Engine) {
			e.PoolForward(ps, x, make([]float32, ps.OutputLen()), make([]int32, ps.OutputLen()))
		}},
		{"LRNForward", func(e kernels.Engine) {
			e.LRNForward(ls, x, make([]float32, ls.Len()), make([]float32, ls.Len()), ws)
		}},
		{"ReLUForward", func(e kernels.Engine) { e.ReLUForward(x, make([]float32, len(x))) }},
		{"Add", func(e kernels.Engine) { e.Add(x, x, make([]float32, len(x))) }},
		{"DropoutForward", func(e kernels.Engine) { e.DropoutForward(kernels.Dropout{Ratio: 0.5}, x, make([]float32, len(x))) }},
		{"LRNForward across channels", func(e kernels.Engine) {
			s := ls
			s.Region = kernels.AcrossChannels
			e.LRNForward(s, x, make([]float32, s.Len()), make([]float32, s.Len()), ws)
		}},
		{"BNForwardTrain", func(e kernels.Engine) {
			bs := kernels.BNShape{N: 4, C: 3, HW: 100, Eps: 1e-5}
			c := make([]float32, bs.C)
			e.BNForwardTrain(bs, x, c, c, make([]float32, bs.Len()), make([]float32, bs.C), make([]float32, bs.C))
		}},
		{"BNBackward", func(e kernels.Engine) {
			bs := kernels.BNShape{N: 4, C: 3, HW: 100, Eps: 1e-5}
			c := make([]float32, bs.C)
			e.BNBackward(bs, x, c, c, c, x, make([]float32, bs.Len()), make([]float32, bs.C), make([]float32, bs.C))
		}},
	}
	for _, op := range ops {
		// Alternate, so that each call follows the other engine's.
		for range 2 {
			for _, c := range []struct {
				e    kernels.Engine
				want int
			}{{a, 2}, {b, 1}} {
				kernels.ParallelMaxParts()
				op.run(c.e)
				if got := kernels.ParallelMaxParts(); got != c.want {
					t.Errorf("%s on the engine of %d threads: jobs split over up to %d threads", op.name, c.want, got)
				}
			}
		}
	}

	// OpenBLAS's count follows the engine that runs a GEMM.
	m := uniform(64 * 64)
	gemm := func(e kernels.Engine) int {
		e.Gemm(false, false, 64, 64, 64, 1, m, 64, m, 64, 0, make([]float32, 64*64), 64)
		return kernels.BLASThreads()
	}
	if gemm(a) == 1 {
		t.Log("OpenBLAS runs one thread: its count is not checked")
	} else {
		for i, c := range []struct {
			e    kernels.Engine
			want int
		}{{b, 1}, {a, 2}, {b, 1}} {
			if got := gemm(c.e); got != c.want {
				t.Errorf("GEMM %d on the engine of %d threads ran on %d OpenBLAS threads", i, c.want, got)
			}
		}
	}

	kerneltest.ThreadsAgree(t, a, b)
}
