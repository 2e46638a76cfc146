package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// runTopology runs the job cfg as the processes of t, each its own
// StartProcess over one in-memory network, and returns what each
// process's Wait returned.
func runTopology(t *testing.T, cfg Config, tp Topology) ([]*Result, []error) {
	t.Helper()
	network, err := rdma.Open("inmem", rdma.Options{Job: cfg.Job})
	if err != nil {
		t.Fatal(err)
	}
	coord := slices.IndexFunc(tp.Processes, func(r Roles) bool { return r.Coordinator })
	ps := make([]ProcessConfig, len(tp.Processes))
	for i, r := range tp.Processes {
		ps[i] = ProcessConfig{Topology: tp, Index: i, Network: network, Host: fmt.Sprintf("host%d", i)}
		if r.Coordinator {
			if ps[i].Listeners.Coordinator, err = network.Listen(""); err != nil {
				t.Fatal(err)
			}
		}
		for range r.Servers {
			ln, err := network.Listen("")
			if err != nil {
				t.Fatal(err)
			}
			ps[i].Listeners.Servers = append(ps[i].Listeners.Servers, ln)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results, errs := make([]*Result, len(ps)), make([]error, len(ps))
	var wg sync.WaitGroup
	for i := range ps {
		ps[i].Coordinator = ps[coord].Listeners.Coordinator.Addr()
		j, err := StartProcess(ctx, cfg, ps[i])
		if err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
		wg.Go(func() { results[i], errs[i] = waitJob(t, j, 2*time.Minute) })
	}
	wg.Wait()
	return results, errs
}

// TestStartProcess runs one hardsync job three ways: in one process, as
// the processes of a launcher's ranks and as a process per role. Only
// the coordinator's process returns the result, which lists every
// process with its roles; the others end without error. Hardsync makes
// the weights a function of the job alone: the three ends agree, so the
// processes' initial weights, data plan and shard assignment do too.
func TestStartProcess(t *testing.T) {
	train, test := mnistSubset(t, 1600, 100)
	cfg := Config{Model: "mlp", Data: "mnist", Engine: engine(t), Train: train, Test: test, Learners: 2, Batch: 8,
		Protocol: ps.Hardsync, Shards: 2, Epochs: 2, Chunk: 5, Seed: 1, Job: 7,
		Solver: sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness}}
	if err := cfg.LoadModel(); err != nil {
		t.Fatal(err)
	}
	one, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, cfg, one)
	ranks, err := Ranks(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	for name, tp := range map[string]Topology{"ranks": ranks, "apart": Apart(2, 2)} {
		t.Run(name, func(t *testing.T) {
			results, errs := runTopology(t, cfg, tp)
			var res *Result
			for i, r := range tp.Processes {
				switch {
				case errs[i] != nil:
					t.Fatalf("process %d: %v", i, errs[i])
				case r.Coordinator != (results[i] != nil):
					t.Fatalf("process %d (%+v): result %t", i, r, results[i] != nil)
				case r.Coordinator:
					res = results[i]
				}
			}
			checkResult(t, cfg, res)
			procs := processesOf(res.Processes)
			if len(procs) != len(tp.Processes) {
				t.Fatalf("the result lists %d processes, want %d: %+v", len(procs), len(tp.Processes), procs)
			}
			for _, p := range procs {
				var i int
				fmt.Sscanf(p.Host, "host%d", &i)
				want := tp.Processes[i]
				if p.Rank != want.Rank || !slices.Equal(p.Servers, append([]int{}, want.Servers...)) || !slices.Equal(p.Learners, append([]int{}, want.Learners...)) {
					t.Errorf("process %s: %+v, want %+v", p.Host, p, want)
				}
			}
			var diff float64
			for i := range one.Weights {
				diff = max(diff, math.Abs(float64(one.Weights[i]-res.Weights[i])))
			}
			if diff > 1e-5 || res.Steps != one.Steps || res.TestError != one.TestError && math.Abs(res.TestError-one.TestError) > 0.02 {
				t.Errorf("%s: max |Δw| %.3g, %d steps, test error %v; in one process %d steps, test error %v", name, diff, res.Steps, res.TestError, one.Steps, one.TestError)
			}
		})
	}
}

// TestStartProcessRefuses: a process whose listeners are not those of
// its roles, or whose configuration lacks what they need, does not
// start, and closes its listeners.
func TestStartProcessRefuses(t *testing.T) {
	train, _ := mnistSubset(t, 100, 0)
	network, err := rdma.Open("inmem", rdma.Options{Job: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Learners: 2, Batch: 8, Protocol: ps.Softsync, N: 2,
		Shards: 2, Epochs: 1, Solver: sgd.Config{LR: 0.05}}
	tp := Apart(2, 2)
	for _, c := range []struct {
		name   string
		change func(*Config, *ProcessConfig)
		err    error
	}{
		{"the head without a coordinator's listener", func(_ *Config, p *ProcessConfig) { p.Index, p.Listeners.Coordinator = 0, nil }, ErrTopology},
		{"a shard server without a listener", func(_ *Config, p *ProcessConfig) { p.Index, p.Listeners.Servers = 1, nil }, ErrTopology},
		{"no such process", func(_ *Config, p *ProcessConfig) { p.Index = 9 }, ErrTopology},
		{"a topology of another job", func(c *Config, _ *ProcessConfig) { c.Learners = 3 }, ErrTopology},
		{"a learner without an engine", func(c *Config, p *ProcessConfig) { p.Index, p.Listeners, c.Engine = 3, Listeners{}, nil }, ErrConfig},
		{"the head without training data", func(c *Config, p *ProcessConfig) { p.Index, p.Listeners.Servers, c.Train = 0, nil, nil }, ErrConfig},
	} {
		t.Run(c.name, func(t *testing.T) {
			coordLn, _ := network.Listen("")
			serverLn, _ := network.Listen("")
			c2, p := cfg, ProcessConfig{Topology: tp, Index: 1, Network: network, Coordinator: coordLn.Addr(),
				Listeners: Listeners{Coordinator: coordLn, Servers: []rdma.Listener{serverLn}}}
			c.change(&c2, &p)
			if _, err := StartProcess(context.Background(), c2, p); !errors.Is(err, c.err) {
				t.Fatalf("StartProcess: %v, want %v", err, c.err)
			}
			for _, ln := range append([]rdma.Listener{p.Listeners.Coordinator}, p.Listeners.Servers...) {
				if ln == nil {
					continue
				}
				if c, err := network.Dial(context.Background(), ln.Addr()); !errors.Is(err, rdma.ErrRefused) {
					t.Errorf("dial %s after StartProcess failed: %v, want refused", ln.Addr(), err)
					if c != nil {
						c.Close()
					}
				}
			}
		})
	}
}

// TestResumeSettings writes checkpoints of a job in one process described
// as a command line describes it (network and data by name), interrupts
// it, and resumes it from its checkpoint with the same configuration and
// with another number of shards: the checkpoint records the job's
// settings, which the resume checks, and the resumed job does the rest of
// the data.
func TestResumeSettings(t *testing.T) {
	train, test := mnistSubset(t, 2000, 200)
	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Model: "mlp", Data: "mnist", TrainSubset: 2000, TestSubset: 200, Engine: engine(t), Train: train, Test: test,
		Learners: 2, Batch: 10, Protocol: ps.Softsync, N: 2, Shards: 2, Epochs: 3, Chunk: 5, Report: 2 * time.Millisecond, Seed: 1,
		Transport: "inmem", Checkpoints: store, CheckpointEvery: 100, Solver: sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness}}
	if err := cfg.LoadModel(); err != nil {
		t.Fatal(err)
	}
	j, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Eventually(t, 2*time.Minute, "the job to push 250 gradients", func() bool { return j.Progress().Steps >= 250 })
	j.Interrupt()
	first, err := waitJob(t, j, time.Minute)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupt: %v", err)
	}
	total := 3 * first.BatchesPerEpoch
	if first.Chunks.Batches >= total {
		t.Fatalf("the interrupt came after the last chunk (%d batches done): nothing to resume", first.Chunks.Batches)
	}
	snap, _, err := store.Latest(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := cfg.Settings(); !maps.Equal(snap.Manifest.Job, want) {
		t.Fatalf("the checkpoint records the job's settings %v, want %v", snap.Manifest.Job, want)
	}
	for _, shards := range []int{3, 2} { // the same configuration last: it writes checkpoints on
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) {
			c := cfg
			c.Shards = shards
			if _, err := c.ResumeFrom(store, nil); err != nil {
				t.Fatalf("resume: %v", err)
			}
			if shards != cfg.Shards {
				c.Checkpoints = nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := Run(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if res.Chunks.Batches != total || len(res.Shards) != shards || len(res.History) != 3 {
				t.Errorf("resumed: %d batches of completed chunks (want %d), %d shards, history %+v", res.Chunks.Batches, total, len(res.Shards), res.History)
			}
		})
	}
	other := cfg
	other.Batch = 20
	if _, err := other.ResumeFrom(store, nil); !errors.Is(err, checkpoint.ErrMismatch) && !errors.Is(err, checkpoint.ErrNone) {
		t.Errorf("resume of another batch: %v, want a mismatch", err)
	}
}

// TestResultKeepsFinalWeights: the head's result has the evaluator's
// final weights even when the evaluator ends with a failure after it
// reported them (the process is stopped while the coordinator finishes
// the job: the evaluator loses the coordinator, the coordinator still
// takes the final report); a result without them never reaches
// OnResult, and Wait fails saying so.
func TestResultKeepsFinalWeights(t *testing.T) {
	newJob := func() *Job {
		return &Job{roles: Roles{Coordinator: true, Evaluator: true}, coord: &Coordinator{}, parent: context.Background(), cancel: func() {}}
	}
	lost := fmt.Errorf("evaluator 0: %w: lost the coordinator: %w", ErrJobFailed, context.Canceled)

	j := newJob()
	final := []float32{1, 2, 3}
	j.finalWeights(final) // OnFinal, before the final report
	j.evaluatorEnded(nil, lost)
	var got *Result
	j.onResult(func(r *Result) { got = r })(&Result{})
	if got == nil || !slices.Equal(got.Weights, final) {
		t.Fatalf("OnResult got %+v, want the final weights %v", got, final)
	}

	j = newJob()
	j.evaluatorEnded(nil, lost)
	got = nil
	j.res = &Result{}
	j.onResult(func(r *Result) { got = r })(j.res)
	if got != nil {
		t.Errorf("OnResult got a result without weights")
	}
	if res, err := j.Wait(); !errors.Is(err, errNoWeights) {
		t.Errorf("Wait: %+v, %v, want %v", res, err, errNoWeights)
	}

	j = newJob() // no OnResult: Wait alone says so
	j.res = &Result{}
	if res, err := j.Wait(); !errors.Is(err, errNoWeights) {
		t.Errorf("Wait without OnResult: %+v, %v, want %v", res, err, errNoWeights)
	}
}
