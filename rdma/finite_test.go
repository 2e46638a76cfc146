package rdma

import (
	"math"
	"testing"
)

func TestFirstNonFinite(t *testing.T) {
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7f800001), math.Float32frombits(0xffffffff)}
	finite := []float32{0, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 1, -2.5,
		math.Float32frombits(0x7f7fffff), math.Float32frombits(0x00800000)}
	for n := range 40 {
		x := make([]float32, n)
		for i := range x {
			x[i] = finite[i%len(finite)]
		}
		if got := FirstNonFinite(x); got != -1 {
			t.Fatalf("n=%d all finite: %d", n, got)
		}
		for pos := range n {
			for _, s := range specials {
				y := append([]float32(nil), x...)
				y[pos] = s
				if pos+1 < n {
					y[n-1] = specials[0] // a later one must not win
				}
				if got := FirstNonFinite(y); got != pos {
					t.Fatalf("n=%d, %v at %d: got %d", n, s, pos, got)
				}
			}
		}
	}
}
