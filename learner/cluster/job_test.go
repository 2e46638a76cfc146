package cluster

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/kernels/kerneltest"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// engine returns the engine the job tests run on: the native one at the
// generic level (the reference engine without it), on one thread, as
// softsync train gives its in-process learners: several learners calling
// a multi-threaded OpenBLAS at once wait for each other's threads.
func engine(t testing.TB) kernels.Engine {
	return kerneltest.Serial(t, isa.Generic)
}

var mnist struct {
	once        sync.Once
	train, test *data.Dataset
	err         error
}

// mnistSubset returns the first n training and m test images of MNIST
// from the GoMNIST module.
func mnistSubset(t testing.TB, n, m int) (*data.Dataset, *data.Dataset) {
	mnist.once.Do(func() {
		dir, err := data.LocateGoMNIST(context.Background(), filepath.Join(runtime.GOROOT(), "bin", "go"))
		if err != nil {
			mnist.err = err
			return
		}
		mnist.train, mnist.test, mnist.err = data.LoadMNIST(dir)
	})
	if mnist.err != nil {
		t.Fatal(mnist.err)
	}
	return mnist.train.Subset(n), mnist.test.Subset(m)
}

func spec(t testing.TB, name string) *nn.Spec {
	s, err := nn.Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkResult checks the accounting every finished job must satisfy.
func checkResult(t *testing.T, cfg Config, res *Result) {
	t.Helper()
	if res.Images != res.Steps*int64(cfg.Batch) {
		t.Errorf("images %d ≠ steps %d × batch %d", res.Images, res.Steps, cfg.Batch)
	}
	if len(res.Weights) != cfg.Spec.VectorLen() {
		t.Errorf("%d final weights, want %d", len(res.Weights), cfg.Spec.VectorLen())
	}
	if len(res.Shards) != cfg.Shards {
		t.Fatalf("%d shard stats, want %d", len(res.Shards), cfg.Shards)
	}
	for k, st := range res.Shards {
		var sum uint64
		for _, c := range st.Histogram {
			sum += c
		}
		if sum != st.Gradients {
			t.Errorf("shard %d: histogram sums to %d, %d gradients accepted", k, sum, st.Gradients)
		}
		if st.Gradients+st.Dropped != uint64(res.Steps) {
			t.Errorf("shard %d: %d accepted + %d dropped ≠ %d pushed", k, st.Gradients, st.Dropped, res.Steps)
		}
		if st.Rejected.Total() != 0 || st.Duplicates != 0 {
			t.Errorf("shard %d: rejections %+v, duplicates %d", k, st.Rejected, st.Duplicates)
		}
		if cfg.Protocol == ps.Hardsync && (st.MaxStaleness != 0 || st.Dropped != 0) {
			t.Errorf("shard %d: hardsync with max staleness %d, %d dropped", k, st.MaxStaleness, st.Dropped)
		}
	}
	if sent := res.Traffic.TotalSent(); sent.Msgs == 0 || res.Traffic.FrameBytesSent == 0 {
		t.Errorf("no traffic counted: %+v", sent)
	}
	for i, h := range res.History {
		if h.Epoch != i+1 || h.Seconds <= 0 || (i > 0 && h.Seconds < res.History[i-1].Seconds) {
			t.Errorf("history[%d] = %+v", i, h)
		}
	}
}

// TestJobHardsyncExact: through the job runner, hardsync with λ learners
// of batch μ gives the weights of one learner of batch μλ (float
// tolerance), both with LeNet's per-layer multipliers: each hardsync
// round holds the λ consecutive mini-batches of μ that make the single
// learner's mini-batch of μλ (data.Plan).
func TestJobHardsyncExact(t *testing.T) {
	train, _ := mnistSubset(t, 640, 0)
	const lambda, mu, rounds = 4, 4, 12
	base := Config{Spec: spec(t, "lenet"), Engine: engine(t), Train: train, Protocol: ps.Hardsync,
		Epochs: 1, Seed: 3, Shards: 3, Chunk: 5,
		Solver: sgd.Config{LR: 0.02, Momentum: 0.9, WeightDecay: 5e-4, LRMode: sgd.LRStaleness}}
	run := func(learners, batch int, transport string) *Result {
		cfg := base
		cfg.Learners, cfg.Batch, cfg.Transport, cfg.MaxSteps = learners, batch, transport, rounds*learners
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, cfg, res)
		return res
	}
	single := run(1, lambda*mu, "inmem")
	for _, transport := range []string{"inmem", "tcp"} {
		dist := run(lambda, mu, transport)
		if dist.Steps != lambda*single.Steps || single.Steps != rounds {
			t.Fatalf("%d distributed steps, %d single", dist.Steps, single.Steps)
		}
		for r, n := range dist.LearnerSteps {
			if n != rounds {
				t.Errorf("learner %d pushed %d gradients, want %d (one per round)", r, n, rounds)
			}
		}
		for k, st := range dist.Shards {
			if st.Updates != uint64(single.Steps) || st.Partial != 0 {
				t.Errorf("shard %d: %d updates (%d partial), want %d full ones", k, st.Updates, st.Partial, single.Steps)
			}
		}
		var maxDiff float64
		for i, w := range dist.Weights {
			maxDiff = max(maxDiff, math.Abs(float64(w-single.Weights[i])))
		}
		t.Logf("%s: max |Δw| = %.3g", transport, maxDiff)
		if maxDiff > 2e-5 {
			t.Errorf("%s: hardsync λ=%d μ=%d differs from single learner μ=%d by %.3g", transport, lambda, mu, lambda*mu, maxDiff)
		}
	}
	// The runs must have trained: a single learner on other images differs.
	other := base
	other.Learners, other.Batch, other.MaxSteps = 1, lambda*mu, rounds
	other.Train = train.Subset(320)
	res, err := Run(context.Background(), other)
	if err != nil {
		t.Fatal(err)
	}
	diff := 0.0
	for i, w := range res.Weights {
		diff = max(diff, math.Abs(float64(w-single.Weights[i])))
	}
	if diff < 1e-3 {
		t.Errorf("training on other images changed the weights by only %.3g", diff)
	}
}

// TestJobOverlapStaleness: one softsync learner that prefetches its
// weights computes every gradient but the first on weights one update
// old, and the server must measure exactly that.
func TestJobOverlapStaleness(t *testing.T) {
	train, _ := mnistSubset(t, 512, 0)
	for _, overlap := range []bool{false, true} {
		cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Learners: 1, Batch: 8,
			Protocol: ps.Softsync, N: 1, Shards: 2, Epochs: 1, MaxSteps: 40, Seed: 1, Overlap: overlap,
			Solver: sgd.Config{LR: 0.01, Momentum: 0.9, LRMode: sgd.LRStaleness}}
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, cfg, res)
		want := []uint64{40}
		if overlap {
			want = []uint64{1, 39}
		}
		for k, st := range res.Shards {
			if !slices.Equal(st.Histogram, want) {
				t.Errorf("overlap %v, shard %d: staleness histogram %v, want %v", overlap, k, st.Histogram, want)
			}
		}
	}
}

// TestJobRules runs a small job under delay compensation with the
// staleness rate, momentum compensation and an n schedule, learners
// prefetching: it completes; each shard keeps one or two copies of its
// range per learner; epoch 0 updates with every gradient (n = 4, c₀ =
// 1) and epoch 1 with every two (n = 2).
func TestJobRules(t *testing.T) {
	train, test := mnistSubset(t, 512, 100)
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 4, Batch: 8,
		Protocol: ps.Softsync, N: 4, NSchedule: sgd.NSchedule{{From: 0, N: 4}, {From: 1, N: 2}}, Shards: 2, Epochs: 2, Seed: 1, Overlap: true,
		Solver: sgd.Config{LR: 0.01, Momentum: 0.9, MomentumComp: true}}
	if err := cfg.Solver.ParseRule("dc:0.04+staleness"); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, cfg, res)
	rs, err := ps.Ranges(cfg.Spec.VectorLen(), cfg.Shards)
	if err != nil {
		t.Fatal(err)
	}
	for k, st := range res.Shards {
		copyBytes := uint64(4 * rs[k].Len())
		if st.PulledBytes < copyBytes || st.PulledBytes > 2*4*copyBytes || st.PulledBytes%copyBytes != 0 {
			t.Errorf("shard %d: %d bytes of pulled weights, want 1 to 8 copies of %d", k, st.PulledBytes, copyBytes)
		}
		if st.Updates != 64+32 || st.Partial != 0 || st.Refused != 0 {
			t.Errorf("shard %d: %d updates (%d partial, %d refused), want 64 + 32", k, st.Updates, st.Partial, st.Refused)
		}
	}
	if len(res.History) != 2 || !(res.TestError < 0.9) {
		t.Errorf("history %+v, test error %v", res.History, res.TestError)
	}
}

// TestJobBoundedStaleness runs fully asynchronous learners with a bound
// on staleness: every gradient is accepted or dropped, never above the
// bound.
func TestJobBoundedStaleness(t *testing.T) {
	train, test := mnistSubset(t, 1024, 200)
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 4, Batch: 4,
		Protocol: ps.Softsync, N: 4, MaxStaleness: 2, Shards: 2, Epochs: 1, MaxSteps: 50, Seed: 1, Overlap: true,
		Solver: sgd.Config{LR: 0.01, Momentum: 0.9, LRMode: sgd.LRStaleness}}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, cfg, res)
	for k, st := range res.Shards {
		if st.MaxStaleness > 2 {
			t.Errorf("shard %d: max staleness %d above the bound 2", k, st.MaxStaleness)
		}
	}
	if len(res.History) != 0 || math.IsNaN(res.TestError) {
		t.Errorf("a partial epoch: history %+v, test error %v", res.History, res.TestError)
	}
}

// TestJobEvaluateOnly: zero epochs evaluates the initial weights.
func TestJobEvaluateOnly(t *testing.T) {
	train, test := mnistSubset(t, 100, 300)
	s := spec(t, "mlp")
	init := make([]float32, s.VectorLen()) // all zero: every logit equal, class 0 predicted
	res, err := Run(context.Background(), Config{Spec: s, Engine: engine(t), Train: train, Test: test,
		Learners: 1, Batch: 10, Protocol: ps.Hardsync, Shards: 1, Init: init, Solver: sgd.Config{LR: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	zeros := 0
	for _, l := range test.Labels {
		if l == 0 {
			zeros++
		}
	}
	if want := 1 - float64(zeros)/float64(test.N); math.Abs(res.TestError-want) > 1e-12 || res.Steps != 0 {
		t.Errorf("test error %v after %d steps, want %v", res.TestError, res.Steps, want)
	}
}

// TestJobNothingToTrain: a job with no epochs ends as soon as every
// process has joined; whichever joins last, every shard server reads its
// welcome before the end of the data (a race the coordinator once lost
// when a learner joined just after a shard server).
func TestJobNothingToTrain(t *testing.T) {
	train, test := mnistSubset(t, 100, 50)
	s := spec(t, "mlp")
	for i := range 40 {
		_, err := Run(context.Background(), Config{Spec: s, Engine: engine(t), Train: train, Test: test,
			Learners: 3, Batch: 10, Protocol: ps.Softsync, N: 1, Shards: 3, Seed: uint64(i), Solver: sgd.Config{LR: 0.1}})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
}

// TestConfigErrors: bad configurations fail before anything starts,
// naming the field.
func TestConfigErrors(t *testing.T) {
	train, _ := mnistSubset(t, 100, 0)
	good := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Learners: 2, Batch: 10,
		Protocol: ps.Softsync, N: 2, Shards: 1, Epochs: 1, Solver: sgd.Config{LR: 0.1}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	cifar := data.Synthetic(20, 3, 32, 32, 10, 1)
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"Learners", func(c *Config) { c.Learners = 0 }},
		{"Batch", func(c *Config) { c.Batch = 0 }},
		{"Batch", func(c *Config) { c.Batch = 101 }},                         // 100 images
		{"Batch", func(c *Config) { c.Protocol, c.Batch = ps.Hardsync, 60 }}, // a round of 2×60 images
		{"Chunk", func(c *Config) { c.Chunk = -1 }},
		{"N", func(c *Config) { c.N = 3 }},
		{"MaxStaleness", func(c *Config) { c.Protocol, c.MaxStaleness = ps.Hardsync, 2 }},
		{"Shards", func(c *Config) { c.Shards = 0 }},
		{"Shards", func(c *Config) { c.Shards = 1 << 20 }},
		{"Epochs", func(c *Config) { c.Epochs = -1 }},
		{"Transport", func(c *Config) { c.Transport = "udp" }},
		{"PSTimeout", func(c *Config) { c.PSTimeout = -time.Second }},
		{"Solver.LR", func(c *Config) { c.Solver.LR = 0 }},
		{"Solver.Momentum", func(c *Config) { c.Solver.Momentum = 1 }},
		{"Init", func(c *Config) { c.Init = make([]float32, 3) }},
		{"", func(c *Config) { c.Train = cifar }},
		// topk would add up batch norm's statistics of several mini-batches.
		{"Codec", func(c *Config) {
			c.Codec = rdma.Codec{ID: rdma.CodecTopK, Fraction: 0.1}
			c.Spec = bnSpec(t)
		}},
	} {
		cfg := good
		tc.edit(&cfg)
		_, err := Start(context.Background(), cfg)
		var fe *param.FieldError
		switch {
		case tc.field == "":
			if !errors.Is(err, data.ErrShape) {
				t.Errorf("CIFAR data into the mlp: %v, want ErrShape", err)
			}
		case !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrConfig):
			t.Errorf("want an error naming %s, got %v", tc.field, err)
		}
	}
}

// bnSpec is the mlp with batch norm: MNIST-shaped input, 10 classes.
func bnSpec(t *testing.T) *nn.Spec {
	s, err := nn.Parse("bn.net", []byte("input channels=1 height=28 width=28\nfc out=16\nbatchnorm b\nrelu\nfc out=10\nsoftmax\n"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestResumeKeys: the settings a resumed job must share with its
// checkpoint (docs/checkpoint.md) are the same for every caller: what one
// does with the slice it got changes nothing for the others.
func TestResumeKeys(t *testing.T) {
	want := []string{"model", "data", "classes", "train-subset", "batch", "seed", "learners", "protocol"}
	keys := ResumeKeys()
	if !slices.Equal(keys, want) {
		t.Fatalf("resume keys %q, want %q", keys, want)
	}
	keys[0] = "lr"
	if got := ResumeKeys(); !slices.Equal(got, want) {
		t.Errorf("resume keys %q after a caller changed its copy, want %q", got, want)
	}
}

// TestJobDiverges: a learning rate that blows the loss up stops the job
// with ErrDiverged rather than pushing NaN.
func TestJobDiverges(t *testing.T) {
	train, _ := mnistSubset(t, 2000, 0)
	_, err := Run(context.Background(), Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train,
		Learners: 2, Batch: 10, Protocol: ps.Softsync, N: 2, Shards: 1, Epochs: 1, Seed: 1,
		Solver: sgd.Config{LR: 1e9}})
	if !errors.Is(err, learner.ErrDiverged) {
		t.Errorf("LR 1e9: %v, want ErrDiverged", err)
	}
}

// TestJobRefusedDiverges: at a rate that makes every update overflow
// (1e39 is +Inf in float32), the shards refuse every update and keep the
// initial weights, counting each refused gradient against its learner,
// and the job ends as diverged, with the refusals as the reason.
func TestJobRefusedDiverges(t *testing.T) {
	train, _ := mnistSubset(t, 2000, 0)
	var srv *ps.Server
	_, err := Run(context.Background(), Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train,
		Learners: 2, Batch: 10, Protocol: ps.Softsync, N: 2, Shards: 2, Epochs: 1, Seed: 1,
		Solver:  sgd.Config{LR: 1e39},
		OnServe: func(s *ps.Server) { srv = s }})
	if !errors.Is(err, learner.ErrDiverged) || !errors.Is(err, ps.ErrDiverged) {
		t.Fatalf("LR 1e39: %v, want ErrDiverged for updates refused in a row", err)
	}
	for k, st := range srv.Stats().Shards { // final: the job is over
		var refused uint64
		for _, n := range st.RefusedGradients {
			refused += n
		}
		if st.Updates != 0 || st.Refused < ps.RefusedLimit-1 || refused != st.Refused || st.Rejected.Total() != st.Rejected.Diverged {
			t.Errorf("shard %d: %+v", k, st)
		}
	}
}

// TestJobInterrupt interrupts a job while it trains: Wait returns
// ErrInterrupted with the result so far: the weights reached (trained,
// measured) and the completed epochs only.
func TestJobInterrupt(t *testing.T) {
	train, test := mnistSubset(t, 4000, 500)
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 2, Batch: 8,
		Protocol: ps.Softsync, N: 2, Shards: 2, Epochs: 50, Seed: 1,
		Solver: sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness}}
	j, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Eventually(t, 2*time.Minute, "the job to push 600 gradients", func() bool { return j.Progress().Steps >= 600 })
	j.Interrupt()
	res, err := waitJob(t, j, time.Minute)
	if !errors.Is(err, ErrInterrupted) || res == nil || !res.Interrupted {
		t.Fatalf("interrupted job: result %v, err %v", res, err)
	}
	if len(res.Weights) != cfg.Spec.VectorLen() || math.IsNaN(res.TestError) || res.TestError > 0.5 {
		t.Errorf("weights reached: %d values, test error %v", len(res.Weights), res.TestError)
	}
	if len(res.History) >= 50 || res.Steps < 600 || res.Steps >= int64(50*res.BatchesPerEpoch) {
		t.Errorf("%d epochs in the history, %d steps: want the part done", len(res.History), res.Steps)
	}
	// A learner stopped between its push and its count may leave one
	// step uncounted or counted only by the shards.
	for k, st := range res.Shards {
		if d := int64(st.Gradients+st.Dropped) - res.Steps; d < -int64(cfg.Learners) || d > int64(cfg.Learners) {
			t.Errorf("shard %d: %d gradients counted for %d steps reported", k, st.Gradients+st.Dropped, res.Steps)
		}
	}
	if res.Traffic.TotalSent().Msgs == 0 {
		t.Error("no traffic reported")
	}
}

// TestJobResumeAfterTheData interrupts a job after its last mini-batch
// but before the final weights were measured (the evaluator's request
// for them never reaches the shard server, so that it still waits for
// them when the interrupt comes): the resumed job has no data left and
// must still wait for its learners, measure the final weights and end.
func TestJobResumeAfterTheData(t *testing.T) {
	train, test := mnistSubset(t, 400, 500)
	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 2, Batch: 10,
		Protocol: ps.Softsync, N: 2, Shards: 1, Epochs: 2, Chunk: 5, Report: 2 * time.Millisecond, Seed: 1,
		Checkpoints: store, Solver: sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness}}
	finalLost := func(m *rdma.Msg) bool { return m.Type != ps.TypeSnapshot || m.Timestamp != 0 } // 0: the final weights
	j, err := start(context.Background(), cfg, tamper(RoleEvaluator, finalLost))
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Eventually(t, 2*time.Minute, "the learners to push every mini-batch", func() bool {
		p := j.Progress()
		return p.TotalSteps > 0 && p.Steps >= p.TotalSteps
	})
	j.Interrupt()
	if _, err := waitJob(t, j, time.Minute); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("the job interrupted while the evaluator waited for the final weights: %v, want ErrInterrupted", err)
	}
	checkResumeRendezvous(t, cfg, store)
	re, _, err := LoadResume(store, nil, nil, cfg.Spec.VectorLen(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Resume, cfg.Checkpoints = re, nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("resumed job with no data left: %v", err)
	}
	if len(res.History) != 2 || math.IsNaN(res.TestError) {
		t.Errorf("resumed: history %+v, test error %v", res.History, res.TestError)
	}
}

// TestJobCheckpointResume interrupts a job that writes checkpoints, then
// resumes it from the checkpoint written at the interruption onto another
// number of shards: the resumed job finishes the data exactly (the chunks
// in flight at the interruption are done again, every batch completed
// once), keeps the history of the first part and trains on from its
// weights.
func TestJobCheckpointResume(t *testing.T) {
	train, test := mnistSubset(t, 3000, 500)
	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 2, Batch: 10,
		Protocol: ps.Softsync, N: 2, Shards: 2, Epochs: 4, Chunk: 5, Report: 2 * time.Millisecond, Seed: 1,
		Checkpoints: store, CheckpointEvery: 200,
		Solver: sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness}}
	j, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Eventually(t, 2*time.Minute, "the job to push 500 gradients", func() bool { return j.Progress().Steps >= 500 })
	j.Interrupt()
	first, err := waitJob(t, j, time.Minute)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupt: %v", err)
	}
	if first.Chunks.Batches >= 4*first.BatchesPerEpoch {
		t.Fatalf("the interrupt came after the last chunk (%d batches done): nothing to resume", first.Chunks.Batches)
	}
	re, skipped, err := LoadResume(store, nil, nil, cfg.Spec.VectorLen(), 3, nil)
	if err != nil || len(skipped) != 0 {
		t.Fatalf("load: %v (skipped %v)", err, skipped)
	}
	if !re.Info.Relaid {
		t.Error("2 shards onto 3: not re-laid")
	}
	// A process that runs shard 1 only keeps its arrays, on the same
	// layout and re-split, with every shard's consumed mini-batches.
	for _, shards := range []int{2, 3} {
		one, _, err := LoadResume(store, nil, nil, cfg.Spec.VectorLen(), shards, func(k int) bool { return k == 1 })
		if err != nil {
			t.Fatal(err)
		}
		for k, sh := range one.Shards {
			if sh.Dropped() != (k != 1) || (k == 1) != (len(sh.Weights) > 0) || sh.Consumed == nil {
				t.Errorf("%d shards, shard %d: dropped %t with %d weights and %d intervals consumed", shards, k, sh.Dropped(), len(sh.Weights), len(sh.Consumed))
			}
		}
	}
	cfg.Shards, cfg.Resume, cfg.Checkpoints = 3, re, nil
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	total := 4 * res.BatchesPerEpoch
	if res.Chunks.Batches != total || res.Steps < int64(total) {
		t.Errorf("resumed: %d batches of completed chunks, %d steps; want %d", res.Chunks.Batches, res.Steps, total)
	}
	if len(res.History) != 4 || len(first.History) > 0 && res.History[0] != first.History[0] {
		t.Errorf("history: first part %+v, resumed %+v", first.History, res.History)
	}
	t.Logf("interrupted at %d steps, test error %.3f, history %+v; resumed: %+v", first.Steps, first.TestError, first.History, res.History)
	// Async test errors move by points between epochs; the training
	// loss goes on falling, and each epoch end has its own weights.
	h := res.History
	if res.TestError > 0.2 || h[3].TrainLoss >= h[0].TrainLoss || h[2].TestError == h[3].TestError && h[2].TrainLoss == h[3].TrainLoss {
		t.Errorf("after resuming: history %+v", h)
	}
	for k, st := range res.Shards {
		if st.Duplicates != 0 || st.Rejected.Total() != 0 {
			t.Errorf("shard %d after resuming: %+v", k, st)
		}
	}
}

// TestJobEarlyPush: a learner that sends its gradient in pieces during
// backward, over TCP to four shards, ends with the very weights and shard
// counters of one that sends it whole (one learner: the job is
// deterministic), under both protocols, with one compute thread and two.
func TestJobEarlyPush(t *testing.T) {
	train, _ := mnistSubset(t, 512, 0)
	for _, c := range []struct {
		proto   ps.Protocol
		workers int
	}{{ps.Hardsync, 1}, {ps.Softsync, 1}, {ps.Softsync, 2}} {
		proto := c.proto
		var whole *Result
		for _, early := range []bool{false, true} {
			cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Learners: 1, Batch: 8, Workers: c.workers,
				Protocol: proto, N: 1, Shards: 4, Transport: "tcp", Epochs: 1, MaxSteps: 30, Seed: 1, EarlyPush: early,
				Solver: sgd.Config{LR: 0.01, Momentum: 0.9, LRMode: sgd.LRStaleness}}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, cfg, res)
			if !early {
				whole = res
				continue
			}
			if !slices.Equal(res.Weights, whole.Weights) {
				t.Errorf("%v, %d workers: the weights differ with early pushes", proto, c.workers)
			}
			for k, st := range res.Shards {
				if w := whole.Shards[k]; st.Gradients != w.Gradients || st.Clock != w.Clock || st.Gradients != 30 {
					t.Errorf("%v, shard %d: %d gradients at clock %d with early pushes, %d at %d without", proto, k, st.Gradients, st.Clock, w.Gradients, w.Clock)
				}
			}
		}
	}
}

// TestSyntheticData: the data set "synthetic" has the model's shape, its
// test images follow its training images in one draw (the same class
// prototypes), two calls make the same images, and subsets make only
// the images they use, the first of the same draw.
func TestSyntheticData(t *testing.T) {
	nativeOnly(t) // 60,000 CIFAR-shaped images, three times
	sp := spec(t, "cifar10_full")
	ds := SyntheticData(sp, 0, 0)
	in := sp.Input
	train, test := ds.Train.(*data.Dataset), ds.Test.(*data.Dataset)
	if err := train.CheckShape(in.C, in.H, in.W, sp.Classes()); err != nil {
		t.Fatal(err)
	}
	if train.N != SyntheticTrain || test.N != SyntheticTest || ds.Name != "synthetic" {
		t.Fatalf("%s: %d training and %d test images", ds.Name, train.N, test.N)
	}
	all := data.Synthetic(SyntheticTrain+SyntheticTest, in.C, in.H, in.W, sp.Classes(), 1)
	il := train.ImageLen()
	if !slices.Equal(test.Pixels, all.Pixels[SyntheticTrain*il:]) || !slices.Equal(test.Labels, all.Labels[SyntheticTrain:]) ||
		!slices.Equal(train.Labels, all.Labels[:SyntheticTrain]) {
		t.Fatal("the test images are not the ones after the training images of one draw")
	}
	if again := SyntheticData(sp, 0, 0); !slices.Equal(again.Train.(*data.Dataset).Pixels, train.Pixels) {
		t.Fatal("two calls made different images")
	}
	sub := SyntheticData(sp, 100, 30)
	subTrain, subTest := sub.Train.(*data.Dataset), sub.Test.(*data.Dataset)
	if subTrain.N != 100 || subTest.N != 30 || !slices.Equal(subTrain.Pixels, train.Pixels[:100*il]) ||
		!slices.Equal(subTest.Pixels, all.Pixels[100*il:130*il]) {
		t.Fatalf("subsets of 100 and 30: %d and %d images, not the first 130 of the draw", subTrain.N, subTest.N)
	}
	if got, want := SyntheticBytes(sp, 100, 30), int64(len(subTrain.Pixels)+len(subTest.Pixels)+4*130); got != want {
		t.Errorf("SyntheticBytes(100, 30) = %d, want %d", got, want)
	}
}

// TestMessageLimit: a job's network carries its largest shard whole (a
// push, a pull or a snapshot is one message), beyond rdma's default
// limit when the network is large, and a shard beyond what one message
// may carry is refused, naming the shards that would do. Nothing is
// allocated: the spec is parsed only.
func TestMessageLimit(t *testing.T) {
	wide, err := nn.Parse("wide.net", []byte("input channels=1 height=28 width=28\nfc fc1 out=400000\nfc fc2 out=10\nsoftmax\n"))
	if err != nil {
		t.Fatal(err)
	}
	n := wide.VectorLen() // 317,600,010: beyond rdma.MaxElems (268,435,456)
	cfg := Config{Spec: wide, Learners: 2, Batch: 1, Protocol: ps.Softsync, N: 2, Shards: 1, Solver: sgd.Config{LR: 0.1}}
	var fe *param.FieldError
	if err := cfg.ValidateSettings(); !errors.As(err, &fe) || fe.Field != "Shards" || !strings.Contains(err.Error(), "use --shards 2 or more") {
		t.Fatalf("a shard of %d values: %v, want an error naming Shards and --shards 2", n, err)
	}
	cfg.Shards = 2
	if err := cfg.ValidateSettings(); err != nil {
		t.Fatal(err)
	}
	rs, _ := ps.Ranges(n, 2)
	if got, want := cfg.MessageLimit(), uint32(max(rs[0].Len(), rs[1].Len())); got != want || got <= rdma.DefaultLimits().MaxElems {
		t.Errorf("MessageLimit of 2 shards of %d values: %d, want the larger range %d", n, got, want)
	}
	if _, err := rdma.Open("inmem", rdma.Options{MaxElems: cfg.MessageLimit()}); err != nil {
		t.Errorf("a network with the job's limit: %v", err)
	}
	small := Config{Spec: spec(t, "mlp"), Shards: 1}
	if got := small.MessageLimit(); got != rdma.DefaultLimits().MaxElems {
		t.Errorf("MessageLimit of the mlp: %d, want rdma's default %d", got, rdma.DefaultLimits().MaxElems)
	}
}
