package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/tools/bench"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

func init() { addBenchCommand(newBenchScaleCmd) }

// scaleOptions are the flags of softsync bench scale.
type scaleOptions struct {
	model, transport                  string
	protocols                         []string
	batch, steps, shards, maxLearners int
}

func (o *scaleOptions) check() error {
	for _, c := range []struct {
		flag string
		v    int
	}{{"--steps", o.steps}, {"--batch", o.batch}, {"--shards", o.shards}} {
		if c.v < 1 {
			return fmt.Errorf("%s: must be ≥ 1, got %d", c.flag, c.v)
		}
	}
	if o.maxLearners < 0 {
		return fmt.Errorf("--max-learners: must be ≥ 0, got %d", o.maxLearners)
	}
	if o.transport != "tcp" && o.transport != "shm" {
		return fmt.Errorf("--transport: %q is not tcp or shm (the links softsync sim measures)", o.transport)
	}
	for _, p := range o.protocols {
		if p != "hardsync" && p != "softsync" {
			return fmt.Errorf("--protocols: %q is not hardsync or softsync", p)
		}
	}
	return nil
}

func newBenchScaleCmd(app *App) *cobra.Command {
	var o scaleOptions
	var asJSON bool
	c := &cobra.Command{
		Use:   "scale [--json]",
		Short: "images/s of 1, 2, 4, … learner processes, each on a CPU of its own, beside softsync sim's prediction",
		Long: `Run the same training job (bench speedup's: a fixed number of mini-batches per
learner of one compute thread, random order) as processes on this host for
λ = 1, 2, 4, … up to C − S learners, C the CPUs this process may use (its
affinity: taskset or a cpuset give fewer), S the shard servers. Each process
is pinned (sched_setaffinity) to CPUs of its own, counted in that list from
0: shard server k to CPU k, the head (coordinator and evaluator) to the
shard servers' CPUs, learner r to CPU S + r. bench scale sets the mask on
the thread that starts the process, which inherits it before it runs: every
thread it starts is pinned too, and its Go runtime and OpenBLAS see only its
CPU. CPUs are logical: with SMT, give it one CPU per core (taskset -c).

Before the jobs, softsync sim measures its inputs (compute time of one
mini-batch on one thread, the link over --transport, the shard's update and
copy rates) pinned to the CPUs of the shard servers and the first learner,
and predicts every λ and protocol. bench scale prints, per λ and protocol,
images/s, the speedup over λ = 1 and the efficiency (speedup / λ), the mean
and largest staleness of the accepted gradients, the prediction and its
error, (predicted − measured) / measured.

With fewer than S + 2 CPUs there is no curve of processes on CPUs of their
own: bench scale says so and runs λ up to C, learner r on CPU (S + r) mod C,
the jobs where shard servers and learners share CPUs marked shared.`,

		Example: `  softsync bench scale
  softsync bench scale --model cifar10_full --batch 100 --transport shm --shards 2 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			cpus, err := allowedCPUs()
			if err != nil {
				return err
			}
			plan := bench.PlanScale(cpus, o.shards, o.maxLearners)
			if plan.Note != "" {
				app.Log.Warn("bench scale: " + plan.Note)
			}
			ctx, stop := signalContext(cmd, app)
			defer stop()
			res, err := bench.Scale(ctx, bench.ScaleConfig{Model: o.model, Batch: o.batch, Steps: o.steps, Shards: o.shards,
				Protocols: o.protocols, Transport: o.transport, Plan: plan, Engine: app.Engine, Procs: app.processes()})
			if err != nil {
				return err
			}
			if asJSON {
				return app.printJSON(res)
			}
			writeScaleText(app.Out, res)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.model, "model", "lenet", "network")
	f.IntVar(&o.batch, "batch", 64, "mini-batch size μ per learner")
	f.IntVar(&o.steps, "steps", 200, "mini-batches per learner")
	f.IntVar(&o.shards, "shards", 1, "shard-server processes, one shard and one CPU each")
	f.IntVar(&o.maxLearners, "max-learners", 0, "the largest λ (0: as many as there are CPUs for)")
	f.StringSliceVar(&o.protocols, "protocols", []string{"hardsync", "softsync"}, "comma-separated protocols: hardsync, softsync (n = λ)")
	f.StringVar(&o.transport, "transport", "tcp", "tcp or shm")
	f.BoolVar(&asJSON, "json", false, "print {model, batch, transport, plan, inputs, rows} as JSON instead of the table")
	return c
}

func writeScaleText(w io.Writer, res *bench.ScaleResult) {
	p := res.Plan
	fmt.Fprintf(w, "%s, μ = %d, over %s: %d CPU(s) %v, %d shard server(s)\n", res.Model, res.Batch, res.Transport, len(p.CPUs), p.CPUs, p.Shards)
	if p.Note != "" {
		fmt.Fprintf(w, "%s\n", p.Note)
	}
	if in := res.Inputs; in != nil {
		fmt.Fprintf(w, "prediction (softsync sim): compute %s per mini-batch, link %s/s, latency %s, shard update %s/s, copy %s/s\n",
			textfmt.Duration(in.ComputeSec), textfmt.Bytes(uint64(in.Bandwidth)), textfmt.Duration(in.LatencySec), textfmt.Bytes(uint64(in.ShardRate)), textfmt.Bytes(uint64(in.CopyRate)))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "λ\tprotocol\timages/s\tspeedup\tefficiency\tmean τ\tmax τ\tpredicted\tspeedup\tmean τ\terror\t")
	for _, r := range res.Rows {
		mark := ""
		if r.Shared {
			mark = " (shared)"
		}
		fmt.Fprintf(tw, "%d%s\t%s\t%s\t%.2f×\t%.0f%%\t%.2f\t%d\t%s\t%.2f×\t%.2f\t%+.0f%%\t\n", r.Learners, mark, r.Protocol,
			textfmt.Thousands(int64(r.ImagesPerSec+0.5)), r.Speedup, 100*r.Efficiency, r.MeanStaleness, r.MaxStaleness,
			textfmt.Thousands(int64(r.Predicted.ImagesPerSec+0.5)), r.Predicted.Speedup, r.Predicted.MeanStaleness, 100*r.Error)
	}
	tw.Flush()
}
