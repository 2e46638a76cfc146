package bench

import (
	"math/rand/v2"
	"time"

	"github.com/softsync/softsync/kernels"
)

// GemmSizes are the M×N×K products bench gemm measures by default: a
// square one and the GEMMs of the paper's networks (LeNet and
// cifar10_full convolutions batched over the mini-batch, LeNet's ip1).
var GemmSizes = [][3]int{
	{1024, 1024, 1024},
	{32, 25600, 800},
	{50, 4096, 500},
	{64, 6400, 800},
	{500, 64, 800},
	{128, 576, 1024},
}

// GemmResult is one row of `softsync bench gemm --json`.
type GemmResult struct {
	M         int     `json:"m"`
	N         int     `json:"n"`
	K         int     `json:"k"`
	GFlops    float64 `json:"gflops"`     // through the Go API (Engine.Gemm)
	GFlopsC   float64 `json:"gflops_c"`   // raw C loop over cblas_sgemm, same process
	GFlopsRef float64 `json:"gflops_ref"` // pure-Go reference engine
}

// Gemm measures sgemm of one size (row-major, no transposes) through e's
// Go API, through a raw C loop over cblas_sgemm in this process, and on
// the pure-Go reference engine. Go and C runs alternate, each starting
// every other round; each figure is the best of rounds runs of at least
// minTime. The raw C figure is 0 when the engine is not native.
func Gemm(e kernels.Engine, m, n, k int, minTime time.Duration, rounds int) GemmResult {
	r := rand.New(rand.NewPCG(uint64(m), uint64(n)))
	fill := func(x []float32) {
		for i := range x {
			x[i] = r.Float32()
		}
	}
	a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	fill(a)
	fill(b)
	flop := 2 * float64(m) * float64(n) * float64(k)
	goCall := func(reps int) time.Duration {
		t := time.Now()
		for range reps {
			e.Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		}
		return time.Since(t)
	}
	res := GemmResult{M: m, N: n, K: k}
	reps := calibrate(goCall, minTime)
	native := e.Name() == "native"
	cCall := func() {
		if d, err := kernels.RawGemmLoop(kernels.ThreadsOf(e), m, n, k, a, b, c, reps); err == nil && d > 0 {
			res.GFlopsC = max(res.GFlopsC, flop*float64(reps)/d.Seconds()/1e9)
		}
	}
	for i := range max(rounds, 1) {
		// Alternate which of Go and C runs first, so that neither
		// always inherits the other's warm caches or clock.
		if native && i%2 == 1 {
			cCall()
		}
		res.GFlops = max(res.GFlops, flop*float64(reps)/goCall(reps).Seconds()/1e9)
		if native && i%2 == 0 {
			cCall()
		}
	}
	ref := kernels.Reference()
	refCall := func(reps int) time.Duration {
		t := time.Now()
		for range reps {
			ref.Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		}
		return time.Since(t)
	}
	refReps := calibrate(refCall, minTime)
	res.GFlopsRef = flop * float64(refReps) / refCall(refReps).Seconds() / 1e9
	return res
}

// calibrate returns how many calls of f take at least minTime (after one
// warm-up call).
func calibrate(f func(int) time.Duration, minTime time.Duration) int {
	d := f(1)
	reps := 1
	for d < minTime && reps < 1<<20 {
		reps *= 2
		d = f(reps)
	}
	return reps
}
