package main

import (
	"context"
	"fmt"
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
	Transport    string      `json:"transport"`
	Protocol     string      `json:"protocol"`
	Learners     int         `json:"learners"`
	ImagesPerSec float64     `json:"images_per_sec"`
	Speedup      float64     `json:"speedup"`    // images/s over λ = the first --learners of the same model, transport and protocol
	Efficiency   float64     `json:"efficiency"` // speedup / (λ / the first λ)
	Steps        int64       `json:"steps"`
	Seconds      float64     `json:"seconds"`
	Processes    []procUsage `json:"processes"` // the head, the shard server, the learners
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
	protocol, transport string
	learners, shards    int
	steps               int
	pin                 func(role string, id int) []int
}

func (j benchJob) run(ctx context.Context, app *App) (*launchResult, error) {
	args := []string{"--model", j.model, "--batch", strconv.Itoa(j.batch), "--epochs", "1000",
		"--max-steps", strconv.Itoa(j.steps * j.learners), "--protocol", j.protocol, "--transport", j.transport,
		"--test-subset", "100", "--quiet", "--lr", "0.01"}
	app.Threads = 1
	res, err := launchJob(ctx, app, &launchFlags{learners: j.learners, shards: j.shards, pin: j.pin}, args, true)
	if err != nil {
		return nil, fmt.Errorf("%s, %s over %s with %d learners: %w", j.modelBatch, j.protocol, j.transport, j.learners, err)
	}
	return res, nil
}

func newBenchSpeedupCmd(app *App) *cobra.Command {
	var models, protocols, learners, transports string
	var batch, steps int
	var asJSON bool
	c := &cobra.Command{
		Use:   "speedup [--json]",
		Short: "images/s of the same job with 1, 2, … learner processes over the network, and the speedup",
		Long: `Run the same training job (LeNet on MNIST by default, random order, a fixed
number of mini-batches per learner) as processes on this host, as softsync
launch does: one shard server and λ learner processes of one compute thread
each, over each transport of --transport, for every model, protocol and λ
asked, and print images/s, the speedup over the first λ of the same model,
transport and protocol, the efficiency (speedup / λ, relative to the first
λ) and the peak resident set (VmHWM) of the processes. Softsync runs with
n = λ. The transports take turns at each λ, so that they see the same load.
Training time runs from the moment every process has arrived to the last
mini-batch done, so process start-up is not in it; the head (coordinator
and evaluator) and the shard server run on the same cores as the learners
(softsync bench scale pins each to a core of its own).`,
		Example: `  softsync bench speedup --transport tcp,shm
  softsync bench speedup --model lenet:64,cifar10_full:100 --transport shm --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, c := range []struct {
				flag string
				v    int
			}{{"--steps", steps}, {"--batch", batch}} {
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
			ctx, stop := signalContext(cmd, app)
			defer stop()
			var rows []speedupRow
			for _, m := range ms {
				for _, proto := range strings.Split(protocols, ",") {
					base := map[string]float64{} // per transport: images/s per learner at the first λ
					for _, l := range ls {
						for _, tr := range strings.Split(transports, ",") {
							j := benchJob{modelBatch: m, protocol: proto, transport: tr, learners: l, shards: 1, steps: steps}
							res, err := j.run(ctx, app)
							if err != nil {
								return err
							}
							rep := res.Report
							if _, ok := base[tr]; !ok {
								base[tr] = rep.ImagesPerSec / float64(l)
							}
							r := speedupRow{Model: m.model, Batch: m.batch, Transport: tr, Protocol: proto, Learners: l,
								ImagesPerSec: rep.ImagesPerSec, Steps: rep.Steps, Seconds: rep.Seconds, Processes: res.Usage}
							r.Speedup = rep.ImagesPerSec / (base[tr] * float64(ls[0]))
							r.Efficiency = r.Speedup * float64(ls[0]) / float64(l)
							rows = append(rows, r)
						}
					}
				}
			}
			if asJSON {
				return app.printJSON(rows)
			}
			tw := tabwriter.NewWriter(app.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "model\ttransport\tprotocol\tlearners\timages/s\tspeedup\tefficiency\tpeak RSS: head, shard, learners\t\n")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%.2f×\t%.0f%%\t%s\t\n", modelBatch{r.Model, r.Batch}, r.Transport, r.Protocol, r.Learners,
					thousands(int64(r.ImagesPerSec+0.5)), r.Speedup, 100*r.Efficiency, rssText(r.Processes))
			}
			return tw.Flush()
		},
	}
	f := c.Flags()
	f.StringVar(&models, "model", "lenet", "networks, comma-separated, each MODEL or MODEL:μ (e.g. lenet:64,cifar10_full:100)")
	f.IntVar(&batch, "batch", 64, "mini-batch size μ per learner of a --model without :μ")
	f.IntVar(&steps, "steps", 200, "mini-batches per learner")
	f.StringVar(&protocols, "protocols", "hardsync,softsync", "comma-separated protocols")
	f.StringVar(&learners, "learners", "1,2", "comma-separated learner counts; the first is the base of the speedup")
	f.StringVar(&transports, "transport", "tcp", "comma-separated transports, measured side by side: tcp, shm, verbs or auto")
	f.BoolVar(&asJSON, "json", false, "print a JSON array of {model, batch, transport, protocol, learners, images_per_sec, speedup, efficiency, steps, seconds, processes: [{process, cpus, peak_rss_bytes}]}")
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
