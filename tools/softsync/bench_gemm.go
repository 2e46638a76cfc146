package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
)

func init() { addBenchCommand(newBenchGemmCmd) }

// gemmSizes are the M×N×K products measured by default: a square one and
// the GEMMs of the paper's networks (LeNet and cifar10_full convolutions
// batched over the mini-batch, LeNet's ip1).
var gemmSizes = [][3]int{
	{1024, 1024, 1024},
	{32, 25600, 800},
	{50, 4096, 500},
	{64, 6400, 800},
	{500, 64, 800},
	{128, 576, 1024},
}

// gemmResult is one row of `softsync bench gemm --json`.
type gemmResult struct {
	M         int     `json:"m"`
	N         int     `json:"n"`
	K         int     `json:"k"`
	GFlops    float64 `json:"gflops"`     // through the Go API (Engine.Gemm)
	GFlopsC   float64 `json:"gflops_c"`   // raw C loop over cblas_sgemm, same process
	GFlopsRef float64 `json:"gflops_ref"` // pure-Go reference engine
}

func newBenchGemmCmd(app *App) *cobra.Command {
	var asJSON bool
	var minTime time.Duration
	var rounds int
	var sizes string
	c := &cobra.Command{
		Use:   "gemm",
		Short: "sgemm GFLOP/s through the Go API, a raw C loop and the pure-Go reference",
		Long: `For each size, sgemm GFLOP/s (row-major, no transposes) through the Go
API (Engine.Gemm), through a C loop calling cblas_sgemm in this process
(the overhead-free baseline), their ratio, and the pure-Go reference.
Go and C runs alternate, each starting every other round; each figure is
the best of --rounds runs of at least --min-time.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			switch {
			case rounds < 1:
				return fmt.Errorf("--rounds: must be ≥ 1, got %d", rounds)
			case minTime < 0:
				return fmt.Errorf("--min-time: must be ≥ 0, got %v", minTime)
			}
			e, info, err := app.EngineInfo()
			if err != nil {
				return err
			}
			app.Log.Info("engine", "engine", info.Engine, "core", info.CoreName, "threads", info.Threads)
			list, err := parseSizes(sizes)
			if err != nil {
				return err
			}
			var res []gemmResult
			for _, sz := range list {
				r := benchGemm(e, sz[0], sz[1], sz[2], minTime, rounds)
				res = append(res, r)
				app.Log.Debug("gemm", "m", r.M, "n", r.N, "k", r.K, "gflops", r.GFlops, "gflops_c", r.GFlopsC)
			}
			if asJSON {
				return app.printJSON(res)
			}
			w := tabwriter.NewWriter(app.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(w, "M\tN\tK\tGo API GFLOP/s\traw C GFLOP/s\tGo/C\tpure Go GFLOP/s\t\n")
			for _, r := range res {
				ratio := "-"
				if r.GFlopsC > 0 {
					ratio = fmt.Sprintf("%.3f", r.GFlops/r.GFlopsC)
				}
				fmt.Fprintf(w, "%d\t%d\t%d\t%.1f\t%.1f\t%s\t%.1f\t\n", r.M, r.N, r.K, r.GFlops, r.GFlopsC, ratio, r.GFlopsRef)
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of {m, n, k, gflops, gflops_c, gflops_ref}")
	c.Flags().DurationVar(&minTime, "min-time", 200*time.Millisecond, "minimum duration of one timed run")
	c.Flags().IntVar(&rounds, "rounds", 4, "timed runs per figure (best kept)")
	c.Flags().StringVar(&sizes, "sizes", "", "comma-separated MxNxK sizes (default: the paper's GEMM shapes and 1024x1024x1024)")
	return c
}

// benchGemm measures one size. The raw C figure is 0 when the engine is
// not native.
func benchGemm(e kernels.Engine, m, n, k int, minTime time.Duration, rounds int) gemmResult {
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
	res := gemmResult{M: m, N: n, K: k}
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

// parseSizes parses "MxNxK,MxNxK"; empty means gemmSizes.
func parseSizes(s string) ([][3]int, error) {
	if s == "" {
		return gemmSizes, nil
	}
	var out [][3]int
	for _, f := range strings.Split(s, ",") {
		var m, n, k int
		if _, err := fmt.Sscanf(f, "%dx%dx%d", &m, &n, &k); err != nil || m < 1 || n < 1 || k < 1 {
			return nil, fmt.Errorf("--sizes: %q is not MxNxK with positive sizes", f)
		}
		out = append(out, [3]int{m, n, k})
	}
	return out, nil
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
