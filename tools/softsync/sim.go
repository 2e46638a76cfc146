package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps/sim/costmodel"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/tools/bench"
	"github.com/softsync/softsync/tools/internal/plots"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

func init() { addCommand(newSimCmd) }

// simMeasureTime is how long sim measures each input for (tests shorten
// it).
var simMeasureTime = 500 * time.Millisecond

type simFlags struct {
	preset, model, protocols, learners, link, comp  string
	batch, shards, steps                            int
	compute                                         string
	spread, bandwidth, shardBW, shardRate, copyRate float64
	latency                                         string
	seed                                            uint64
	jsonOut, sharedLink                             bool
	plotOut                                         string
	fit                                             float64
	fitLearners                                     int
}

func newSimCmd(app *App) *cobra.Command {
	var f simFlags
	c := &cobra.Command{
		Use:   "sim",
		Short: "Predict images/s and speedup for λ learners from measured inputs (ps/sim's throughput model)",
		Long: `Predicts the throughput of hardsync and n-softsync jobs of λ learners with the
deterministic simulator (ps/sim) driving the real shard core: learners compute for
a drawn time per mini-batch, messages cross links of finite bandwidth with a
latency, each shard's core serves one message at a time, gradients pass through the
codec (docs/sim.md has the model). It prints, for each λ and protocol, images/s,
the speedup over one learner, the efficiency (speedup / λ) and the mean staleness.

Inputs are measured on this machine unless given:
  --compute      time of one mini-batch's forward and backward pass: the network and
                 synthetic data of softsync bench train, --threads workers
  --compress     the codec's wire ratio and encode/decode time, on a synthetic
                 gradient of the network's size, over --link
  --bandwidth, --latency  the link, per direction: measured as push+pull rounds over
                 --link (tcp: loopback sockets; inmem: in-process), 4 KiB and
                 gradient-sized, as softsync bench transport does
  --shard-rate   gradient bytes per second one shard core updates with (as
                 go test -bench ShardPush ./ps), and the fixed cost of a message
  --copy-rate    bytes per second a shard core copies weights into pull replies
--preset p775 describes the paper's cluster instead (Rudra on an IBM P775).`,
		Example: `  softsync sim --model lenet --batch 8 --learners 1,2 --link tcp
  softsync sim --preset p775 --plot speedup.png
  softsync sim --preset p775 --fit-speedup 28      # the compute time that gives 28× at λ = 30
  softsync sim --model cifar10_full --batch 4 --compute 20ms --bandwidth 1.25e9 --latency 50us --shard-rate 8e9`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSim(cmd, app, &f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.preset, "preset", "", "a cluster instead of this machine: p775 (the paper's)")
	fl.StringVar(&f.model, "model", "lenet", "network (its parameter count sets the message sizes)")
	fl.IntVar(&f.batch, "batch", 4, "μ, mini-batch per learner")
	fl.StringVar(&f.learners, "learners", "1,2,4,8,16,30,32,48,64", "λ values, comma-separated")
	fl.StringVar(&f.protocols, "protocols", "hardsync,1-softsync,λ-softsync", "protocols: hardsync, N-softsync (n = min(N, λ)), λ-softsync (n = λ)")
	fl.StringVar(&f.compute, "compute", "", "time per mini-batch, e.g. 20ms (default: measured)")
	fl.Float64Var(&f.spread, "compute-spread", 0.15, "σ of the log-normal compute time (0.15: a homogeneous cluster's jitter)")
	fl.StringVar(&f.comp, "compress", "none", "gradient codec (docs/wire.md); weights use it too when lossless")
	fl.StringVar(&f.link, "link", "tcp", "what to measure the link on: tcp (loopback) or inmem")
	fl.Float64Var(&f.bandwidth, "bandwidth", 0, "link bandwidth per direction, bytes/s, e.g. 1.25e9 for 10 Gbit/s (default: measured)")
	fl.Float64Var(&f.shardBW, "shard-bandwidth", 0, "a shard server's link, bytes/s per direction (default: --bandwidth)")
	fl.StringVar(&f.latency, "latency", "", "one-way latency, e.g. 50us (default: measured)")
	fl.Float64Var(&f.shardRate, "shard-rate", 0, "gradient bytes/s a shard core updates with (default: measured)")
	fl.BoolVar(&f.sharedLink, "shared-link", false, "all traffic of all learners and shards crosses one link, one message at a time (the loopback interface of one machine)")
	fl.Float64Var(&f.copyRate, "copy-rate", 0, "weight bytes/s a shard core copies into pull replies (default: measured)")
	fl.IntVar(&f.shards, "shards", 1, "parameter-server shards, one per server")
	fl.IntVar(&f.steps, "steps", 200, "simulated mini-batches per learner")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the simulated compute times")
	fl.BoolVar(&f.jsonOut, "json", false, "print {inputs, rows} as JSON instead of the table")
	fl.StringVar(&f.plotOut, "plot", "", "write a PNG of speedup against λ to this file")
	fl.Float64Var(&f.fit, "fit-speedup", 0, "instead of the sweep: find the compute time at which λ-softsync at --fit-learners reaches this speedup")
	fl.IntVar(&f.fitLearners, "fit-learners", 30, "λ of --fit-speedup")
	return c
}

func runSim(cmd *cobra.Command, app *App, f *simFlags) error {
	protos, err := costmodel.ParseProtocols(f.protocols)
	if err != nil {
		return fmt.Errorf("--protocols: %w", err)
	}
	var lambdas []int
	for _, s := range strings.Split(f.learners, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || v < 1 {
			return fmt.Errorf("--learners: %q is not a number ≥ 1", s)
		}
		lambdas = append(lambdas, v)
	}
	if f.steps < 1 || f.shards < 1 || f.batch < 1 || f.spread < 0 {
		return fmt.Errorf("--steps, --shards and --batch must be ≥ 1, --compute-spread ≥ 0")
	}
	in, err := simSetup(cmd, app, f)
	if err != nil {
		return err
	}
	if f.fit > 0 {
		t, err := costmodel.Fit(in, f.fit, f.fitLearners)
		if err != nil {
			return fmt.Errorf("--fit-speedup %w", err)
		}
		fmt.Fprintf(app.Out, "compute time per mini-batch for %.3g× at λ = %d (λ-softsync): %s\n", f.fit, f.fitLearners, textfmt.Duration(t))
		return nil
	}
	rows, err := costmodel.Sweep(in, protos, lambdas)
	if err != nil {
		return err
	}
	if f.plotOut != "" {
		if err := plots.Speedup(f.plotOut, in, rows, f.preset == "p775"); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	if f.jsonOut {
		return app.printJSON(struct {
			Inputs *costmodel.Inputs `json:"inputs"`
			Rows   []costmodel.Row   `json:"rows"`
		}{in, rows})
	}
	writeSimText(app, in, rows)
	return nil
}

// simSetup takes the preset or measures what the flags leave open.
func simSetup(cmd *cobra.Command, app *App, f *simFlags) (*costmodel.Inputs, error) {
	set := cmd.Flags().Changed
	var in costmodel.Inputs
	if f.preset != "" {
		p, ok := costmodel.Presets[f.preset]
		if !ok {
			return nil, fmt.Errorf("--preset %q: the presets are p775", f.preset)
		}
		in = p
	} else {
		in = costmodel.Inputs{Model: f.model, Batch: f.batch, ComputeSpread: f.spread, Codec: f.comp, Shards: f.shards, Steps: f.steps}
	}
	// Flags given explicitly override the preset.
	if set("model") {
		in.Model = f.model
	}
	if set("batch") {
		in.Batch = f.batch
	}
	if set("compute-spread") {
		in.ComputeSpread = f.spread
	}
	if set("shards") {
		in.Shards = f.shards
	}
	if set("steps") {
		in.Steps = f.steps
	}
	if set("shared-link") {
		in.SharedLink = f.sharedLink
	}
	in.Seed = f.seed
	spec, err := nn.Load(in.Model)
	if err != nil {
		return nil, fmt.Errorf("--model: %w", err)
	}
	in.Params = spec.VectorLen()
	if f.compute != "" {
		d, err := parseDuration(f.compute)
		if err != nil {
			return nil, fmt.Errorf("--compute: %w", err)
		}
		in.ComputeSec = d
	}
	if f.latency != "" {
		d, err := parseDuration(f.latency)
		if err != nil {
			return nil, fmt.Errorf("--latency: %w", err)
		}
		in.LatencySec = d
	}
	for _, v := range []struct {
		name string
		src  float64
		dst  *float64
	}{{"bandwidth", f.bandwidth, &in.Bandwidth}, {"shard-bandwidth", f.shardBW, &in.ShardBW}, {"shard-rate", f.shardRate, &in.ShardRate}, {"copy-rate", f.copyRate, &in.CopyRate}} {
		if set(v.name) {
			if !(v.src > 0) {
				return nil, fmt.Errorf("--%s: must be > 0, got %g", v.name, v.src)
			}
			*v.dst = v.src
		}
	}
	if f.preset != "" {
		if set("compress") || set("link") {
			return nil, fmt.Errorf("--preset describes its cluster's codec and link: --compress and --link measure this machine's")
		}
		return &in, nil
	}
	codec, err := rdma.ParseCodec(f.comp)
	if err != nil {
		return nil, fmt.Errorf("--compress: %w", err)
	}
	in.Codec = codec.String()
	engine := func(threads int) (kernels.Engine, error) {
		app.Threads = threads
		e, _, err := app.EngineInfo()
		return e, err
	}
	mc := bench.MeasureConfig{Spec: spec, Threads: app.Threads, Engine: engine, Link: f.link,
		KeepBandwidth: set("bandwidth"), KeepLatency: set("latency"), MinTime: simMeasureTime}
	if err := bench.MeasureInputs(cmd.Context(), mc, &in); err != nil {
		return nil, err
	}
	if in.ShardBW == 0 {
		in.ShardBW = in.Bandwidth
	}
	return &in, nil
}

func writeSimText(app *App, in *costmodel.Inputs, rows []costmodel.Row) {
	fmt.Fprintf(app.Out, "%s, μ = %d: %s parameters, compute %s per mini-batch (log-normal σ %.2g), codec %s (wire ratio %.3f)\n",
		in.Model, in.Batch, textfmt.Thousands(int64(in.Params)), textfmt.Duration(in.ComputeSec), in.ComputeSpread, in.Codec, in.WireRatio)
	rate := func(bps float64) string {
		if bps == 0 {
			return "unlimited"
		}
		return textfmt.Bytes(uint64(bps)) + "/s"
	}
	link := fmt.Sprintf("links %s per direction (shard servers %s)", rate(in.Bandwidth), rate(in.ShardBW))
	if in.SharedLink {
		link = fmt.Sprintf("one link of %s for all traffic", rate(in.ShardBW))
	}
	fmt.Fprintf(app.Out, "%s, latency %s; shard update %s, copy %s, %d shard(s); %s\n\n",
		link, textfmt.Duration(in.LatencySec), rate(in.ShardRate), rate(in.CopyRate), in.Shards, in.Source)
	tw := tabwriter.NewWriter(app.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "λ\tprotocol\tn\timages/s\tspeedup\tefficiency\tmean τ\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.2f\t%.0f%%\t%.2f\t\n", r.Learners, r.Protocol, r.N,
			textfmt.Thousands(int64(r.ImagesPerSec+0.5)), r.Speedup, 100*r.Efficiency, r.MeanStaleness)
	}
	tw.Flush()
}

// parseDuration reads a duration such as 20ms or 50us, in seconds.
func parseDuration(s string) (float64, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: must be > 0", s)
	}
	return d.Seconds(), nil
}
