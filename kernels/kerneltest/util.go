package kerneltest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// tail is the number of extra elements given to every output slice; they
// hold sentinel and must be left untouched.
const (
	tail     = 5
	sentinel = float32(1234.5)
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// uniform returns n values uniform in [-1, 1).
func uniform(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 2*r.Float32() - 1
	}
	return x
}

// distinct returns n values that differ pairwise by at least gap, in a
// random order, so that max pooling has no ties within a finite-difference
// step smaller than gap/2.
func distinct(r *rand.Rand, n int, gap float32) []float32 {
	x := make([]float32, n)
	for i, p := range r.Perm(n) {
		x[i] = (float32(p) - float32(n)/2) * gap
	}
	return x
}

// output returns a slice of n NaNs followed by tail sentinels: an engine
// that reads an output before writing it, or leaves part of it unwritten,
// produces NaNs; one that writes past n changes a sentinel.
func output(n int) []float32 {
	x := make([]float32, n+tail)
	for i := range x[:n] {
		x[i] = float32(math.NaN())
	}
	for i := range x[n:] {
		x[n+i] = sentinel
	}
	return x
}

// checkTail fails if the tail of an output made by output(n) changed.
func checkTail(t testing.TB, name string, x []float32, n int) {
	t.Helper()
	for i, v := range x[n:] {
		if v != sentinel {
			t.Errorf("%s[%d] past the required length %d was written: %g", name, n+i, n, v)
			return
		}
	}
}

// frozen records copies of input slices to check later that an engine did
// not modify them.
type frozen struct {
	names []string
	orig  [][]float32
	live  [][]float32
}

func freeze(kv ...any) *frozen {
	f := &frozen{}
	for i := 0; i < len(kv); i += 2 {
		x, _ := kv[i+1].([]float32)
		if x == nil {
			continue
		}
		f.names = append(f.names, kv[i].(string))
		f.orig = append(f.orig, append([]float32(nil), x...))
		f.live = append(f.live, x)
	}
	return f
}

func (f *frozen) check(t testing.TB, op string) {
	t.Helper()
	for i, x := range f.live {
		for j := range x {
			if math.Float32bits(x[j]) != math.Float32bits(f.orig[i][j]) {
				t.Errorf("%s modified its input %s[%d]: %g → %g", op, f.names[i], j, f.orig[i][j], x[j])
				break
			}
		}
	}
}

// approx compares got with want element-wise: |got−want| ≤ tol·(mag + 1e-30),
// where mag[i] bounds the size of the terms that were summed into want[i]
// (Σ|terms|), so that the tolerance is relative to the rounding error a
// float32 computation of that sum can make. mag nil means |want|.
func approx(t testing.TB, what string, got []float32, want, mag []float64, tol float64) {
	t.Helper()
	bad := 0
	for i := range want {
		m := math.Abs(want[i])
		if mag != nil {
			m = mag[i]
		}
		d := math.Abs(float64(got[i]) - want[i])
		if !(d <= tol*(m+1e-30)) {
			if bad < 4 {
				t.Errorf("%s[%d] = %g, want %g (|diff| %.3g > tol %.3g × %.3g)", what, i, got[i], want[i], d, tol, m)
			}
			bad++
		}
	}
	if bad > 4 {
		t.Errorf("%s: %d of %d elements wrong", what, bad, len(want))
	}
}

// sameBits fails unless got and want hold the same bits (zeros of either
// sign and NaNs told apart) over want's length.
func sameBits(t testing.TB, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s[%d] = %g (bits %#x), want %g (bits %#x)", what, i, got[i], math.Float32bits(got[i]),
				want[i], math.Float32bits(want[i]))
			return
		}
	}
}

// sumTol is the tolerance for float32 sums of k products, relative to the
// sum of the products' magnitudes: a few units of roundoff times √k (the
// typical growth of rounding error); a wrong index or a missed term gives
// errors of order one.
func sumTol(k int) float64 { return 4e-6*math.Sqrt(float64(k)) + 1e-6 }

// mustPanic checks that f panics with a message containing want.
func mustPanic(t testing.TB, op, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("%s: no panic, want one naming %q", op, want)
			return
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Errorf("%s: panic %q does not name %q", op, msg, want)
		}
	}()
	f()
}

// gradCheck compares an analytic gradient with central finite differences
// of loss with respect to x, at up to samples coordinates of x chosen with
// r. loss must recompute the forward pass from the current x. Following
// Caffe's GradientChecker, the check passes when |numeric − analytic| ≤
// thr·max(|numeric|, |analytic|, floor).
func gradCheck(t testing.TB, what string, r *rand.Rand, x []float32, analytic []float32,
	loss func() float64, step float32, samples int, thr, floor float64) {
	t.Helper()
	idx := r.Perm(len(x))
	if len(idx) > samples {
		idx = idx[:samples]
	}
	bad := 0
	for _, i := range idx {
		orig := x[i]
		x[i] = orig + step
		lp := loss()
		x[i] = orig - step
		lm := loss()
		x[i] = orig
		// The step actually applied in float32 arithmetic.
		h := float64(orig+step) - float64(orig-step)
		num := (lp - lm) / h
		ana := float64(analytic[i])
		scale := max(math.Abs(num), math.Abs(ana), floor)
		if !(math.Abs(num-ana) <= thr*scale) {
			if bad < 4 {
				t.Errorf("%s[%d]: analytic %g, finite difference %g", what, i, ana, num)
			}
			bad++
		}
	}
	if bad > 4 {
		t.Errorf("%s: %d of %d sampled gradients wrong", what, bad, len(idx))
	}
}

// dot64 returns Σ g[i]·y[i] in float64, the scalar loss whose gradient with
// respect to y is g.
func dot64(g, y []float32) float64 {
	var s float64
	for i := range g {
		s += float64(g[i]) * float64(y[i])
	}
	return s
}

// raceMaxMACs is the most multiply-adds a case of Gemm, FC or a
// convolution (forward pass) runs under the race detector; larger ones
// (the small-dimension products' operands of a million floats, the large
// FC layers, the Winograd shapes of 64 channels) skip there, see
// nativeOnly.
const raceMaxMACs = 1 << 21

// nativeOnly skips, under the race detector, a case of macs multiply-adds
// above raceMaxMACs. The engines run such cases without goroutines of
// their own (the reference engine's loops, the native engine's C threads,
// which the detector does not see), so the detector could only slow them
// down: minutes of the race build's float64 sums. make test runs the
// kernels package's tests without it too, where every case runs.
func nativeOnly(t *testing.T, macs int) {
	t.Helper()
	if raceEnabled && macs > raceMaxMACs {
		t.Skipf("%d multiply-adds: run without the race detector (make test runs the kernels tests natively too)", macs)
	}
}
