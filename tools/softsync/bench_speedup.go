package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/tools/bench"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

func init() { addBenchCommand(newBenchSpeedupCmd) }

func newBenchSpeedupCmd(app *App) *cobra.Command {
	var models, dataName, protocols, learners, transports, shards, binds string
	var batch, steps, repeat int
	var asJSON, ceiling bool
	var early []bool
	c := &cobra.Command{
		Use:   "speedup [--json]",
		Short: "images/s of the same job with 1, 2, … learner processes over the network, and the speedup",
		Long: `Run the same training job (LeNet on MNIST by default, random order, a fixed
number of mini-batches per learner) as processes on this host, as softsync
launch does: S shard servers and λ learner processes of one compute
thread each, over each transport of --transport (by default auto, as a job
would: shared memory between processes of one host), for each S of --shards,
with and without --early-push and with each --bind as asked, for every
model, protocol and λ asked, and print images/s, the speedup over the first λ of the same
model, transport, shard count, protocol, early push and binding, the efficiency
(speedup / λ, relative to the first λ) and the peak resident set (VmHWM)
of the processes. Softsync runs with n = λ. The transports, shard counts,
early push and bindings take turns at each λ, so that they see the same
load.
With --repeat N every job runs N times, in rounds of all the jobs, and its
row is its median run. Training time runs from the moment every process has
arrived to the last mini-batch done, so process start-up is not in it. As
under launch, each learner is pinned to CPUs of its own (--bind learners,
when there are as many CPUs as learners) and runs under SCHED_BATCH; the
head (coordinator and evaluator) and the shard servers run on any core, the
learners' too (softsync bench scale pins each to a core of its own).
With --ceiling every round also runs, at each λ, λ independent
one-learner jobs at once in the benchmark's process (bench train's job:
one compute thread, parameter server in process, random data); their
images over the time of the slowest, against the first λ's, is the
speedup the machine allows for the same per-learner work with no
transport, shard server or head: a λ-learner job can only come close to
it.`,
		Example: `  softsync bench speedup
  softsync bench speedup --transport tcp,shm
  softsync bench speedup --transport shm --shards 1,2 --ceiling --repeat 5
  softsync bench speedup --model lenet:64,cifar10_full:100 --transport shm --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, c := range []struct {
				flag string
				v    int
			}{{"--steps", steps}, {"--batch", batch}, {"--repeat", repeat}} {
				if c.v < 1 {
					return fmt.Errorf("%s: must be ≥ 1, got %d", c.flag, c.v)
				}
			}
			ms, err := parseModelBatches(models, batch)
			if err != nil {
				return err
			}
			ls, err := parseCounts("--learners", learners)
			if err != nil {
				return err
			}
			ss, err := parseCounts("--shards", shards)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd, app)
			defer stop()
			g := bench.SpeedupGrid{Models: ms, Data: dataName, Protocols: strings.Split(protocols, ","), Learners: ls, Transports: strings.Split(transports, ","),
				Shards: ss, EarlyPush: early, Binds: strings.Split(binds, ","), Steps: steps, Ceiling: ceiling}
			for _, b := range g.Binds {
				if err := checkBind(b); err != nil {
					return err
				}
			}
			engine := func() (kernels.Engine, error) {
				app.Threads = 1
				e, _, err := app.EngineInfo()
				return e, err
			}
			rows, err := bench.Speedup(ctx, bench.SpeedupConfig{Jobs: g.Jobs(), Repeat: repeat, Procs: app.processes(), Engine: engine})
			if err != nil {
				return err
			}
			if asJSON {
				return app.printJSON(rows)
			}
			tw := tabwriter.NewWriter(app.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "model\ttransport\tprotocol\tshards\tlearners\timages/s\tspeedup\tefficiency\tpeak RSS: head, shard, learners\t\n")
			for _, r := range rows {
				tr := r.Transport
				if r.Used != "" && r.Used != r.Transport {
					tr += " (" + r.Used + ")"
				}
				if r.EarlyPush {
					tr += ", early push"
				}
				if r.Bind == "none" {
					tr += ", unpinned"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%.2f×\t%.0f%%\t%s\t\n", bench.ModelBatch{Model: r.Model, Batch: r.Batch}, tr, r.Protocol, r.Shards, r.Learners,
					imagesText(r.ImagesPerSec), r.Speedup, 100*r.Efficiency, rssText(r.Processes))
			}
			return tw.Flush()
		},
	}
	f := c.Flags()
	f.StringVar(&models, "model", "lenet", "networks, comma-separated, each MODEL or MODEL:μ (e.g. lenet:64,cifar10_full:100)")
	f.IntVar(&batch, "batch", 64, "mini-batch size μ per learner of a --model without :μ")
	f.StringVar(&dataName, "data", "", `train's --data for every job (default: each model's own, MNIST for lenet, CIFAR-10 for cifar10_full); "synthetic" needs no data set`)
	f.IntVar(&steps, "steps", 200, "mini-batches per learner")
	f.IntVar(&repeat, "repeat", 1, "runs of each job, in rounds of all the jobs; the median run is kept")
	f.StringVar(&protocols, "protocols", "hardsync,softsync", "comma-separated protocols")
	f.StringVar(&learners, "learners", "1,2", "comma-separated learner counts; the first is the base of the speedup")
	f.StringVar(&transports, "transport", "auto", "comma-separated transports, measured side by side: auto (the one a job uses: shm on one host), tcp, shm or verbs")
	f.StringVar(&shards, "shards", "1", "comma-separated shard counts, measured side by side: shard-server processes, one shard each")
	f.BoolVar(&ceiling, "ceiling", false, `also run, at each λ, λ independent one-learner jobs at once in this process (one compute thread each, parameter server in process, random data): rows of transport "independent", protocol "none", the machine's ceiling for λ learners`)
	f.BoolSliceVar(&early, "early-push", []bool{false}, "comma-separated: without (false) and/or with (true) train's --early-push, side by side")
	f.StringVar(&binds, "bind", "learners", "comma-separated launch --bind values, side by side: learners (each learner pinned to CPUs of its own) and/or none")
	f.BoolVar(&asJSON, "json", false, "print a JSON array of {model, batch, transport, transport_used, protocol, learners, shards, early_push, bind, images_per_sec, runs, speedup, efficiency, steps, seconds, processes: [{process, cpus, peak_rss_bytes}]}")
	return c
}

// imagesText gives images/s: a decimal below 100 (alexnet's few a second),
// whole numbers with thousands separators above.
func imagesText(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return textfmt.Thousands(int64(v + 0.5))
}

// rssText gives the peak resident sets of a job's processes: the head's,
// the shard servers' largest and the learners' largest.
func rssText(ps []bench.ProcUsage) string {
	var head, shard, learner int64
	for _, p := range ps {
		switch {
		case p.Process == "head":
			head = p.PeakRSS
		case strings.HasPrefix(p.Process, "shard server"):
			shard = max(shard, p.PeakRSS)
		default:
			learner = max(learner, p.PeakRSS)
		}
	}
	mib := func(b int64) string { return fmt.Sprintf("%.0f", float64(b)/(1<<20)) }
	return fmt.Sprintf("%s, %s, %s MiB", mib(head), mib(shard), mib(learner))
}

// parseModelBatches reads a comma-separated list of MODEL or MODEL:μ;
// MODEL alone takes batch.
func parseModelBatches(s string, batch int) ([]bench.ModelBatch, error) {
	var ms []bench.ModelBatch
	for _, f := range strings.Split(s, ",") {
		name, mu, ok := strings.Cut(strings.TrimSpace(f), ":")
		m := bench.ModelBatch{Model: name, Batch: batch}
		if ok {
			b, err := strconv.Atoi(mu)
			if err != nil || b < 1 {
				return nil, fmt.Errorf("--model: %q: μ must be a number ≥ 1", f)
			}
			m.Batch = b
		}
		if name == "" {
			return nil, fmt.Errorf("--model: %q names no network", f)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// parseCounts reads a comma-separated list of numbers ≥ 1.
func parseCounts(flag, s string) ([]int, error) {
	var v []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a number ≥ 1", flag, f)
		}
		v = append(v, n)
	}
	return v, nil
}
