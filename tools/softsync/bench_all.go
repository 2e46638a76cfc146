package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/tools/bench"
)

func init() { addBenchCommand(newBenchAllCmd) }

// benchAllOptions are the flags of softsync bench all.
type benchAllOptions struct {
	out, doc       string
	goBench        []string
	quick          bool
	repeat         int
	images         int     // per training run
	torchSeconds   float64 // per PyTorch network
	trainThreads   []int
	skip           []string
	python, script string
	dataScript     string
}

func newBenchAllCmd(app *App) *cobra.Command {
	var o benchAllOptions
	c := &cobra.Command{
		Use:   "all",
		Short: "Every benchmark and its reference in one run: bench/results.json and bench/summary.md",
		Long: `Runs, each in a process of its own (softsync bench ... --json): bench peak,
bench gemm (beside a raw C loop over cblas_sgemm in the same process),
bench train for LeNet at μ = 64 and 4 and cifar10_full at μ = 100 and 4 on
--train-threads threads, at every level the CPU runs of avx512 and avx2,
beside PyTorch's training step on the same threads
(bench/torch_train_throughput.py, Debian's python3-torch), bench data
(the image pipeline on a generated folder of ImageNet-sized JPEGs, resnet18's
224×224 crops of images resized to 256) beside torchvision's transforms on the
same folder and threads (bench/torch_data_throughput.py, Debian's
python3-torchvision), bench
transport (inmem, tcp and shm with every codec, verbs-emu) beside iperf3 over
loopback, and bench speedup (λ = 1, 2 learner processes, over tcp and shm,
beside its --ceiling of λ independent jobs). --go-bench adds
the output of go test -bench runs (make bench: the convolution layers and
memory-bound kernels of package kernels per level, compared with the bench
peak of this run, and the solver's passes of ps/sgd beside memmove).

Training and PyTorch, bench data and torchvision alternate --repeat times, and so do the jobs of bench
speedup; their figure is the median of the runs. The other figures are what the benchmark itself keeps (best of
its rounds, median round). A reference that cannot run (torch or iperf3
missing) is recorded as missing with the reason.

Writes --out/results.json (schema: docs/bench.md) and --out/summary.md, and
with --doc regenerates the tables of that page between its markers
(softsync bench report does that alone). --quick runs tiny sizes: a check
that everything runs, not a measurement.`,
		Example: `  softsync bench all
  softsync bench all --quick --out /tmp/bench
  softsync bench all --go-bench build/bench/go-bench.txt --doc docs/performance.md`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.repeat < 1:
				return fmt.Errorf("--repeat: must be ≥ 1, got %d", o.repeat)
			case o.images < 1:
				return fmt.Errorf("--train-images: must be ≥ 1, got %d", o.images)
			case o.torchSeconds <= 0:
				return fmt.Errorf("--torch-seconds: must be > 0, got %g", o.torchSeconds)
			}
			for _, s := range o.skip {
				if !slices.Contains(bench.Steps, s) {
					return fmt.Errorf("--skip: unknown step %q (%s)", s, strings.Join(bench.Steps, ", "))
				}
			}
			for _, t := range o.trainThreads {
				if t < 1 {
					return fmt.Errorf("--train-threads: %d is not a thread count ≥ 1", t)
				}
			}
			_, info, err := app.EngineInfo()
			if err != nil {
				return err
			}
			return bench.All(cmd.Context(), bench.AllConfig{Out: o.out, Doc: o.doc, GoBench: o.goBench, Quick: o.quick, Repeat: o.repeat,
				Images: o.images, TorchSeconds: o.torchSeconds, TrainThreads: o.trainThreads, Skip: o.skip, Python: o.python, Script: o.script,
				DataScript: o.dataScript,
				ISA:        app.ISA, Info: info, Log: app.Log, Procs: app.processes()})
		},
	}
	f := c.Flags()
	f.StringVar(&o.out, "out", "bench", "folder of results.json and summary.md")
	f.StringVar(&o.doc, "doc", "", "a markdown page whose generated tables to refresh (docs/performance.md)")
	f.StringSliceVar(&o.goBench, "go-bench", nil, "files of go test -bench output to add (comma-separated)")
	f.BoolVar(&o.quick, "quick", false, "tiny sizes and times: checks that every step runs")
	f.IntVar(&o.repeat, "repeat", 3, "runs of each training, PyTorch and speedup figure (median kept)")
	f.IntVar(&o.images, "train-images", 10000, "images per training run (a tenth of them warm up)")
	f.Float64Var(&o.torchSeconds, "torch-seconds", 5, "timed seconds per PyTorch network and run")
	f.IntSliceVar(&o.trainThreads, "train-threads", []int{2, 1}, "thread counts of the trainings, softsync and PyTorch, and of bench data and torchvision")
	f.StringSliceVar(&o.skip, "skip", nil, "steps not to run: "+strings.Join(bench.Steps, ", "))
	f.StringVar(&o.python, "python", "/usr/bin/python3", "Python with Debian's python3-torch")
	f.StringVar(&o.script, "torch-script", "bench/torch_train_throughput.py", "the PyTorch reference script")
	f.StringVar(&o.dataScript, "torch-data-script", "bench/torch_data_throughput.py", "the torchvision reference script of bench data")
	return c
}
