package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/tools/repro"
)

func init() { addCommand(newReproCmd) }

// reproFlags holds the flags of softsync repro.
type reproFlags struct {
	data, model, out, ns, modes string
	imagenet                    string
	images                      imageFlags
	quick, sim, rules           bool
	seed                        uint64
	learners, batch, single     int
	epochs                      int
	lr                          float64
	trainSubset, testSubset     int
	parallel                    int
}

func newReproCmd(app *App) *cobra.Command {
	var f reproFlags
	c := &cobra.Command{
		Use:   "repro",
		Short: "The paper's accuracy table: hardsync and n-softsync, constant and staleness-aware rates",
		Long: `Runs the design of the paper's CIFAR10 experiment (Zhang et al., IJCAI 2016) on the
data set given: λ = 30 learners of μ = 4 under n-softsync for n ∈ {1, 2, 4, 10, 15, 30},
each with the constant rate α0 and with the staleness-aware rate α0/τ, plus hardsync
(λ = 30, μ = 4) and the single learner (μ = 128), all with the same solver and
schedule. It writes, into --out:

  table.md     test error, mean and max staleness, updates and images/s per run
  report.json  one object per run with the fields of softsync train --json, plus
               "run", "mode" and "diverged" (docs/repro.md)
  test-error.png  test error per epoch of every run
  staleness.png   staleness histogram of every softsync run

The model follows the data: lenet on MNIST, Fashion-MNIST and other idx folders,
cifar10_full on CIFAR-10. Schedules (--quick: a short one):
  lenet         10 epochs, α0 0.01, momentum 0.9, weight decay 5e-4, ×0.1 after
                epoch 8; --quick: 2 epochs on the first 20,000 training images
  cifar10_full  140 epochs, α0 0.001, momentum 0.9, weight decay 0.004, ×0.1 after
                epochs 120 and 130 (the paper); --quick: 2 epochs on 20,000 images

Without --sim the runs are real: λ concurrent learners in this process, one after
the other, through the job runner of softsync train. With --sim they run in the
deterministic simulator (ps/sim): learners in virtual time, compute and message
times drawn from a seeded model, every gradient really computed on the weights
that learner pulled, mini-batches handed out in one global order per epoch as the
learners start computing, the test error measured at each epoch end on the
shard's weights. The same seed gives the same table, bit for bit; --parallel
runs several simulations at once. A run whose loss becomes NaN or infinite, or
whose updates keep being refused (each would make a weight NaN or infinite),
stops and is reported as diverged.

--imagenet DIR runs the design of the paper's ImageNet experiment instead, on the
image folder DIR (DIR/train/CLASS/IMAGE, DIR/val/CLASS/IMAGE; or a list file with
--data-root and --val-list): λ = 18 learners of μ = 16 under n-softsync for
n ∈ {1, 2, 4, 9, 18} with α0 and α0/τ, hardsync (18 × 16) and the single learner
(μ = 256), alexnet (--model: any network taking 3-channel images; its classes
are the folder's for alexnet and resnet18) with the paper's schedule: 35 epochs,
α0 0.01, momentum 0.9, weight decay 5e-4, ×0.2 after epochs 20 and 30; --quick:
2 epochs on 20,000 training images spread over the classes, evaluated on 2,000.
Images are resized, cropped (random for training, centre for evaluation) and
mirrored as softsync train does (--resize, --crop, --mirror, --data-threads).
The table adds the top-5 error and the learners' data wait, and
test-error-top5.png the top-5 error per epoch. Real learners only (no --sim).

--rules compares the staleness rules instead, in the simulator: every rule of
--lr-modes (default: ` + repro.DefaultRules + `)
under n-softsync for every n of --n (default: ` + repro.DefaultRulesN + `), each under two
timing models of the learners: homogeneous (the one above) and heterogeneous
(each learner's speed drawn once from 1–3×, compute times log-normal with
σ = 0.5). A rule is spelled as --lr-mode of softsync train; "+momentum-comp"
after it adds --momentum-comp. It writes table.md (test error per rule and n,
per timing model), report.json and rules.png (test error against n).`,
		Example: `  softsync repro --quick --sim
  softsync repro --rules --quick --data fashion-mnist --out repro/rules-fashion-mnist
  softsync repro --sim --data fashion-mnist --out repro/fashion-mnist
  softsync repro --data ~/cifar-10-batches-bin --out repro/cifar10
  softsync repro --imagenet ~/imagenet --quick --out repro/imagenet`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			cfg, err := f.config(ctx, cmd, app)
			if err != nil {
				return err
			}
			t, err := repro.Prepare(ctx, cfg)
			if te := (*repro.TooFewImagesError)(nil); errors.As(err, &te) {
				return fmt.Errorf("--train-subset: %w", err)
			}
			if err != nil {
				return flagError(err)
			}
			res, err := t.Run(ctx)
			if err != nil {
				return err
			}
			fmt.Fprint(app.Out, res.Text)
			fmt.Fprintf(app.Out, "\nwritten: %s\n", strings.Join(res.Files, ", "))
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.data, "data", "mnist", dataFlagHelp)
	fl.StringVar(&f.model, "model", "", "network (default: lenet, or cifar10_full for CIFAR-10)")
	fl.StringVar(&f.out, "out", "repro", "folder for table.md, report.json and the plots (created)")
	fl.BoolVar(&f.quick, "quick", false, "the short schedule (see above)")
	fl.BoolVar(&f.sim, "sim", false, "run in the deterministic simulator (virtual time, bit-for-bit reproducible)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the weights, the data order and the simulator")
	fl.IntVar(&f.learners, "learners", 30, "λ of the distributed runs")
	fl.IntVar(&f.batch, "batch", 4, "μ of the distributed runs")
	fl.IntVar(&f.single, "single-batch", 128, "μ of the single learner")
	fl.StringVar(&f.ns, "n", "1,2,4,10,15,30", "softsync's n values, comma-separated (each ≤ --learners)")
	fl.StringVar(&f.modes, "lr-modes", "constant,staleness", "staleness rules of the softsync runs, comma-separated, each as --lr-mode of softsync train (a number after a comma continues hinge:B,A); +momentum-comp adds --momentum-comp")
	fl.BoolVar(&f.rules, "rules", false, "compare the staleness rules under two timing models, in the simulator (see above)")
	fl.IntVar(&f.epochs, "epochs", 0, "epochs of every run (default: the schedule's)")
	fl.Float64Var(&f.lr, "lr", 0, "base learning rate α0 of every run (default: the schedule's)")
	fl.IntVar(&f.trainSubset, "train-subset", -1, "train on the first N images (default: the schedule's; 0 = all)")
	fl.IntVar(&f.testSubset, "test-subset", 0, "evaluate on the first N test images; 0 = all")
	fl.IntVar(&f.parallel, "parallel", 0, "--sim: simulations run at once (default: the cores available)")
	fl.StringVar(&f.imagenet, "imagenet", "", "run the paper's ImageNet design on this image folder or list file (see above)")
	addImageFlags(fl, &f.images)
	return c
}

// The paper's ImageNet design (--imagenet): λ, μ, the single learner's
// μ and softsync's n values.
const (
	imagenetLearners = 18
	imagenetBatch    = 16
	imagenetSingle   = 256
	imagenetN        = "1,2,4,9,18"
)

// config checks the flags, loads the data and the network, and makes
// repro's configuration of them.
func (f *reproFlags) config(ctx context.Context, cmd *cobra.Command, app *App) (repro.Config, error) {
	changed := cmd.Flags().Changed
	switch {
	case f.learners < 1:
		return repro.Config{}, fmt.Errorf("--learners: must be ≥ 1, got %d", f.learners)
	case f.batch < 1 || f.single < 1:
		return repro.Config{}, fmt.Errorf("--batch and --single-batch: must be ≥ 1, got %d and %d", f.batch, f.single)
	case f.epochs < 0 || f.testSubset < 0 || f.trainSubset < -1 || f.parallel < 0:
		return repro.Config{}, fmt.Errorf("--epochs, --train-subset, --test-subset and --parallel must be ≥ 0")
	}
	if f.imagenet != "" {
		switch {
		case changed("data"):
			return repro.Config{}, fmt.Errorf("--data and --imagenet: give one (--imagenet DIR is the data)")
		case f.rules:
			return repro.Config{}, fmt.Errorf("--rules and --imagenet: the rules are compared in the simulator, which takes data held in memory")
		}
		if !changed("learners") {
			f.learners = imagenetLearners
		}
		if !changed("batch") {
			f.batch = imagenetBatch
		}
		if !changed("single-batch") {
			f.single = imagenetSingle
		}
		if !changed("n") {
			f.ns = imagenetN
		}
	}
	modes, ns := f.modes, f.ns
	if f.rules && !changed("lr-modes") {
		modes = repro.DefaultRules
	}
	if f.rules && !changed("n") {
		ns = repro.DefaultRulesN
	}
	rules, err := repro.ParseRules(modes)
	if err != nil {
		return repro.Config{}, fmt.Errorf("--lr-modes: %w", err)
	}
	var nv []int
	for _, s := range strings.Split(ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > f.learners {
			return repro.Config{}, fmt.Errorf("--n: %q is not a number in [1, %d]", s, f.learners)
		}
		nv = append(nv, n)
	}
	ds, spec, err := f.loadData(ctx, cmd, app)
	if err != nil {
		return repro.Config{}, err
	}
	switch { // 0 takes the schedule's
	case changed("epochs") && f.epochs < 1:
		return repro.Config{}, fmt.Errorf("--epochs: must be ≥ 1")
	case changed("lr") && f.lr == 0: // other rates are checked with the solver's settings
		return repro.Config{}, fmt.Errorf("--lr: must be a finite number > 0, got 0")
	}
	// Every learner runs single-threaded kernels: real runs put λ
	// learners on the cores, simulations one run per core.
	threads := app.Threads
	engine := func() (kernels.Engine, error) {
		app.Threads = 1
		e, _, err := app.EngineInfo()
		return e, err
	}
	return repro.Config{Spec: spec, Train: ds.Train, Test: ds.Test, DataName: ds.Name, ImageNet: f.imagenet != "", Out: f.out, Quick: f.quick, Sim: f.sim, Rules: f.rules,
		Seed: f.seed, Learners: f.learners, Batch: f.batch, Single: f.single, N: nv, LRModes: rules, Epochs: f.epochs, LR: f.lr,
		TrainSubset: f.trainSubset, TestSubset: f.testSubset, Parallel: f.parallel, Threads: threads, Engine: engine, Log: app.Log}, nil
}

// loadData loads --data or --imagenet and the network (--model, else
// the data's: lenet, cifar10_full for CIFAR-10, alexnet for --imagenet).
func (f *reproFlags) loadData(ctx context.Context, cmd *cobra.Command, app *App) (cluster.DataSet, *nn.Spec, error) {
	if f.imagenet != "" {
		cfg := &cluster.Config{Model: cmp.Or(f.model, "alexnet"), Data: f.imagenet}
		if err := cfg.LoadModel(); err != nil {
			return cluster.DataSet{}, nil, fmt.Errorf("--model: %w", err)
		}
		if !cluster.IsImageData(f.imagenet) {
			return cluster.DataSet{}, nil, fmt.Errorf("--imagenet %s: not an image folder (DIR/train/CLASS/IMAGE) nor a list file", f.imagenet)
		}
		if err := f.images.fit(cfg, cmd.Flags()); err != nil {
			return cluster.DataSet{}, nil, err
		}
		ds, err := app.lookupImages(cfg, &f.images)
		return ds, cfg.Spec, err
	}
	for _, name := range imageFlagNames {
		if cmd.Flags().Changed(name) {
			return cluster.DataSet{}, nil, fmt.Errorf("--%s: applies to --imagenet", name)
		}
	}
	ds, err := findData(ctx, f.data, goBinary())
	if err != nil {
		return ds, nil, fmt.Errorf("--data %s: %w", f.data, err)
	}
	model := f.model
	if model == "" {
		model = "lenet"
		if ds.Train.Info().C == 3 {
			model = "cifar10_full"
		}
	}
	spec, err := nn.Load(model)
	if err != nil {
		return ds, nil, fmt.Errorf("--model: %w", err)
	}
	in := spec.Input
	if err := ds.Train.Info().CheckShape(in.C, in.H, in.W, spec.Classes()); err != nil {
		return ds, nil, fmt.Errorf("--data %s does not fit --model %s: %w", f.data, model, err)
	}
	return ds, spec, nil
}
