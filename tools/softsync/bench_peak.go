package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/tools/bench"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

func init() { addBenchCommand(newBenchPeakCmd) }

// parseByteSizes reads a comma-separated list of sizes in bytes, each
// with an optional KiB or MiB suffix.
func parseByteSizes(s string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		if v, ok := strings.CutSuffix(f, "KiB"); ok {
			f, mult = v, 1<<10
		} else if v, ok := strings.CutSuffix(f, "MiB"); ok {
			f, mult = v, 1<<20
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n*mult < 64 {
			return nil, fmt.Errorf("--copy-sizes: bad size %q (want a number of bytes ≥ 64, optionally with KiB or MiB)", f)
		}
		sizes = append(sizes, n*mult)
	}
	return sizes, nil
}

func newBenchPeakCmd(app *App) *cobra.Command {
	var asJSON bool
	var minTime time.Duration
	var rounds int
	var copySizes string
	c := &cobra.Command{
		Use:   "peak",
		Short: "The machine's FMA peak per instruction-set level and its copy bandwidth",
		Long: `The yardsticks of the other benchmarks. For each instruction-set level
this CPU runs (avx512, avx2, generic), the GFLOP/s of a loop of
independent fused multiply-adds on registers only (no memory traffic), on
one core and on every core at once (--threads, default all cores): the
ceiling of any compute-bound kernel at that level; "kernels" marks the
level the kernels run at (--isa). Then the copy bandwidth, bytes read plus
bytes written per second, for buffers that stay in a core's L2 cache
(256 KiB) and far beyond the last-level cache (64 MiB per core; both set
by --copy-sizes): the ceiling of a kernel that streams as much memory. Each figure is the best
of --rounds runs of at least --min-time.`,
		Example: `  softsync bench peak
  softsync bench peak --json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if rounds < 1 {
				return fmt.Errorf("--rounds: must be ≥ 1, got %d", rounds)
			}
			want, _, err := app.isaLevel()
			if err != nil {
				return err
			}
			kernelLevel, err := isa.Resolve(want)
			if err != nil {
				return fmt.Errorf("--isa: %w", err)
			}
			cores := app.Threads
			if cores == 0 {
				cores = kernels.DefaultThreads()
			}
			sizes, err := parseByteSizes(copySizes)
			if err != nil {
				return err
			}
			res, err := bench.Peak(bench.PeakConfig{Cores: cores, MinTime: minTime, Rounds: rounds, CopySizes: sizes,
				Kernels: kernelLevel, Log: app.Log})
			if err != nil {
				return err
			}
			if asJSON {
				return app.printJSON(res)
			}
			w := tabwriter.NewWriter(app.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(w, "ISA\tGFLOP/s one core\tGFLOP/s %d cores\t\t\n", cores)
			for _, l := range res.Levels {
				mark := ""
				if l.KernelLevel {
					mark = "kernels"
				}
				fmt.Fprintf(w, "%s\t%.1f\t%.1f\t%s\t\n", l.ISA, l.GFlopsCore, l.GFlops, mark)
			}
			fmt.Fprintf(w, "\t\t\t\t\ncopy buffer\tGB/s one core\tGB/s %d cores\t\t\n", cores)
			for _, c := range res.Copy {
				fmt.Fprintf(w, "%s\t%.1f\t%.1f\t\t\n", textfmt.Size(c.Bytes), c.GBsCore, c.GBs)
			}
			return w.Flush()
		},
	}
	f := c.Flags()
	f.BoolVar(&asJSON, "json", false, "print {levels: [{isa, gflops_one_core, gflops, cores, kernels}], copy: [{bytes, gbs_one_core, gbs, cores}]}")
	f.DurationVar(&minTime, "min-time", 100*time.Millisecond, "minimum duration of one timed run")
	f.IntVar(&rounds, "rounds", 5, "timed runs per figure (best kept)")
	f.StringVar(&copySizes, "copy-sizes", bench.DefaultCopySizes, "copy buffer sizes per core, comma-separated, in bytes with an optional KiB or MiB suffix")
	return c
}
