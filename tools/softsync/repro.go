package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

func init() { addCommand(newReproCmd) }

// reproFlags holds the flags of softsync repro.
type reproFlags struct {
	data, model, out, ns, modes string
	quick, sim, rules           bool
	seed                        uint64
	learners, batch, single     int
	epochs                      int
	lr                          float64
	trainSubset, testSubset     int
	parallel                    int
}

// reproSchedule is the solver and length of every run of a table: the
// paper keeps everything but λ, μ, the protocol and the rate mode equal.
type reproSchedule struct {
	epochs              int
	lr, momentum, decay float64
	steps               []int
	trainSubset         int // 0: the whole training set
}

// reproSchedules are the full and the --quick schedule of each model:
// cifar10_full's is the paper's (140 epochs, α0 = 0.001, ÷10 after 120
// and 130); LeNet's is Caffe's MNIST solver with the rate step of
// softsync train.
var reproSchedules = map[string][2]reproSchedule{
	"lenet": {
		{epochs: 10, lr: 0.01, momentum: 0.9, decay: 5e-4, steps: []int{8}},
		{epochs: 2, lr: 0.01, momentum: 0.9, decay: 5e-4, trainSubset: 20000},
	},
	"cifar10_full": {
		{epochs: 140, lr: 0.001, momentum: 0.9, decay: 0.004, steps: []int{120, 130}},
		{epochs: 2, lr: 0.001, momentum: 0.9, decay: 0.004, trainSubset: 20000},
	},
}

// reproRun is one row of the table.
type reproRun struct {
	protocol ps.Protocol
	n        int    // softsync only
	rule     string // the rule as spelled in --lr-modes
	solver   sgd.Config
	learners int
	batch    int
	timing   reproTiming // --sim only
	rules    bool        // a row of softsync repro --rules
}

// name is the run's label in the table and in report.json ("run").
func (r reproRun) name() string {
	switch {
	case r.learners == 1:
		return "single learner"
	case r.protocol == ps.Hardsync:
		return "hardsync"
	case r.rules:
		return fmt.Sprintf("%d-softsync, %s, %s", r.n, r.rule, r.timing)
	case r.rule == "staleness":
		return fmt.Sprintf("%d-softsync, α0/τ", r.n)
	case r.rule == "average":
		return fmt.Sprintf("%d-softsync, α0/⟨τ⟩", r.n)
	case r.rule == "constant":
		return fmt.Sprintf("%d-softsync, α0", r.n)
	}
	return fmt.Sprintf("%d-softsync, %s", r.n, r.rule)
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

--rules compares the staleness rules instead, in the simulator: every rule of
--lr-modes (default: ` + defaultReproRules + `)
under n-softsync for every n of --n (default: ` + defaultReproRulesN + `), each under two
timing models of the learners: homogeneous (the one above) and heterogeneous
(each learner's speed drawn once from 1–3×, compute times log-normal with
σ = 0.5). A rule is spelled as --lr-mode of softsync train; "+momentum-comp"
after it adds --momentum-comp. It writes table.md (test error per rule and n,
per timing model), report.json and rules.png (test error against n).`,
		Example: `  softsync repro --quick --sim
  softsync repro --rules --quick --data fashion-mnist --out repro/rules-fashion-mnist
  softsync repro --sim --data fashion-mnist --out repro/fashion-mnist
  softsync repro --data ~/cifar-10-batches-bin --out repro/cifar10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			return runRepro(ctx, app, cmd, &f)
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
	return c
}

// reproSetup is what every run of a table shares.
type reproSetup struct {
	app      *App
	f        *reproFlags
	spec     *nn.Spec
	engine   kernels.Engine
	sched    reproSchedule
	dataName string
	threads  int // --threads: workers per real learner (0: the cores shared out)
	train    *data.Dataset
	test     *data.Dataset
	norm     data.Normalizer
}

func runRepro(ctx context.Context, app *App, cmd *cobra.Command, f *reproFlags) error {
	rs, runs, err := prepareRepro(ctx, app, cmd, f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	mode := "real"
	if f.sim {
		mode = "sim"
	}
	app.Log.Info("repro", "data", rs.dataName, "model", rs.spec.Name, "mode", mode, "runs", len(runs),
		"epochs", rs.sched.epochs, "train_images", rs.train.N)
	entries := make([]*reproEntry, len(runs))
	do := func(i int) error {
		start := time.Now()
		var e *reproEntry
		var err error
		if f.sim {
			e, err = rs.simRun(ctx, runs[i])
		} else {
			e, err = rs.realRun(ctx, runs[i])
		}
		if err != nil {
			return fmt.Errorf("run %q: %w", runs[i].name(), err)
		}
		entries[i] = e
		app.Log.Info("run done", "run", e.Run, "test_error", errorText(e), "mean_staleness", fmt.Sprintf("%.2f", e.Staleness.Mean),
			"took", time.Since(start).Round(time.Second))
		return nil
	}
	if err := forEach(len(runs), f.parallel, f.sim, do); err != nil {
		return err
	}
	return writeRepro(f.out, rs, entries)
}

// forEach calls do(0 … n−1): in order, stopping at the first error, or,
// if concurrent, on at most parallel goroutines at once (0: the cores
// available), returning every error.
func forEach(n, parallel int, concurrent bool, do func(int) error) error {
	if !concurrent {
		for i := range n {
			if err := do(i); err != nil {
				return err
			}
		}
		return nil
	}
	if parallel <= 0 {
		parallel = kernels.DefaultThreads()
	}
	next := make(chan int)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for range min(parallel, n) {
		wg.Go(func() {
			for i := range next {
				errs[i] = do(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// prepareRepro checks the flags, loads the data and the engine, and lists
// the runs.
func prepareRepro(ctx context.Context, app *App, cmd *cobra.Command, f *reproFlags) (*reproSetup, []reproRun, error) {
	switch {
	case f.learners < 1:
		return nil, nil, fmt.Errorf("--learners: must be ≥ 1, got %d", f.learners)
	case f.batch < 1 || f.single < 1:
		return nil, nil, fmt.Errorf("--batch and --single-batch: must be ≥ 1, got %d and %d", f.batch, f.single)
	case f.epochs < 0 || f.testSubset < 0 || f.trainSubset < -1 || f.parallel < 0:
		return nil, nil, fmt.Errorf("--epochs, --train-subset, --test-subset and --parallel must be ≥ 0")
	}
	if f.rules {
		f.sim = true
		if !cmd.Flags().Changed("lr-modes") {
			f.modes = defaultReproRules
		}
		if !cmd.Flags().Changed("n") {
			f.ns = defaultReproRulesN
		}
	}
	runs, err := reproRuns(f)
	if err != nil {
		return nil, nil, err
	}
	ds, err := cluster.LookupData(ctx, f.data, goBinary())
	name, train, test := ds.Name, ds.Train, ds.Test
	if err != nil {
		return nil, nil, fmt.Errorf("--data %s: %w", f.data, err)
	}
	model := f.model
	if model == "" {
		model = "lenet"
		if train.C == 3 {
			model = "cifar10_full"
		}
	}
	spec, err := nn.Load(model)
	if err != nil {
		return nil, nil, fmt.Errorf("--model: %w", err)
	}
	in := spec.Input
	if err := train.CheckShape(in.C, in.H, in.W, spec.Classes()); err != nil {
		return nil, nil, fmt.Errorf("--data %s does not fit --model %s: %w", f.data, model, err)
	}
	scheds, ok := reproSchedules[model]
	if !ok {
		scheds = reproSchedules["lenet"]
	}
	sched := scheds[0]
	if f.quick {
		sched = scheds[1]
	}
	if cmd.Flags().Changed("epochs") {
		sched.epochs = f.epochs
	}
	if f.trainSubset >= 0 {
		sched.trainSubset = f.trainSubset
	}
	if cmd.Flags().Changed("lr") {
		sched.lr = f.lr
	}
	if sched.epochs < 1 {
		return nil, nil, fmt.Errorf("--epochs: must be ≥ 1")
	}
	if sched.trainSubset > 0 {
		train = train.Subset(sched.trainSubset)
	}
	if f.testSubset > 0 {
		test = test.Subset(f.testSubset)
	}
	if per := train.N / f.learners; per < f.batch || train.N < f.single {
		return nil, nil, fmt.Errorf("--train-subset: %d training images are too few for %d learners × %d and a single learner of %d",
			train.N, f.learners, f.batch, f.single)
	}
	// Every learner runs single-threaded kernels: real runs put λ
	// learners on the cores, simulations one run per core.
	threads := app.Threads
	app.Threads = 1
	e, _, err := app.EngineInfo()
	if err != nil {
		return nil, nil, err
	}
	rs := &reproSetup{app: app, f: f, spec: spec, engine: e, sched: sched, dataName: name, threads: threads,
		train: train, test: test, norm: data.MeanNormalizer(train)}
	for _, r := range runs { // a bad combination fails now, not after hours
		cfg := rs.jobConfig(r)
		if err := cfg.ValidateSettings(); err != nil {
			return nil, nil, flagError(err)
		}
	}
	return rs, runs, nil
}

// reproRuns lists the runs of the table: the single learner, hardsync,
// then n-softsync for each n and rule; under --rules n-softsync only, for
// each timing model, n and rule.
func reproRuns(f *reproFlags) ([]reproRun, error) {
	constant := sgd.Config{LRMode: sgd.LRConstant}
	runs := []reproRun{ // τ = 0 under hardsync: the rule makes no difference
		{protocol: ps.Hardsync, learners: 1, batch: f.single, rule: "constant", solver: constant},
		{protocol: ps.Hardsync, learners: f.learners, batch: f.batch, rule: "constant", solver: constant},
	}
	timings := []reproTiming{timingHomogeneous}
	if f.rules {
		runs, timings = nil, []reproTiming{timingHomogeneous, timingHeterogeneous}
	}
	rules, solvers, err := parseReproRules(f.modes)
	if err != nil {
		return nil, err
	}
	var ns []int
	for _, s := range strings.Split(f.ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > f.learners {
			return nil, fmt.Errorf("--n: %q is not a number in [1, %d]", s, f.learners)
		}
		ns = append(ns, n)
	}
	for _, t := range timings {
		for _, n := range ns {
			for i, rule := range rules {
				runs = append(runs, reproRun{protocol: ps.Softsync, n: n, rule: rule, solver: solvers[i], learners: f.learners,
					batch: f.batch, timing: t, rules: f.rules})
			}
		}
	}
	return runs, nil
}

// momentumCompSuffix after a rule in --lr-modes adds --momentum-comp.
const momentumCompSuffix = "+momentum-comp"

// parseReproRules splits --lr-modes into rules, as spelled, and the
// solver fields each sets. A part that starts with a digit continues the
// previous one (the A of hinge:B,A).
func parseReproRules(s string) ([]string, []sgd.Config, error) {
	var rules []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if len(rules) > 0 && p != "" && p[0] >= '0' && p[0] <= '9' {
			rules[len(rules)-1] += "," + p
			continue
		}
		rules = append(rules, p)
	}
	solvers := make([]sgd.Config, len(rules))
	for i, r := range rules {
		base, mc := strings.CutSuffix(r, momentumCompSuffix)
		if err := solvers[i].ParseRule(base); err != nil {
			return nil, nil, fmt.Errorf("--lr-modes: %w", err)
		}
		solvers[i].MomentumComp = mc
	}
	return rules, solvers, nil
}

// jobConfig is run r as a job of softsync train: the configuration real
// runs pass to the job runner and the one reports describe.
func (rs *reproSetup) jobConfig(r reproRun) cluster.Config {
	s := rs.sched
	solver := r.solver
	solver.LR, solver.Momentum, solver.WeightDecay, solver.LRSteps, solver.LRGamma = s.lr, s.momentum, s.decay, s.steps, 0.1
	return cluster.Config{Spec: rs.spec, Engine: rs.engine, Train: rs.train, Test: rs.test,
		Learners: r.learners, Batch: r.batch, Epochs: s.epochs, Protocol: r.protocol, N: r.n, Shards: 1,
		Solver:    solver,
		Transport: "inmem", Codec: rdma.Codec{}, Seed: rs.f.seed, Normalizer: &rs.norm, DataName: rs.dataName}
}

// realRun trains run r with real concurrent learners through the
// in-process job runner (cluster.Start and Wait, the code path of
// softsync train).
func (rs *reproSetup) realRun(ctx context.Context, r reproRun) (*reproEntry, error) {
	cfg := rs.jobConfig(r)
	par := learner.PlanThreads(rs.spec, kernels.DefaultThreads(), r.learners, r.batch, rs.threads)
	cfg.Workers = par.Workers
	var history []cluster.Epoch
	var mu sync.Mutex
	cfg.OnEpoch = func(e cluster.Epoch) {
		mu.Lock()
		history = append(history, e)
		mu.Unlock()
		rs.app.Log.Info("epoch", "run", r.name(), "epoch", e.Epoch, "test_error", fmt.Sprintf("%.2f%%", 100*e.TestError))
	}
	job, err := cluster.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	res, err := job.Wait()
	if err == nil {
		return newReproEntry(&cfg, r, "real", res), nil
	}
	if !diverged(err) || ctx.Err() != nil {
		return nil, err
	}
	// A diverged job has no result: report the epochs it completed and
	// how far it got.
	p := job.Progress()
	mu.Lock()
	defer mu.Unlock()
	res = &cluster.Result{History: history, TestError: nan(), Steps: p.Steps, Images: p.Images,
		Seconds: p.Elapsed.Seconds(), BatchesPerEpoch: p.Batches}
	if res.Seconds > 0 {
		res.ImagesPerSec = float64(res.Images) / res.Seconds
	}
	e := newReproEntry(&cfg, r, "real", res)
	e.Diverged, e.DivergedWhy = true, err.Error()
	return e, nil
}

// diverged reports whether a job failed because its loss or a gradient
// became NaN or infinite, or its updates kept being refused.
func diverged(err error) bool {
	return errors.Is(err, learner.ErrDiverged) || strings.Contains(err.Error(), ps.ErrNonFinite.Error()) ||
		strings.Contains(err.Error(), ps.ErrDiverged.Error())
}

// errorText is a run's test error for logs and the table.
func errorText(e *reproEntry) string {
	switch {
	case e.Diverged:
		return fmt.Sprintf("diverged (epoch %.2f)", e.EpochsDone)
	case e.TestError == nil:
		return "n/a"
	}
	return fmt.Sprintf("%.2f%%", 100**e.TestError)
}

// writeRepro writes table.md, report.json and the plots into dir: the
// test error per epoch and the staleness of every run, or under --rules
// the test error against n and the staleness of the runs under α0/τ.
func writeRepro(dir string, rs *reproSetup, entries []*reproEntry) error {
	if err := os.WriteFile(filepath.Join(dir, "table.md"), []byte(reproTable(rs, entries)), 0o644); err != nil {
		return err
	}
	if err := writeJSONFile(filepath.Join(dir, "report.json"), entries); err != nil {
		return err
	}
	files := []string{"table.md", "report.json", "test-error.png", "staleness.png"}
	errorPlot := writeReproErrorPlot
	row := func(e *reproEntry) (string, bool) { return e.lrMode, true }
	if rs.f.rules {
		files[2], errorPlot = "rules.png", writeReproRulesPlot
		row = func(e *reproEntry) (string, bool) { return e.Timing, e.lrMode == "staleness" }
	}
	if err := errorPlot(filepath.Join(dir, files[2]), rs, entries); err != nil {
		return fmt.Errorf("%s: %w", files[2], err)
	}
	if err := writeReproStalenessPlot(filepath.Join(dir, files[3]), entries, row); err != nil {
		return fmt.Errorf("%s: %w", files[3], err)
	}
	for i := range files {
		files[i] = filepath.Join(dir, files[i])
	}
	fmt.Fprint(rs.app.Out, reproTable(rs, entries))
	fmt.Fprintf(rs.app.Out, "\nwritten: %s\n", strings.Join(files, ", "))
	return nil
}
