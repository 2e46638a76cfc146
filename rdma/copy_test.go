package rdma

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// TestCopyPar compares copyPar with copy for float32 and byte slices of
// lengths around the size it spreads from and around its parts' bounds,
// with 1 to 3 Ps: the same elements copied, the same count returned,
// nothing written past it (into a longer dst), and a shorter dst filled.
// Under the race detector, which slows the checks' loops many times, only
// 3 Ps and two lengths run.
func TestCopyPar(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	const f = copyParMin / 4 // floats
	src := make([]float32, 2*f+3)
	for i := range src {
		src[i] = float32(i) + 0.5
	}
	procs, lens := []int{1, 2, 3}, []int{0, 1, f - 1, f, f + 1, f + 17, 2*f + 3}
	if raceEnabled {
		procs, lens = procs[2:], []int{1, f + 17}
	}
	for _, procs := range procs {
		runtime.GOMAXPROCS(procs)
		for _, n := range lens {
			testCopyPar(t, fmt.Sprintf("float32, %d Ps", procs), src[:n])
			testCopyPar(t, fmt.Sprintf("byte, %d Ps", procs), f32bytes(src)[:4*n-n%3]) // 4f−1, 4f+2, ...
		}
	}
}

func testCopyPar[T float32 | byte](t *testing.T, what string, src []T) {
	t.Helper()
	want, got := make([]T, len(src)+7), make([]T, len(src)+7)
	for i := range want {
		want[i], got[i] = 3, 3
	}
	if k := copyPar(got, src); k != copy(want, src) || !slices.Equal(got, want) {
		t.Fatalf("%s, %d elements into %d: copyPar returned %d and differs from copy", what, len(src), len(got), k)
	}
	clear(got)
	if k := copyPar(got[:len(src)/2], src); k != len(src)/2 || !slices.Equal(got[:k], src[:k]) || got[k] != 0 {
		t.Fatalf("%s, %d elements into %d: copyPar returned %d and differs from copy", what, len(src), len(src)/2, k)
	}
}
