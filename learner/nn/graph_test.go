package nn

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/kerneltest"
	"github.com/softsync/softsync/ps/param"
)

// graphSpec has every layer kind and the graph's cases: an add of the
// input (NCHW) and a convolution's output (CNHW), residual adds run in
// place, outputs read by several layers (gradients accumulated: r2 by
// n1 and s2, b3 by r3 and f3, the input by c0, a0 and q), a layer of the
// input (q), an add of one output to itself (s5), batch norm after
// convolutions (CNHW) and after a fully connected layer (per feature),
// dropout on CNHW and NCHW tensors and over a relu's output in place,
// grouped convolution, LRN across channels, global pooling, pooling with
// floor rounding (where Caffe's ceil rounding gives a row and a column
// more), a convolution without bias. The batch norms' shifts keep the relus'
// inputs away from their kinks (for finite differences), not from the
// relus' paths.
const graphSpec = `input channels=3 height=8 width=8
conv c0 out=3 kernel=3 pad=1 weight=gaussian:0.3
add a0 from=input,c0
conv c1 out=4 kernel=3 pad=1 bias=none weight=msra:fan_out
batchnorm b1 weight=constant:0.5 bias=constant:2
relu r1
conv c2 out=4 kernel=3 pad=1 group=2 weight=gaussian:0.3 bias=gaussian:0.1
batchnorm b2 weight=gaussian:0.5 bias=constant:1
add s1 from=b2,r1
relu r2
lrn n1 size=3 alpha=0.5 beta=0.75 region=across_channels
dropout d1 ratio=0.3
add s2 from=d1,r2
pool p2 mode=avg kernel=3 stride=2 pad=1 round=floor
conv c3 out=6 kernel=3 pad=1 weight=gaussian:0.3
pool q mode=max kernel=3 stride=2 pad=1 round=floor from=input
conv c4 out=6 kernel=1 weight=gaussian:0.3
add s3 from=c3,c4
pool g1 mode=avg global=true
fc f1 out=5 weight=gaussian:0.5 bias=gaussian:0.1
batchnorm b3 weight=constant:0.5 bias=gaussian:0.2
relu r3
dropout d2 ratio=0.2
fc f2 out=4 weight=gaussian:0.5
fc f3 out=4 from=b3 weight=gaussian:0.5
add s4 from=f2,f3
add s5 from=s4,s4
softmax
`

// learnable returns the parameter vector's learnable ranges.
func learnable(layout []param.Segment) [][2]int {
	var r [][2]int
	for _, s := range layout {
		if s.Kind == param.Learnable {
			r = append(r, [2]int{s.Offset, s.Offset + s.Len})
		}
	}
	return r
}

// TestGraphFiniteDifference compares Backward with central differences of
// Forward's loss for every learnable parameter of graphSpec, with fixed
// dropout masks (SetSeed before every pass).
func TestGraphFiniteDifference(t *testing.T) {
	spec := mustParse(t, graphSpec)
	kerneltest.ForEachEngine(t, func(t *testing.T, e kernels.Engine) {
		n := mustNet(t, spec, e, 4, 7)
		x, labels := randomBatch(n, 3)
		x0 := slices.Clone(x)
		forward := func() float64 {
			n.SetSeed(11)
			return float64(n.Forward(x, labels))
		}
		forward()
		if !slices.Equal(x, x0) {
			t.Fatal("Forward modified its input")
		}
		n.Backward()
		g := slices.Clone(n.Grads())
		p := n.Params()
		// A step of 5e-3 keeps float32 rounding in the loss well below
		// the tolerance; with the relus away from their kinks the
		// truncation error stays below it too.
		const eps = 5e-3
		bad, checked := 0, 0
		for _, r := range learnable(n.Layout()) {
			for i := r[0]; i < r[1]; i++ {
				v := p[i]
				p[i] = v + eps
				lp := forward()
				p[i] = v - eps
				lm := forward()
				p[i] = v
				fd := (lp - lm) / (2 * eps)
				checked++
				if math.Abs(fd-float64(g[i])) > 2e-3+2e-2*math.Abs(fd) {
					if bad++; bad < 5 {
						t.Errorf("parameter %d: backward %.6g, finite difference %.6g", i, g[i], fd)
					}
				}
			}
		}
		if bad > 0 {
			t.Fatalf("%d of %d gradients wrong", bad, checked)
		}
	})
}

// TestGraphWorkers: graphSpec split over workers gives the loss, logits
// and gradients (batch norm's statistics included) of one worker, up to
// float32 summation order: batch norm's statistics span the batch and
// dropout's masks do not depend on the split. Evaluate agrees too.
func TestGraphWorkers(t *testing.T) {
	spec := mustParse(t, graphSpec)
	kerneltest.ForEachEngine(t, func(t *testing.T, e kernels.Engine) {
		const batch = 6
		one := mustNetW(t, spec, e, Config{Batch: batch}, 5)
		x, labels := randomBatch(one, 2)
		one.SetSeed(3)
		loss := one.Gradient(x, labels)
		logits, grads := slices.Clone(one.Logits()), slices.Clone(one.Grads())
		lt := one.Evaluate(x, labels)
		tlogits := slices.Clone(one.Logits())
		for _, w := range []int{2, 3, 6} {
			what := fmt.Sprintf("%d workers", w)
			n := mustNetW(t, spec, e, Config{Batch: batch, Workers: w}, 5)
			if n.Workers() != w || n.Parts() != w {
				t.Fatalf("%s: %d workers, %d parts", what, n.Workers(), n.Parts())
			}
			for range 2 {
				n.SetSeed(3)
				if l := n.Gradient(x, labels); math.Abs(float64(l-loss)) > 1e-5*float64(loss) {
					t.Fatalf("%s: loss %g, want %g", what, l, loss)
				}
				closeTo(t, what+": logits", n.Logits(), logits, 1e-5)
				segmentsClose(t, what, n.Layout(), n.Grads(), grads, 1e-4)
			}
			n.SetSeed(3)
			n.Forward(x, labels)
			n.Backward()
			segmentsClose(t, what+": Forward and Backward", n.Layout(), n.Grads(), grads, 1e-4)
			if l := n.Evaluate(x, labels); math.Abs(float64(l-lt)) > 1e-5*float64(lt) {
				t.Fatalf("%s: Evaluate's loss %g, want %g", what, l, lt)
			}
			closeTo(t, what+": Evaluate's logits", n.Logits(), tlogits, 1e-5)
		}
	})
}

// segmentsClose compares two gradient vectors segment by segment: the
// learnable ones to tol of the largest magnitude of want's learnable
// values (a bias before batch norm has a gradient of zero up to
// rounding), the state ones to tol of their own.
func segmentsClose(t *testing.T, what string, layout []param.Segment, got, want []float32, tol float64) {
	t.Helper()
	var scale float64
	for _, r := range learnable(layout) {
		for _, v := range want[r[0]:r[1]] {
			scale = max(scale, math.Abs(float64(v)))
		}
	}
	for _, s := range layout {
		g, w := got[s.Offset:s.Offset+s.Len], want[s.Offset:s.Offset+s.Len]
		if s.Kind == param.State {
			closeTo(t, what+": "+s.Name, g, w, tol)
			continue
		}
		for i := range w {
			if d := math.Abs(float64(g[i] - w[i])); !(d <= tol*scale) {
				t.Errorf("%s: %s[%d] = %g, want %g (tolerance %.2g)", what, s.Name, i, g[i], w[i], tol*scale)
				break
			}
		}
	}
}

// TestBatchNormStatistics: the running statistics' slots of Grads hold
// the batch's mean and unbiased variance of each batch norm's input, and
// Evaluate normalises with the running statistics in Params.
func TestBatchNormStatistics(t *testing.T) {
	// b normalises the input itself, per channel over 4 images of 2×3.
	spec := mustParse(t, "input channels=2 height=2 width=3\nbatchnorm b\nfc out=3\nsoftmax\n")
	kerneltest.ForEachEngine(t, func(t *testing.T, e kernels.Engine) {
		for _, w := range []int{1, 2} {
			n := mustNetW(t, spec, e, Config{Batch: 4, Workers: w}, 1)
			x, labels := randomBatch(n, 9)
			n.Gradient(x, labels)
			g := n.Grads()
			for c := range 2 {
				var vals []float64
				for img := range 4 {
					for _, v := range x[(img*2+c)*6 : (img*2+c+1)*6] {
						vals = append(vals, float64(v))
					}
				}
				mean, ss := 0.0, 0.0
				for _, v := range vals {
					mean += v
				}
				mean /= float64(len(vals))
				for _, v := range vals {
					ss += (v - mean) * (v - mean)
				}
				unbiased := ss / float64(len(vals)-1)
				// Segments: b.weight, b.bias, b.running_mean, b.running_var.
				if got := g[4+c]; math.Abs(float64(got)-mean) > 1e-5 {
					t.Errorf("%d workers: channel %d: mean slot %g, want %g", w, c, got, mean)
				}
				if got := g[6+c]; math.Abs(float64(got)-unbiased) > 1e-5*unbiased {
					t.Errorf("%d workers: channel %d: variance slot %g, want %g", w, c, got, unbiased)
				}
			}
			// With a bound (fp16's range, say), the statistics stop at it.
			for i := range x {
				x[i] *= 100 // variances of about 3300
			}
			n.SetStateLimit(1000)
			n.Gradient(x, labels)
			if g[6] != 1000 || g[7] != 1000 || math.Abs(float64(g[4])) > 1000 {
				t.Errorf("%d workers: statistics %v beyond the bound 1000", w, g[4:8])
			}
			n.SetStateLimit(0)
			for i := range x {
				x[i] /= 100
			}
			// At test: running mean 0.5 and variance 4 for channel 0:
			// y = (x − 0.5)/√(4 + 1e-5)·γ + β with γ = 1, β = 0.
			p := n.Params()
			p[4], p[6] = 0.5, 4
			m, err := n.WithBatch(4)
			if err != nil {
				t.Fatal(err)
			}
			clear(p[8:]) // fc: zero weights, bias = the first feature's... use logits below
			fc := p[8 : 8+3*12]
			fc[0] = 1 // logit 0 = normalised element 0 of image's channel 0
			m.Evaluate(x, labels)
			for img := range 4 {
				want := (x[img*12] - 0.5) / float32(math.Sqrt(4+1e-5))
				if got := m.Logits()[img*3]; math.Abs(float64(got-want)) > 1e-5 {
					t.Errorf("%d workers: image %d: logit %g, want %g", w, img, got, want)
				}
			}
			m.Close()
		}
	})
}

// TestPlanReuse: activations share buffers where their lifetimes allow,
// a Net for Inference keeps far less than a training one, and
// Spec.Memory counts what New allocates.
func TestPlanReuse(t *testing.T) {
	// A deep chain: without reuse every output would have a buffer.
	var b strings.Builder
	b.WriteString("input channels=8 height=16 width=16\n")
	for i := range 12 {
		fmt.Fprintf(&b, "conv c%d out=8 kernel=3 pad=1\nbatchnorm b%d\nrelu r%d\n", i, i, i)
	}
	b.WriteString("fc out=10\nsoftmax\n")
	spec := mustParse(t, b.String())
	train, err := spec.Memory(Config{Batch: 8}, kernels.Reference())
	if err != nil {
		t.Fatal(err)
	}
	test, err := spec.Memory(Config{Batch: 8, Inference: true}, kernels.Reference())
	if err != nil {
		t.Fatal(err)
	}
	act := int64(8 * 8 * 16 * 16 * 4) // one conv output of the batch, bytes
	// Training keeps each conv's and batch norm's output for the
	// backward pass (the relus run in place): 24 activations, the input
	// in CNHW, and two gradient buffers in turn; at test, two buffers in
	// turn.
	if train.Activations > 28*act || train.Activations < 27*act {
		t.Errorf("training activations %s, want about 27 × %s", formatBytes(train.Activations), formatBytes(act))
	}
	if test.Activations > 3*act || test.Grads != 0 || test.WorkerGrads != 0 {
		t.Errorf("inference memory %v, want activations about 2 × %s and no gradients", test, formatBytes(act))
	}
	memoryTrue(t, spec, []Config{{Batch: 8}, {Batch: 8, Inference: true}, {Batch: 8, Workers: 2}}, nil)
}

// memoryTrue checks, for each of cfgs, that New allocates what
// spec.Memory says but the workspace (and the plan's own data), and
// calls check, if not nil, on the Net.
func memoryTrue(t *testing.T, spec *Spec, cfgs []Config, check func(*Net, Config)) {
	t.Helper()
	for _, cfg := range cfgs {
		plan, _ := spec.Memory(cfg, kernels.Reference())
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		n, err := New(spec, kernels.Reference(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		got := int64(after.TotalAlloc - before.TotalAlloc)
		want := plan.Total() - plan.Workspace
		if got < want || got > want+want/20+128<<10 { // and the plan's own data
			t.Errorf("%+v: New allocated %s, Memory says %s without the workspace", cfg, formatBytes(got), formatBytes(want))
		}
		if check != nil {
			check(n, cfg)
		}
		n.Close()
	}
}

// TestTooLarge: a Net whose activations cannot be allocated, or that
// exceeds MemoryLimit, is refused before anything is allocated, naming
// the file, line, layer and bytes.
func TestTooLarge(t *testing.T) {
	spec := mustParse(t, "input channels=3 height=224 width=224\nconv c1 out=64 kernel=3 pad=1\nfc out=10\nsoftmax\n")
	_, err := New(spec, kernels.Reference(), Config{Batch: 1 << 20})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "test.net:2: conv c1: its output for 1048576 images holds 3,367,254,360,064 values (12.2 TiB)") {
		t.Errorf("batch 2^20: %v", err)
	}
	plan, err := spec.Memory(Config{Batch: 32}, kernels.Reference())
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(spec, kernels.Reference(), Config{Batch: 32, MemoryLimit: plan.Total() - 1})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "above the limit") || !strings.Contains(err.Error(), "conv c1 (test.net:2)") {
		t.Errorf("limit: %v", err)
	}
	if _, err := New(spec, kernels.Reference(), Config{Batch: 32, MemoryLimit: plan.Total()}); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	bn := mustParse(t, "input channels=3 height=1 width=1\nfc out=4\nbatchnorm b\nsoftmax\n")
	if _, err := New(bn, kernels.Reference(), Config{Batch: 1}); err == nil || !strings.Contains(err.Error(), "test.net:3: batchnorm b: training needs more than one value per channel") {
		t.Errorf("batch norm of one value: %v", err)
	}
	if _, err := New(bn, kernels.Reference(), Config{Batch: 1, Inference: true}); err != nil {
		t.Errorf("batch norm of one value at test: %v", err)
	}
	if _, err := New(bn, kernels.Reference(), Config{Batch: 4, Workers: 2, Part: 1}); err == nil || !strings.Contains(err.Error(), "Part") {
		t.Errorf("batch norm cut into parts: %v", err)
	}
}

// TestGraphNoAllocs: a step of graphSpec allocates nothing, with one
// worker or several (their meetings at batch norm included), on every
// engine that promises as much.
func TestGraphNoAllocs(t *testing.T) {
	spec := mustParse(t, graphSpec)
	for _, e := range append(kerneltest.Engines(t), idleEngine{kernels.Reference()}) {
		if e.Name() == "reference" {
			continue
		}
		for _, w := range []int{1, 2} {
			n := mustNetW(t, spec, e, Config{Batch: 4, Workers: w}, 1)
			x, labels := randomBatch(n, 1)
			n.Gradient(x, labels)
			n.Evaluate(x, labels)
			if a := testing.AllocsPerRun(5, func() { n.Gradient(x, labels); n.Evaluate(x, labels) }); a != 0 {
				t.Errorf("%s with %d workers: %v allocations per step", e.Name(), w, a)
			}
		}
	}
}
