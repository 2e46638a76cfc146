package kerneltest

import (
	"fmt"
	"math"
	"testing"

	"github.com/softsync/softsync/kernels"
)

func testGemm(t *testing.T, e kernels.Engine) {
	r := newRand(1)
	sizes := [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {64, 48, 40}, {5, 130, 70}, {0, 3, 2}, {4, 3, 0}}
	scalars := [][2]float32{{1, 0}, {0.5, -1.5}, {-2, 1}}
	for _, sz := range sizes {
		m, n, k := sz[0], sz[1], sz[2]
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				for _, ab := range scalars {
					name := fmt.Sprintf("%dx%dx%d/tA=%v/tB=%v/alpha=%g/beta=%g", m, n, k, tA, tB, ab[0], ab[1])
					t.Run(name, func(t *testing.T) { gemmCase(t, e, r.Uint64(), tA, tB, m, n, k, ab[0], ab[1]) })
				}
			}
		}
	}
	// Products with one small dimension and a large operand, which the
	// native engine runs on kernels of its own at level AVX2 with alpha =
	// 1 and beta = 0 (C = A·Bᵀ with 9 to 64 columns, C = Aᵀ·B with 9 to 64
	// rows of A and B), and the same shapes with other scalars.
	for _, c := range []struct {
		tA, tB  bool
		m, n, k int
	}{{false, true, 1030, 12, 1030}, {false, true, 1024, 49, 1024}, {true, false, 1040, 1030, 17}, {true, false, 1031, 1027, 9}} {
		for _, ab := range scalars[:2] {
			name := fmt.Sprintf("%dx%dx%d/tA=%v/tB=%v/alpha=%g/beta=%g", c.m, c.n, c.k, c.tA, c.tB, ab[0], ab[1])
			t.Run(name, func(t *testing.T) { gemmCase(t, e, r.Uint64(), c.tA, c.tB, c.m, c.n, c.k, ab[0], ab[1]) })
		}
	}
}

// gemmCase runs one Gemm with leading dimensions larger than the minimum;
// the padding columns of C must not change.
func gemmCase(t *testing.T, e kernels.Engine, seed uint64, tA, tB bool, m, n, k int, alpha, beta float32) {
	nativeOnly(t, m*n*k)
	r := newRand(seed)
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	lda, ldb, ldc := ac+2, bc+3, n+1
	a := uniform(r, max(ar*lda, 1))
	b := uniform(r, max(br*ldb, 1))
	clen := m * ldc
	c := uniform(r, clen)
	if beta == 0 {
		// beta = 0 means C is not read: NaNs must not propagate.
		for i := range c {
			c[i] = float32(math.NaN())
		}
	}
	for i := 0; i < m; i++ {
		for j := n; j < ldc; j++ {
			c[i*ldc+j] = sentinel
		}
	}
	want, mag := naiveGemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	in := freeze("a", a, "b", b)
	e.Gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	in.check(t, "Gemm")
	got := make([]float32, m*n)
	for i := 0; i < m; i++ {
		copy(got[i*n:(i+1)*n], c[i*ldc:i*ldc+n])
		for j := n; j < ldc; j++ {
			if c[i*ldc+j] != sentinel {
				t.Fatalf("Gemm wrote c[%d] in the padding of row %d", i*ldc+j, i)
			}
		}
	}
	approx(t, "c", got, want, mag, sumTol(k))
}
