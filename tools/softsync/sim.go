package main

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/ps/sim"
	"github.com/softsync/softsync/rdma"
)

func init() { addCommand(newSimCmd) }

// simInputs are the measured or given inputs of a throughput prediction
// (the "inputs" object of softsync sim --json; docs/sim.md).
type simInputs struct {
	Model         string  `json:"model"`
	Params        int     `json:"params"`
	Batch         int     `json:"batch"`
	ComputeSec    float64 `json:"compute_s"`      // mean time of one mini-batch's forward and backward pass
	ComputeSpread float64 `json:"compute_spread"` // σ of the log-normal compute time
	Codec         string  `json:"codec"`
	WireRatio     float64 `json:"wire_ratio"`    // encoded / raw gradient bytes
	EncodeSec     float64 `json:"encode_s"`      // one gradient's encoding
	DecodeSec     float64 `json:"decode_s"`      // one gradient's decoding
	Bandwidth     float64 `json:"bandwidth_Bps"` // each learner's link, bytes/s per direction
	ShardBW       float64 `json:"shard_bandwidth_Bps"`
	LatencySec    float64 `json:"latency_s"`        // one way
	ShardRate     float64 `json:"shard_update_Bps"` // gradient bytes per second a shard core updates with
	CopyRate      float64 `json:"shard_copy_Bps"`   // weight bytes per second a shard core copies into pull replies
	MessageSec    float64 `json:"message_s"`        // fixed service time of every message at a shard
	SharedLink    bool    `json:"shared_link"`      // one link of shard_bandwidth_Bps for all traffic
	Shards        int     `json:"shards"`
	Steps         int     `json:"steps_per_learner"`
	Seed          uint64  `json:"seed"`
	Source        string  `json:"source"` // the preset, or what was measured
}

// simRow is one prediction: λ learners under one protocol.
type simRow struct {
	Learners      int     `json:"learners"`
	Protocol      string  `json:"protocol"`
	N             int     `json:"n"` // 0 for hardsync
	ImagesPerSec  float64 `json:"images_per_sec"`
	Speedup       float64 `json:"speedup"`    // over one learner
	Efficiency    float64 `json:"efficiency"` // speedup / λ
	MeanStaleness float64 `json:"mean_staleness"`
}

// simProtocol is a protocol of the sweep: hardsync, n-softsync with a
// fixed n (capped at λ), or λ-softsync (n = λ, fully asynchronous).
type simProtocol struct {
	name  string
	proto ps.Protocol
	n     int // 0 with proto Softsync: n = λ
}

func (p simProtocol) at(learners int) (ps.Protocol, int) {
	switch {
	case p.proto == ps.Hardsync:
		return ps.Hardsync, 0
	case p.n == 0:
		return ps.Softsync, learners
	}
	return ps.Softsync, min(p.n, learners)
}

func parseSimProtocols(s string) ([]simProtocol, error) {
	var ps_ []simProtocol
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "hardsync":
			ps_ = append(ps_, simProtocol{name: f, proto: ps.Hardsync})
		case f == "λ-softsync" || f == "lambda-softsync":
			ps_ = append(ps_, simProtocol{name: "λ-softsync", proto: ps.Softsync})
		case strings.HasSuffix(f, "-softsync"):
			n, err := strconv.Atoi(strings.TrimSuffix(f, "-softsync"))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("--protocols: %q is not hardsync, N-softsync or λ-softsync", f)
			}
			ps_ = append(ps_, simProtocol{name: f, proto: ps.Softsync, n: n})
		default:
			return nil, fmt.Errorf("--protocols: %q is not hardsync, N-softsync or λ-softsync", f)
		}
	}
	return ps_, nil
}

// simPresets are clusters described by their hardware rather than
// measured here (docs/sim.md says how each figure was chosen).
var simPresets = map[string]simInputs{
	// Rudra on an IBM P775 (the paper's cluster): cifar10_full at μ = 4,
	// 4 POWER7 threads per learner and per shard, 192 GB/s of
	// interconnect per node, MPI latency of a few microseconds, a shard
	// core that updates at 8 GB/s and copies at 10 GB/s (assumed). The
	// compute time is fitted: --fit-speedup 22, 25 and 28 (30-softsync at
	// λ = 30 over one learner, the paper's 22–28×) give 1.7, 2.0 and
	// 2.5 ms; 2 ms is taken (docs/sim.md).
	"p775": {Model: "cifar10_full", Batch: 4, ComputeSec: 2e-3, ComputeSpread: 0.15, Codec: "none", WireRatio: 1,
		Bandwidth: 192e9, ShardBW: 192e9, LatencySec: 5e-6, ShardRate: 8e9, CopyRate: 10e9, MessageSec: 2e-6,
		Shards: 1, Steps: 200, Source: "preset p775"},
}

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
	protos, err := parseSimProtocols(f.protocols)
	if err != nil {
		return err
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
		t, err := fitCompute(in, f.fit, f.fitLearners)
		if err != nil {
			return err
		}
		fmt.Fprintf(app.Out, "compute time per mini-batch for %.3g× at λ = %d (λ-softsync): %s\n", f.fit, f.fitLearners, fmtDuration(t))
		return nil
	}
	rows, err := simSweep(in, protos, lambdas)
	if err != nil {
		return err
	}
	if f.plotOut != "" {
		if err := writeSpeedupPlot(f.plotOut, in, rows, f.preset == "p775"); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	if f.jsonOut {
		return app.printJSON(struct {
			Inputs *simInputs `json:"inputs"`
			Rows   []simRow   `json:"rows"`
		}{in, rows})
	}
	writeSimText(app, in, rows)
	return nil
}

// simSetup takes the preset or measures what the flags leave open.
func simSetup(cmd *cobra.Command, app *App, f *simFlags) (*simInputs, error) {
	set := cmd.Flags().Changed
	var in simInputs
	if f.preset != "" {
		p, ok := simPresets[f.preset]
		if !ok {
			return nil, fmt.Errorf("--preset %q: the presets are p775", f.preset)
		}
		in = p
	} else {
		in = simInputs{Model: f.model, Batch: f.batch, ComputeSpread: f.spread, Codec: f.comp, Shards: f.shards, Steps: f.steps}
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
	in.Params = spec.NumParams()
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
	if err := measureSimInputs(cmd.Context(), app, spec, f, &in, set); err != nil {
		return nil, err
	}
	if in.ShardBW == 0 {
		in.ShardBW = in.Bandwidth
	}
	return &in, nil
}

// network is the ps/sim model of in. Besides the codec, a learner's
// client copies its gradient into the push and the pulled weights into its
// network each step (ps.Client): both are learner time at the copy rate.
func (in *simInputs) network() *sim.Network {
	codecLossless := true
	if c, err := rdma.ParseCodec(in.Codec); err == nil {
		codecLossless = c.ID.Lossless()
	}
	p := float64(in.Params)
	n := &sim.Network{Elements: in.Params, GradientBytes: 4 * in.WireRatio, WeightBytes: 4, HeaderBytes: 56,
		LearnerBandwidth: in.Bandwidth, ShardBandwidth: in.ShardBW, SharedLink: in.SharedLink,
		PushFixed: in.MessageSec, PushPerElem: 4/in.ShardRate + in.DecodeSec/p,
		PullFixed: in.MessageSec, PullPerElem: 4 / in.CopyRate,
		EncodePerElem: in.EncodeSec/p + 4/in.CopyRate, DecodePerElem: 4 / in.CopyRate}
	if codecLossless && in.Codec != "none" {
		n.WeightBytes = 4 * in.WireRatio
		n.PullPerElem += in.EncodeSec / p
		n.DecodePerElem += in.DecodeSec / p
	}
	return n
}

// predict simulates λ learners under proto for in.Steps mini-batches each
// and returns images/s and the mean staleness of shard 0.
func predict(in *simInputs, proto ps.Protocol, n, learners int) (float64, float64, error) {
	total := learners * in.Steps
	cfg := sim.Config{
		PS: ps.Config{Job: 1, Learners: learners, Protocol: proto, N: n, Shards: in.Shards, Batch: in.Batch,
			Solver: sgd.Config{LR: 1e-3, LRMode: sgd.LRStaleness}},
		Init:       make([]float32, 16*in.Shards), // a small vector standing for in.Params values
		TotalSteps: total,
		Compute:    sim.Dist{Kind: sim.LogNormal, Mean: in.ComputeSec, Spread: in.ComputeSpread},
		Latency:    in.LatencySec,
		Seed:       in.Seed,
		Net:        in.network(),
	}
	res, err := sim.Run(cfg)
	if err != nil {
		return 0, 0, err
	}
	return float64(total*in.Batch) / res.Time, res.Shards[0].MeanStaleness(), nil
}

// simSweep predicts every λ × protocol; the speedup is over one learner
// (λ = 1, where every protocol is the same).
func simSweep(in *simInputs, protos []simProtocol, lambdas []int) ([]simRow, error) {
	base, _, err := predict(in, ps.Hardsync, 0, 1)
	if err != nil {
		return nil, err
	}
	var rows []simRow
	for _, p := range protos {
		for _, l := range lambdas {
			proto, n := p.at(l)
			ips, tau, err := predict(in, proto, n, l)
			if err != nil {
				return nil, err
			}
			rows = append(rows, simRow{Learners: l, Protocol: p.name, N: n, ImagesPerSec: ips,
				Speedup: ips / base, Efficiency: ips / base / float64(l), MeanStaleness: tau})
		}
	}
	return rows, nil
}

// fitCompute finds by bisection (on a log scale) the compute time per
// mini-batch at which λ-softsync with learners learners runs speedup
// times one learner; the speedup grows with the compute time.
func fitCompute(in *simInputs, speedup float64, learners int) (float64, error) {
	if speedup >= float64(learners) {
		return 0, fmt.Errorf("--fit-speedup %g: must be below λ = %d", speedup, learners)
	}
	at := func(t float64) (float64, error) {
		c := *in
		c.ComputeSec = t
		one, _, err := predict(&c, ps.Hardsync, 0, 1)
		if err != nil {
			return 0, err
		}
		many, _, err := predict(&c, ps.Softsync, learners, learners)
		return many / one, err
	}
	lo, hi := 1e-7, 100.0
	for range 60 {
		mid := math.Sqrt(lo * hi)
		s, err := at(mid)
		if err != nil {
			return 0, err
		}
		if s < speedup {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Sqrt(lo * hi), nil
}

func writeSimText(app *App, in *simInputs, rows []simRow) {
	fmt.Fprintf(app.Out, "%s, μ = %d: %s parameters, compute %s per mini-batch (log-normal σ %.2g), codec %s (wire ratio %.3f)\n",
		in.Model, in.Batch, thousands(int64(in.Params)), fmtDuration(in.ComputeSec), in.ComputeSpread, in.Codec, in.WireRatio)
	rate := func(bps float64) string {
		if bps == 0 {
			return "unlimited"
		}
		return bytesText(uint64(bps)) + "/s"
	}
	link := fmt.Sprintf("links %s per direction (shard servers %s)", rate(in.Bandwidth), rate(in.ShardBW))
	if in.SharedLink {
		link = fmt.Sprintf("one link of %s for all traffic", rate(in.ShardBW))
	}
	fmt.Fprintf(app.Out, "%s, latency %s; shard update %s, copy %s, %d shard(s); %s\n\n",
		link, fmtDuration(in.LatencySec), rate(in.ShardRate), rate(in.CopyRate), in.Shards, in.Source)
	tw := tabwriter.NewWriter(app.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "λ\tprotocol\tn\timages/s\tspeedup\tefficiency\tmean τ\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.2f\t%.0f%%\t%.2f\t\n", r.Learners, r.Protocol, r.N,
			thousands(int64(r.ImagesPerSec+0.5)), r.Speedup, 100*r.Efficiency, r.MeanStaleness)
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

// writeSpeedupPlot draws the speedup against λ of each protocol, with the
// ideal line; paper adds the paper's 22–28× at λ = 30.
func writeSpeedupPlot(path string, in *simInputs, rows []simRow, paper bool) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Predicted speedup, %s μ = %d (%s)", in.Model, in.Batch, in.Source)
	p.X.Label.Text = "learners λ"
	p.Y.Label.Text = "speedup over one learner"
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	maxL := 1
	for _, r := range rows {
		maxL = max(maxL, r.Learners)
	}
	ideal, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: float64(maxL), Y: float64(maxL)}})
	if err != nil {
		return err
	}
	ideal.Color, ideal.Dashes = color.Gray{Y: 150}, []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(ideal)
	p.Legend.Add("linear", ideal)
	var names []string
	for _, r := range rows {
		if !slices.Contains(names, r.Protocol) {
			names = append(names, r.Protocol)
		}
	}
	for k, name := range names {
		var xy plotter.XYs
		for _, r := range rows {
			if r.Protocol == name {
				xy = append(xy, plotter.XY{X: float64(r.Learners), Y: r.Speedup})
			}
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		c := plotutil.Color(k)
		line.Color, points.Color, points.Shape, line.Width = c, c, draw.CircleGlyph{}, vg.Points(1.5)
		p.Add(line, points)
		p.Legend.Add(name, line, points)
	}
	if paper {
		band, err := plotter.NewLine(plotter.XYs{{X: 30, Y: 22}, {X: 30, Y: 28}})
		if err != nil {
			return err
		}
		band.Color, band.Width = color.RGBA{R: 200, A: 255}, vg.Points(6)
		p.Add(band)
		p.Legend.Add("paper: 22–28× at λ = 30", band)
	}
	p.X.Min, p.Y.Min = 0, 0
	return drawGrid(path, [][]*plot.Plot{{p}}, 7*vg.Inch, 5*vg.Inch)
}
