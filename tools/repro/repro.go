// Package repro is the harness of softsync repro: the paper's accuracy
// table (Zhang et al., IJCAI 2016: hardsync and n-softsync under the
// constant rate α0 and the staleness-aware α0/τ, beside a single
// learner), and with Config.Rules the staleness rules compared under two
// timing models of the learners. Each run is a job of the paper's design
// on the data given, real (λ concurrent learners in this process, through
// cluster.Start, the code path of softsync train) or simulated (ps/sim:
// the shard core in virtual time, every gradient really computed; the
// same seed gives the same table, bit for bit).
//
// Prepare checks a Config, loads the data and lists the runs; Table.Run
// runs them and writes table.md, report.json (docs/repro.md) and the
// plots into Config.Out. The package never reads flags or the
// environment and never prints: it logs its progress to Config.Log, and
// the binary prints the table Run returns.
package repro

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// Config is a table of softsync repro.
type Config struct {
	// Spec is the network, Train and Test the data set (whole: the
	// schedule and the subsets below take their part), DataName its name
	// in the table and the reports.
	Spec        *nn.Spec
	Train, Test data.Set
	DataName    string
	// ImageNet runs the paper's ImageNet design: alexnet's schedule
	// (whatever the network), top-5 errors in the table and a plot of
	// them. The data is an image set (real runs only).
	ImageNet bool
	// Out is the folder of table.md, report.json and the plots
	// (created).
	Out string
	// Quick takes the short schedule; Sim runs in the simulator; Rules
	// compares the staleness rules instead (in the simulator).
	Quick, Sim, Rules bool
	Seed              uint64
	// Learners and Batch are λ and μ of the distributed runs, Single
	// the μ of the single learner.
	Learners, Batch, Single int
	// N are softsync's n values (each ≤ Learners), LRModes the rules of
	// the softsync runs as ParseRules returns them.
	N       []int
	LRModes []string
	// Epochs and LR replace the schedule's when not 0; TrainSubset
	// replaces it when ≥ 0 (0: every training image); TestSubset > 0
	// evaluates on the first TestSubset test images.
	Epochs                  int
	LR                      float64
	TrainSubset, TestSubset int
	// Parallel is the simulations run at once (0: the cores available).
	Parallel int
	// Threads is the workers of a real learner (0: the cores shared out).
	Threads int
	// Engine returns the compute engine of single-threaded kernels every
	// learner runs on, created on first use.
	Engine func() (kernels.Engine, error)
	Log    *slog.Logger // nil: nothing logged
}

// TooFewImagesError says that the training images a table keeps (the
// schedule's or Config.TrainSubset) cannot give every learner a
// mini-batch.
type TooFewImagesError struct{ Images, Learners, Batch, Single int }

func (e *TooFewImagesError) Error() string {
	return fmt.Sprintf("%d training images are too few for %d learners × %d and a single learner of %d",
		e.Images, e.Learners, e.Batch, e.Single)
}

// Result is a table that ran: the text of table.md and the files written.
type Result struct {
	Text    string
	Files   []string
	Entries []*Entry
}

// schedule is the solver and length of every run of a table: the
// paper keeps everything but λ, μ, the protocol and the rate mode equal.
type schedule struct {
	epochs              int
	lr, momentum, decay float64
	steps               []int
	gamma               float64 // the rate's factor at each step (0: 0.1)
	trainSubset         int     // 0: the whole training set
	testSubset          int     // 0: the whole test set
}

// schedules are the full and the --quick schedule of each model:
// cifar10_full's is the paper's (140 epochs, α0 = 0.001, ÷10 after 120
// and 130), alexnet's too (35 epochs, α0 = 0.01, ÷5 after 20 and 30;
// Caffe's weight decay); LeNet's is Caffe's MNIST solver with the rate
// step of softsync train.
var schedules = map[string][2]schedule{
	"lenet": {
		{epochs: 10, lr: 0.01, momentum: 0.9, decay: 5e-4, steps: []int{8}},
		{epochs: 2, lr: 0.01, momentum: 0.9, decay: 5e-4, trainSubset: 20000},
	},
	"cifar10_full": {
		{epochs: 140, lr: 0.001, momentum: 0.9, decay: 0.004, steps: []int{120, 130}},
		{epochs: 2, lr: 0.001, momentum: 0.9, decay: 0.004, trainSubset: 20000},
	},
	"alexnet": {
		{epochs: 35, lr: 0.01, momentum: 0.9, decay: 5e-4, steps: []int{20, 30}, gamma: 0.2},
		{epochs: 2, lr: 0.01, momentum: 0.9, decay: 5e-4, gamma: 0.2, trainSubset: 20000, testSubset: 2000},
	},
}

// run is one row of the table.
type run struct {
	protocol ps.Protocol
	n        int    // softsync only
	rule     string // the rule as spelled in --lr-modes
	solver   sgd.Config
	learners int
	batch    int
	timing   timing // --sim only
	rules    bool   // a row of softsync repro --rules
}

// name is the run's label in the table and in report.json ("run").
func (r run) name() string {
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

// Table is a table ready to run: its runs and what they share.
type Table struct {
	cfg      Config
	runs     []run
	spec     *nn.Spec
	engine   kernels.Engine
	sched    schedule
	dataName string
	train    data.Set
	test     data.Set
	norm     data.Normalizer
}

// Prepare checks cfg, takes the schedule's part of the data and lists
// the runs; the engine is
// created here, and every run's settings are checked, so that a bad
// combination fails now, not after hours.
func Prepare(ctx context.Context, cfg Config) (*Table, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Rules {
		cfg.Sim = true
	}
	runs, err := listRuns(&cfg)
	if err != nil {
		return nil, err
	}
	spec, name, train, test := cfg.Spec, cfg.DataName, cfg.Train, cfg.Test
	in := spec.Input
	if err := train.Info().CheckShape(in.C, in.H, in.W, spec.Classes()); err != nil {
		return nil, fmt.Errorf("data %s does not fit model %s: %w", name, spec.Name, err)
	}
	if _, inMemory := train.(*data.Dataset); cfg.Sim && !inMemory {
		return nil, fmt.Errorf("%s is read from disk: the simulator takes data held in memory (MNIST, CIFAR-10); run real learners", name)
	}
	model := spec.Name
	if cfg.ImageNet {
		model = "alexnet" // the design's schedule, whatever network stands in
	}
	scheds, ok := schedules[model]
	if !ok {
		scheds = schedules["lenet"]
	}
	sched := scheds[0]
	if cfg.Quick {
		sched = scheds[1]
	}
	if cfg.Epochs != 0 {
		sched.epochs = cfg.Epochs
	}
	if cfg.TrainSubset >= 0 {
		sched.trainSubset = cfg.TrainSubset
	}
	if cfg.LR != 0 {
		sched.lr = cfg.LR
	}
	if sched.epochs < 1 {
		return nil, fmt.Errorf("epochs: must be ≥ 1, got %d", sched.epochs)
	}
	if cfg.TestSubset > 0 {
		sched.testSubset = cfg.TestSubset
	}
	if test == nil {
		return nil, fmt.Errorf("data %s has no test set (an image folder's val/, a --val-list)", name)
	}
	train, test = data.Subset(train, sched.trainSubset), data.Subset(test, sched.testSubset)
	if n := train.Info().Len; n/cfg.Learners < cfg.Batch || n < cfg.Single {
		return nil, &TooFewImagesError{Images: n, Learners: cfg.Learners, Batch: cfg.Batch, Single: cfg.Single}
	}
	e, err := cfg.Engine()
	if err != nil {
		return nil, err
	}
	norm, err := train.Mean(cluster.MeanImages) // once for every run
	if err != nil {
		return nil, err
	}
	rs := &Table{cfg: cfg, runs: runs, spec: spec, engine: e, sched: sched, dataName: name,
		train: train, test: test, norm: norm}
	for _, r := range runs { // a bad combination fails now, not after hours
		jc := rs.jobConfig(r)
		if err := jc.ValidateSettings(); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// Run runs the table's runs, in order, or simulated on Config.Parallel
// goroutines at once, and writes table.md, report.json and the plots into
// Config.Out.
func (rs *Table) Run(ctx context.Context) (*Result, error) {
	cfg := &rs.cfg
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	mode := "real"
	if cfg.Sim {
		mode = "sim"
	}
	runs := rs.runs
	cfg.Log.Info("repro", "data", rs.dataName, "model", rs.spec.Name, "mode", mode, "runs", len(runs),
		"epochs", rs.sched.epochs, "train_images", rs.train.Info().Len)
	entries := make([]*Entry, len(runs))
	do := func(i int) error {
		start := time.Now()
		var e *Entry
		var err error
		if cfg.Sim {
			e, err = rs.simRun(ctx, runs[i])
		} else {
			e, err = rs.realRun(ctx, runs[i])
		}
		if err != nil {
			return fmt.Errorf("run %q: %w", runs[i].name(), err)
		}
		entries[i] = e
		cfg.Log.Info("run done", "run", e.Run, "test_error", errorText(e), "test_error_top5", fracText(e.TestError5), "mean_staleness", fmt.Sprintf("%.2f", e.Staleness.Mean),
			"took", time.Since(start).Round(time.Second))
		return nil
	}
	if err := forEach(len(runs), cfg.Parallel, cfg.Sim, do); err != nil {
		return nil, err
	}
	return rs.write(entries)
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

// listRuns lists the runs of the table: the single learner, hardsync,
// then n-softsync for each n and rule; under --rules n-softsync only, for
// each timing model, n and rule.
func listRuns(f *Config) ([]run, error) {
	constant := sgd.Config{LRMode: sgd.LRConstant}
	runs := []run{ // τ = 0 under hardsync: the rule makes no difference
		{protocol: ps.Hardsync, learners: 1, batch: f.Single, rule: "constant", solver: constant},
		{protocol: ps.Hardsync, learners: f.Learners, batch: f.Batch, rule: "constant", solver: constant},
	}
	timings := []timing{timingHomogeneous}
	if f.Rules {
		runs, timings = nil, []timing{timingHomogeneous, timingHeterogeneous}
	}
	solvers := make([]sgd.Config, len(f.LRModes))
	for i, r := range f.LRModes {
		var err error
		if solvers[i], err = parseRule(r); err != nil {
			return nil, err
		}
	}
	for _, n := range f.N {
		if n < 1 || n > f.Learners {
			return nil, fmt.Errorf("n = %d: not in [1, %d]", n, f.Learners)
		}
	}
	for _, t := range timings {
		for _, n := range f.N {
			for i, rule := range f.LRModes {
				runs = append(runs, run{protocol: ps.Softsync, n: n, rule: rule, solver: solvers[i], learners: f.Learners,
					batch: f.Batch, timing: t, rules: f.Rules})
			}
		}
	}
	return runs, nil
}

// momentumCompSuffix after a rule in --lr-modes adds --momentum-comp.
const momentumCompSuffix = "+momentum-comp"

// ParseRules splits a list of rules (--lr-modes) into the rules, each
// as spelled, and checks each: a rule is spelled as --lr-mode of softsync
// train, "+momentum-comp" after it adds --momentum-comp. A part that
// starts with a digit continues the previous one (the A of hinge:B,A).
func ParseRules(s string) ([]string, error) {
	var rules []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if len(rules) > 0 && p != "" && p[0] >= '0' && p[0] <= '9' {
			rules[len(rules)-1] += "," + p
			continue
		}
		rules = append(rules, p)
	}
	for _, r := range rules {
		if _, err := parseRule(r); err != nil {
			return nil, err
		}
	}
	return rules, nil
}

// parseRule returns the solver fields a rule, as ParseRules spells it,
// sets.
func parseRule(r string) (sgd.Config, error) {
	var s sgd.Config
	base, mc := strings.CutSuffix(r, momentumCompSuffix)
	if err := s.ParseRule(base); err != nil {
		return s, err
	}
	s.MomentumComp = mc
	return s, nil
}

// jobConfig is run r as a job of softsync train: the configuration real
// runs pass to the job runner and the one reports describe.
func (rs *Table) jobConfig(r run) cluster.Config {
	s := rs.sched
	solver := r.solver
	solver.LR, solver.Momentum, solver.WeightDecay, solver.LRSteps, solver.LRGamma = s.lr, s.momentum, s.decay, s.steps, cmp.Or(s.gamma, 0.1)
	return cluster.Config{Spec: rs.spec, Engine: rs.engine, Train: rs.train, Test: rs.test,
		Learners: r.learners, Batch: r.batch, Epochs: s.epochs, Protocol: r.protocol, N: r.n, Shards: 1,
		Solver:    solver,
		Transport: "inmem", Codec: rdma.Codec{}, Seed: rs.cfg.Seed, Normalizer: &rs.norm, DataName: rs.dataName}
}

// realRun trains run r with real concurrent learners through the
// in-process job runner (cluster.Start and Wait, the code path of
// softsync train).
func (rs *Table) realRun(ctx context.Context, r run) (*Entry, error) {
	cfg := rs.jobConfig(r)
	par := learner.PlanThreads(rs.spec, kernels.DefaultThreads(), r.learners, r.batch, rs.cfg.Threads)
	cfg.Workers = par.Workers
	var history []cluster.Epoch
	var mu sync.Mutex
	cfg.OnEpoch = func(e cluster.Epoch) {
		mu.Lock()
		history = append(history, e)
		mu.Unlock()
		rs.cfg.Log.Info("epoch", "run", r.name(), "epoch", e.Epoch, "test_error", fmt.Sprintf("%.2f%%", 100*e.TestError),
			"test_error_top5", fmt.Sprintf("%.2f%%", 100*e.TestErrorTop5))
	}
	job, err := cluster.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	res, err := job.Wait()
	if err == nil {
		return newEntry(&cfg, r, "real", res), nil
	}
	if !diverged(err) || ctx.Err() != nil {
		return nil, err
	}
	// A diverged job has no result: report the epochs it completed and
	// how far it got.
	p := job.Progress()
	mu.Lock()
	defer mu.Unlock()
	res = &cluster.Result{History: history, TestError: nan(), TestErrorTop5: nan(), Steps: p.Steps, Images: p.Images,
		Seconds: p.Elapsed.Seconds(), BatchesPerEpoch: p.Batches}
	if res.Seconds > 0 {
		res.ImagesPerSec = float64(res.Images) / res.Seconds
	}
	e := newEntry(&cfg, r, "real", res)
	e.Diverged, e.DivergedWhy = true, err.Error()
	return e, nil
}

// diverged reports whether a job failed because its loss or a gradient
// became NaN or infinite, or its updates kept being refused: errors of a
// learner's or a shard's that keep their identity on their way to the
// coordinator (docs/wire.md, "Errors between processes").
func diverged(err error) bool {
	return errors.Is(err, learner.ErrDiverged) || errors.Is(err, ps.ErrNonFinite) || errors.Is(err, ps.ErrDiverged)
}

// errorText is a run's test error for logs and the table.
func errorText(e *Entry) string {
	if e.Diverged {
		return fmt.Sprintf("diverged (epoch %.2f)", e.EpochsDone)
	}
	return fracText(e.TestError)
}

// fracText shows a fraction as a percentage, "n/a" for none.
func fracText(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f%%", 100**v)
}

// write writes table.md, report.json and the plots into Config.Out: the
// test error per epoch and the staleness of every run, or under Rules
// the test error against n and the staleness of the runs under α0/τ.
func (rs *Table) write(entries []*Entry) (*Result, error) {
	dir := rs.cfg.Out
	text := tableText(rs, entries)
	if err := os.WriteFile(filepath.Join(dir, "table.md"), []byte(text), 0o644); err != nil {
		return nil, err
	}
	if err := writeJSONFile(filepath.Join(dir, "report.json"), entries); err != nil {
		return nil, err
	}
	files := []string{"table.md", "report.json", "test-error.png", "staleness.png"}
	errorPlot := func(path string, rs *Table, entries []*Entry) error { return writeErrorPlot(path, rs, entries, top1) }
	row := func(e *Entry) (string, bool) { return e.lrMode, true }
	if rs.cfg.Rules {
		files[2], errorPlot = "rules.png", writeRulesPlot
		row = func(e *Entry) (string, bool) { return e.Timing, e.lrMode == "staleness" }
	}
	if err := errorPlot(filepath.Join(dir, files[2]), rs, entries); err != nil {
		return nil, fmt.Errorf("%s: %w", files[2], err)
	}
	if err := writeStalenessPlot(filepath.Join(dir, files[3]), entries, row); err != nil {
		return nil, fmt.Errorf("%s: %w", files[3], err)
	}
	if rs.cfg.ImageNet {
		files = append(files, "test-error-top5.png")
		if err := writeErrorPlot(filepath.Join(dir, files[4]), rs, entries, top5); err != nil {
			return nil, fmt.Errorf("%s: %w", files[4], err)
		}
	}
	for i := range files {
		files[i] = filepath.Join(dir, files[i])
	}
	return &Result{Text: text, Files: files, Entries: entries}, nil
}
