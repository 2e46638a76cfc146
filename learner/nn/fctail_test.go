package nn

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/kerneltest"
)

// tailSpec ends in an fc tail (f1 to f3) with relus and dropouts in both
// orders, an fc without bias, layers of 40 outputs (cut at multiples of
// 16 between two workers) and of 5 (fewer than some Nets' workers), after
// a head with batch norm, whose workers meet at the same barriers.
const tailSpec = `input channels=2 height=6 width=6
conv c1 out=4 kernel=3 pad=1 weight=gaussian:0.3
batchnorm b1 bias=constant:0.5
relu r1
pool p1 mode=max kernel=2 stride=2
fc f1 out=40 weight=gaussian:0.3 bias=gaussian:0.1
relu r2
dropout d1 ratio=0.3
fc f2 out=35 bias=none weight=gaussian:0.3
dropout d2 ratio=0.2
relu r3
fc f3 out=5 weight=gaussian:0.3
softmax
`

func TestFCTail(t *testing.T) {
	for _, c := range []struct {
		src  string
		want string // the first layer of the tail, "" for none
	}{
		{tailSpec, "f1"},
		{graphSpec, ""}, // f3 reads b3, and the loss an add
		{"input channels=1 height=4 width=4\nfc f1 out=3\nrelu r\nfc f2 out=2\nsoftmax\n", ""}, // nothing before the tail
		{"input channels=1 height=4 width=4\npool p mode=max kernel=2 stride=2\nrelu r\ndropout d ratio=0.5\nfc f1 out=3\nsoftmax\n", "f1"},
		{"input channels=1 height=4 width=4\npool p mode=max kernel=2 stride=2\nfc f1 out=3\nrelu r\nsoftmax\n", "f1"},
	} {
		spec := mustParse(t, c.src)
		got := ""
		if i := spec.fcTail(); i >= 0 {
			got = spec.Layers[i].Name
		}
		if got != c.want {
			t.Errorf("%q: tail from %q, want %q", c.src, got, c.want)
		}
	}
	for name, want := range map[string]string{"alexnet": "fc6", "lenet": "ip1", "mlp": "", "resnet18": "fc", "cifar10_full": "ip1"} {
		spec, _ := Builtin(name)
		got := ""
		if i := spec.fcTail(); i >= 0 {
			got = spec.Layers[i].Name
		}
		if got != want {
			t.Errorf("%s: tail from %q, want %q", name, got, want)
		}
	}
	// Split by default only where the tail's weights are large, and then
	// with one part per worker.
	alex, _ := Builtin("alexnet")
	if sp := alex.splitBatch(Config{Batch: 64, Workers: 2}); alex.splitTail(Config{Batch: 64, Workers: 2}, sp) != alex.fcTail() || len(sp[0]) != 1 {
		t.Errorf("alexnet with 2 workers: shares %v, tail not split", sp)
	}
	if sp := alex.splitBatch(Config{Batch: 64, Workers: 2, SplitFC: -1}); alex.splitTail(Config{Batch: 64, Workers: 2, SplitFC: -1}, sp) != len(alex.Layers) {
		t.Errorf("alexnet with SplitFC −1: tail split")
	}
	lenet, _ := Builtin("lenet")
	if cfg := (Config{Batch: 64, Workers: 2}); lenet.splitTail(cfg, lenet.splitBatch(cfg)) != len(lenet.Layers) {
		t.Errorf("lenet's tail split by default")
	}
	if cfg := (Config{Batch: 8, Workers: 2, SplitFC: 1, Part: 2}); lenet.splitTail(cfg, lenet.splitBatch(cfg)) != len(lenet.Layers) {
		t.Errorf("lenet's tail split with its shares cut into parts")
	}
}

// TestSplitFC: Nets whose workers split the fc tail give the loss,
// logits, probabilities and gradients (batch norm's statistics included)
// of one worker, up to float32 summation order, with the same dropout
// masks; Forward and Backward give what Gradient gives; Evaluate agrees;
// nothing is allocated per step; the gradient hook is called as without
// a split.
func TestSplitFC(t *testing.T) {
	tailNet := mustParse(t, tailSpec)
	lenet, _ := Builtin("lenet")
	for _, spec := range []*Spec{tailNet, lenet} {
		kerneltest.ForEachEngine(t, func(t *testing.T, e kernels.Engine) {
			const batch = 7
			one := mustNetW(t, spec, e, Config{Batch: batch}, 5)
			x, labels := randomBatch(one, 2)
			one.SetSeed(3)
			loss := one.Gradient(x, labels)
			logits, prob, grads := slices.Clone(one.Logits()), slices.Clone(one.Probs()), slices.Clone(one.Grads())
			lt := one.Evaluate(x, labels)
			tlogits := slices.Clone(one.Logits())
			for _, w := range []int{2, 3, 6} {
				what := fmt.Sprintf("%s, %d workers", spec.Name, w)
				n := mustNetW(t, spec, e, Config{Batch: batch, Workers: w, SplitFC: 1}, 5)
				if n.tail == nil || n.Parts() != w {
					t.Fatalf("%s: tail %v, %d parts", what, n.tail != nil, n.Parts())
				}
				for range 2 { // nothing accumulates across steps
					n.SetSeed(3)
					if l := n.Gradient(x, labels); math.Abs(float64(l-loss)) > 1e-5*float64(loss) {
						t.Fatalf("%s: loss %g, want %g", what, l, loss)
					}
					closeTo(t, what+": logits", n.Logits(), logits, 1e-5)
					closeTo(t, what+": probabilities", n.Probs(), prob, 1e-5)
					segmentsClose(t, what, n.Layout(), n.Grads(), grads, 1e-5)
				}
				g, l := slices.Clone(n.Grads()), n.Loss()
				n.SetSeed(3)
				n.Forward(x, labels)
				n.Backward()
				if !slices.Equal(n.Grads(), g) || n.Loss() != l {
					t.Fatalf("%s: Forward and Backward differ from Gradient", what)
				}
				if l := n.Evaluate(x, labels); math.Abs(float64(l-lt)) > 1e-5*float64(lt) {
					t.Fatalf("%s: Evaluate's loss %g, want %g", what, l, lt)
				}
				closeTo(t, what+": Evaluate's logits", n.Logits(), tlogits, 1e-5)
				if e.Name() != "reference" && w == 2 { // (more goroutines than cores may allocate in the scheduler)
					n.Gradient(x, labels)
					if a := testing.AllocsPerRun(5, func() { n.Gradient(x, labels) }); a != 0 {
						t.Errorf("%s: %v allocations per step", what, a)
					}
				}
				n.Close()
			}
		})
	}
	testGradHook(t, tailNet, []Config{{Batch: 6, Workers: 2, SplitFC: 1}, {Batch: 6, Workers: 3, SplitFC: 1}})
}

// TestSplitFCMemory: Spec.Memory counts what New allocates for a Net
// that splits its fc tail, whose other workers keep no gradients of the
// tail's weights.
func TestSplitFCMemory(t *testing.T) {
	spec := mustParse(t, "input channels=4 height=8 width=8\nconv c out=8 kernel=3 pad=1\nrelu r\nfc f1 out=300\nrelu r1\nfc f2 out=10\nsoftmax\n")
	split, err := spec.Memory(Config{Batch: 8, Workers: 2, SplitFC: 1}, kernels.Reference())
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := spec.Memory(Config{Batch: 8, Workers: 2, SplitFC: -1}, kernels.Reference())
	if tail := 4 * int64(300*512+300+10*300+10); whole.WorkerGrads-split.WorkerGrads != tail {
		t.Errorf("worker gradients %s split, %s not: want %s less", formatBytes(split.WorkerGrads), formatBytes(whole.WorkerGrads), formatBytes(tail))
	}
	memoryTrue(t, spec, []Config{{Batch: 8, Workers: 2, SplitFC: 1}, {Batch: 8, Workers: 3, SplitFC: 1}, {Batch: 8, Workers: 2, SplitFC: 1, Inference: true}},
		func(n *Net, cfg Config) {
			if n.tail == nil {
				t.Errorf("%+v: tail not split", cfg)
			}
		})
}
