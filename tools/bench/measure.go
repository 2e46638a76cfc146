package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/ps/sim/costmodel"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transportbench"
)

// MeasureConfig says how MeasureInputs measures the inputs of a
// throughput prediction on this machine.
type MeasureConfig struct {
	Spec *nn.Spec
	// Threads is --threads: the cores the compute time is measured on
	// (0: all; learner.PlanThreads shares them between goroutines and
	// BLAS threads). Engine returns the compute engine of that many BLAS
	// threads, created on first use.
	Threads int
	Engine  func(blasThreads int) (kernels.Engine, error)
	// Link is the transport the link is measured over: tcp (loopback)
	// or inmem.
	Link string
	// KeepBandwidth and KeepLatency keep the link's figures the inputs
	// were given, while its codec is still measured.
	KeepBandwidth, KeepLatency bool
	// MinTime is how long each input is measured for.
	MinTime time.Duration
}

// MeasureInputs measures on this machine every input of in left 0 (the
// compute time of one mini-batch, the link's bandwidth and latency, the
// codec's ratio and time, the shard's update and copy rates), and notes
// what it measured in in.Source.
func MeasureInputs(ctx context.Context, cfg MeasureConfig, in *costmodel.Inputs) error {
	var measured []string
	var grad []float32
	if in.ComputeSec == 0 {
		par := learner.PlanThreads(cfg.Spec, kernels.DefaultThreads(), 1, in.Batch, cfg.Threads)
		e, err := cfg.Engine(par.BLAS)
		if err != nil {
			return err
		}
		if in.ComputeSec, grad, err = measureCompute(e, cfg.Spec, in.Batch, par.Workers, cfg.MinTime); err != nil {
			return err
		}
		measured = append(measured, fmt.Sprintf("compute (%d worker(s))", par.Workers))
	}
	if grad == nil {
		grad = make([]float32, in.Params)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range grad {
			grad[i] = float32(r.NormFloat64() * 1e-3)
		}
	}
	if in.Bandwidth == 0 || in.LatencySec == 0 || in.Codec != "none" {
		if err := measureLink(ctx, &cfg, in); err != nil {
			return err
		}
		measured = append(measured, "link and codec over "+cfg.Link)
	} else {
		in.WireRatio = 1
	}
	if in.ShardRate == 0 {
		var err error
		if in.ShardRate, in.MessageSec, err = measureShard(grad, cfg.MinTime); err != nil {
			return err
		}
		measured = append(measured, "shard update")
	}
	if in.CopyRate == 0 {
		in.CopyRate = measureCopy(len(grad), cfg.MinTime)
		measured = append(measured, "copy")
	}
	in.Source = "given"
	if len(measured) > 0 {
		in.Source = "measured on this machine: " + strings.Join(measured, ", ")
	}
	return nil
}

// measureCompute times one mini-batch's forward and backward pass of
// spec at batch images over workers goroutines, on the synthetic data of
// softsync bench train; it returns the mean time and a gradient.
func measureCompute(e kernels.Engine, spec *nn.Spec, batch, workers int, minTime time.Duration) (float64, []float32, error) {
	net, err := nn.New(spec, e, nn.Config{Batch: batch, Workers: workers})
	if err != nil {
		return 0, nil, err
	}
	defer net.Close()
	net.Init(1)
	in := spec.Input
	ds := data.Synthetic(batch, in.C, in.H, in.W, spec.Classes(), 1)
	ds.Scale = 1.0 / 256 // as softsync bench train
	z := data.MeanNormalizer(ds)
	x, labels := make([]float32, batch*ds.ImageLen()), make([]int32, batch)
	for range data.Batches(ds, z, x, labels) {
		break
	}
	times := timeCalls(minTime, func() { net.Gradient(x, labels) })
	return mean(times), slices.Clone(net.Grads()), nil
}

// timeCalls calls f a few times to warm up, then for at least
// minTime and 5 calls, and returns each call's time in seconds.
func timeCalls(minTime time.Duration, f func()) []float64 {
	for range 3 {
		f()
	}
	var ts []float64
	var total time.Duration
	for len(ts) < 5 || total < minTime {
		t0 := time.Now()
		f()
		d := time.Since(t0)
		ts = append(ts, d.Seconds())
		total += d
	}
	return ts
}

// mean is the average of v: over back-to-back calls, the time a call
// takes on this machine as loaded as it is, which is what a job's steps
// get (a median would keep the calls that no other work interrupted).
func mean(v []float64) float64 {
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// measureLink measures push+pull rounds over the link (softsync bench
// transport's echo rounds) of 4 KiB and of one gradient, uncompressed,
// and fits round = 2·latency + 2·bytes/bandwidth through the two; with a
// codec, one more row gives its wire ratio and its encode and decode time
// per gradient (each round encodes and decodes twice). The figures cfg
// keeps are not replaced.
func measureLink(ctx context.Context, cfg *MeasureConfig, in *costmodel.Inputs) error {
	link := cfg.Link
	codec, err := rdma.ParseCodec(in.Codec)
	if err != nil {
		return err
	}
	small, size := 4096, 4*in.Params
	tc := transportbench.Config{Transports: []string{link}, Codecs: []rdma.Codec{{}}, Sizes: []int{small, size},
		MinTime: cfg.MinTime, Seed: 1}
	rows, err := transportbench.Run(ctx, tc, nil)
	if err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	r1, r2 := rows[0].RoundSec, rows[1].RoundSec
	bw, lat := 0.0, r1/2
	if r2 > r1 {
		bw = 2 * float64(size-small) / (r2 - r1)
		lat = max(0, r1-2*float64(small)/bw) / 2
	}
	if !cfg.KeepBandwidth {
		in.Bandwidth = bw
	}
	if !cfg.KeepLatency {
		in.LatencySec = lat
	}
	in.WireRatio = 1
	if codec.ID != rdma.CodecNone {
		tc.Codecs, tc.Sizes = []rdma.Codec{codec}, []int{size}
		rows, err := transportbench.Run(ctx, tc, nil)
		if err != nil {
			return fmt.Errorf("codec %s: %w", codec, err)
		}
		in.WireRatio, in.EncodeSec, in.DecodeSec = rows[0].Ratio, rows[0].EncodeSec/2, rows[0].DecodeSec/2
	}
	return nil
}

// measureShard times pushes through one shard core holding the whole
// vector (as go test -bench ShardPush ./ps: softsync with c = 1, so that
// every push is an update with momentum and weight decay) and returns the
// gradient bytes per second it updates with, and the time of a push of
// 16 values (the fixed cost of a message).
func measureShard(grad []float32, minTime time.Duration) (float64, float64, error) {
	rate := func(g []float32) (float64, error) {
		const learners = 8
		cfg := ps.Config{Learners: learners, Protocol: ps.Softsync, N: learners, Shards: 1, Batch: 1,
			Solver: sgd.Config{LR: 1e-6, Momentum: 0.9, WeightDecay: 5e-4, LRMode: sgd.LRStaleness}}
		s, err := ps.NewShard(cfg, 0, make([]float32, len(g)), 1)
		if err != nil {
			return 0, err
		}
		m := ps.Msg{Type: ps.MsgPush, Grad: g}
		i := 0
		var failed error
		ts := timeCalls(minTime, func() {
			m.Learner, m.Seq, m.Clock = uint32(i%learners), uint64(i), s.Clock()
			if r := s.Step(m); len(r.Replies) > 0 && failed == nil {
				failed = r.Replies[0].Err
			}
			i++
		})
		return mean(ts), failed
	}
	tPush, err := rate(grad)
	if err != nil {
		return 0, 0, err
	}
	tMsg, err := rate(grad[:16])
	if err != nil {
		return 0, 0, err
	}
	return 4 * float64(len(grad)) / max(tPush-tMsg, 1e-12), tMsg, nil
}

// measureCopy returns the bytes per second of copying n floats, the work
// of a shard answering a pull.
func measureCopy(n int, minTime time.Duration) float64 {
	src, dst := make([]float32, n), make([]float32, n)
	return 4 * float64(n) / mean(timeCalls(minTime, func() { copy(dst, src) }))
}
