package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func init() { addBenchCommand(newBenchSpeedupCmd) }

// speedupRow is one job of softsync bench speedup.
type speedupRow struct {
	Model        string      `json:"model"`
	Batch        int         `json:"batch"`
	Data         string      `json:"data"` // --data as given ("": the model's default)
	Transport    string      `json:"transport"`
	Protocol     string      `json:"protocol"`
	Learners     int         `json:"learners"`
	Shards       int         `json:"shards"`
	EarlyPush    bool        `json:"early_push"`
	Bind         string      `json:"bind"`           // launch --bind ("" for independent jobs)
	ImagesPerSec float64     `json:"images_per_sec"` // of the median run
	Runs         []float64   `json:"runs"`           // images/s of every run, in order
	Speedup      float64     `json:"speedup"`        // images/s over λ = the first --learners of the same model, transport, protocol, shards and early push
	Efficiency   float64     `json:"efficiency"`     // speedup / (λ / the first λ)
	Steps        int64       `json:"steps"`
	Seconds      float64     `json:"seconds"`
	Processes    []procUsage `json:"processes"` // of the median run: the head, the shard servers, the learners (none for independent jobs)
}

// speedupGrid is what bench speedup varies: every combination of its
// lists is a job.
type speedupGrid struct {
	models     []modelBatch
	data       string // --data ("": each model's own)
	protocols  []string
	learners   []int
	transports []string
	shards     []int
	early      []bool
	binds      []string // launch --bind values
	steps      int
	ceiling    bool
}

// cells returns the jobs of bench speedup in the order they run in each
// round: by model, protocol, λ, then transport, shard count, early push
// and binding, so that the variants of one λ run side by side; with
// ceiling, each model's independent jobs (runIndependent) for every λ
// first.
func (g speedupGrid) cells() []benchJob {
	var js []benchJob
	for _, m := range g.models {
		for _, l := range g.learners {
			if g.ceiling {
				js = append(js, benchJob{modelBatch: m, data: "synthetic", protocol: "none", transport: independentTransport, learners: l, steps: g.steps})
			}
		}
		for _, proto := range g.protocols {
			for _, l := range g.learners {
				for _, tr := range g.transports {
					for _, s := range g.shards {
						for _, e := range g.early {
							for _, b := range g.binds {
								js = append(js, benchJob{modelBatch: m, data: g.data, protocol: proto, transport: tr, learners: l, shards: s,
									earlyPush: e, bind: b, steps: g.steps})
							}
						}
					}
				}
			}
		}
	}
	return js
}

// benchSpeedup runs every job repeat times, in rounds, and returns a row
// per job from its median run, the speedup over the first λ of the same
// model, protocol, transport, shard count, early push and binding.
func benchSpeedup(ctx context.Context, app *App, jobs []benchJob, repeat int) ([]speedupRow, error) {
	runs := make([][]*launchResult, len(jobs))
	for range repeat {
		for i, j := range jobs {
			res, err := j.run(ctx, app)
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], res)
		}
	}
	return speedupRows(jobs, runs), nil
}

// speedupRows makes a row of each job from its runs (runs[i] are job i's,
// each with its report): the median run by images/s (the lower of the two
// middle ones for an even count), the speedup over the first job of the
// same model, protocol, transport, shard count, early push and binding.
func speedupRows(jobs []benchJob, runs [][]*launchResult) []speedupRow {
	var rows []speedupRow
	base := map[string]speedupRow{} // the first row of each model, protocol, transport, shard count, early push and binding
	for i, j := range jobs {
		r := speedupRow{Model: j.model, Batch: j.batch, Data: j.data, Transport: j.transport, Protocol: j.protocol, Learners: j.learners,
			Shards: j.shards, EarlyPush: j.earlyPush, Bind: j.bind}
		for _, x := range runs[i] {
			r.Runs = append(r.Runs, x.Report.ImagesPerSec)
		}
		sorted := slices.SortedStableFunc(slices.Values(runs[i]), func(a, b *launchResult) int { return cmp.Compare(a.Report.ImagesPerSec, b.Report.ImagesPerSec) })
		mid := sorted[(len(sorted)-1)/2]
		r.ImagesPerSec, r.Steps, r.Seconds, r.Processes = mid.Report.ImagesPerSec, mid.Report.Steps, mid.Report.Seconds, mid.Usage
		key := fmt.Sprintf("%s %s %s %d %v %s", j.modelBatch, j.protocol, j.transport, j.shards, j.earlyPush, j.bind)
		b, ok := base[key]
		if !ok {
			b, base[key] = r, r
		}
		r.Speedup = r.ImagesPerSec / b.ImagesPerSec
		r.Efficiency = r.Speedup * float64(b.Learners) / float64(r.Learners)
		rows = append(rows, r)
	}
	return rows
}

// modelBatch is a network and its mini-batch size μ.
type modelBatch struct {
	model string
	batch int
}

func (m modelBatch) String() string { return fmt.Sprintf("%s μ=%d", m.model, m.batch) }

// parseModelBatches reads a comma-separated list of MODEL or MODEL:μ;
// MODEL alone takes batch.
func parseModelBatches(s string, batch int) ([]modelBatch, error) {
	var ms []modelBatch
	for _, f := range strings.Split(s, ",") {
		name, mu, ok := strings.Cut(strings.TrimSpace(f), ":")
		m := modelBatch{model: name, batch: batch}
		if ok {
			b, err := strconv.Atoi(mu)
			if err != nil || b < 1 {
				return nil, fmt.Errorf("--model: %q: μ must be a number ≥ 1", f)
			}
			m.batch = b
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

// benchJob is one training job of the process benchmarks: steps
// mini-batches per learner of one compute thread, random order, a small
// test subset, run as processes on this host by launchJob.
type benchJob struct {
	modelBatch
	data                string // --data ("": the model's default)
	protocol, transport string
	learners, shards    int
	earlyPush           bool
	bind                string // launch --bind
	steps               int
	pin                 func(role string, id int) []int
}

func (j benchJob) run(ctx context.Context, app *App) (*launchResult, error) {
	if j.transport == independentTransport {
		return runIndependent(ctx, app, j)
	}
	args := []string{"--model", j.model, "--batch", strconv.Itoa(j.batch), "--epochs", "1000",
		"--max-steps", strconv.Itoa(j.steps * j.learners), "--protocol", j.protocol, "--transport", j.transport,
		"--test-subset", "100", "--quiet", "--lr", "0.01"}
	if j.earlyPush {
		args = append(args, "--early-push")
	}
	if j.data != "" {
		args = append(args, "--data", j.data)
	}
	app.Threads = 1
	res, err := launchJob(ctx, app, &launchFlags{learners: j.learners, shards: j.shards, bind: cmp.Or(j.bind, "learners"), pin: j.pin}, args, true)
	if err != nil {
		return nil, fmt.Errorf("%s, %s over %s with %d learners: %w", j.modelBatch, j.protocol, j.transport, j.learners, err)
	}
	return res, nil
}

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
thread each, over each transport of --transport, for each S of --shards,
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
		Example: `  softsync bench speedup --transport tcp,shm
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
			g := speedupGrid{models: ms, data: dataName, protocols: strings.Split(protocols, ","), learners: ls, transports: strings.Split(transports, ","),
				shards: ss, early: early, binds: strings.Split(binds, ","), steps: steps, ceiling: ceiling}
			for _, b := range g.binds {
				if err := checkBind(b); err != nil {
					return err
				}
			}
			rows, err := benchSpeedup(ctx, app, g.cells(), repeat)
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
				if r.EarlyPush {
					tr += ", early push"
				}
				if r.Bind == "none" {
					tr += ", unpinned"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%.2f×\t%.0f%%\t%s\t\n", modelBatch{r.Model, r.Batch}, tr, r.Protocol, r.Shards, r.Learners,
					thousands(int64(r.ImagesPerSec+0.5)), r.Speedup, 100*r.Efficiency, rssText(r.Processes))
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
	f.StringVar(&transports, "transport", "tcp", "comma-separated transports, measured side by side: tcp, shm, verbs or auto")
	f.StringVar(&shards, "shards", "1", "comma-separated shard counts, measured side by side: shard-server processes, one shard each")
	f.BoolVar(&ceiling, "ceiling", false, `also run, at each λ, λ independent one-learner jobs at once in this process (one compute thread each, parameter server in process, random data): rows of transport "independent", protocol "none", the machine's ceiling for λ learners`)
	f.BoolSliceVar(&early, "early-push", []bool{false}, "comma-separated: without (false) and/or with (true) train's --early-push, side by side")
	f.StringVar(&binds, "bind", "learners", "comma-separated launch --bind values, side by side: learners (each learner pinned to CPUs of its own) and/or none")
	f.BoolVar(&asJSON, "json", false, "print a JSON array of {model, batch, transport, protocol, learners, shards, early_push, bind, images_per_sec, runs, speedup, efficiency, steps, seconds, processes: [{process, cpus, peak_rss_bytes}]}")
	return c
}

// rssText gives the peak resident sets of a job's processes: the head's,
// the shard servers' largest and the learners' largest.
func rssText(ps []procUsage) string {
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
