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
	"github.com/softsync/softsync/kernels/peak"
)

func init() { addBenchCommand(newBenchPeakCmd) }

// peakLevel is one instruction-set level of `softsync bench peak --json`.
type peakLevel struct {
	ISA         string  `json:"isa"`
	GFlopsCore  float64 `json:"gflops_one_core"`
	GFlops      float64 `json:"gflops"` // all cores at once
	Cores       int     `json:"cores"`
	KernelLevel bool    `json:"kernels"` // the level the kernels run at (--isa, SOFTSYNC_ISA, or the best)
}

// peakCopy is one buffer size of the copy bandwidth.
type peakCopy struct {
	Bytes   int     `json:"bytes"` // per core, each of source and destination
	GBsCore float64 `json:"gbs_one_core"`
	GBs     float64 `json:"gbs"` // all cores at once; bytes read plus bytes written
	Cores   int     `json:"cores"`
}

// peakResult is the output of `softsync bench peak --json`.
type peakResult struct {
	Levels []peakLevel `json:"levels"`
	Copy   []peakCopy  `json:"copy"`
}

// defaultCopySizes are the copy buffers measured by default: one that
// stays in a core's L2 cache and one far beyond the last-level cache.
const defaultCopySizes = "256KiB,64MiB"

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
			cfg := peak.Config{Cores: cores, MinTime: minTime, Rounds: rounds}
			if err := cfg.Validate(); err != nil {
				return err
			}
			sizes, err := parseByteSizes(copySizes)
			if err != nil {
				return err
			}
			var res peakResult
			for _, l := range isa.All {
				if !isa.Supported(l) {
					app.Log.Info("level not measured", "isa", l, "reason", isa.Reason())
					continue
				}
				r, err := peak.FMA(cfg, l)
				if err != nil {
					return err
				}
				res.Levels = append(res.Levels, peakLevel{ISA: l.String(), GFlopsCore: r.One, GFlops: r.All,
					Cores: r.Cores, KernelLevel: l == kernelLevel})
			}
			for _, size := range sizes {
				r, err := peak.Copy(cfg, size)
				if err != nil {
					return err
				}
				res.Copy = append(res.Copy, peakCopy{Bytes: size, GBsCore: r.One, GBs: r.All, Cores: r.Cores})
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
				fmt.Fprintf(w, "%s\t%.1f\t%.1f\t\t\n", fmtBytes(c.Bytes), c.GBsCore, c.GBs)
			}
			return w.Flush()
		},
	}
	f := c.Flags()
	f.BoolVar(&asJSON, "json", false, "print {levels: [{isa, gflops_one_core, gflops, cores, kernels}], copy: [{bytes, gbs_one_core, gbs, cores}]}")
	f.DurationVar(&minTime, "min-time", 100*time.Millisecond, "minimum duration of one timed run")
	f.IntVar(&rounds, "rounds", 5, "timed runs per figure (best kept)")
	f.StringVar(&copySizes, "copy-sizes", defaultCopySizes, "copy buffer sizes per core, comma-separated, in bytes with an optional KiB or MiB suffix")
	return c
}

// fmtBytes prints a power-of-two size as KiB or MiB.
func fmtBytes(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
