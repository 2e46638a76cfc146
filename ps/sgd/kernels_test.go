package sgd

import (
	"math"
	"math/rand/v2"
	"testing"
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

// TestKernelsAgainstFloat64 checks every pass, at every length from 0 to 80
// and at unaligned starts (so both the 32-, 8-float and scalar-tail paths
// run), against float64 loops written out here.
func TestKernelsAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const tol = 1e-6
	for n := 0; n <= 80; n++ {
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

func TestFirstNonFinite(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc00001), math.Float32frombits(0xff800001)}
	good := []float32{0, float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32,
		math.SmallestNonzeroFloat32, math.Float32frombits(0x007fffff), 1}
	for n := 0; n <= 70; n++ {
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
