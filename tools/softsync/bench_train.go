package main

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/peak"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

func init() { addBenchCommand(newBenchTrainCmd) }

// benchTrainResult is the output of softsync bench train --json.
type benchTrainResult struct {
	Model        string  `json:"model"`
	Batch        int     `json:"batch"`
	Learners     int     `json:"learners"`
	Threads      int     `json:"threads"` // per learner: network workers over a single-threaded engine
	Protocol     string  `json:"protocol"`
	Transport    string  `json:"transport"`
	Overlap      bool    `json:"overlap"`
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
}

func newBenchTrainCmd(app *App) *cobra.Command {
	var model, protocol, transport string
	var batch, learners, images int
	var asJSON, overlap bool
	c := &cobra.Command{
		Use:   "train",
		Short: "Images/s of full training steps through the training path, on random data",
		Long: `Runs training steps (forward, backward, push of the gradient, the server's
update, pull of the weights) through the same job runner as softsync train,
on random data of the model's input shape, with no evaluation, and prints
the images/s of the timed steps (the first tenth of the steps warm up and
are not timed), the GFLOP/s they make (nn.Spec.TrainFLOPs per image: the
convolutions and fully connected layers) and their fraction of the FMA
peak of the kernels' instruction-set level on all the machine's cores
(softsync bench peak, the better of its measures just before and just
after the steps), and how many cores the
process kept busy. --learners 1 is the single learner of softsync train; with
more, the learners run concurrently (softsync, n = λ, unless --protocol says
otherwise) and images/s is their total.`,
		Example: `  softsync bench train --model lenet --batch 64
  softsync bench train --model cifar10_full --batch 100 --json
  softsync bench train --model lenet --batch 8 --learners 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := nn.Load(model)
			if err != nil {
				return fmt.Errorf("--model: %w", err)
			}
			switch {
			case batch < 1:
				return fmt.Errorf("--batch: must be ≥ 1, got %d", batch)
			case learners < 1:
				return fmt.Errorf("--learners: must be ≥ 1, got %d", learners)
			case images < 1:
				return fmt.Errorf("--images: must be ≥ 1, got %d", images)
			case transport != "inmem" && transport != "tcp":
				return fmt.Errorf("--transport: unknown transport %q (want inmem or tcp)", transport)
			}
			proto := ps.Hardsync
			if learners > 1 {
				proto = ps.Softsync
			}
			if protocol != "" {
				if proto, err = ps.ParseProtocol(protocol); err != nil {
					return fmt.Errorf("--protocol: unknown protocol %q (want hardsync or softsync)", protocol)
				}
			}
			par := learner.PlanThreads(spec, kernels.DefaultThreads(), learners, batch, app.Threads)
			app.Threads = par.BLAS
			e, info, err := app.EngineInfo()
			if err != nil {
				return err
			}
			// The yardstick: the register-only FMA peak of the kernels'
			// level on all the machine's cores, the better of its
			// measures just before and just after the steps (other work
			// on a shared machine can hold one of them down).
			pc := peak.Config{Cores: kernels.DefaultThreads(), Rounds: 3}
			pk, err := peak.FMA(pc, info.ISA)
			if err != nil {
				return err
			}
			threads := par.Workers
			res, err := benchTrain(cmd.Context(), e, spec, batch, learners, threads, images, proto, transport, overlap)
			if err != nil {
				return err
			}
			if after, err := peak.FMA(pc, info.ISA); err == nil && after.All > pk.All {
				pk = after
			}
			res.Model, res.Threads, res.Engine, res.ISA = spec.Name, threads, e.Name(), info.ISA.String()
			res.GFlops = res.ImagesPerSec * float64(spec.TrainFLOPs()) / 1e9
			res.PeakGFlops = pk.All
			res.PeakFraction = res.GFlops / pk.All
			if asJSON {
				return app.printJSON(res)
			}
			fmt.Fprintf(app.Out, "%s, batch %d, %d learner(s) × %d thread(s), %s, %s engine (%s): %s images/s, %.1f GFLOP/s = %.0f%% of the %s peak (%.0f GFLOP/s on %d cores); %d timed steps in %s, %.1f cores busy\n",
				res.Model, res.Batch, res.Learners, res.Threads, res.Protocol, res.Engine, res.ISA,
				thousands(int64(res.ImagesPerSec+0.5)), res.GFlops, 100*res.PeakFraction, res.ISA, res.PeakGFlops, pk.Cores,
				res.Steps, fmtDuration(res.Seconds), res.CPUSeconds/res.Seconds)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&model, "model", "lenet", "network: lenet, cifar10_full, mlp or a spec file")
	f.IntVar(&batch, "batch", 64, "mini-batch size μ per learner")
	f.IntVar(&learners, "learners", 1, "learners in this process")
	f.IntVar(&images, "images", 20000, "images to process, all learners together (a tenth of them warm up)")
	f.StringVar(&protocol, "protocol", "", "hardsync or softsync (n = λ) (default: hardsync for one learner, softsync for more)")
	f.StringVar(&transport, "transport", "inmem", "inmem or tcp (loopback)")
	f.BoolVar(&overlap, "overlap", false, "learners prefetch the next weights while computing")
	f.BoolVar(&asJSON, "json", false, "print a JSON object {model, batch, learners, threads, isa, images_per_sec, gflops, peak_gflops, peak_fraction, cpu_seconds, ...}")
	return c
}

// benchTrainConfig is the job of bench train: steps mini-batches per
// learner of random data in MNIST's range of inputs, one shard, softsync
// with n = λ or hardsync, a small stable learning rate.
func benchTrainConfig(spec *nn.Spec, e kernels.Engine, batch, learners, workers, steps int, proto ps.Protocol, transport string) cluster.Config {
	in := spec.Input
	ds := data.Synthetic(max(4*batch*learners, 512), in.C, in.H, in.W, spec.Classes(), 1)
	ds.Scale = 1.0 / 256 // inputs in MNIST's range: a stable loss for any of the networks
	return cluster.Config{Spec: spec, Engine: e, Train: ds, Learners: learners, Batch: batch, Workers: workers,
		Epochs: steps, MaxSteps: steps * learners, Protocol: proto, N: learners, Shards: 1, Transport: transport,
		Codec: rdma.Codec{}, Seed: 1, Solver: sgd.Config{LR: 1e-4, Momentum: 0.9, WeightDecay: 5e-4, LRMode: sgd.LRStaleness}}
}

// benchTrain runs a job on synthetic data and times its steps after a
// warm-up tenth.
func benchTrain(ctx context.Context, e kernels.Engine, spec *nn.Spec, batch, learners, workers, images int,
	proto ps.Protocol, transport string, overlap bool) (*benchTrainResult, error) {
	steps := max(10, images/(batch*learners))
	warm := int64(max(1, steps/10) * learners)
	cfg := benchTrainConfig(spec, e, batch, learners, workers, steps, proto, transport)
	cfg.Overlap = overlap
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
	return &benchTrainResult{Batch: batch, Learners: learners, Protocol: proto.String(), Transport: transport, Overlap: overlap,
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
