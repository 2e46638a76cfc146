package kerneltest

import (
	"fmt"
	"math"
	"testing"

	"github.com/softsync/softsync/kernels"
)

func testReLU(t *testing.T, e kernels.Engine) {
	r := newRand(5)
	n := 1037
	x := uniform(r, n)
	x[0], x[1] = 0, float32(math.Copysign(0, -1))
	y := output(n)
	in := freeze("x", x)
	e.ReLUForward(x, y)
	in.check(t, "ReLUForward")
	checkTail(t, "y", y, n)
	want := make([]float64, n)
	for i, v := range x {
		want[i] = math.Max(float64(v), 0)
	}
	approx(t, "y", y, want, nil, 0)

	dy := uniform(r, n)
	dx := output(n)
	in = freeze("y", y[:n], "dy", dy)
	e.ReLUBackward(y[:n], dy, dx)
	in.check(t, "ReLUBackward")
	checkTail(t, "dx", dx, n)
	for i := range want {
		want[i] = 0
		if x[i] > 0 {
			want[i] = float64(dy[i])
		}
	}
	approx(t, "dx", dx, want, nil, 0)

	// In place: y may alias x, dx may alias dy.
	xy := append([]float32(nil), x...)
	e.ReLUForward(xy, xy)
	approx(t, "y (in place)", xy, sliceTo64(y[:n]), nil, 0)
	d := append([]float32(nil), dy...)
	e.ReLUBackward(xy, d, d)
	approx(t, "dx (in place)", d, want, nil, 0)

	// Finite differences away from the kink at 0.
	for i := range x {
		if math.Abs(float64(x[i])) < 0.05 {
			x[i] = 0.5
		}
	}
	g := uniform(r, n)
	yy := make([]float32, n)
	loss := func() float64 { e.ReLUForward(x, yy); return dot64(g, yy) }
	loss()
	gx := make([]float32, n)
	e.ReLUBackward(yy, g, gx)
	gradCheck(t, "dx", r, x, gx, loss, 1e-2, 40, 1e-2, 0.1)
}

func sliceTo64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

var lrnShapes = []kernels.LRNShape{
	{N: 2, C: 3, H: 5, W: 6, Size: 3, Alpha: 0.9, Beta: 0.75, K: 1},
	{N: 1, C: 2, H: 7, W: 4, Size: 5, Alpha: 2, Beta: 0.5, K: 2},
	{N: 2, C: 2, H: 8, W: 8, Size: 3, Alpha: 5e-5, Beta: 0.75, K: 1}, // cifar10_full's norm layers
	{N: 1, C: 1, H: 1, W: 3, Size: 3, Alpha: 1.5, Beta: 1.3, K: 1.2},
	{N: 2, C: 2, H: 9, W: 11, Size: 1, Alpha: 0.7, Beta: 0.75, K: 1},
	// Across channels: AlexNet's norm1 in miniature, a window wider than
	// the channels, other powers, and a window of one channel.
	{N: 2, C: 7, H: 3, W: 5, Size: 5, Alpha: 0.9, Beta: 0.75, K: 1, Region: kernels.AcrossChannels},
	{N: 1, C: 3, H: 2, W: 5, Size: 7, Alpha: 2, Beta: 0.5, K: 2, Region: kernels.AcrossChannels},
	{N: 3, C: 5, H: 4, W: 4, Size: 3, Alpha: 1.3, Beta: 1.3, K: 1.2, Region: kernels.AcrossChannels},
	{N: 2, C: 4, H: 1, W: 3, Size: 1, Alpha: 0.7, Beta: 1, K: 1, Region: kernels.AcrossChannels},
}

func testLRN(t *testing.T, e kernels.Engine) {
	for i, s := range lrnShapes {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRand(uint64(500 + i))
			n := s.Len()
			x := uniform(r, n)
			wantScale, wantY := naiveLRN(s, x)
			ws := dirtyWorkspace()
			y, scale := checkLRNForward(t, e, s, x, wantScale, wantY, ws)

			dy := uniform(r, n)
			want, mag := naiveLRNBackward(s, x, dy, wantScale, wantY)
			dx := output(n)
			in := freeze("x", x, "y", y[:n], "scale", scale[:n], "dy", dy)
			e.LRNBackward(s, x, y[:n], scale[:n], dy, dx, ws)
			in.check(t, "LRNBackward")
			checkTail(t, "dx", dx, n)
			approx(t, "dx", dx, want, mag, 1e-5)
		})
	}
}

// lrnExtremes are forward passes whose scales cross the range where the
// native engine's s^(−3/4) runs its fast path (2^−120 … 2^120): some
// elements of each take the exact power instead. Their backward passes
// would underflow dy·y/scale in float32 whatever the method.
var lrnExtremes = []kernels.LRNShape{
	{N: 1, C: 6, H: 3, W: 7, Size: 3, Alpha: 1e36, Beta: 0.75, K: 1.2e36, Region: kernels.AcrossChannels},
	{N: 1, C: 2, H: 5, W: 5, Size: 3, Alpha: 3e35, Beta: 0.75, K: 1.2e36},
}

func testLRNExtremes(t *testing.T, e kernels.Engine) {
	for i, s := range lrnExtremes {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRand(uint64(700 + i))
			n := s.Len()
			x := uniform(r, n)
			wantScale, wantY := naiveLRN(s, x)
			var in, out int
			for _, v := range wantScale {
				if v > 0x1p120 {
					out++
				} else {
					in++
				}
			}
			if in == 0 || out == 0 {
				t.Fatalf("scales %d in the fast range and %d above it: the case should have both", in, out)
			}
			checkLRNForward(t, e, s, x, wantScale, wantY, dirtyWorkspace())
		})
	}
}

// checkLRNForward runs e's LRN forward pass on x and checks it against
// the naive scale and y, and that it leaves x and the outputs' tails
// alone; it returns y and scale.
func checkLRNForward(t *testing.T, e kernels.Engine, s kernels.LRNShape, x []float32, wantScale, wantY []float64,
	ws *kernels.Workspace) (y, scale []float32) {
	t.Helper()
	n := s.Len()
	y, scale = output(n), output(n)
	in := freeze("x", x)
	e.LRNForward(s, x, y, scale, ws)
	in.check(t, "LRNForward")
	checkTail(t, "y", y, n)
	checkTail(t, "scale", scale, n)
	// scale is a sum of Size² (Size) positive terms; y one power of it.
	approx(t, "scale", scale, wantScale, nil, 1e-6*float64(s.Size))
	approx(t, "y", y, wantY, nil, 1e-5)
	return y, scale
}

func testLRNGradient(t *testing.T, e kernels.Engine) {
	for _, i := range []int{0, 1, 5, 7} {
		s := lrnShapes[i]
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRand(uint64(600 + i))
			n := s.Len()
			x, g := uniform(r, n), uniform(r, n)
			y, scale := make([]float32, n), make([]float32, n)
			ws := &kernels.Workspace{}
			loss := func() float64 { e.LRNForward(s, x, y, scale, ws); return dot64(g, y) }
			loss()
			dx := make([]float32, n)
			e.LRNBackward(s, x, y, scale, g, dx, ws)
			gradCheck(t, "dx", r, x, dx, loss, 1e-2, 40, 1e-2, 0.1)
		})
	}
}

// testAdd checks y = a + b, in place over either operand too.
func testAdd(t *testing.T, e kernels.Engine) {
	r := newRand(1200)
	for _, n := range []int{1, 7, 1037, 4099} {
		a, b := uniform(r, n), uniform(r, n)
		want := make([]float64, n)
		for i := range want {
			want[i] = float64(a[i] + b[i]) // one float32 rounding, as required
		}
		y := output(n)
		in := freeze("a", a, "b", b)
		e.Add(a, b, y)
		in.check(t, "Add")
		checkTail(t, "y", y, n)
		approx(t, fmt.Sprintf("y (n=%d)", n), y, want, nil, 0)
		a2, b2 := append([]float32(nil), a...), append([]float32(nil), b...)
		e.Add(a2, b, a2)
		approx(t, "y (aliasing a)", a2, want, nil, 0)
		e.Add(a, b2, b2)
		approx(t, "y (aliasing b)", b2, want, nil, 0)
	}
}

// dropouts covers no dropping, AlexNet's ratio, ratios near the ends, a
// stream starting at an offset, and one whose positions cross a 2^32
// boundary.
var dropouts = []kernels.Dropout{
	{Ratio: 0, Seed: 1},
	{Ratio: 0.5, Seed: 42},
	{Ratio: 0.1, Seed: 7, Offset: 12345},
	{Ratio: 0.9, Seed: 1 << 40},
	{Ratio: 0.5, Seed: 3, Offset: 1<<32 - 600},
}

// testDropout checks DropoutForward and DropoutBackward against the mask
// written from its definition, in place too, and that the kept fraction
// is 1 − Ratio within 5 standard errors.
func testDropout(t *testing.T, e kernels.Engine) {
	r := newRand(1300)
	for i, d := range dropouts {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			n := 1037 + 64*i
			x := uniform(r, n)
			kept := naiveKept(d, n)
			scale := 1 / (1 - d.Ratio)
			// Infinities and NaNs too: a dropped element is x·0.
			x[1], x[2], x[3] = float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())
			want := make([]float32, n)
			nk := 0
			for k := range want {
				m := float32(0)
				if kept[k] {
					m = scale
					nk++
				}
				want[k] = x[k] * m // 0 with x's sign when dropped
			}
			y := output(n)
			in := freeze("x", x)
			e.DropoutForward(d, x, y)
			in.check(t, "DropoutForward")
			checkTail(t, "y", y, n)
			sameBits(t, "y", y, want)
			dx := output(n)
			e.DropoutBackward(d, x, dx)
			in.check(t, "DropoutBackward")
			checkTail(t, "dx", dx, n)
			sameBits(t, "dx", dx, want)
			xy := append([]float32(nil), x...)
			e.DropoutForward(d, xy, xy)
			sameBits(t, "y (in place)", xy, want)
			copy(xy, x)
			e.DropoutBackward(d, xy, xy)
			sameBits(t, "dx (in place)", xy, want)
			x[1], x[2], x[3] = 0.5, -0.5, 0.25
			p := 1 - float64(d.Ratio)
			if se := math.Sqrt(p * (1 - p) / float64(n)); math.Abs(float64(nk)/float64(n)-p) > 5*se+1e-12 {
				t.Errorf("kept %d of %d, want a fraction %g ± %g", nk, n, p, 5*se)
			}

			// The gradient, by finite differences of the forward pass.
			g := uniform(r, n)
			yy := make([]float32, n)
			loss := func() float64 { e.DropoutForward(d, x, yy); return dot64(g, yy) }
			gx := make([]float32, n)
			e.DropoutBackward(d, g, gx)
			gradCheck(t, "dx", r, x, gx, loss, 1e-2, 40, 1e-2, 0.1)
		})
	}
}

// testDropoutMask checks the mask's statistics on a million elements and
// that a tensor split into parts at any offsets gets the mask it gets
// whole.
func testDropoutMask(t *testing.T, e kernels.Engine) {
	const n = 1 << 20
	x := make([]float32, n)
	for i := range x {
		x[i] = 1
	}
	y := make([]float32, n)
	for _, d := range []kernels.Dropout{{Ratio: 0.5, Seed: 9}, {Ratio: 0.25, Seed: 10, Offset: 1<<32 - n/2}} {
		e.DropoutForward(d, x, y)
		p := 1 - float64(d.Ratio)
		var kept, pairs, runs int
		for i, v := range y {
			k := v != 0
			if k {
				kept++
			}
			if i > 0 && k && y[i-1] != 0 {
				pairs++ // both neighbours kept
			}
			if i > 0 && k != (y[i-1] != 0) {
				runs++
			}
		}
		se := math.Sqrt(p * (1 - p) / n)
		if f := float64(kept) / n; math.Abs(f-p) > 5*se {
			t.Errorf("%+v: kept fraction %g, want %g ± %g", d, f, p, 5*se)
		}
		// Neighbours independent: both kept with probability p², and
		// the mask changes between neighbours with probability 2p(1−p).
		if f, w := float64(pairs)/(n-1), p*p; math.Abs(f-w) > 5*math.Sqrt(w*(1-w)/n) {
			t.Errorf("%+v: neighbours both kept %g of the time, want %g", d, f, w)
		}
		if f, w := float64(runs)/(n-1), 2*p*(1-p); math.Abs(f-w) > 5*math.Sqrt(w*(1-w)/n) {
			t.Errorf("%+v: mask changes between neighbours %g of the time, want %g", d, f, w)
		}
		// Split at uneven points, each part with its own Offset.
		parts := make([]float32, n)
		for lo, step := 0, 1; lo < n; lo, step = lo+step, step*3+1 {
			hi := min(lo+step, n)
			p := d
			p.Offset += uint64(lo)
			e.DropoutForward(p, x[lo:hi], parts[lo:hi])
		}
		for i := range y {
			if parts[i] != y[i] {
				t.Fatalf("%+v: element %d is %g when the tensor is split, %g whole", d, i, parts[i], y[i])
			}
		}
	}
	// Another seed gives another mask, unrelated to the first.
	y2 := make([]float32, n)
	e.DropoutForward(kernels.Dropout{Ratio: 0.5, Seed: 9}, x, y)
	e.DropoutForward(kernels.Dropout{Ratio: 0.5, Seed: 11}, x, y2)
	same := 0
	for i := range y {
		if (y[i] != 0) == (y2[i] != 0) {
			same++
		}
	}
	if f := float64(same) / n; math.Abs(f-0.5) > 5*0.5/math.Sqrt(n) {
		t.Errorf("masks of seeds 9 and 11 agree on %g of the elements, want 0.5", f)
	}
}

// fcShapes: the last two have 9 to 64 rows and a million weights or
// more, which the native engine's own kernels run at level AVX2 (partial
// tiles of rows, columns and blocks of inputs).
var fcShapes = [][3]int{{1, 1, 1}, {3, 7, 5}, {8, 33, 10}, {16, 50, 20}, {5, 130, 3}, {6, 16, 4}, {7, 64, 9},
	{12, 1030, 1021}, {20, 1030, 1024}}

func testFC(t *testing.T, e kernels.Engine) {
	for i, sh := range fcShapes {
		n, in, out := sh[0], sh[1], sh[2]
		t.Run(fmt.Sprintf("%dx%dx%d", n, in, out), func(t *testing.T) {
			nativeOnly(t, n*in*out)
			r := newRand(uint64(700 + i))
			x, w, b := uniform(r, n*in), uniform(r, out*in), uniform(r, out)
			for _, bias := range [][]float32{b, nil} {
				want, mag := naiveGemm(false, true, n, out, in, 1, x, in, w, in, 0, nil, out)
				if bias != nil {
					for k := range want {
						want[k] += float64(bias[k%out])
						mag[k] += math.Abs(float64(bias[k%out]))
					}
				}
				y := output(n * out)
				fr := freeze("x", x, "w", w, "b", bias)
				e.FCForward(n, in, out, x, w, bias, y)
				fr.check(t, "FCForward")
				checkTail(t, "y", y, n*out)
				approx(t, "y", y, want, mag, sumTol(in))
			}
			dy := uniform(r, n*out)
			dx, dw, db := output(n*in), output(out*in), output(out)
			fr := freeze("x", x, "w", w, "dy", dy)
			e.FCBackward(n, in, out, x, w, dy, dx, dw, db)
			fr.check(t, "FCBackward")
			checkTail(t, "dx", dx, n*in)
			checkTail(t, "dw", dw, out*in)
			checkTail(t, "db", db, out)
			wdw, mdw := naiveGemm(true, false, out, in, n, 1, dy, out, x, in, 0, nil, in)
			approx(t, "dw", dw, wdw, mdw, sumTol(n))
			wdx, mdx := naiveGemm(false, false, n, in, out, 1, dy, out, w, in, 0, nil, in)
			approx(t, "dx", dx, wdx, mdx, sumTol(out))
			ones := make([]float32, n)
			for k := range ones {
				ones[k] = 1
			}
			wdb, mdb := naiveGemm(false, false, 1, out, n, 1, ones, n, dy, out, 0, nil, out)
			approx(t, "db", db, wdb, mdb, sumTol(n))
			dw2 := output(out * in)
			e.FCBackward(n, in, out, x, w, dy, nil, dw2, nil)
			approx(t, "dw (dx, db nil)", dw2, wdw, mdw, sumTol(n))
		})
	}
}

func testFCGradient(t *testing.T, e kernels.Engine) {
	n, in, out := 4, 9, 6
	r := newRand(800)
	x, w, b, g := uniform(r, n*in), uniform(r, out*in), uniform(r, out), uniform(r, n*out)
	y := make([]float32, n*out)
	loss := func() float64 { e.FCForward(n, in, out, x, w, b, y); return dot64(g, y) }
	dx, dw, db := make([]float32, n*in), make([]float32, out*in), make([]float32, out)
	e.FCBackward(n, in, out, x, w, g, dx, dw, db)
	gradCheck(t, "dx", r, x, dx, loss, 1e-2, 30, 1e-2, 0.1)
	gradCheck(t, "dw", r, w, dw, loss, 1e-2, 30, 1e-2, 0.1)
	gradCheck(t, "db", r, b, db, loss, 1e-2, 30, 1e-2, 0.1)
}

func testSoftmax(t *testing.T, e kernels.Engine) {
	r := newRand(900)
	n, k := 6, 10
	logits := uniform(r, n*k)
	for i := range logits {
		logits[i] *= 4
	}
	// One row far from zero, one with a dominant logit: softmax must stay
	// finite (shift by the row maximum).
	for j := 0; j < k; j++ {
		logits[k+j] += 1000
	}
	logits[2*k+3] = 80
	labels := []int32{3, 0, 9, 3, 5, 7}
	want, wantLoss := naiveSoftmax(n, k, logits, labels)
	prob, dl := output(n*k), output(n*k)
	in := freeze("logits", logits)
	loss := e.SoftmaxCrossEntropy(n, k, logits, labels, prob, dl)
	in.check(t, "SoftmaxCrossEntropy")
	checkTail(t, "prob", prob, n*k)
	checkTail(t, "dlogits", dl, n*k)
	if math.Abs(float64(loss)-wantLoss) > 1e-5*math.Abs(wantLoss) {
		t.Errorf("loss = %g, want %g", loss, wantLoss)
	}
	approx(t, "prob", prob, want, nil, 1e-5)
	wantD, magD := make([]float64, n*k), make([]float64, n*k)
	for i := range want {
		wantD[i], magD[i] = want[i]/float64(n), want[i]/float64(n)
		if i%k == int(labels[i/k]) {
			wantD[i] -= 1 / float64(n)
			magD[i] += 1 / float64(n)
		}
	}
	approx(t, "dlogits", dl, wantD, magD, 1e-5)
	if l2 := e.SoftmaxCrossEntropy(n, k, logits, labels, prob, nil); l2 != loss {
		t.Errorf("loss with dlogits nil = %g, want %g", l2, loss)
	}

	// Finite differences of the returned loss on moderate logits.
	z := uniform(r, n*k)
	d := make([]float32, n*k)
	e.SoftmaxCrossEntropy(n, k, z, labels, prob, d)
	f := func() float64 { return float64(e.SoftmaxCrossEntropy(n, k, z, labels, prob, nil)) }
	gradCheck(t, "dlogits", r, z, d, f, 1e-2, 40, 1e-2, 0.01)
}
