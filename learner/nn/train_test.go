package nn

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/kerneltest"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps/param"
)

// momentumSGD is plain SGD with momentum and weight decay honouring the
// per-segment multipliers, as Caffe's SGD solver:
// v ← m·v − lr·lr_mult·(g + decay·decay_mult·w), w ← w + v; state
// segments fold their measurement as the parameter server does,
// w ← (1 − BNMomentum)·w + BNMomentum·g.
type momentumSGD struct {
	lr, momentum, decay float32
	v                   []float32
}

func (o *momentumSGD) step(w, g []float32, layout []param.Segment) {
	if o.v == nil {
		o.v = make([]float32, len(w))
	}
	for _, s := range layout {
		lr, d := o.lr*s.LRMult, o.decay*s.DecayMult
		ws, gs, vs := w[s.Offset:s.Offset+s.Len], g[s.Offset:s.Offset+s.Len], o.v[s.Offset:s.Offset+s.Len]
		gs, vs = gs[:len(ws)], vs[:len(ws)] // no bounds checks in the loop
		if s.Kind == param.State {
			for i := range ws {
				ws[i] = (1-BNMomentum)*ws[i] + BNMomentum*gs[i]
			}
			continue
		}
		for i := range ws {
			vs[i] = o.momentum*vs[i] - lr*(gs[i]+d*ws[i])
			ws[i] += vs[i]
		}
	}
}

// raceDetector is set when the tests run under the race detector, which
// slows the Go parts of a training step (data, update) tenfold: the
// learning tests then skip, since they run without it in make test's
// pure-Go pass, and their concurrency is covered by the other tests.
var raceDetector bool

func skipUnderRace(t *testing.T) {
	if raceDetector {
		t.Skip("learning test skipped under the race detector")
	}
}

// fastest returns the last engine of the build (the native one when built).
func fastest(t testing.TB) kernels.Engine {
	es := kerneltest.Engines(t)
	return es[len(es)-1]
}

// train runs steps SGD steps of net on the loader and returns the mean
// loss of the first and of the last ten steps.
func train(net *Net, l *data.Loader, opt *momentumSGD, steps int) (first, last float64) {
	for i := range steps {
		b, err := l.Next(context.Background())
		if err != nil {
			panic(err)
		}
		loss := float64(net.Gradient(b.X, b.Labels))
		opt.step(net.Params(), net.Grads(), net.Layout())
		if i < 10 {
			first += loss / 10
		}
		if i >= steps-10 {
			last += loss / 10
		}
	}
	return first, last
}

// accuracy evaluates net on ds with an evaluation network of batch 100
// sharing its parameters.
func accuracy(t *testing.T, net *Net, ds *data.Dataset, z data.Normalizer) float64 {
	ev, err := net.WithBatch(100)
	if err != nil {
		t.Fatal(err)
	}
	x, labels := make([]float32, 100*ds.ImageLen()), make([]int32, 100)
	correct := 0
	for n := range data.Batches(ds, z, x, labels) {
		ev.Forward(x, labels)
		c, _ := ev.Score(labels[:n])
		correct += c
	}
	return float64(correct) / float64(ds.N)
}

// TestLearnMNIST trains LeNet on real MNIST for a few hundred steps with
// Caffe's LeNet solver settings and checks that it learns.
func TestLearnMNIST(t *testing.T) {
	skipUnderRace(t)
	dir, err := data.LocateGoMNIST(context.Background(), filepath.Join(runtime.GOROOT(), "bin", "go"))
	if err != nil {
		t.Fatal(err)
	}
	trainSet, testSet, err := data.LoadMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	testSet = testSet.Subset(1000)
	spec, _ := Builtin("lenet")
	e := fastest(t)
	// The pure-Go engine is slow: fewer, smaller steps and a lower bar.
	batch, steps, want := 32, 300, 0.92
	if e.Name() == "reference" {
		batch, steps, want = 16, 200, 0.88
	}
	net := mustNet(t, spec, e, batch, 1)
	if err := trainSet.CheckShape(net.Input().C, net.Input().H, net.Input().W, net.Classes()); err != nil {
		t.Fatal(err)
	}
	z := data.MeanNormalizer(trainSet.Subset(10000))
	l, err := data.NewSingleLoader(trainSet, data.Plan{Batch: batch, Chunk: steps, Epochs: 1, Seed: 1}, z)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	first, last := train(net, l, &momentumSGD{lr: 0.01, momentum: 0.9, decay: 5e-4}, steps)
	acc := accuracy(t, net, testSet, z)
	t.Logf("%s engine, %d steps of %d: loss %.3f → %.3f, test accuracy %.3f, %v",
		e.Name(), steps, batch, first, last, acc, time.Since(start).Round(time.Millisecond))
	if first < 1.8 || first > 2.6 {
		t.Errorf("initial loss %.3f, want about ln 10 = 2.30", first)
	}
	if last > 0.4*first {
		t.Errorf("loss fell from %.3f only to %.3f", first, last)
	}
	if acc < want {
		t.Errorf("test accuracy %.3f after %d steps, want ≥ %.2f", acc, steps, want)
	}
}

// TestLearnCIFARFormat trains cifar10_full on synthetic data written and
// read back in CIFAR-10's binary format, and checks that the loss falls
// and that the model tells the classes apart in images it was not trained
// on (held out from the same draws: same class prototypes, other noise).
//
// Bound: the run is deterministic. With these seeds it ends at loss 1.42
// (from 2.30) and held-out accuracy 0.61 on both engines (10 native runs,
// as two test processes running at once, and 2 pure-Go runs); the test
// asks for 0.5, five times chance. The seeds matter more than the
// engine: over ten pairs of data and loader seeds (these among them) the
// accuracy spread over 0.25 … 0.65 (mean 0.49 ± 0.12), the same to within
// one image on both engines.
func TestLearnCIFARFormat(t *testing.T) {
	skipUnderRace(t)
	first, last, acc := learnCIFAR(t, fastest(t), 10, 1)
	t.Logf("loss %.3f → %.3f, held-out accuracy %.3f", first, last, acc)
	if last > 0.7*first {
		t.Errorf("loss fell from %.3f only to %.3f", first, last)
	}
	if acc < 0.5 {
		t.Errorf("held-out accuracy %.3f, want ≥ 0.5 (chance: 0.1)", acc)
	}
}

// learnCIFAR writes synthetic images as CIFAR-10 files: training file i
// holds the first 100 of 120 images drawn from dataSeed+i (each seed has
// prototypes of its own: five looks per class), the test file the last 20
// of each. It reads them back and trains cifar10_full for 80 steps of 8
// images in the loader's order from planSeed, and returns the mean loss
// of the first and of the last ten steps and the accuracy on the test
// file.
func learnCIFAR(t *testing.T, e kernels.Engine, dataSeed, planSeed uint64) (first, last, acc float64) {
	dir := t.TempDir()
	held := &data.Dataset{C: 3, H: 32, W: 32, Classes: 10, Scale: 1}
	for i, name := range data.CIFAR10TrainFiles() {
		d := data.Synthetic(120, 3, 32, 32, 10, dataSeed+uint64(i))
		il := d.ImageLen()
		held.N += 20
		held.Pixels, held.Labels = append(held.Pixels, d.Pixels[100*il:]...), append(held.Labels, d.Labels[100:]...)
		if err := data.WriteCIFAR10(filepath.Join(dir, name), d.Subset(100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := data.WriteCIFAR10(filepath.Join(dir, data.CIFAR10TestFile), held); err != nil {
		t.Fatal(err)
	}
	trainSet, testSet, err := data.LoadCIFAR10(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := Builtin("cifar10_full")
	net := mustNet(t, spec, e, 8, 1)
	z := data.MeanNormalizer(trainSet)
	l, err := data.NewSingleLoader(trainSet, data.Plan{Batch: 8, Chunk: 8, Epochs: 2, Seed: planSeed}, z)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The paper's momentum and weight decay at twice its base rate:
	// cifar10_full's tiny first-layer initialisation (σ = 1e-4) keeps the
	// loss near ln 10 for some tens of steps before it falls.
	first, last = train(net, l, &momentumSGD{lr: 0.002, momentum: 0.9, decay: 0.004}, 80)
	return first, last, accuracy(t, net, testSet, z)
}

// benchSetup is an engine with its BLAS thread count and the network's
// number of workers.
type benchSetup struct {
	name             string
	threads, workers int
}

// benchSetups are the ways to use two cores for one network: BLAS
// threads inside each kernel call, or workers splitting the batch.
var benchSetups = []benchSetup{{"native", 2, 1}, {"native", 1, 1}, {"native", 1, 2}, {"reference", 0, 1}}

// engineFor returns the engine of a setup, setting the process-wide BLAS
// thread count, or skips the benchmark if the build lacks it.
func engineFor(b *testing.B, s benchSetup) kernels.Engine {
	if s.name == "reference" {
		return kernels.Reference()
	}
	if !kernels.NativeBuilt() {
		b.Skip("native engine not built")
	}
	e, info, err := kernels.New(kernels.Config{Threads: s.threads})
	if err != nil || info.Fallback {
		b.Fatalf("native engine: %v %v", err, info.FallbackErr)
	}
	return e
}

// benchNets are the networks and batches of the benchmarks; the ImageNet
// networks run on the native engine only (a step of the reference engine
// takes minutes).
var benchNets = []struct {
	net   string
	batch int
}{{"lenet", 64}, {"lenet", 4}, {"cifar10_full", 100}, {"cifar10_full", 50}, {"cifar10_full", 4}, {"alexnet", 32}, {"resnet18", 32}}

// skipSlow skips a benchmark of an ImageNet network on the reference
// engine.
func skipSlow(b *testing.B, net string, s benchSetup) {
	if s.name == "reference" && (net == "alexnet" || net == "resnet18") {
		b.Skip("the reference engine takes minutes per step of", net)
	}
}

// BenchmarkTrainStep measures a full training step (forward, backward and
// an SGD-momentum update) on fixed random data, per engine, BLAS threads
// and workers.
func BenchmarkTrainStep(b *testing.B) {
	for _, c := range benchNets {
		for _, s := range benchSetups {
			b.Run(fmt.Sprintf("%s/batch=%d/%s/threads=%d/workers=%d", c.net, c.batch, s.name, s.threads, s.workers), func(b *testing.B) {
				skipSlow(b, c.net, s)
				spec, _ := Builtin(c.net)
				net := mustNetW(b, spec, engineFor(b, s), Config{Batch: c.batch, Workers: s.workers}, 1)
				x, labels := randomBatch(net, 1)
				opt := &momentumSGD{lr: 1e-4, momentum: 0.9, decay: 5e-4}
				step := func() {
					net.Gradient(x, labels)
					opt.step(net.Params(), net.Grads(), net.Layout())
				}
				step()
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cpuTime()
				for b.Loop() {
					step()
				}
				b.ReportMetric(float64(b.N*c.batch)/b.Elapsed().Seconds(), "images/s")
				// CPU time per image (all threads) shows the work done,
				// which a busy machine disturbs less than wall time.
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*c.batch), "cpu-µs/image")
			})
		}
	}
}

// BenchmarkTrainStepParts measures the training step of LeNet (μ = 64)
// and cifar10_full (μ = 100) on the native engine with one BLAS thread,
// one and two workers, at several part sizes (Config.Part; -1 is one
// part per worker, 0 the default): how PartBatch's cache budget is
// chosen.
func BenchmarkTrainStepParts(b *testing.B) {
	for _, c := range []struct {
		net   string
		batch int
		parts []int
	}{{"lenet", 64, []int{-1, 0, 8, 16}}, {"cifar10_full", 100, []int{-1, 0, 2, 4, 6, 8, 12}}} {
		for _, workers := range []int{1, 2} {
			for _, part := range c.parts {
				b.Run(fmt.Sprintf("%s/batch=%d/workers=%d/part=%d", c.net, c.batch, workers, part), func(b *testing.B) {
					spec, _ := Builtin(c.net)
					net := mustNetW(b, spec, engineFor(b, benchSetup{"native", 1, workers}), Config{Batch: c.batch, Workers: workers, Part: part}, 1)
					x, labels := randomBatch(net, 1)
					net.Gradient(x, labels)
					b.ResetTimer()
					for b.Loop() {
						net.Gradient(x, labels)
					}
					b.ReportMetric(float64(b.N*c.batch)/b.Elapsed().Seconds(), "images/s")
				})
			}
		}
	}
}

// BenchmarkSplitFC measures the gradient of AlexNet (μ = 32) and LeNet
// (μ = 64) on the native engine with one BLAS thread and two workers,
// with the fc tail split by outputs (SplitFC 1) and by images (−1), the
// two settings alternating step by step, so that both see the same load
// of a shared machine: how splitFCBytes is chosen. It reports each
// setting's time per step, of the wall clock and of the process's CPU.
func BenchmarkSplitFC(b *testing.B) {
	for _, c := range []struct {
		net   string
		batch int
	}{{"alexnet", 32}, {"lenet", 64}} {
		b.Run(fmt.Sprintf("%s/batch=%d/workers=2", c.net, c.batch), func(b *testing.B) {
			spec, _ := Builtin(c.net)
			e := engineFor(b, benchSetup{"native", 1, 2})
			nets := []*Net{
				mustNetW(b, spec, e, Config{Batch: c.batch, Workers: 2, SplitFC: -1}, 1),
				mustNetW(b, spec, e, Config{Batch: c.batch, Workers: 2, SplitFC: 1}, 1),
			}
			x, labels := randomBatch(nets[0], 1)
			var wall, cpu [2]time.Duration
			for _, n := range nets {
				n.Gradient(x, labels)
			}
			for b.Loop() {
				for i, n := range nets {
					t0, c0 := time.Now(), cpuTime()
					n.Gradient(x, labels)
					wall[i] += time.Since(t0)
					cpu[i] += cpuTime() - c0
				}
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(ms(wall[0]), "byimage-ms")
			b.ReportMetric(ms(wall[1]), "split-ms")
			b.ReportMetric(ms(cpu[0]), "byimage-cpu-ms")
			b.ReportMetric(ms(cpu[1]), "split-cpu-ms")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timedLayer accumulates the wall-clock and the thread CPU time spent in
// a layer (its goroutine locked to its thread).
type timedLayer struct {
	layer
	fwd, bwd, fwdCPU, bwdCPU time.Duration
}

func (t *timedLayer) forward(x, y []float32) {
	t0, c0 := time.Now(), threadCPU()
	t.layer.forward(x, y)
	t.fwd += time.Since(t0)
	t.fwdCPU += threadCPU() - c0
}

func (t *timedLayer) backward(x, y, dy, dx []float32) {
	t0, c0 := time.Now(), threadCPU()
	t.layer.backward(x, y, dy, dx)
	t.bwd += time.Since(t0)
	t.bwdCPU += threadCPU() - c0
}

// BenchmarkLayers times every layer's forward and backward pass of a
// training step on one worker (metrics in µs per step: NAME.fwd-µs by
// the wall clock, NAME.fwd-cpu-µs in CPU time of the worker's thread,
// which other work on a busy machine disturbs less; with BLAS threads
// the CPU time is the worker's thread's alone), to show which kernels
// dominate. rest-cpu-µs is the step's thread CPU time outside the
// layers (the loss, residual adds, gradient sums); update-µs the
// solver's.
func BenchmarkLayers(b *testing.B) {
	for _, c := range benchNets {
		for _, s := range benchSetups[:2] {
			b.Run(fmt.Sprintf("%s/batch=%d/%s/threads=%d", c.net, c.batch, s.name, s.threads), func(b *testing.B) {
				skipSlow(b, c.net, s)
				spec, _ := Builtin(c.net)
				n := mustNetW(b, spec, engineFor(b, s), Config{Batch: c.batch, Part: -1}, 1)
				x, labels := randomBatch(n, 1)
				r := n.reps[0]
				timed := make([]*timedLayer, len(r.layers))
				for i, l := range r.layers {
					if l != nil {
						timed[i] = &timedLayer{layer: l}
						r.layers[i] = timed[i]
					}
				}
				opt := &momentumSGD{lr: 1e-4, momentum: 0.9, decay: 5e-4}
				var update, grad time.Duration
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				for b.Loop() {
					c0 := threadCPU()
					n.Gradient(x, labels)
					grad += threadCPU() - c0
					t0 := time.Now()
					opt.step(n.Params(), n.Grads(), n.Layout())
					update += time.Since(t0)
				}
				us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
				for i, t := range timed {
					if t == nil {
						continue
					}
					name := "swap" + strconv.Itoa(i)
					if l := r.plan.ops[i].layer; l >= 0 {
						name = spec.Layers[l].Name
					}
					b.ReportMetric(us(t.fwd), name+".fwd-µs")
					b.ReportMetric(us(t.bwd), name+".bwd-µs")
					b.ReportMetric(us(t.fwdCPU), name+".fwd-cpu-µs")
					b.ReportMetric(us(t.bwdCPU), name+".bwd-cpu-µs")
					grad -= t.fwdCPU + t.bwdCPU
				}
				b.ReportMetric(us(grad), "rest-cpu-µs")
				b.ReportMetric(us(update), "update-µs")
			})
		}
	}
}
