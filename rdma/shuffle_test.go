package rdma

import (
	"math/rand/v2"
	"testing"
)

// TestShuffle compares with the definition: plane p holds byte p of every
// element, in order.
func TestShuffle(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 7, 8, 9, 63, 1000} {
		raw := make([]byte, 4*n)
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		planes := shuffle(make([]byte, 4*n), raw)
		for i := range n {
			for p := range 4 {
				if planes[p*n+i] != raw[4*i+p] {
					t.Fatalf("n=%d: plane %d element %d = %#x, want %#x", n, p, i, planes[p*n+i], raw[4*i+p])
				}
			}
		}
		back := make([]byte, 4*n)
		unshuffle(back, planes)
		if string(back) != string(raw) {
			t.Fatalf("n=%d: unshuffle does not invert shuffle", n)
		}
	}
}
