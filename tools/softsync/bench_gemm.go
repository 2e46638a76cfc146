package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/tools/bench"
)

func init() { addBenchCommand(newBenchGemmCmd) }

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
			var res []bench.GemmResult
			for _, sz := range list {
				r := bench.Gemm(e, sz[0], sz[1], sz[2], minTime, rounds)
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

// parseSizes parses "MxNxK,MxNxK"; empty means bench.GemmSizes.
func parseSizes(s string) ([][3]int, error) {
	if s == "" {
		return bench.GemmSizes, nil
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
