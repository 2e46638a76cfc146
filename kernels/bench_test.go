package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/kernels/kerneltest"
)

// Benchmarks report GFLOP/s (b.ReportMetric) and allocations; names are
// benchstat-friendly: Benchmark<Op>/<engine>/<shape>[/<pass>].

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 2*r.Float32() - 1
	}
	return x
}

func reportGFlops(b *testing.B, flopPerOp float64) {
	b.ReportMetric(flopPerOp*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// gemmSizes are the GEMMs of the paper's networks batched over the
// mini-batch, and a square one.
var gemmSizes = [][3]int{
	{1024, 1024, 1024}, {32, 25600, 800}, {50, 4096, 500}, {64, 6400, 800}, {500, 64, 800}, {128, 576, 1024},
}

func BenchmarkGemm(b *testing.B) {
	engines := kerneltest.Engines(b)
	if len(engines) > 2 {
		engines = engines[:2] // the GEMMs are OpenBLAS's whatever the level
	}
	for _, e := range engines {
		for _, s := range gemmSizes {
			m, n, k := s[0], s[1], s[2]
			b.Run(fmt.Sprintf("%s/%dx%dx%d", e.Name(), m, n, k), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				a, bb, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
				b.ReportAllocs()
				for b.Loop() {
					e.Gemm(false, false, m, n, k, 1, a, k, bb, n, 0, c, n)
				}
				reportGFlops(b, 2*float64(m)*float64(n)*float64(k))
			})
		}
	}
}

// convLayers are the convolutions of Caffe's LeNet (batch 64) and
// cifar10_full (batch 100). first marks a network's first layer, whose
// backward pass computes no input gradient.
var convLayers = []struct {
	name  string
	s     kernels.ConvShape
	first bool
}{
	{"lenet-conv1", kernels.ConvShape{N: 64, C: 1, H: 28, W: 28, OC: 20, KH: 5, KW: 5, StrideH: 1, StrideW: 1}, true},
	{"lenet-conv2", kernels.ConvShape{N: 64, C: 20, H: 12, W: 12, OC: 50, KH: 5, KW: 5, StrideH: 1, StrideW: 1}, false},
	{"cifar-conv1", kernels.ConvShape{N: 100, C: 3, H: 32, W: 32, OC: 32, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1}, true},
	{"cifar-conv2", kernels.ConvShape{N: 100, C: 32, H: 16, W: 16, OC: 32, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1}, false},
	{"cifar-conv3", kernels.ConvShape{N: 100, C: 32, H: 8, W: 8, OC: 64, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1}, false},
}

// BenchmarkConv measures each layer's forward pass, backward pass, and
// both together against the bare GEMMs they contain, on the fastest engine
// of the build with all cores and, for the native engine, with one thread
// (as each network worker runs it: native-<level>-1thread) at each
// instruction-set level with direct kernels (AVX-512, AVX2) the CPU runs.
func BenchmarkConv(b *testing.B) {
	e := kerneltest.Fastest(b)
	benchConv(b, e, kerneltest.Label(e, 0))
	if e.Name() != "native" {
		return
	}
	forLevels(b, []isa.Level{isa.AVX512, isa.AVX2}, func(one kernels.Engine) {
		benchConv(b, one, kerneltest.Label(one, 0)+"-1thread")
	})
}

// forLevels runs f with the native engine on one thread at each of levels
// the CPU runs (the others are logged).
func forLevels(b *testing.B, levels []isa.Level, f func(e kernels.Engine)) {
	for _, l := range levels {
		if !isa.Supported(l) {
			b.Logf("native-%v: %s", l, isa.Reason())
			continue
		}
		one, _, err := kernels.New(kernels.Config{Threads: 1, CoreType: os.Getenv("OPENBLAS_CORETYPE"), ISA: l})
		if err != nil {
			b.Fatal(err)
		}
		f(one)
	}
}

// reportCPU adds cpu-GFLOP/s, the FLOPs per second of CPU time of the
// benchmark's thread, for engines that run on the calling thread only
// (one thread): on a shared machine the wall-clock rate also counts the
// time other work held the core, the CPU-time rate does not. The caller
// locks the goroutine to its thread and passes the CPU time at the start.
func reportCPU(b *testing.B, flopPerOp, cpu0 float64) {
	if cpu0 < 0 {
		return
	}
	if d := threadCPU() - cpu0; d > 0 {
		b.ReportMetric(flopPerOp*float64(b.N)/d/1e9, "cpu-GFLOP/s")
	}
}

// benchConv runs BenchmarkConv's layers on e, named name/<layer>/<pass>;
// on a one-thread engine (name ending in -1thread) it also reports
// cpu-GFLOP/s.
func benchConv(b *testing.B, e kernels.Engine, name string) {
	oneThread := strings.HasSuffix(name, "-1thread")
	start := func() float64 {
		if !oneThread {
			return -1
		}
		runtime.LockOSThread()
		return threadCPU()
	}
	stop := func() {
		if oneThread {
			runtime.UnlockOSThread()
		}
	}
	for _, l := range convLayers {
		s := l.s
		r := rand.New(rand.NewPCG(3, 4))
		x, w, bias := randSlice(r, s.InputLen()), randSlice(r, s.WeightLen()), randSlice(r, s.OC)
		y, dy := make([]float32, s.OutputLen()), randSlice(r, s.OutputLen())
		dw, db := make([]float32, s.WeightLen()), make([]float32, s.OC)
		var dx []float32
		if !l.first {
			dx = make([]float32, s.InputLen())
		}
		k, np := s.C*s.KH*s.KW, s.N*s.OutH()*s.OutW()
		fwdFlop := 2 * float64(s.OC) * float64(np) * float64(k)
		bwdFlop := fwdFlop // dW
		if dx != nil {
			bwdFlop += fwdFlop // dX
		}
		ws := &kernels.Workspace{}
		prefix := name + "/" + l.name
		b.Run(prefix+"/fwd", func(b *testing.B) {
			b.ReportAllocs()
			e.ConvForward(s, x, w, bias, y, ws)
			cpu0 := start()
			defer stop()
			for b.Loop() {
				e.ConvForward(s, x, w, bias, y, ws)
			}
			reportGFlops(b, fwdFlop)
			reportCPU(b, fwdFlop, cpu0)
		})
		b.Run(prefix+"/bwd", func(b *testing.B) {
			b.ReportAllocs()
			e.ConvBackward(s, x, w, dy, dx, dw, db, ws)
			cpu0 := start()
			defer stop()
			for b.Loop() {
				e.ConvBackward(s, x, w, dy, dx, dw, db, ws)
			}
			reportGFlops(b, bwdFlop)
			reportCPU(b, bwdFlop, cpu0)
		})
		// fwd+bwd alternates the layer's passes with its bare GEMMs
		// (same shapes and transposes, no im2col), so that both see
		// the same machine load: gemm-GFLOP/s is the rate of the
		// GEMMs alone and %gemm the layer's rate relative to it.
		col, out, dcol := randSlice(r, k*np), make([]float32, s.OC*np), make([]float32, k*np)
		b.Run(prefix+"/fwd+bwd", func(b *testing.B) {
			b.ReportAllocs()
			var layer, gemm time.Duration
			for b.Loop() {
				t0 := time.Now()
				e.ConvForward(s, x, w, bias, y, ws)
				e.ConvBackward(s, x, w, dy, dx, dw, db, ws)
				t1 := time.Now()
				e.Gemm(false, false, s.OC, np, k, 1, w, k, col, np, 0, out, np)
				e.Gemm(false, true, s.OC, k, np, 1, out, np, col, np, 0, dw, k)
				if dx != nil {
					e.Gemm(true, false, k, np, s.OC, 1, w, k, out, np, 0, dcol, np)
				}
				layer += t1.Sub(t0)
				gemm += time.Since(t1)
			}
			flop := (fwdFlop + bwdFlop) * float64(b.N)
			b.ReportMetric(flop/layer.Seconds()/1e9, "GFLOP/s")
			b.ReportMetric(flop/gemm.Seconds()/1e9, "gemm-GFLOP/s")
			b.ReportMetric(100*gemm.Seconds()/layer.Seconds(), "%gemm")
		})
	}
}

// BenchmarkLayers measures the non-GEMM layers of the two networks on one
// thread, as each network worker runs them, at every instruction-set
// level the CPU runs, in input elements per second (Melem/s) and bytes
// read plus written per second (MB/s, SetBytes; cpu-GB/s per second of
// the thread's CPU time): they stream memory, so the yardstick is the copy
// bandwidth (softsync bench peak).
func BenchmarkLayers(b *testing.B) {
	e := kerneltest.Fastest(b)
	if e.Name() != "native" {
		benchLayers(b, e, e.Name())
		return
	}
	forLevels(b, isa.All, func(one kernels.Engine) { benchLayers(b, one, kerneltest.Label(one, 0)) })
}

// benchLayers runs BenchmarkLayers' layers on e, named name/<layer>/<pass>.
func benchLayers(b *testing.B, e kernels.Engine, name string) {
	r := rand.New(rand.NewPCG(5, 6))
	// run times f like b.Loop after one untimed call, on the goroutine's
	// own thread, and reports
	// Melem/s, MB/s (SetBytes) and cpu-GB/s (bytes per second of the
	// thread's CPU time, as reportCPU).
	run := func(b *testing.B, n, bytes int, f func()) {
		b.ReportAllocs()
		b.SetBytes(int64(bytes))
		f() // touch the outputs and grow workspaces before timing
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpu0 := threadCPU()
		for b.Loop() {
			f()
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Melem/s")
		if d := threadCPU() - cpu0; cpu0 >= 0 && d > 0 {
			b.ReportMetric(float64(bytes)*float64(b.N)/d/1e9, "cpu-GB/s")
		}
	}
	pools := []struct {
		name string
		s    kernels.PoolShape
	}{
		{"lenet-pool1", kernels.PoolShape{Mode: kernels.MaxPool, N: 32, C: 20, H: 24, W: 24, KH: 2, KW: 2, StrideH: 2, StrideW: 2}},
		{"cifar-pool1", kernels.PoolShape{Mode: kernels.MaxPool, N: 50, C: 32, H: 32, W: 32, KH: 3, KW: 3, StrideH: 2, StrideW: 2}},
		{"cifar-pool2", kernels.PoolShape{Mode: kernels.AvgPool, N: 50, C: 32, H: 16, W: 16, KH: 3, KW: 3, StrideH: 2, StrideW: 2}},
	}
	for _, p := range pools {
		s := p.s
		x, y, mask := randSlice(r, s.InputLen()), make([]float32, s.OutputLen()), make([]int32, s.OutputLen())
		dx := make([]float32, s.InputLen())
		e.PoolForward(s, x, y, mask)
		out := 4 // bytes per output: y, and the mask for max pooling
		if s.Mode == kernels.MaxPool {
			out = 8
		}
		bytes := 4*s.InputLen() + out*s.OutputLen()
		b.Run(name+"/"+p.name+"/fwd", func(b *testing.B) {
			run(b, s.InputLen(), bytes, func() { e.PoolForward(s, x, y, mask) })
		})
		b.Run(name+"/"+p.name+"/bwd", func(b *testing.B) {
			run(b, s.InputLen(), bytes, func() { e.PoolBackward(s, y, mask, dx) })
		})
	}
	ls := kernels.LRNShape{N: 50, C: 32, H: 16, W: 16, Size: 3, Alpha: 5e-5, Beta: 0.75, K: 1}
	x, y, scale, dx := randSlice(r, ls.Len()), make([]float32, ls.Len()), make([]float32, ls.Len()), make([]float32, ls.Len())
	ws := &kernels.Workspace{}
	e.LRNForward(ls, x, y, scale, ws) // grow the workspace
	b.Run(name+"/cifar-norm1/fwd", func(b *testing.B) {
		// x read, y and scale written
		run(b, ls.Len(), 12*ls.Len(), func() { e.LRNForward(ls, x, y, scale, ws) })
	})
	b.Run(name+"/cifar-norm1/bwd", func(b *testing.B) {
		// x, y, scale, dy read, dx written
		run(b, ls.Len(), 20*ls.Len(), func() { e.LRNBackward(ls, x, y, scale, y, dx, ws) })
	})
	b.Run(name+"/cifar-relu1/fwd+bwd", func(b *testing.B) {
		// x read, y written; y, dy read, dx written
		run(b, ls.Len(), 20*ls.Len(), func() {
			e.ReLUForward(x, y)
			e.ReLUBackward(y, x, dx)
		})
	})
}
