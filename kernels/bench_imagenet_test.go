package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/kernels/kerneltest"
)

// BenchmarkImageNet measures the memory-bound layers of AlexNet and
// ResNet-18 at batch 32 — batch normalisation, LRN across channels,
// dropout, the residual Add, AlexNet's max pooling and global pooling — on the fastest engine
// with all its threads and, for the native engine, on one thread at each
// level the CPU runs. Names: ImageNet/<engine>/<layer>/<pass>. Each
// reports the bytes the kernel reads plus writes per second (MB/s from
// SetBytes, and GB/s; cpu-GB/s per second of the thread's CPU time on one
// thread), against which the copy bandwidth of softsync bench peak is
// the yardstick, and Melem/s.
func BenchmarkImageNet(b *testing.B) {
	e := kerneltest.Fastest(b)
	benchImageNet(b, e, fmt.Sprintf("%s-%dthreads", kerneltest.Label(e, 0), kernels.ThreadsOf(e)))
	if e.Name() != "native" {
		return
	}
	forLevels(b, isa.All, func(one kernels.Engine) { benchImageNet(b, one, kerneltest.Label(one, 0)+"-1thread") })
}

func benchImageNet(b *testing.B, e kernels.Engine, name string) {
	r := rand.New(rand.NewPCG(7, 8))
	oneThread := kernels.ThreadsOf(e) == 1
	// run times f after one untimed call, which touches the outputs and
	// grows workspaces; bytes are those f reads plus writes.
	run := func(b *testing.B, elems, bytes int, f func()) {
		b.ReportAllocs()
		b.SetBytes(int64(bytes))
		f()
		if oneThread {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		cpu0 := threadCPU()
		for b.Loop() {
			f()
		}
		s := b.Elapsed().Seconds()
		b.ReportMetric(float64(bytes)*float64(b.N)/s/1e9, "GB/s")
		b.ReportMetric(float64(elems)*float64(b.N)/s/1e6, "Melem/s")
		if d := threadCPU() - cpu0; oneThread && cpu0 >= 0 && d > 0 {
			b.ReportMetric(float64(bytes)*float64(b.N)/d/1e9, "cpu-GB/s")
		}
	}
	big := randSlice(r, 32*64*112*112)
	buf := [3][]float32{make([]float32, len(big)), make([]float32, len(big)), make([]float32, len(big))}

	// The yardstick in the same run: Go's copy of the largest tensor
	// (memmove; 8 bytes per element, read plus written, on the calling
	// thread whatever the engine's threads).
	b.Run(name+"/copy-32x64x112x112", func(b *testing.B) {
		run(b, len(big), 8*len(big), func() { copy(buf[0], big) })
	})

	// Batch normalisation: ResNet-18's first (64 channels of 112×112,
	// NCHW; and the same tensor channel-major, passed as one image) and
	// its last (512 of 7×7). Training forward reads x twice (statistics,
	// then y) and writes y: 12 bytes per element; inference 8; backward
	// reads x and dy twice and writes dx: 20.
	for _, c := range []struct {
		name string
		s    kernels.BNShape
	}{
		{"resnet-bn1", kernels.BNShape{N: 32, C: 64, HW: 112 * 112, Eps: 1e-5}},
		{"resnet-bn1-cnhw", kernels.BNShape{N: 1, C: 64, HW: 32 * 112 * 112, Eps: 1e-5}},
		{"resnet-layer4-bn", kernels.BNShape{N: 32, C: 512, HW: 7 * 7, Eps: 1e-5}},
	} {
		s, n := c.s, c.s.Len()
		x, y, dx := big[:n], buf[0][:n], buf[1][:n]
		gamma, beta, mean, v := randSlice(r, s.C), randSlice(r, s.C), make([]float32, s.C), make([]float32, s.C)
		dgamma, dbeta := make([]float32, s.C), make([]float32, s.C)
		e.BNForwardTrain(s, x, gamma, beta, y, mean, v)
		b.Run(name+"/"+c.name+"/fwd", func(b *testing.B) {
			run(b, n, 12*n, func() { e.BNForwardTrain(s, x, gamma, beta, y, mean, v) })
		})
		b.Run(name+"/"+c.name+"/infer", func(b *testing.B) {
			run(b, n, 8*n, func() { e.BNForwardInfer(s, x, gamma, beta, mean, v, y) })
		})
		b.Run(name+"/"+c.name+"/bwd", func(b *testing.B) {
			run(b, n, 20*n, func() { e.BNBackward(s, x, gamma, mean, v, y, dx, dgamma, dbeta) })
		})
	}

	// LRN across channels: AlexNet's norm1 and norm2 (size 5, α 1e-4,
	// β 0.75). Forward reads x and writes y and scale: 12 bytes per
	// element; backward reads x, y, scale and dy and writes dx: 20.
	ws := &kernels.Workspace{}
	for _, c := range []struct {
		name string
		s    kernels.LRNShape
	}{
		{"alexnet-norm1", kernels.LRNShape{N: 32, C: 96, H: 55, W: 55, Size: 5, Alpha: 1e-4, Beta: 0.75, K: 1, Region: kernels.AcrossChannels}},
		{"alexnet-norm2", kernels.LRNShape{N: 32, C: 256, H: 27, W: 27, Size: 5, Alpha: 1e-4, Beta: 0.75, K: 1, Region: kernels.AcrossChannels}},
		// The same tensors channel-major, as the networks run them (one
		// image of N·H rows).
		{"alexnet-norm1-cnhw", kernels.LRNShape{N: 1, C: 96, H: 32 * 55, W: 55, Size: 5, Alpha: 1e-4, Beta: 0.75, K: 1, Region: kernels.AcrossChannels}},
		{"alexnet-norm2-cnhw", kernels.LRNShape{N: 1, C: 256, H: 32 * 27, W: 27, Size: 5, Alpha: 1e-4, Beta: 0.75, K: 1, Region: kernels.AcrossChannels}},
	} {
		s, n := c.s, c.s.Len()
		x, y, scale, dx := big[:n], buf[0][:n], buf[1][:n], buf[2][:n]
		e.LRNForward(s, x, y, scale, ws)
		b.Run(name+"/"+c.name+"/fwd", func(b *testing.B) {
			run(b, n, 12*n, func() { e.LRNForward(s, x, y, scale, ws) })
		})
		b.Run(name+"/"+c.name+"/bwd", func(b *testing.B) {
			run(b, n, 20*n, func() { e.LRNBackward(s, x, y, scale, x, dx, ws) })
		})
	}

	// Dropout (8 bytes per element) on AlexNet's fc6 output and on a
	// tensor of ResNet-18's first activation's size; the residual Add
	// (12 bytes) of ResNet-18's layer1.
	for _, c := range []struct {
		name string
		n    int
	}{{"alexnet-drop6", 32 * 4096}, {"drop-32x64x112x112", 32 * 64 * 112 * 112}} {
		d, x, y := kernels.Dropout{Ratio: 0.5, Seed: 1}, big[:c.n], buf[0][:c.n]
		b.Run(name+"/"+c.name+"/fwd", func(b *testing.B) { run(b, c.n, 8*c.n, func() { e.DropoutForward(d, x, y) }) })
	}
	n := 32 * 64 * 56 * 56
	b.Run(name+"/resnet-add-32x64x56x56/fwd", func(b *testing.B) {
		run(b, n, 12*n, func() { e.Add(big[:n], buf[0][:n], buf[1][:n]) })
	})

	// AlexNet's max pooling (3×3, stride 2, ceil rounding: each row's
	// last column is read by its last window only), ResNet-18's (3×3,
	// stride 2, padding 1, 112×112, 16 images per worker), and global
	// pooling of ResNet-18's last activation (512 planes of 7×7).
	for _, c := range []struct {
		name string
		s    kernels.PoolShape
	}{
		{"alexnet-pool1", kernels.PoolShape{Mode: kernels.MaxPool, N: 32, C: 96, H: 55, W: 55, KH: 3, KW: 3, StrideH: 2, StrideW: 2}},
		{"alexnet-pool2", kernels.PoolShape{Mode: kernels.MaxPool, N: 32, C: 256, H: 27, W: 27, KH: 3, KW: 3, StrideH: 2, StrideW: 2}},
		{"resnet18-pool", kernels.PoolShape{Mode: kernels.MaxPool, N: 16, C: 64, H: 112, W: 112, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 2, StrideW: 2}},
	} {
		s := c.s
		x, y, dx, mask := big[:s.InputLen()], buf[0][:s.OutputLen()], buf[1][:s.InputLen()], make([]int32, s.OutputLen())
		e.PoolForward(s, x, y, mask)
		b.Run(name+"/"+c.name+"/fwd", func(b *testing.B) {
			run(b, s.InputLen(), 4*s.InputLen()+8*s.OutputLen(), func() { e.PoolForward(s, x, y, mask) })
		})
		b.Run(name+"/"+c.name+"/bwd", func(b *testing.B) {
			run(b, s.InputLen(), 4*s.InputLen()+8*s.OutputLen(), func() { e.PoolBackward(s, y, mask, dx) })
		})
	}
	for _, mode := range []kernels.PoolMode{kernels.AvgPool, kernels.MaxPool} {
		s := kernels.PoolShape{Mode: mode, N: 32, C: 512, H: 7, W: 7, KH: 7, KW: 7, StrideH: 1, StrideW: 1}
		x, y, dx, mask := big[:s.InputLen()], buf[0][:s.OutputLen()], buf[1][:s.InputLen()], make([]int32, s.OutputLen())
		out := 4
		if mode == kernels.MaxPool {
			out = 8
		}
		pname := map[kernels.PoolMode]string{kernels.AvgPool: "avg", kernels.MaxPool: "max"}[mode]
		e.PoolForward(s, x, y, mask)
		b.Run(name+"/resnet-global-"+pname+"pool/fwd", func(b *testing.B) {
			run(b, s.InputLen(), 4*s.InputLen()+out*s.OutputLen(), func() { e.PoolForward(s, x, y, mask) })
		})
		b.Run(name+"/resnet-global-"+pname+"pool/bwd", func(b *testing.B) {
			run(b, s.InputLen(), 4*s.InputLen()+out*s.OutputLen(), func() { e.PoolBackward(s, y, mask, dx) })
		})
	}
}

// alexnetGrouped are AlexNet's two-group convolutions (Caffe's
// bvlc_alexnet, batch 32).
var alexnetGrouped = []struct {
	name string
	s    kernels.ConvShape
}{
	{"alexnet-conv2", kernels.ConvShape{N: 32, C: 96, H: 27, W: 27, OC: 256, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1}},
	{"alexnet-conv4", kernels.ConvShape{N: 32, C: 384, H: 13, W: 13, OC: 384, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1}},
	{"alexnet-conv5", kernels.ConvShape{N: 32, C: 384, H: 13, W: 13, OC: 256, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1}},
}

// BenchmarkGroupedConv measures AlexNet's two-group convolutions against
// the same layers ungrouped (twice the FLOPs), in CNHW as the networks
// run them, forward and backward (weight, bias and input gradients), in
// GFLOP/s (cpu-GFLOP/s too on one thread): a grouped convolution should
// run as fast per FLOP as its ungrouped equivalent. It runs the fastest
// engine with all its threads and, for the native engine, one thread at
// each level with direct kernels the CPU runs. Names:
// GroupedConv/<engine>/<layer>/groups=<G>/<pass>.
func BenchmarkGroupedConv(b *testing.B) {
	e := kerneltest.Fastest(b)
	benchGrouped(b, e, fmt.Sprintf("%s-%dthreads", kerneltest.Label(e, 0), kernels.ThreadsOf(e)))
	if e.Name() != "native" {
		return
	}
	forLevels(b, []isa.Level{isa.AVX512, isa.AVX2}, func(one kernels.Engine) {
		benchGrouped(b, one, kerneltest.Label(one, 0)+"-1thread")
	})
}

func benchGrouped(b *testing.B, e kernels.Engine, label string) {
	oneThread := kernels.ThreadsOf(e) == 1
	for _, l := range alexnetGrouped {
		for _, g := range []int{2, 1} {
			s := l.s
			s.Group, s.Layout = g, kernels.CNHW
			r := rand.New(rand.NewPCG(9, 10))
			x, w, bias := randSlice(r, s.InputLen()), randSlice(r, s.WeightLen()), randSlice(r, s.OC)
			y, dy := make([]float32, s.OutputLen()), randSlice(r, s.OutputLen())
			dx, dw, db := make([]float32, s.InputLen()), make([]float32, s.WeightLen()), make([]float32, s.OC)
			flop := 2 * float64(s.N*s.OutH()*s.OutW()) * float64(s.OC) * float64(s.C/g*s.KH*s.KW)
			ws := &kernels.Workspace{}
			prefix := fmt.Sprintf("%s/%s/groups=%d", label, l.name, g)
			b.Run(prefix+"/fwd", func(b *testing.B) {
				loopGFlops(b, oneThread, flop, func() { e.ConvForward(s, x, w, bias, y, ws) })
			})
			b.Run(prefix+"/bwd", func(b *testing.B) {
				loopGFlops(b, oneThread, 2*flop, func() { e.ConvBackward(s, x, w, dy, dx, dw, db, ws) })
			})
		}
	}
}

// loopGFlops times f like b.Loop after one untimed call (which grows the
// workspace) and reports GFLOP/s, and cpu-GFLOP/s when the engine runs
// on one thread (the goroutine then stays on its thread).
func loopGFlops(b *testing.B, oneThread bool, flop float64, f func()) {
	b.ReportAllocs()
	f()
	cpu0 := -1.0
	if oneThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpu0 = threadCPU()
	}
	for b.Loop() {
		f()
	}
	reportGFlops(b, flop)
	reportCPU(b, flop, cpu0)
}
