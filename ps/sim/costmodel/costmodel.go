// Package costmodel predicts the images/s and speedup of hardsync and
// n-softsync jobs of λ learners from a handful of measured or given
// inputs (Inputs: compute time per mini-batch, the link, the codec, the
// shard's update and copy rates), by running them in the deterministic
// simulator ps/sim over its Network model (docs/sim.md). It is what
// softsync sim prints and softsync bench scale sets beside its
// measurements; tools/bench measures the inputs on a machine.
//
// Sweep predicts every λ × protocol, with the speedup over one learner;
// Fit finds the compute time at which a speedup is reached. Everything is
// a function of the Inputs (Seed included): the same inputs give the same
// rows.
package costmodel

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/ps/sim"
	"github.com/softsync/softsync/rdma"
)

// Inputs are the measured or given inputs of a throughput prediction
// (the "inputs" object of softsync sim --json; docs/sim.md).
type Inputs struct {
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

// Row is one prediction: λ learners under one protocol.
type Row struct {
	Learners      int     `json:"learners"`
	Protocol      string  `json:"protocol"`
	N             int     `json:"n"` // 0 for hardsync
	ImagesPerSec  float64 `json:"images_per_sec"`
	Speedup       float64 `json:"speedup"`    // over one learner
	Efficiency    float64 `json:"efficiency"` // speedup / λ
	MeanStaleness float64 `json:"mean_staleness"`
}

// Protocol is a protocol of the sweep: hardsync, n-softsync with a fixed
// n (capped at λ), or λ-softsync (n = λ, fully asynchronous).
type Protocol struct {
	Name  string // as the rows name it: hardsync, N-softsync, λ-softsync
	proto ps.Protocol
	n     int // 0 with proto Softsync: n = λ
}

// At returns the protocol and its n for λ = learners.
func (p Protocol) At(learners int) (ps.Protocol, int) {
	switch {
	case p.proto == ps.Hardsync:
		return ps.Hardsync, 0
	case p.n == 0:
		return ps.Softsync, learners
	}
	return ps.Softsync, min(p.n, learners)
}

// ParseProtocols reads a comma-separated list of hardsync, N-softsync
// and λ-softsync (also spelled lambda-softsync).
func ParseProtocols(s string) ([]Protocol, error) {
	var list []Protocol
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "hardsync":
			list = append(list, Protocol{Name: f, proto: ps.Hardsync})
		case f == "λ-softsync" || f == "lambda-softsync":
			list = append(list, Protocol{Name: "λ-softsync", proto: ps.Softsync})
		case strings.HasSuffix(f, "-softsync"):
			n, err := strconv.Atoi(strings.TrimSuffix(f, "-softsync"))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%q is not hardsync, N-softsync or λ-softsync", f)
			}
			list = append(list, Protocol{Name: f, proto: ps.Softsync, n: n})
		default:
			return nil, fmt.Errorf("%q is not hardsync, N-softsync or λ-softsync", f)
		}
	}
	return list, nil
}

// Presets are clusters described by their hardware rather than measured
// (docs/sim.md says how each figure was chosen).
var Presets = map[string]Inputs{
	// Rudra on an IBM P775 (the paper's cluster): cifar10_full at μ = 4,
	// 4 POWER7 threads per learner and per shard, 192 GB/s of
	// interconnect per node, MPI latency of a few microseconds, a shard
	// core that updates at 8 GB/s and copies at 10 GB/s (assumed). The
	// compute time is fitted: a speedup of 22, 25 and 28 (30-softsync at
	// λ = 30 over one learner, the paper's 22–28×) gives 1.7, 2.0 and
	// 2.5 ms; 2 ms is taken (docs/sim.md).
	"p775": {Model: "cifar10_full", Batch: 4, ComputeSec: 2e-3, ComputeSpread: 0.15, Codec: "none", WireRatio: 1,
		Bandwidth: 192e9, ShardBW: 192e9, LatencySec: 5e-6, ShardRate: 8e9, CopyRate: 10e9, MessageSec: 2e-6,
		Shards: 1, Steps: 200, Source: "preset p775"},
}

// Network is the ps/sim model of in. Besides the codec, a learner's
// client copies its gradient into the push and the pulled weights into its
// network each step (ps.Client): both are learner time at the copy rate.
func (in *Inputs) Network() *sim.Network {
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

// Predict simulates λ = learners under proto (with softsync's n) for
// in.Steps mini-batches each and returns images/s and the mean staleness
// of shard 0.
func Predict(in *Inputs, proto ps.Protocol, n, learners int) (float64, float64, error) {
	total := learners * in.Steps
	cfg := sim.Config{
		PS: ps.Config{Job: 1, Learners: learners, Protocol: proto, N: n, Shards: in.Shards, Batch: in.Batch,
			Solver: sgd.Config{LR: 1e-3, LRMode: sgd.LRStaleness}},
		Init:       make([]float32, 16*in.Shards), // a small vector standing for in.Params values
		TotalSteps: total,
		Compute:    sim.Dist{Kind: sim.LogNormal, Mean: in.ComputeSec, Spread: in.ComputeSpread},
		Latency:    in.LatencySec,
		Seed:       in.Seed,
		Net:        in.Network(),
	}
	res, err := sim.Run(cfg)
	if err != nil {
		return 0, 0, err
	}
	return float64(total*in.Batch) / res.Time, res.Shards[0].MeanStaleness(), nil
}

// Sweep predicts every λ × protocol, protocol by protocol; the speedup is
// over one learner (λ = 1, where every protocol is the same).
func Sweep(in *Inputs, protos []Protocol, lambdas []int) ([]Row, error) {
	base, _, err := Predict(in, ps.Hardsync, 0, 1)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, p := range protos {
		for _, l := range lambdas {
			proto, n := p.At(l)
			ips, tau, err := Predict(in, proto, n, l)
			if err != nil {
				return nil, err
			}
			rows = append(rows, Row{Learners: l, Protocol: p.Name, N: n, ImagesPerSec: ips,
				Speedup: ips / base, Efficiency: ips / base / float64(l), MeanStaleness: tau})
		}
	}
	return rows, nil
}

// Fit finds by bisection (on a log scale) the compute time per
// mini-batch, in seconds, at which λ-softsync with learners learners runs
// speedup times one learner; the speedup grows with the compute time.
func Fit(in *Inputs, speedup float64, learners int) (float64, error) {
	if speedup >= float64(learners) {
		return 0, fmt.Errorf("%g: must be below λ = %d", speedup, learners)
	}
	at := func(t float64) (float64, error) {
		c := *in
		c.ComputeSec = t
		one, _, err := Predict(&c, ps.Hardsync, 0, 1)
		if err != nil {
			return 0, err
		}
		many, _, err := Predict(&c, ps.Softsync, learners, learners)
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
