package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func init() { addBenchCommand(newBenchScaleCmd) }

// scalePlan is where the processes of softsync bench scale run: of the C
// CPUs it may use, counted from 0 in increasing order, shard server k on
// the k-th, the head on the S shard servers', learner r on the (S + r)-th,
// for λ = 1, 2, 4, … up to C − S (and C − S itself). With fewer than S + 2 CPUs there is no curve of
// processes on CPUs of their own: then the CPUs are counted modulo C
// (learner r on the ((S + r) mod C)-th), λ goes up to C, and the jobs where
// λ + S > C share CPUs between shard servers and learners.
type scalePlan struct {
	CPUs     []int  `json:"cpus"` // the CPUs this process may use, in order
	Shards   int    `json:"shards"`
	Learners []int  `json:"learners"` // the λ values, increasing
	Note     string `json:"note,omitempty"`
}

// planScale plans bench scale on cpus with shards shard servers, up to
// maxLearners learners (0: as many as fit).
func planScale(cpus []int, shards, maxLearners int) scalePlan {
	p := scalePlan{CPUs: cpus, Shards: shards}
	top := len(cpus) - shards
	if top < 2 {
		top = len(cpus)
		p.Note = fmt.Sprintf("too few CPUs for a scaling curve: %d CPU(s), and %d shard server(s) and 2 learners need %d; "+
			"running what fits, λ up to %d, the jobs marked shared with shard servers and learners on the same CPUs", len(cpus), shards, shards+2, top)
	}
	if maxLearners > 0 {
		top = min(top, maxLearners)
	}
	for l := 1; l < top; l *= 2 {
		p.Learners = append(p.Learners, l)
	}
	if top >= 1 {
		p.Learners = append(p.Learners, top)
	}
	return p
}

// shared reports whether the job of λ learners puts two processes (the
// head aside) on one CPU.
func (p scalePlan) shared(learners int) bool { return learners+p.Shards > len(p.CPUs) }

// cpusOf returns the CPUs a process of role ("eval", "ps", "learner") and
// id runs on.
func (p scalePlan) cpusOf(role string, id int) []int {
	c := len(p.CPUs)
	switch role {
	case "eval":
		return p.CPUs[:min(p.Shards, c)]
	case "ps":
		return []int{p.CPUs[id%c]}
	}
	return []int{p.CPUs[(p.Shards+id)%c]}
}

// simCPUs are the CPUs the prediction's inputs are measured on: those of
// the shard servers and of the first learner.
func (p scalePlan) simCPUs() []int { return p.CPUs[:min(len(p.CPUs), p.Shards+1)] }

// scaleRow is one job of softsync bench scale beside its prediction.
type scaleRow struct {
	Protocol      string      `json:"protocol"` // hardsync, or softsync with n = λ
	Learners      int         `json:"learners"`
	ImagesPerSec  float64     `json:"images_per_sec"`
	Speedup       float64     `json:"speedup"`    // over the same protocol's λ = 1
	Efficiency    float64     `json:"efficiency"` // speedup / λ
	MeanStaleness float64     `json:"mean_staleness"`
	MaxStaleness  int         `json:"max_staleness"`
	Predicted     simRow      `json:"predicted"` // softsync sim's row of the same λ and protocol
	Error         float64     `json:"error"`     // (predicted − measured) / measured images/s
	Steps         int64       `json:"steps"`
	Seconds       float64     `json:"seconds"`
	Shared        bool        `json:"shared"` // shard servers and learners shared CPUs
	Processes     []procUsage `json:"processes"`
}

// scaleResult is the output of softsync bench scale --json.
type scaleResult struct {
	Model     string     `json:"model"`
	Batch     int        `json:"batch"`
	Transport string     `json:"transport"`
	Plan      scalePlan  `json:"plan"`
	Inputs    *simInputs `json:"inputs"` // softsync sim's, measured in the same run
	Rows      []scaleRow `json:"rows"`
}

// simProtocolName is softsync sim's name of a job's protocol.
func simProtocolName(proto string) string {
	if proto == "softsync" {
		return "λ-softsync"
	}
	return proto
}

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
			plan := planScale(cpus, o.shards, o.maxLearners)
			if plan.Note != "" {
				app.Log.Warn("bench scale: " + plan.Note)
			}
			ctx, stop := signalContext(cmd, app)
			defer stop()
			res, err := benchScale(ctx, app, &o, plan)
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

// benchScale predicts the jobs of plan with softsync sim, pinned to the
// CPUs of the shard servers and the first learner, then runs them,
// protocol by protocol, λ increasing.
func benchScale(ctx context.Context, app *App, o *scaleOptions, plan scalePlan) (*scaleResult, error) {
	var pred struct {
		Inputs *simInputs `json:"inputs"`
		Rows   []simRow   `json:"rows"`
	}
	var ls, sps []string
	for _, l := range plan.Learners {
		ls = append(ls, strconv.Itoa(l))
	}
	for _, p := range o.protocols {
		sps = append(sps, simProtocolName(p))
	}
	simArgs := []string{"sim", "--json", "--model", o.model, "--batch", strconv.Itoa(o.batch), "--learners", strings.Join(ls, ","),
		"--protocols", strings.Join(sps, ","), "--link", o.transport, "--shards", strconv.Itoa(o.shards), "--steps", strconv.Itoa(o.steps)}
	if err := selfJSON(ctx, plan.simCPUs(), &pred, []string{"--log-level", "warn", "--threads", "1", "--engine", app.Engine}, simArgs); err != nil {
		return nil, fmt.Errorf("the prediction: %w", err)
	}
	res := &scaleResult{Model: o.model, Batch: o.batch, Transport: o.transport, Plan: plan, Inputs: pred.Inputs}
	for _, proto := range o.protocols {
		var base float64
		for _, l := range plan.Learners {
			j := benchJob{modelBatch: modelBatch{o.model, o.batch}, protocol: proto, transport: o.transport,
				learners: l, shards: o.shards, steps: o.steps, pin: plan.cpusOf}
			out, err := j.run(ctx, app)
			if err != nil {
				return nil, err
			}
			rep := out.Report
			if base == 0 {
				base = rep.ImagesPerSec / float64(l)
			}
			r := scaleRow{Protocol: proto, Learners: l, ImagesPerSec: rep.ImagesPerSec, Speedup: rep.ImagesPerSec / base,
				MeanStaleness: rep.Staleness.Mean, MaxStaleness: rep.Staleness.Max,
				Steps: rep.Steps, Seconds: rep.Seconds, Shared: plan.shared(l), Processes: out.Usage}
			r.Efficiency = r.Speedup / float64(l)
			for _, p := range pred.Rows {
				if p.Learners == l && p.Protocol == simProtocolName(proto) {
					r.Predicted = p
					r.Error = (p.ImagesPerSec - rep.ImagesPerSec) / rep.ImagesPerSec
				}
			}
			res.Rows = append(res.Rows, r)
		}
	}
	return res, nil
}

func writeScaleText(w io.Writer, res *scaleResult) {
	p := res.Plan
	fmt.Fprintf(w, "%s, μ = %d, over %s: %d CPU(s) %v, %d shard server(s)\n", res.Model, res.Batch, res.Transport, len(p.CPUs), p.CPUs, p.Shards)
	if p.Note != "" {
		fmt.Fprintf(w, "%s\n", p.Note)
	}
	if in := res.Inputs; in != nil {
		fmt.Fprintf(w, "prediction (softsync sim): compute %s per mini-batch, link %s/s, latency %s, shard update %s/s, copy %s/s\n",
			fmtDuration(in.ComputeSec), bytesText(uint64(in.Bandwidth)), fmtDuration(in.LatencySec), bytesText(uint64(in.ShardRate)), bytesText(uint64(in.CopyRate)))
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
			thousands(int64(r.ImagesPerSec+0.5)), r.Speedup, 100*r.Efficiency, r.MeanStaleness, r.MaxStaleness,
			thousands(int64(r.Predicted.ImagesPerSec+0.5)), r.Predicted.Speedup, r.Predicted.MeanStaleness, 100*r.Error)
	}
	tw.Flush()
}
