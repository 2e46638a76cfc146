package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// settingsConfig is a job as a command line names it.
func settingsConfig(t *testing.T) Config {
	cfg := Config{Model: "mlp", Data: "mnist", Learners: 4, Batch: 16, Epochs: 2, Protocol: ps.Softsync, N: 4, Shards: 2, Seed: 3,
		Transport: "tcp", Solver: sgd.Config{LR: 0.01, Momentum: 0.9, LRSteps: []int{8, 9}, LRGamma: 0.1, LRMode: sgd.LRStaleness}}
	if err := cfg.LoadModel(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestSettings: a job's settings name each flag that defines it; two
// configurations that differ in one of them differ in its key alone; a
// network that is not built in, and initial weights, are named with the
// hash of their content.
func TestSettings(t *testing.T) {
	base := settingsConfig(t)
	s := base.Settings()
	want := map[string]string{"model": "mlp", "data": "mnist", "learners": "4", "batch": "16", "epochs": "2", "protocol": "softsync",
		"n": "4", "shards": "2", "seed": "3", "lr": "0.01", "momentum": "0.9", "lr-steps": "8,9", "lr-mode": "staleness",
		"compress": "none", "transport": "tcp", "chunk": "8", "train-subset": "0", "overlap": "false"}
	for k, v := range want {
		if s[k] != v {
			t.Errorf("settings[%q] = %q, want %q", k, s[k], v)
		}
	}
	if _, ok := s["load"]; ok {
		t.Errorf("settings of a job without --load: %v", s)
	}
	for _, key := range ResumeKeys() {
		if _, ok := s[key]; !ok {
			t.Errorf("no setting %q, which a resume checks", key)
		}
	}
	for key, change := range map[string]func(*Config){
		"model": func(c *Config) {
			c.Model = "lenet"
			if err := c.LoadModel(); err != nil {
				t.Fatal(err)
			}
		},
		"data":     func(c *Config) { c.Data = "fashion-mnist" },
		"batch":    func(c *Config) { c.Batch++ },
		"lr-steps": func(c *Config) { c.Solver.LRSteps = nil },
		"compress": func(c *Config) { c.Codec = rdma.Codec{ID: rdma.CodecTopK, Fraction: 0.01} },
		"shards":   func(c *Config) { c.Shards = 3 },
		"load":     func(c *Config) { c.Init = make([]float32, c.Spec.VectorLen()) },
	} {
		c := settingsConfig(t)
		change(&c)
		got := c.Settings()
		var diff []string
		for k := range got {
			if got[k] != s[k] {
				diff = append(diff, k)
			}
		}
		if !slices.Equal(diff, []string{key}) {
			t.Errorf("changing %s changes the settings %v: %v", key, diff, got)
		}
	}
	spec := settingsConfig(t)
	spec.Model = filepath.Join(t.TempDir(), "my.net")
	m := spec.Settings()["model"]
	if !strings.HasPrefix(m, spec.Model+" (spec ") {
		t.Errorf("a spec file's model setting %q, want its path and hash", m)
	}
	spec.Spec.Layers[0].Out++ // fc1
	if m2 := spec.Settings()["model"]; m2 == m {
		t.Errorf("a spec file's model setting %q for two specs", m)
	}
	load := settingsConfig(t)
	load.Init, load.InitFile = make([]float32, load.Spec.VectorLen()), "w.weights"
	if l := load.Settings()["load"]; !strings.HasPrefix(l, "w.weights (") {
		t.Errorf("load setting %q, want the file and the hash of the weights", l)
	}
}

// TestDefaults: the built-in networks' defaults, LeNet's for a spec file;
// the caller owns the steps it gets.
func TestDefaults(t *testing.T) {
	for model, want := range map[string]Defaults{
		"lenet":        {Batch: 64, Epochs: 10, LR: 0.01, Momentum: 0.9, WeightDecay: 5e-4, LRSteps: []int{8}, LRGamma: 0.1, Data: "mnist"},
		"cifar10_full": {Batch: 128, Epochs: 140, LR: 0.001, Momentum: 0.9, WeightDecay: 0.004, LRSteps: []int{120, 130}, LRGamma: 0.1, Data: "cifar10"},
		"my.net":       {Batch: 64, Epochs: 10, LR: 0.01, Momentum: 0.9, WeightDecay: 5e-4, LRSteps: []int{8}, LRGamma: 0.1, Data: "mnist"},
		// The paper's ImageNet schedule: α0 = 0.01, ÷5 after epochs 20 and 30, 35 epochs.
		"alexnet": {Batch: 256, Epochs: 35, LR: 0.01, Momentum: 0.9, WeightDecay: 5e-4, LRSteps: []int{20, 30}, LRGamma: 0.2},
		// torchvision's recipe: 32 images per GPU (learner), lr 0.1 for 8.
		"resnet18": {Batch: 32, Epochs: 90, LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4, LRSteps: []int{30, 60}, LRGamma: 0.1},
	} {
		d := DefaultsFor(model)
		if !slices.Equal(d.LRSteps, want.LRSteps) {
			t.Errorf("%s: steps %v, want %v", model, d.LRSteps, want.LRSteps)
		}
		d.LRSteps[0] = -1
		d.LRSteps, want.LRSteps = nil, nil
		if fmt.Sprint(d) != fmt.Sprint(want) {
			t.Errorf("%s: %+v, want %+v", model, d, want)
		}
	}
	if s := DefaultsFor("lenet").LRSteps; s[0] != 8 {
		t.Errorf("a caller's change reached the table: lenet's steps %v", s)
	}
}

// TestJobID: the job id is a function of the secret, odd (never 0),
// 1 without a secret.
func TestJobID(t *testing.T) {
	a, b := JobID([]byte("0123456789abcdef")), JobID([]byte("0123456789abcdeg"))
	if a == b || a%2 == 0 || b%2 == 0 || JobID([]byte("0123456789abcdef")) != a || JobID(nil) != 1 {
		t.Errorf("job ids %#x %#x, %#x without a secret", a, b, JobID(nil))
	}
}

// TestInitialWeights: the spec's fillers drawn from the seed (the same
// every time, other for another seed), or Init as given; the layout is
// the network's.
func TestInitialWeights(t *testing.T) {
	cfg := settingsConfig(t)
	layout, w1, err := cfg.InitialWeights()
	if err != nil {
		t.Fatal(err)
	}
	_, w2, _ := cfg.InitialWeights()
	cfg.Seed++
	_, w3, _ := cfg.InitialWeights()
	if len(w1) != cfg.Spec.VectorLen() || !slices.Equal(w1, w2) || slices.Equal(w1, w3) {
		t.Errorf("initial weights: %d values, the same seed the same: %t, another seed the same: %t", len(w1), slices.Equal(w1, w2), slices.Equal(w1, w3))
	}
	if last := layout[len(layout)-1]; last.Offset+last.Len != len(w1) {
		t.Errorf("layout ends at %d, %d weights", last.Offset+last.Len, len(w1))
	}
	cfg.Init = w3
	if _, w, _ := cfg.InitialWeights(); &w[0] != &w3[0] {
		t.Error("Init set: other weights returned")
	}
	if _, _, err := (&Config{}).InitialWeights(); err == nil {
		t.Error("no network: no error")
	}
}

// TestWeightsCodecAndEvalWorkers: the shards send weights with the
// gradients' codec when it is lossless; the evaluator has the workers of
// the learners of its process, one learner's without any.
func TestWeightsCodecAndEvalWorkers(t *testing.T) {
	for codec, want := range map[string]string{"none": "none", "zstd": "zstd", "shuffle+s2": "shuffle+s2", "fp16": "none", "topk:0.1": "none"} {
		c, err := rdma.ParseCodec(codec)
		if err != nil {
			t.Fatal(err)
		}
		if got := (&Config{Codec: c}).WeightsCodec(); got.String() != want {
			t.Errorf("gradients %s: weights %s, want %s", codec, got, want)
		}
	}
	for _, c := range []struct{ workers, learners, want int }{{0, 0, 1}, {3, 0, 3}, {3, 4, 12}, {0, 4, 4}} {
		if got := (&Config{Workers: c.workers}).EvalWorkers(c.learners); got != c.want {
			t.Errorf("%d workers, %d learners here: %d evaluation workers, want %d", c.workers, c.learners, got, c.want)
		}
	}
}

// TestUpdateThreads: each shard of a process spreads its updates over the
// threads the process's learners use (one learner's share without any),
// at most GOMAXPROCS, shared out among its shards, at least one.
func TestUpdateThreads(t *testing.T) {
	for _, c := range []struct{ workers, learners, shards, procs, want int }{
		{2, 1, 1, 2, 2}, {2, 1, 2, 2, 1}, {1, 8, 1, 2, 2}, {0, 0, 1, 4, 1}, {3, 0, 1, 1, 1}, {4, 2, 2, 16, 4}, {2, 1, 3, 2, 1},
	} {
		if got := (&Config{Workers: c.workers}).UpdateThreads(c.learners, c.shards, c.procs); got != c.want {
			t.Errorf("%d workers, %d learners, %d shards here, GOMAXPROCS %d: %d update threads, want %d", c.workers, c.learners, c.shards, c.procs, got, c.want)
		}
	}
}

// TestData: a folder of idx files is found by name and named in reports
// by it; UseData keeps the subsets, refuses images the network does not
// take and a training set smaller than a round, and leaves the
// normaliser to the job (the coordinator's).
func TestData(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []struct {
		images, labels string
		n              int
	}{{data.MNISTTrainImages, data.MNISTTrainLabels, 100}, {data.MNISTTestImages, data.MNISTTestLabels, 30}} {
		if err := data.WriteIDX(filepath.Join(dir, f.images), filepath.Join(dir, f.labels), data.Synthetic(f.n, 1, 28, 28, 10, 1), true); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := LookupData(context.Background(), dir, "go")
	if err != nil || ds.Name != dir || ds.Train.Info().Len != 100 || ds.Test.Info().Len != 30 {
		t.Fatalf("LookupData(%s): %q, %v", dir, ds.Name, err)
	}
	if _, err := LookupData(context.Background(), filepath.Join(dir, "nothing"), "go"); !errors.Is(err, data.ErrMissing) {
		t.Errorf("no such folder: %v, want data.ErrMissing", err)
	}
	cfg := settingsConfig(t)
	cfg.TrainSubset, cfg.TestSubset = 80, 20
	if err := cfg.UseData(ds); err != nil || cfg.Train.Info().Len != 80 || cfg.Test.Info().Len != 20 || cfg.DataName != dir || cfg.Normalizer != nil {
		t.Fatalf("UseData: %v; %d and %d images, name %q, normaliser %v", err, cfg.Train.Info().Len, cfg.Test.Info().Len, cfg.DataName, cfg.Normalizer)
	}
	var fe *param.FieldError
	cfg = settingsConfig(t)
	cfg.Protocol, cfg.Batch, cfg.Learners = ps.Hardsync, 30, 4
	if err := cfg.UseData(ds); !errors.As(err, &fe) || fe.Field != "Batch" {
		t.Errorf("100 images for hardsync rounds of 4 × 30: %v, want an error naming Batch", err)
	}
	cfg = settingsConfig(t)
	cfg.Model = "cifar10_full"
	if err := cfg.LoadModel(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.UseData(ds); !errors.Is(err, data.ErrShape) {
		t.Errorf("MNIST images into cifar10_full: %v, want data.ErrShape", err)
	}
}
