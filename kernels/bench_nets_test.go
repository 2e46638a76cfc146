package kernels_test

import (
	"math/rand/v2"
	"os"
	"runtime"
	"syscall"
	"testing"

	"github.com/softsync/softsync/kernels"
)

// netConv is a convolution of an ImageNet network at batch 32 in CNHW, as
// the networks run it from their first layer on; a grouped layer appears
// as one of its groups (each group is an ungrouped convolution on a block
// of channels). times is how often the layer (with its groups) runs in
// one training step; first marks a network's first layer, whose backward
// pass computes no input gradient.
type netConv struct {
	name  string
	s     kernels.ConvShape
	times int
	first bool
}

func cnhw(c, h, oc, k, stride, pad int) kernels.ConvShape {
	return kernels.ConvShape{N: 32, C: c, H: h, W: h, OC: oc, KH: k, KW: k, PadH: pad, PadW: pad,
		StrideH: stride, StrideW: stride, Layout: kernels.CNHW}
}

// netConvs are the convolutions of Caffe's AlexNet (227×227 input; conv2,
// conv4 and conv5 have 2 groups) and torchvision's ResNet-18 (224×224).
var netConvs = []netConv{
	{"alexnet-conv1", cnhw(3, 227, 96, 11, 4, 0), 1, true},
	{"alexnet-conv2", cnhw(48, 27, 128, 5, 1, 2), 2, false},
	{"alexnet-conv3", cnhw(256, 13, 384, 3, 1, 1), 1, false},
	{"alexnet-conv4", cnhw(192, 13, 192, 3, 1, 1), 2, false},
	{"alexnet-conv5", cnhw(192, 13, 128, 3, 1, 1), 2, false},
	{"resnet18-conv1", cnhw(3, 224, 64, 7, 2, 3), 1, true},
	{"resnet18-layer1", cnhw(64, 56, 64, 3, 1, 1), 4, false},
	{"resnet18-layer2.0", cnhw(64, 56, 128, 3, 2, 1), 1, false},
	{"resnet18-layer2.ds", cnhw(64, 56, 128, 1, 2, 0), 1, false},
	{"resnet18-layer2", cnhw(128, 28, 128, 3, 1, 1), 3, false},
	{"resnet18-layer3.0", cnhw(128, 28, 256, 3, 2, 1), 1, false},
	{"resnet18-layer3.ds", cnhw(128, 28, 256, 1, 2, 0), 1, false},
	{"resnet18-layer3", cnhw(256, 14, 256, 3, 1, 1), 3, false},
	{"resnet18-layer4.0", cnhw(256, 14, 512, 3, 2, 1), 1, false},
	{"resnet18-layer4.ds", cnhw(256, 14, 512, 1, 2, 0), 1, false},
	{"resnet18-layer4", cnhw(512, 7, 512, 3, 1, 1), 3, false},
}

// netFCs are the fully connected layers of the two networks at batch 32.
var netFCs = []struct {
	name       string
	n, in, out int
}{
	{"alexnet-fc6", 32, 9216, 4096},
	{"alexnet-fc7", 32, 4096, 4096},
	{"alexnet-fc8", 32, 4096, 1000},
	{"resnet18-fc", 32, 512, 1000},
}

// processCPU returns the process's CPU time so far in seconds (all its
// threads), or a negative value where it cannot be read.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// netEngines returns the engines BenchmarkNetConv and BenchmarkNetFC
// measure: the fastest engine of the build on 2 threads over the batch of
// 32 ("-2threads"), and on one thread over 16 images ("-1thread"), the
// share of one of two network workers (learner.PlanThreads), with the
// batch each runs.
func netEngines(b *testing.B) []struct {
	name  string
	e     kernels.Engine
	batch int
} {
	fast := fastestAt(b, 2)
	if fast.Name() != "native" {
		return []struct {
			name  string
			e     kernels.Engine
			batch int
		}{{fast.Name(), fast, 32}}
	}
	one := fastestAt(b, 1)
	return []struct {
		name  string
		e     kernels.Engine
		batch int
	}{{labelOf(fast) + "-2threads", fast, 32}, {labelOf(one) + "-1thread", one, 16}}
}

func fastestAt(b *testing.B, threads int) kernels.Engine {
	e, info, err := kernels.New(kernels.Config{Threads: threads, CoreType: os.Getenv("OPENBLAS_CORETYPE")})
	if err != nil {
		b.Fatal(err)
	}
	if info.Fallback {
		b.Logf("reference engine: %v", info.FallbackErr)
	}
	return e
}

func labelOf(e kernels.Engine) string {
	return e.Name() + "-" + kernels.ISAOf(e).String()
}

// timeOp runs f like b.Loop after one untimed call and reports GFLOP/s
// (wall clock) and cpu-GFLOP/s: FLOPs per second of the process's CPU
// time, which on a shared machine leaves out the time other work held
// the cores (so on threads threads it is the rate per core; threads times
// it is what the threads would make on idle cores).
func timeOp(b *testing.B, flop float64, f func()) {
	b.ReportAllocs()
	f()
	cpu0 := processCPU()
	for b.Loop() {
		f()
	}
	b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if d := processCPU() - cpu0; cpu0 >= 0 && d > 0 {
		b.ReportMetric(flop*float64(b.N)/d/1e9, "cpu-GFLOP/s")
	}
}

// gemmCols bounds the columns of the bare GEMMs BenchmarkNetConv runs
// beside each layer (a column matrix of the whole batch can take hundreds
// of MB; OpenBLAS's rate no longer depends on the count at this size).
const gemmCols = 1 << 14

// BenchmarkNetConv measures the convolutions of AlexNet and ResNet-18 at
// their training shapes (netConvs), on 2 threads over 32 images and on one
// thread over 16: per layer the forward pass (fwd), the weight gradient
// alone (dw), both gradients (bwd: weight and input; the first layer's
// has no input gradient) and, as the yardstick, the three GEMMs of the
// same sizes alone (gemm: OC×K×NP, OC×NP×K with B transposed, K×OC×NP
// with A transposed, K = C·KH·KW, NP = images·OH·OW, at most gemmCols
// columns of NP).
func BenchmarkNetConv(b *testing.B) {
	for _, eng := range netEngines(b) {
		e := eng.e
		for _, l := range netConvs {
			s := l.s
			s.N = eng.batch
			r := rand.New(rand.NewPCG(7, 8))
			x, w, bias := randSlice(r, s.InputLen()), randSlice(r, s.WeightLen()), randSlice(r, s.OC)
			y, dy := make([]float32, s.OutputLen()), randSlice(r, s.OutputLen())
			dw, db := make([]float32, s.WeightLen()), make([]float32, s.OC)
			var dx []float32
			if !l.first {
				dx = make([]float32, s.InputLen())
			}
			k, np := s.C*s.KH*s.KW, s.N*s.OutH()*s.OutW()
			flop := 2 * float64(s.OC) * float64(np) * float64(k)
			ws := &kernels.Workspace{}
			prefix := eng.name + "/" + l.name
			b.Run(prefix+"/fwd", func(b *testing.B) {
				timeOp(b, flop, func() { e.ConvForward(s, x, w, bias, y, ws) })
			})
			b.Run(prefix+"/dw", func(b *testing.B) {
				timeOp(b, flop, func() { e.ConvBackward(s, x, w, dy, nil, dw, db, ws) })
			})
			if dx != nil {
				b.Run(prefix+"/bwd", func(b *testing.B) {
					timeOp(b, 2*flop, func() { e.ConvBackward(s, x, w, dy, dx, dw, db, ws) })
				})
			}
			ws = nil
			cols := min(np, gemmCols)
			gflop := 2 * float64(s.OC) * float64(cols) * float64(k)
			b.Run(prefix+"/gemm", func(b *testing.B) {
				a, col, out := randSlice(r, s.OC*k), randSlice(r, k*cols), randSlice(r, s.OC*cols)
				timeOp(b, 3*gflop, func() {
					e.Gemm(false, false, s.OC, cols, k, 1, a, k, col, cols, 0, out, cols)
					e.Gemm(false, true, s.OC, k, cols, 1, out, cols, col, cols, 0, a, k)
					e.Gemm(true, false, k, cols, s.OC, 1, a, k, out, cols, 0, col, cols)
				})
			})
			runtime.GC()
		}
	}
}

// BenchmarkNetFC measures the fully connected layers of the two networks
// on the engines of BenchmarkNetConv: forward, and backward with both
// gradients.
func BenchmarkNetFC(b *testing.B) {
	for _, eng := range netEngines(b) {
		e := eng.e
		for _, l := range netFCs {
			n := l.n * eng.batch / 32
			r := rand.New(rand.NewPCG(9, 10))
			x, w, bias := randSlice(r, n*l.in), randSlice(r, l.out*l.in), randSlice(r, l.out)
			y, dy := make([]float32, n*l.out), randSlice(r, n*l.out)
			dx, dw, db := make([]float32, n*l.in), make([]float32, l.out*l.in), make([]float32, l.out)
			flop := 2 * float64(n) * float64(l.in) * float64(l.out)
			prefix := eng.name + "/" + l.name
			b.Run(prefix+"/fwd", func(b *testing.B) {
				timeOp(b, flop, func() { e.FCForward(n, l.in, l.out, x, w, bias, y) })
			})
			b.Run(prefix+"/bwd", func(b *testing.B) {
				timeOp(b, 2*flop, func() { e.FCBackward(n, l.in, l.out, x, w, dy, dx, dw, db) })
			})
		}
	}
}
