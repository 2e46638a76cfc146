package sgd

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/kernels/isa"
)

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func clone(x []float32) []float32 { return append([]float32(nil), x...) }

// near reports whether got is within tol·(1+|want|) of want.
func near(got float32, want float64, tol float64) bool {
	return math.Abs(float64(got)-want) <= tol*(1+math.Abs(want))
}

// forImpls runs f once per kernel path of kernelImpls, as a subtest.
func forImpls(t *testing.T, f func(t *testing.T)) {
	for _, impl := range kernelImpls(t) {
		t.Run(impl.name, func(t *testing.T) {
			defer impl.use()()
			f(t)
		})
	}
}

// TestKernelsAgainstFloat64 checks every pass, on every path, at every
// length from 0 to 150 and at unaligned starts (so the 64-, 32-, 16-,
// 8-float and scalar-tail paths all run), against float64 loops written
// out here.
func TestKernelsAgainstFloat64(t *testing.T) { forImpls(t, testKernelsAgainstFloat64) }

func testKernelsAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const tol = 1e-6
	for n := 0; n <= 150; n++ {
		for _, start := range []int{0, 1, 3} {
			sl := func() []float32 { return randVec(r, n+start)[start:] }
			w, v, g, l := sl(), sl(), sl(), sl()
			m, a, al, b := float32(0.9), float32(0.37), float32(-0.21), float32(0.013)

			dst := sl()
			scaleTo(dst, g, a)
			for i := range n {
				if !near(dst[i], float64(a)*float64(g[i]), tol) {
					t.Fatalf("scaleTo n=%d start=%d [%d] = %g", n, start, i, dst[i])
				}
			}
			d0 := clone(dst)
			axpy(dst, l, al)
			for i := range n {
				if !near(dst[i], float64(d0[i])+float64(al)*float64(l[i]), tol) {
					t.Fatalf("axpy n=%d start=%d [%d] = %g", n, start, i, dst[i])
				}
			}

			w1, v1 := clone(w), clone(v)
			step(w1, v1, g, l, m, a, al, b)
			for i := range n {
				t1 := float64(m)*float64(v[i]) + float64(a)*float64(g[i]) + float64(al)*float64(l[i]) + float64(b)*float64(w[i])
				if !near(v1[i], t1, tol) || !near(w1[i], float64(w[i])-t1, tol) {
					t.Fatalf("step n=%d start=%d [%d]: v=%g w=%g, want %g %g", n, start, i, v1[i], w1[i], t1, float64(w[i])-t1)
				}
			}
		}
	}
}

func TestFirstNonFinite(t *testing.T) { forImpls(t, testFirstNonFinite) }

func testFirstNonFinite(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc00001), math.Float32frombits(0xff800001)}
	good := []float32{0, float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32,
		math.SmallestNonzeroFloat32, math.Float32frombits(0x007fffff), 1}
	for n := 0; n <= 140; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = good[i%len(good)]
		}
		if got := FirstNonFinite(x); got != -1 {
			t.Fatalf("n=%d all finite: got %d", n, got)
		}
		for p := 0; p < n; p++ {
			for _, b := range bad {
				y := clone(x)
				y[p] = b
				if n > p+1 {
					y[n-1] = b // a second one later: the first must be reported
				}
				if got := FirstNonFinite(y); got != p {
					t.Fatalf("n=%d %g at %d: got %d", n, b, p, got)
				}
			}
		}
	}
}

// TestMaxAbs checks MaxAbs on every path at every length from 0 to 140
// and at unaligned starts against a loop written out here: the largest
// magnitude, +Inf for an infinity of either sign, a NaN for a NaN whatever
// else the vector holds.
func TestMaxAbs(t *testing.T) { forImpls(t, testMaxAbs) }

func testMaxAbs(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := 0; n <= 140; n++ {
		for _, start := range []int{0, 1, 3} {
			x := randVec(r, n+start)[start:]
			var want float64
			for _, v := range x {
				want = math.Max(want, math.Abs(float64(v)))
			}
			if got := MaxAbs(x); float64(got) != want {
				t.Fatalf("n=%d start=%d: MaxAbs %g, want %g", n, start, got, want)
			}
			for p := 0; p < n; p++ {
				y := clone(x)
				y[p] = -math.MaxFloat32
				if got := MaxAbs(y); got != math.MaxFloat32 {
					t.Fatalf("n=%d: -MaxFloat32 at %d: MaxAbs %g", n, p, got)
				}
				y[p] = float32(math.Inf(-1))
				if got := MaxAbs(y); !math.IsInf(float64(got), 1) {
					t.Fatalf("n=%d: -Inf at %d: MaxAbs %g", n, p, got)
				}
				y[n-1-(p%max(1, n/2))] = math.Float32frombits(0xffc00001) // a negative NaN, before or after the Inf
				if got := MaxAbs(y); !math.IsNaN(float64(got)) {
					t.Fatalf("n=%d: NaN and -Inf: MaxAbs %g", n, got)
				}
			}
		}
	}
}

// TestLevelsAgree checks that the assembly levels give the same bits:
// both do the same fused multiply-adds in the same order.
func TestLevelsAgree(t *testing.T) {
	impls := kernelImpls(t)
	if len(impls) < 3 {
		t.Skipf("fewer than two assembly levels here (%s)", isa.Reason())
	}
	r := rand.New(rand.NewPCG(7, 8))
	const n = 1000
	w0, v0, g, l := randVec(r, n), randVec(r, n), randVec(r, n), randVec(r, n)
	var want [2][]float32
	for i, impl := range impls[:2] {
		restore := impl.use()
		w, v, d := clone(w0), clone(v0), clone(w0)
		scaleTo(d, g, 0.37)
		axpy(d, l, -0.21)
		step(w, v, d, l, 0.9, 0.37, -0.21, 0.013)
		restore()
		got := append(append(w, v...), d...)
		if i == 0 {
			want[0] = got
			continue
		}
		for j := range got {
			if math.Float32bits(got[j]) != math.Float32bits(want[0][j]) {
				t.Fatalf("%s and %s differ at %d: %g, %g", impls[0].name, impl.name, j, want[0][j], got[j])
			}
		}
	}
}

func TestLimitISA(t *testing.T) {
	defer LimitISA(isa.Auto)
	if got := LimitISA(isa.Generic); got != isa.Generic || bulk(100) != 0 {
		t.Errorf("LimitISA(generic) = %v, bulk(100) = %d", got, bulk(100))
	}
	if got := LimitISA(isa.Auto); got != asmFor(isa.Best()).level {
		t.Errorf("LimitISA(auto) = %v", got)
	}
}
