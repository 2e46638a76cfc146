package nn

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/kerneltest"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps/sgd"
)

// momentumSGD is plain SGD with momentum and weight decay honouring the
// per-segment multipliers, as Caffe's SGD solver:
// v ← m·v − lr·lr_mult·(g + decay·decay_mult·w), w ← w + v.
type momentumSGD struct {
	lr, momentum, decay float32
	v                   []float32
}

func (o *momentumSGD) step(w, g []float32, layout []sgd.Segment) {
	if o.v == nil {
		o.v = make([]float32, len(w))
	}
	for _, s := range layout {
		lr, d := o.lr*s.LRMult, o.decay*s.DecayMult
		ws, gs, vs := w[s.Offset:s.Offset+s.Len], g[s.Offset:s.Offset+s.Len], o.v[s.Offset:s.Offset+s.Len]
		for i := range ws {
			vs[i] = o.momentum*vs[i] - lr*(gs[i]+d*ws[i])
			ws[i] += vs[i]
		}
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
		b := l.Next()
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
		correct += ev.Correct(labels[:n])
	}
	return float64(correct) / float64(ds.N)
}

// TestLearnMNIST trains LeNet on real MNIST for a few hundred steps with
// Caffe's LeNet solver settings and checks that it learns.
func TestLearnMNIST(t *testing.T) {
	dir, err := data.LocateGoMNIST(context.Background(), filepath.Join(runtime.GOROOT(), "bin", "go"))
	if err != nil {
		t.Fatal(err)
	}
	trainSet, testSet, err := data.LoadMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	testSet = testSet.Subset(2000)
	spec, _ := Builtin("lenet")
	e := fastest(t)
	// The pure-Go engine is slow: fewer steps, a lower bar.
	steps, want := 300, 0.92
	if e.Name() == "reference" {
		steps, want = 150, 0.88
	}
	net := mustNet(t, spec, e, 32, 1)
	if err := trainSet.CheckShape(net.Input().C, net.Input().H, net.Input().W, net.Classes()); err != nil {
		t.Fatal(err)
	}
	z := data.MeanNormalizer(trainSet)
	l, err := data.NewLoader(trainSet, data.LoaderConfig{Batch: 32, Seed: 1, Normalizer: z})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	before := accuracy(t, net, testSet, z)
	first, last := train(net, l, &momentumSGD{lr: 0.01, momentum: 0.9, decay: 5e-4}, steps)
	after := accuracy(t, net, testSet, z)
	t.Logf("%s engine, %d steps of 32: loss %.3f → %.3f, test accuracy %.3f → %.3f, %v",
		e.Name(), steps, first, last, before, after, time.Since(start).Round(time.Millisecond))
	if first < 1.8 || first > 2.6 {
		t.Errorf("initial loss %.3f, want about ln 10 = 2.30", first)
	}
	if last > 0.4*first {
		t.Errorf("loss fell from %.3f only to %.3f", first, last)
	}
	if after < want {
		t.Errorf("test accuracy %.3f after %d steps, want ≥ %.2f", after, steps, want)
	}
}

// TestLearnCIFARFormat trains cifar10_full on synthetic data written and
// read back in CIFAR-10's binary format.
func TestLearnCIFARFormat(t *testing.T) {
	dir := t.TempDir()
	for i, name := range data.CIFAR10TrainFiles {
		if err := data.WriteCIFAR10(filepath.Join(dir, name), data.Synthetic(100, 3, 32, 32, 10, uint64(10+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := data.WriteCIFAR10(filepath.Join(dir, data.CIFAR10TestFile), data.Synthetic(100, 3, 32, 32, 10, 99)); err != nil {
		t.Fatal(err)
	}
	trainSet, _, err := data.LoadCIFAR10(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := Builtin("cifar10_full")
	e := fastest(t)
	net := mustNet(t, spec, e, 16, 1)
	l, err := data.NewLoader(trainSet, data.LoaderConfig{Batch: 16, Seed: 1, Normalizer: data.MeanNormalizer(trainSet)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The paper's momentum and weight decay at twice its base rate:
	// cifar10_full's tiny first-layer initialisation (σ = 1e-4) keeps the
	// loss near ln 10 for some tens of steps before it falls.
	first, last := train(net, l, &momentumSGD{lr: 0.002, momentum: 0.9, decay: 0.004}, 80)
	t.Logf("%s engine: loss %.3f → %.3f", e.Name(), first, last)
	if last > 0.7*first {
		t.Errorf("loss fell from %.3f only to %.3f", first, last)
	}
}

// BenchmarkTrainStep measures a full training step (forward, backward and
// an SGD-momentum update) on fixed random data, per engine.
func BenchmarkTrainStep(b *testing.B) {
	for _, c := range []struct {
		net   string
		batch int
	}{{"lenet", 64}, {"lenet", 4}, {"cifar10_full", 100}, {"cifar10_full", 4}} {
		for _, e := range kerneltest.Engines(b) {
			b.Run(fmt.Sprintf("%s/batch=%d/%s", c.net, c.batch, e.Name()), func(b *testing.B) {
				spec, _ := Builtin(c.net)
				net := mustNet(b, spec, e, c.batch, 1)
				x, labels := randomBatch(net, 1)
				opt := &momentumSGD{lr: 1e-4, momentum: 0.9, decay: 5e-4}
				step := func() {
					net.Gradient(x, labels)
					opt.step(net.Params(), net.Grads(), net.Layout())
				}
				step()
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					step()
				}
				b.ReportMetric(float64(b.N*c.batch)/b.Elapsed().Seconds(), "images/s")
			})
		}
	}
}
