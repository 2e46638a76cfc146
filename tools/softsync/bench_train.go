package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/tools/bench"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

func init() { addBenchCommand(newBenchTrainCmd) }

func newBenchTrainCmd(app *App) *cobra.Command {
	var model, protocol, transport string
	var batch, learners, images, shards int
	var asJSON, overlap, early bool
	c := &cobra.Command{
		Use:   "train",
		Short: "Images/s of full training steps through the training path, on random data",
		Long: `Runs training steps (forward, backward, push of the gradient, the server's
update, pull of the weights) through the same job runner as softsync train,
on random data of the model's input shape (as many images as the run
takes when their pixels fit 256 MiB, so that no epoch ends among the
timed steps, else 512), with no evaluation, and prints the images/s of the timed steps (the first tenth of the steps warm up and
are not timed), the GFLOP/s they make (nn.Spec.TrainFLOPs per image: the
convolutions, counted as direct convolution although the layers that run
as Winograd's F(2x2,3x3), F(4x4,3x3) or F(2x2,5x5) multiply less, and
the fully connected layers) and their fraction of the FMA
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
			case shards < 1:
				return fmt.Errorf("--shards: must be ≥ 1, got %d", shards)
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
			res, err := bench.Train(cmd.Context(), bench.TrainConfig{Spec: spec, Engine: e, ISA: info.ISA, Batch: batch, Learners: learners,
				Workers: par.Workers, Images: images, Protocol: proto, Transport: transport, Overlap: overlap,
				Shards: shards, EarlyPush: early})
			if err != nil {
				return err
			}
			if asJSON {
				return app.printJSON(res)
			}
			fmt.Fprintf(app.Out, "%s, batch %d, %d learner(s) × %d thread(s), %s, %s engine (%s): %s images/s, %.1f GFLOP/s = %.0f%% of the %s peak (%.0f GFLOP/s on %d cores); %d timed steps in %s, %.1f cores busy\n",
				res.Model, res.Batch, res.Learners, res.Threads, res.Protocol, res.Engine, res.ISA,
				textfmt.Thousands(int64(res.ImagesPerSec+0.5)), res.GFlops, 100*res.PeakFraction, res.ISA, res.PeakGFlops, res.PeakCores,
				res.Steps, textfmt.Duration(res.Seconds), res.CPUSeconds/res.Seconds)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&model, "model", "lenet", "network: lenet, cifar10_full, mlp, alexnet, resnet18 or a spec file")
	f.IntVar(&batch, "batch", 64, "mini-batch size μ per learner")
	f.IntVar(&learners, "learners", 1, "learners in this process")
	f.IntVar(&images, "images", 20000, "images to process, all learners together (a tenth of them warm up)")
	f.StringVar(&protocol, "protocol", "", "hardsync or softsync (n = λ) (default: hardsync for one learner, softsync for more)")
	f.StringVar(&transport, "transport", "inmem", "inmem or tcp (loopback)")
	f.BoolVar(&overlap, "overlap", false, "learners prefetch the next weights while computing")
	f.IntVar(&shards, "shards", 1, "shards of the in-process parameter server")
	f.BoolVar(&early, "early-push", false, "learners send each shard its slice of the gradient as soon as backward has produced it (train's --early-push)")
	f.BoolVar(&asJSON, "json", false, "print a JSON object {model, batch, learners, threads, isa, images_per_sec, gflops, peak_gflops, peak_fraction, cpu_seconds, ...}")
	return c
}
