package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/kerneltest"
)

func mustParse(t testing.TB, src string) *Spec {
	t.Helper()
	s, err := Parse("test.net", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustNet(t testing.TB, s *Spec, e kernels.Engine, batch int, seed uint64) *Net {
	t.Helper()
	return mustNetW(t, s, e, Config{Batch: batch}, seed)
}

func mustNetW(t testing.TB, s *Spec, e kernels.Engine, cfg Config, seed uint64) *Net {
	t.Helper()
	n, err := New(s, e, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	n.Init(seed)
	return n
}

// randomBatch returns batch inputs in [−1, 1) and labels for net n.
func randomBatch(n *Net, seed uint64) ([]float32, []int32) {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n.Batch()*n.Input().Len())
	for i := range x {
		x[i] = float32(2*r.Float64() - 1)
	}
	labels := make([]int32, n.Batch())
	for i := range labels {
		labels[i] = int32(r.IntN(n.Classes()))
	}
	return x, labels
}

// oddSpec puts layers where in-place ReLU is and is not legal: first
// (input owned by the caller), after an LRN (which reads its output), after
// pooling and fully connected layers; and a pooling layer before the first
// layer with parameters (no backward pass needed there).
const oddSpec = `input channels=2 height=9 width=9
relu r0
pool p0 mode=avg kernel=2 stride=1 pad=1
conv c1 out=3 kernel=3 pad=1 weight=gaussian:0.5 bias=gaussian:0.1
lrn n1 size=3 alpha=5 beta=0.75
relu r1
pool p1 mode=max kernel=3 stride=2
relu r2
fc f1 out=6 weight=gaussian:0.5 bias=gaussian:0.1
relu r3
fc f2 out=4 weight=gaussian:0.5
softmax
`

// TestGradientFiniteDifference compares Backward with central differences
// of Forward's loss, for every parameter of a small net of every layer
// kind.
func TestGradientFiniteDifference(t *testing.T) {
	spec := mustParse(t, oddSpec)
	kerneltest.ForEachEngine(t, func(t *testing.T, e kernels.Engine) {
		n := mustNet(t, spec, e, 3, 7)
		x, labels := randomBatch(n, 3)
		// Mostly positive inputs: with many zeros after the first ReLU,
		// max pooling would see exact ties, where the loss has no
		// derivative.
		for i := range x {
			x[i] = 0.6*x[i] + 0.4
		}
		x0 := slices.Clone(x)
		n.Forward(x, labels)
		if !slices.Equal(x, x0) {
			t.Fatal("Forward modified its input")
		}
		n.Backward()
		g := slices.Clone(n.Grads())
		p := n.Params()
		const eps = 1e-3
		bad := 0
		for i := range p {
			v := p[i]
			p[i] = v + eps
			lp := float64(n.Forward(x, labels))
			p[i] = v - eps
			lm := float64(n.Forward(x, labels))
			p[i] = v
			fd := (lp - lm) / (2 * eps)
			if math.Abs(fd-float64(g[i])) > 2e-3+2e-2*math.Abs(fd) {
				if bad++; bad < 5 {
					t.Errorf("parameter %d: backward %.6g, finite difference %.6g", i, g[i], fd)
				}
			}
		}
		if bad > 0 {
			t.Fatalf("%d of %d gradients wrong", bad, len(p))
		}
	})
}

// TestReLUInPlace checks which ReLUs run in place: not over the caller's
// images (r0), not over an LRN's output, which its backward pass reads
// (r1); over a pooling layer's (r2) and a fully connected layer's (r3).
// Layers before the first with parameters run no backward pass.
func TestReLUInPlace(t *testing.T) {
	n := mustNet(t, mustParse(t, oddSpec), kernels.Reference(), 2, 1)
	p := n.reps[0].plan
	inPlace, back := map[string]bool{}, map[string]bool{}
	for _, op := range p.ops {
		if op.layer >= 0 {
			name := n.spec.Layers[op.layer].Name
			inPlace[name], back[name] = op.over >= 0, op.back
		}
	}
	want := map[string]bool{"r0": false, "r1": false, "r2": true, "r3": true}
	for name, w := range want {
		if inPlace[name] != w {
			t.Errorf("%s in place: %v, want %v", name, inPlace[name], w)
		}
	}
	if back["r0"] || back["p0"] || !back["c1"] || !back["r2"] {
		t.Errorf("backward passes %v: want none before c1", back)
	}
}

func TestLayout(t *testing.T) {
	spec, _ := Builtin("cifar10_full")
	n := mustNet(t, spec, kernels.Reference(), 1, 1)
	type seg struct {
		name      string
		len       int
		lr, decay float32
	}
	want := []seg{
		{"conv1.weight", 32 * 3 * 25, 1, 1}, {"conv1.bias", 32, 2, 1},
		{"conv2.weight", 32 * 32 * 25, 1, 1}, {"conv2.bias", 32, 2, 1},
		{"conv3.weight", 64 * 32 * 25, 1, 1}, {"conv3.bias", 64, 2, 1},
		{"ip1.weight", 10 * 1024, 1, 250}, {"ip1.bias", 10, 2, 0},
	}
	off := 0
	for i, s := range n.Layout() {
		w := want[i]
		if s.Name != w.name || s.Len != w.len || s.Offset != off || s.LRMult != w.lr || s.DecayMult != w.decay {
			t.Errorf("segment %d = %+v, want %+v at offset %d", i, s, w, off)
		}
		off += s.Len
	}
	if off != len(n.Params()) || len(n.Grads()) != off || off != 89578 {
		t.Fatalf("segments cover %d, params %d, grads %d", off, len(n.Params()), len(n.Grads()))
	}
}

func TestInit(t *testing.T) {
	lenet, _ := Builtin("lenet")
	e := kernels.Reference()
	n := mustNet(t, lenet, e, 1, 42)
	for _, s := range n.Layout() {
		v := n.Params()[s.Offset : s.Offset+s.Len]
		if s.Name[len(s.Name)-4:] == "bias" {
			for _, x := range v {
				if x != 0 {
					t.Fatalf("%s: bias %g, want 0", s.Name, x)
				}
			}
			continue
		}
		// Xavier: uniform on ±sqrt(3/fan_in), so variance 1/fan_in.
		fanIn := map[string]float64{"conv1.weight": 25, "conv2.weight": 500, "ip1.weight": 800, "ip2.weight": 500}[s.Name]
		a := math.Sqrt(3 / fanIn)
		var ss float64
		for _, x := range v {
			if math.Abs(float64(x)) > a {
				t.Fatalf("%s: %g outside ±%g", s.Name, x, a)
			}
			ss += float64(x) * float64(x)
		}
		if got := ss / float64(len(v)) * fanIn; math.Abs(got-1) > 0.15 {
			t.Errorf("%s: variance × fan_in = %.3f, want 1", s.Name, got)
		}
	}
	cifar, _ := Builtin("cifar10_full")
	c := mustNet(t, cifar, e, 1, 42)
	for _, s := range c.Layout() {
		std := map[string]float64{"conv1.weight": 1e-4, "conv2.weight": 0.01, "conv3.weight": 0.01, "ip1.weight": 0.01}[s.Name]
		if std == 0 {
			continue
		}
		var ss float64
		for _, x := range c.Params()[s.Offset : s.Offset+s.Len] {
			ss += float64(x) * float64(x)
		}
		if got := math.Sqrt(ss / float64(s.Len)); math.Abs(got/std-1) > 0.06 {
			t.Errorf("%s: std %.3g, want %.3g", s.Name, got, std)
		}
	}
	// Seeded: the same seed gives the same values, another seed others.
	m := mustNet(t, lenet, e, 1, 42)
	if !slices.Equal(m.Params(), n.Params()) {
		t.Fatal("same seed, different parameters")
	}
	m.Init(43)
	if slices.Equal(m.Params()[:500], n.Params()[:500]) {
		t.Fatal("different seeds, same parameters")
	}
}

// TestScore uses a net whose logits equal its input.
func TestScore(t *testing.T) {
	n := mustNet(t, mustParse(t, "input channels=3 height=1 width=1\nfc out=3\nsoftmax\n"), kernels.Reference(), 4, 1)
	p := n.Params()
	clear(p)
	p[0], p[4], p[8] = 1, 1, 1 // identity weights, zero bias
	x := []float32{
		0.1, 0.9, 0.3, // → 1
		2, -1, 0, // → 0
		0, 0, 5, // → 2
		1, 1, 0, // tie → 0
	}
	n.Forward(x, []int32{1, 1, 2, 0})
	if got, _ := n.Score([]int32{1, 1, 2, 0}); got != 3 {
		t.Fatalf("Score counts %d correct, want 3", got)
	}
	if got, _ := n.Score([]int32{1, 1}); got != 1 {
		t.Fatalf("Score on a prefix counts %d correct, want 1", got)
	}
	// Mean cross-entropy of these logits, computed by hand.
	want := 0.0
	for i, l := range []int{1, 1, 2, 0} {
		row := x[3*i : 3*i+3]
		var z float64
		for _, v := range row {
			z += math.Exp(float64(v))
		}
		want += math.Log(z) - float64(row[l])
	}
	if _, sum := n.Score([]int32{1, 1, 2, 0}); math.Abs(sum-want) > 1e-5 {
		t.Fatalf("Score's loss sum %g, want %g", sum, want)
	}
	if want /= 4; math.Abs(float64(n.Loss())-want) > 1e-6 {
		t.Fatalf("loss %g, want %g", n.Loss(), want)
	}
}

// TestWithBatch evaluates with another batch size on the same parameters.
func TestWithBatch(t *testing.T) {
	spec, _ := Builtin("lenet")
	kerneltest.ForEachEngine(t, func(t *testing.T, e kernels.Engine) {
		n := mustNet(t, spec, e, 5, 3)
		x, labels := randomBatch(n, 4)
		n.Forward(x, labels)
		m, err := n.WithBatch(2)
		if err != nil {
			t.Fatal(err)
		}
		m.Forward(x[:2*784], labels[:2])
		closeTo(t, "logits of the first 2 images", m.Logits(), n.Logits()[:20], 1e-5)
		n.Params()[len(n.Params())-1] += 1 // a bias of ip2: shared
		m.Forward(x[:2*784], labels[:2])
		if d := m.Logits()[9] - n.Logits()[9]; math.Abs(float64(d)-1) > 1e-4 {
			t.Fatalf("parameter change not seen by WithBatch net: logit moved by %g", d)
		}
		if _, err := n.WithBatch(0); err == nil {
			t.Fatal("batch 0 accepted")
		}
	})
}

// TestNoAllocs: a training step allocates nothing in steady state, on
// every engine that promises as much (gonum's parallel Sgemm, under the
// reference engine, allocates), and the network's own code allocates
// nothing on any engine (checked with the kernels' work left out).
func TestNoAllocs(t *testing.T) {
	for _, name := range []string{"lenet", "cifar10_full"} {
		spec, _ := Builtin(name)
		engines := append(kerneltest.Engines(t), idleEngine{kernels.Reference()})
		for _, e := range engines {
			if e.Name() == "reference" {
				continue
			}
			for _, w := range []int{1, 2} {
				n := mustNetW(t, spec, e, Config{Batch: 4, Workers: w}, 1)
				x, labels := randomBatch(n, 1)
				n.Gradient(x, labels)
				if a := testing.AllocsPerRun(5, func() { n.Gradient(x, labels) }); a != 0 {
					t.Errorf("%s on %s with %d workers: %v allocations per step", name, e.Name(), w, a)
				}
			}
		}
	}
}

// idleEngine does none of the kernels' work, so that allocation counts
// measure the network's own code.
type idleEngine struct{ kernels.Engine }

func (idleEngine) Name() string { return "idle" }
func (idleEngine) ConvForward(kernels.ConvShape, []float32, []float32, []float32, []float32, *kernels.Workspace) {
}
func (idleEngine) ConvBackward(kernels.ConvShape, []float32, []float32, []float32, []float32, []float32, []float32, *kernels.Workspace) {
}
func (idleEngine) FCForward(int, int, int, []float32, []float32, []float32, []float32) {}
func (idleEngine) FCBackward(int, int, int, []float32, []float32, []float32, []float32, []float32, []float32) {
}
func (idleEngine) SoftmaxCrossEntropy(int, int, []float32, []int32, []float32, []float32) float32 {
	return 0
}

// TestConcurrentNets runs several networks on one engine at once; each
// must compute exactly what it computes alone.
func TestConcurrentNets(t *testing.T) {
	spec, _ := Builtin("cifar10_full")
	kerneltest.ForEachEngine(t, func(t *testing.T, e kernels.Engine) {
		const k = 4
		var nets [k]*Net
		var want [k][]float32
		for i := range nets {
			nets[i] = mustNet(t, spec, e, 2, uint64(i))
			x, labels := randomBatch(nets[i], uint64(i))
			nets[i].Gradient(x, labels)
			want[i] = slices.Clone(nets[i].Grads())
		}
		var wg sync.WaitGroup
		for i := range nets {
			wg.Go(func() {
				x, labels := randomBatch(nets[i], uint64(i))
				for range 3 {
					nets[i].Gradient(x, labels)
				}
			})
		}
		wg.Wait()
		for i := range nets {
			if !slices.Equal(nets[i].Grads(), want[i]) {
				t.Fatalf("net %d: concurrent gradients differ from sequential ones", i)
			}
		}
	})
}

// TestWorkers: splitting the batch over workers, and each worker's share
// into parts (Config.Part), gives the loss, logits and gradients of one
// worker and one part, up to float32 summation order; and Gradient gives
// exactly what Forward then Backward give.
func TestWorkers(t *testing.T) {
	for name, batch := range map[string]int{"lenet": 7, "cifar10_full": 5} {
		spec, _ := Builtin(name)
		kerneltest.ForEachEngine(t, func(t *testing.T, e kernels.Engine) {
			one := mustNetW(t, spec, e, Config{Batch: batch, Part: -1}, 5)
			x, labels := randomBatch(one, 2)
			loss := one.Gradient(x, labels)
			// parts: how many with LeNet's batch of 7 and cifar10_full's of 5.
			for _, c := range []struct {
				Config
				parts [2]int
			}{
				{Config{Workers: 2, Part: -1}, [2]int{2, 2}},
				{Config{Workers: 9}, [2]int{7, 5}},
				{Config{Part: 2}, [2]int{4, 3}},
				{Config{Workers: 2, Part: 1}, [2]int{7, 5}},
				{Config{Workers: 2, Part: 2}, [2]int{4, 3}}, // shares of 3 and 4, 2 and 3
			} {
				c.Batch = batch
				what := fmt.Sprintf("%s, %d workers, part %d", name, c.Workers, c.Part)
				n := mustNetW(t, spec, e, c.Config, 5)
				w, parts := min(max(c.Workers, 1), batch), c.parts[0]
				if name == "cifar10_full" {
					parts = c.parts[1]
				}
				if n.Workers() != w || n.Parts() != parts {
					t.Fatalf("%s: %d workers and %d parts, want %d and %d", what, n.Workers(), n.Parts(), w, parts)
				}
				for range 2 { // nothing accumulates across steps
					if l := n.Gradient(x, labels); math.Abs(float64(l-loss)) > 1e-6*float64(loss) {
						t.Fatalf("%s: loss %g, want %g", what, l, loss)
					}
					closeTo(t, what+": logits", n.Logits(), one.Logits(), 1e-5)
					closeTo(t, what+": probabilities", n.Probs(), one.Probs(), 1e-5)
					for _, s := range n.Layout() {
						closeTo(t, fmt.Sprintf("%s: %s gradient", what, s.Name),
							n.Grads()[s.Offset:s.Offset+s.Len], one.Grads()[s.Offset:s.Offset+s.Len], 1e-5)
					}
				}
				c1, _ := one.Score(labels)
				if cw, _ := n.Score(labels); c1 != cw {
					t.Fatalf("%s: %d correct, %d with one worker", what, cw, c1)
				}
				grads, loss := slices.Clone(n.Grads()), n.Loss()
				n.Forward(x, labels)
				n.Backward()
				if !slices.Equal(n.Grads(), grads) || n.Loss() != loss {
					t.Fatalf("%s: Forward and Backward differ from Gradient", what)
				}
				n.Close()
				n.Close()
			}
		})
	}
}

func TestForwardMisuse(t *testing.T) {
	n := mustNet(t, mustParse(t, "input channels=1 height=2 width=2\nfc out=2\nsoftmax\n"), kernels.Reference(), 2, 1)
	for name, f := range map[string]func(){
		"short x":     func() { n.Forward(make([]float32, 7), []int32{0, 1}) },
		"few labels":  func() { n.Forward(make([]float32, 8), []int32{0}) },
		"label range": func() { n.Forward(make([]float32, 8), []int32{0, 2}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestGradHook checks SetGradHook's contract: at each call the gradients
// from lo on already have the values they end the pass with, lo falls
// from call to call down to 0, Loss is the batch's, and there is a call
// per layer with parameters, with one worker or several, whole or in
// parts; the hook changes no result, not a bit.
func TestGradHook(t *testing.T) {
	for _, c := range []struct {
		src  string
		cfgs []Config
	}{
		{oddSpec, []Config{{Batch: 6}, {Batch: 6, Part: 2}, {Batch: 6, Workers: 2}, {Batch: 6, Workers: 3, Part: 1}}},
		// Batch norm's workers meet in backward too; no parts.
		{graphSpec, []Config{{Batch: 6}, {Batch: 6, Workers: 2}, {Batch: 6, Workers: 3}}},
	} {
		testGradHook(t, mustParse(t, c.src), c.cfgs)
	}
}

func testGradHook(t *testing.T, spec *Spec, cfgs []Config) {
	kerneltest.ForEachEngine(t, func(t *testing.T, e kernels.Engine) {
		ref := mustNetW(t, spec, e, Config{Batch: 6}, 3)
		x, labels := randomBatch(ref, 4)
		ref.SetSeed(5)
		loss := ref.Gradient(x, labels)
		layers := 0
		for i := range spec.Layers {
			if spec.Layers[i].HasParams() {
				layers++
			}
		}
		for _, cfg := range cfgs {
			what := fmt.Sprintf("%d workers, part %d", cfg.Workers, cfg.Part)
			plain := mustNetW(t, spec, e, cfg, 3)
			plain.SetSeed(5)
			plain.Gradient(x, labels)
			n := mustNetW(t, spec, e, cfg, 3)
			type call struct {
				lo   int
				loss float32
				tail []float32
			}
			var calls []call
			n.SetGradHook(func(lo int) {
				calls = append(calls, call{lo, n.Loss(), slices.Clone(n.Grads()[lo:])})
			})
			for pass, run := range []func(){
				func() { n.SetSeed(5); n.Gradient(x, labels) },
				func() { n.SetSeed(5); n.Forward(x, labels); n.Backward() },
			} {
				calls = calls[:0]
				clear(n.Grads())
				run()
				if len(calls) != layers || calls[len(calls)-1].lo != 0 {
					t.Fatalf("%s, pass %d: %d calls ending at %d, want %d ending at 0", what, pass, len(calls), calls[len(calls)-1].lo, layers)
				}
				for i, cl := range calls {
					if i > 0 && cl.lo >= calls[i-1].lo {
						t.Fatalf("%s, pass %d: call %d has lo %d after %d", what, pass, i, cl.lo, calls[i-1].lo)
					}
					if !slices.Equal(cl.tail, n.Grads()[cl.lo:]) {
						t.Fatalf("%s, pass %d: gradients from %d changed after the hook's call", what, pass, cl.lo)
					}
					if cl.loss != n.Loss() {
						t.Fatalf("%s, pass %d: Loss %g during the hook, %g after", what, pass, cl.loss, n.Loss())
					}
				}
				if math.Abs(float64(n.Loss()-loss)) > 1e-5*float64(loss) {
					t.Fatalf("%s: loss %g, want %g", what, n.Loss(), loss)
				}
				closeTo(t, what, n.Grads(), ref.Grads(), 1e-5)
				if !slices.Equal(n.Grads(), plain.Grads()) || n.Loss() != plain.Loss() {
					t.Fatalf("%s, pass %d: the gradients or the loss differ from those without a hook", what, pass)
				}
			}
			lo := 0
			n.SetGradHook(func(l int) { lo = l })
			if a := testing.AllocsPerRun(5, func() { n.Gradient(x, labels) }); a != 0 || lo != 0 {
				t.Fatalf("%s: %g allocations per step with a hook, last call at %d", what, a, lo)
			}
			n.SetGradHook(nil)
			calls = calls[:0]
			n.Gradient(x, labels)
			if len(calls) != 0 {
				t.Fatalf("%s: %d calls after the hook was removed", what, len(calls))
			}
		}
	})
}

// TestConfigGrads: a Net given Config.Grads keeps its gradient there,
// with the same values as one that allocates its own; a vector of the
// wrong length is an error.
func TestConfigGrads(t *testing.T) {
	spec := mustParse(t, oddSpec)
	e := kernels.Reference()
	own := mustNetW(t, spec, e, Config{Batch: 3}, 7)
	buf := make([]float32, spec.NumParams())
	for i := range buf {
		buf[i] = float32(i) // cleared by New
	}
	lent := mustNetW(t, spec, e, Config{Batch: 3, Grads: buf}, 7)
	x, labels := randomBatch(own, 1)
	own.Gradient(x, labels)
	lent.Gradient(x, labels)
	if &lent.Grads()[0] != &buf[0] || !slices.Equal(buf, own.Grads()) {
		t.Fatal("the gradient is not kept in Config.Grads, or differs")
	}
	if _, err := New(spec, e, Config{Batch: 3, Grads: buf[1:]}); err == nil || !strings.Contains(err.Error(), "Grads") {
		t.Fatalf("Grads one float short: %v", err)
	}
}
