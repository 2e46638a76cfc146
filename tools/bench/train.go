package bench

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/kernels/peak"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// TrainResult is the output of softsync bench train --json.
type TrainResult struct {
	Model        string  `json:"model"`
	Batch        int     `json:"batch"`
	Learners     int     `json:"learners"`
	Threads      int     `json:"threads"` // per learner: network workers over a single-threaded engine
	Protocol     string  `json:"protocol"`
	Transport    string  `json:"transport"`
	Overlap      bool    `json:"overlap"`
	Shards       int     `json:"shards"`
	EarlyPush    bool    `json:"early_push"`
	Engine       string  `json:"engine"`
	ISA          string  `json:"isa"`   // instruction-set level of the kernels
	Steps        int64   `json:"steps"` // timed steps, all learners
	Seconds      float64 `json:"seconds"`
	ImagesPerSec float64 `json:"images_per_sec"`
	// GFlops counts nn.Spec.TrainFLOPs per image (convolutions and
	// fully connected layers: forward, weight and input gradients).
	GFlops float64 `json:"gflops"`
	// PeakGFlops is bench peak's figure for the kernels' level on all
	// the machine's cores, the better of its measures just before and just
	// after the steps; PeakFraction is GFlops / PeakGFlops.
	PeakGFlops   float64 `json:"peak_gflops"`
	PeakFraction float64 `json:"peak_fraction"`
	// CPUSeconds is the process's CPU time (user and system) over the
	// timed steps: on a shared machine, CPUSeconds / Seconds below the
	// cores in use says that other work took some of them.
	CPUSeconds float64 `json:"cpu_seconds"`
	// PeakCores is the number of cores of PeakGFlops.
	PeakCores int `json:"-"`
}

// TrainConfig is a job of bench train: Learners learners of Workers
// goroutines each over Engine, Images images in all (a tenth of them warm
// up) of random data of Spec's input shape.
type TrainConfig struct {
	Spec     *nn.Spec
	Engine   kernels.Engine
	ISA      isa.Level // the kernels' level: the peak the result is set against
	Batch    int
	Learners int
	Workers  int
	Images   int
	Protocol ps.Protocol
	// Transport is inmem or tcp (loopback).
	Transport string
	Overlap   bool // learners prefetch the next weights while computing
	// Shards is the number of shards of the in-process server (0: 1), and
	// EarlyPush has the learners send each its slice of the gradient as
	// soon as backward has produced it (softsync train's --early-push).
	Shards    int
	EarlyPush bool
}

// Train runs training steps (forward, backward, push of the gradient, the
// server's update, pull of the weights) through the same job runner as
// softsync train, on random data of the model's input shape, with no
// evaluation, and returns the images/s of the timed steps (the first
// tenth warm up), the GFLOP/s they make and their fraction of the FMA
// peak of the kernels' level on all the machine's cores, measured just
// before and just after the steps (the better of the two: other work on
// a shared machine can hold one of them down).
func Train(ctx context.Context, cfg TrainConfig) (*TrainResult, error) {
	pc := peak.Config{Cores: kernels.DefaultThreads(), Rounds: 3}
	pk, err := peak.FMA(pc, cfg.ISA)
	if err != nil {
		return nil, err
	}
	res, err := train(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if after, err := peak.FMA(pc, cfg.ISA); err == nil && after.All > pk.All {
		pk = after
	}
	res.Model, res.Threads, res.Engine, res.ISA = cfg.Spec.Name, cfg.Workers, cfg.Engine.Name(), cfg.ISA.String()
	res.GFlops = res.ImagesPerSec * float64(cfg.Spec.TrainFLOPs()) / 1e9
	res.PeakGFlops, res.PeakCores = pk.All, pk.Cores
	res.PeakFraction = res.GFlops / pk.All
	return res, nil
}

// trainJob is the job of bench train: steps mini-batches per
// learner of random data in MNIST's range of inputs, one shard, softsync
// with n = λ or hardsync, a small stable learning rate.
func trainJob(spec *nn.Spec, e kernels.Engine, batch, learners, workers, steps int, proto ps.Protocol, transport string) cluster.Config {
	in := spec.Input
	ds := data.Synthetic(benchImages(in.C*in.H*in.W, batch*learners, steps), in.C, in.H, in.W, spec.Classes(), 1)
	ds.Scale = 1.0 / 256 // inputs in MNIST's range: a stable loss for any of the networks
	return cluster.Config{Spec: spec, Engine: e, Train: ds, Learners: learners, Batch: batch, Workers: workers,
		Epochs: steps, MaxSteps: steps * learners, Protocol: proto, N: learners, Shards: 1, Transport: transport,
		Codec: rdma.Codec{}, Seed: 1, Solver: sgd.Config{LR: 1e-4, Momentum: 0.9, WeightDecay: 5e-4, LRMode: sgd.LRStaleness}}
}

// benchDataBytes bounds the pixels of bench train's synthetic data set.
const benchDataBytes = 256 << 20

// benchImages returns the size of bench train's data set for a run of
// steps rounds of round images of imageLen bytes: the whole run when its
// pixels fit benchDataBytes, so that no epoch ends among the timed steps
// (at an epoch's end the server copies the weights for the evaluator: of
// AlexNet, 244 MB in fresh memory, whose pages the timed step would
// fault in), else at least 512 images and 4 rounds.
func benchImages(imageLen, round, steps int) int {
	n := max(4*round, 512)
	if all := round * steps; all > n && all*imageLen <= benchDataBytes {
		n = all
	}
	return n
}

// train runs a job on synthetic data and times its steps after a
// warm-up tenth.
func train(ctx context.Context, tc TrainConfig) (*TrainResult, error) {
	batch, learners := tc.Batch, tc.Learners
	steps := max(10, tc.Images/(batch*learners))
	warm := int64(max(1, steps/10) * learners)
	cfg := trainJob(tc.Spec, tc.Engine, batch, learners, tc.Workers, steps, tc.Protocol, tc.Transport)
	cfg.Overlap, cfg.EarlyPush, cfg.Shards = tc.Overlap, tc.EarlyPush, max(1, tc.Shards)
	job, err := cluster.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var s0 int64
	var t0 time.Duration
	var cpu0 float64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // note when the warm-up is over
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if p := job.Progress(); p.Steps >= warm {
					mu.Lock()
					s0, t0, cpu0 = p.Steps, p.Elapsed, cpuSeconds()
					mu.Unlock()
					return
				}
			}
		}
	})
	cpuStart := cpuSeconds()
	res, err := job.Wait()
	cpuEnd := cpuSeconds()
	close(stop)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if s0 == 0 || res.Steps <= s0 || t0.Seconds() >= res.Seconds {
		s0, t0, cpu0 = 0, 0, cpuStart // too fast to see the warm-up end: time everything
	}
	sec := res.Seconds - t0.Seconds()
	return &TrainResult{Batch: batch, Learners: learners, Protocol: tc.Protocol.String(), Transport: tc.Transport, Overlap: tc.Overlap,
		Shards: cfg.Shards, EarlyPush: tc.EarlyPush,
		Steps: res.Steps - s0, Seconds: sec, ImagesPerSec: float64((res.Steps-s0)*int64(batch)) / sec,
		CPUSeconds: cpuEnd - cpu0}, nil
}

// cpuSeconds returns the process's CPU time so far, user and system.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
