package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func init() { addBenchCommand(newBenchSpeedupCmd) }

// speedupRow is one job of softsync bench speedup.
type speedupRow struct {
	Protocol     string  `json:"protocol"`
	Learners     int     `json:"learners"`
	ImagesPerSec float64 `json:"images_per_sec"`
	Speedup      float64 `json:"speedup"`    // images/s over the same protocol's λ = 1
	Efficiency   float64 `json:"efficiency"` // speedup / λ
	Steps        int64   `json:"steps"`
	Seconds      float64 `json:"seconds"`
}

func newBenchSpeedupCmd(app *App) *cobra.Command {
	var model, protocols, learners, transport string
	var batch, steps int
	var asJSON bool
	c := &cobra.Command{
		Use:   "speedup [--json]",
		Short: "images/s of the same job with 1, 2, … learner processes over the network, and the speedup",
		Long: `Run the same training job (LeNet on MNIST by default, random order, a fixed
number of mini-batches per learner) as processes on this host, as softsync
launch does: one shard server and λ learner processes of one compute thread
each, over TCP (--transport), for every protocol and λ asked, and print
images/s, the speedup over λ = 1 of the same protocol and the efficiency
(speedup / λ). Softsync runs with n = λ. Training time runs from the moment
every process has arrived to the last mini-batch done, so process start-up
is not in it; the head (coordinator and evaluator) and the shard server run
on the same cores as the learners.`,
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
			ctx, stop := signalContext(cmd, app)
			defer stop()
			var rows []speedupRow
			app.Threads = 1
			for _, proto := range strings.Split(protocols, ",") {
				var base float64
				for _, ls := range strings.Split(learners, ",") {
					l, err := strconv.Atoi(ls)
					if err != nil || l < 1 {
						return fmt.Errorf("--learners: %q is not a learner count ≥ 1", ls)
					}
					args := []string{"--model", model, "--batch", strconv.Itoa(batch), "--epochs", "1000",
						"--max-steps", strconv.Itoa(steps * l), "--protocol", proto, "--transport", transport,
						"--test-subset", "100", "--quiet", "--lr", "0.01"}
					res, err := launchJob(ctx, app, &launchFlags{learners: l, shards: 1}, args, true)
					if err != nil {
						return fmt.Errorf("%s with %d learners: %w", proto, l, err)
					}
					if base == 0 {
						base = res.ImagesPerSec / float64(l)
					}
					r := speedupRow{Protocol: proto, Learners: l, ImagesPerSec: res.ImagesPerSec, Steps: res.Steps, Seconds: res.Seconds}
					r.Speedup = res.ImagesPerSec / base
					r.Efficiency = r.Speedup / float64(l)
					rows = append(rows, r)
				}
			}
			if asJSON {
				return app.printJSON(rows)
			}
			tw := tabwriter.NewWriter(app.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "protocol\tlearners\timages/s\tspeedup\tefficiency\t\n")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%.2f×\t%.0f%%\t\n", r.Protocol, r.Learners, thousands(int64(r.ImagesPerSec+0.5)), r.Speedup, 100*r.Efficiency)
			}
			return tw.Flush()
		},
	}
	f := c.Flags()
	f.StringVar(&model, "model", "lenet", "network")
	f.IntVar(&batch, "batch", 64, "mini-batch size μ per learner")
	f.IntVar(&steps, "steps", 200, "mini-batches per learner")
	f.StringVar(&protocols, "protocols", "hardsync,softsync", "comma-separated protocols")
	f.StringVar(&learners, "learners", "1,2", "comma-separated learner counts; the first is the base of the speedup")
	f.StringVar(&transport, "transport", "tcp", "tcp, verbs or auto")
	f.BoolVar(&asJSON, "json", false, "print a JSON array of {protocol, learners, images_per_sec, speedup, efficiency, steps, seconds}")
	return c
}
