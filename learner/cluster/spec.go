package cluster

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/rdma"
)

// This file derives what every process of a job must agree on from its
// Config: the model's defaults, the settings the coordinator checks, the
// job id, the initial weights and the codec of the weights.

// Defaults are the settings a network trains with unless a command says
// otherwise: Caffe's solvers for its networks (lenet_solver.prototxt with
// one step of the rate after epoch 8 instead of its "inv" decay; the
// paper's cifar10_full and alexnet settings; torchvision's reference
// recipe for resnet18, whose batch of 32 is per GPU, so per learner here:
// 8 hardsync learners are the recipe's 8 GPUs), and the data set it is
// made for ("" for the ImageNet networks: an image folder the user
// names).
type Defaults struct {
	Batch, Epochs             int
	LR, Momentum, WeightDecay float64
	LRSteps                   []int   // epochs after which the rate is multiplied by LRGamma
	LRGamma                   float64 // 0.1, or 0.2 (÷5) for alexnet
	Data                      string  // the data set, by name (LookupData)
}

var defaults = map[string]Defaults{
	"lenet":        {Batch: 64, Epochs: 10, LR: 0.01, Momentum: 0.9, WeightDecay: 5e-4, LRSteps: []int{8}, LRGamma: 0.1, Data: "mnist"},
	"mlp":          {Batch: 64, Epochs: 10, LR: 0.01, Momentum: 0.9, WeightDecay: 5e-4, LRGamma: 0.1, Data: "mnist"},
	"cifar10_full": {Batch: 128, Epochs: 140, LR: 0.001, Momentum: 0.9, WeightDecay: 0.004, LRSteps: []int{120, 130}, LRGamma: 0.1, Data: "cifar10"},
	"alexnet":      {Batch: 256, Epochs: 35, LR: 0.01, Momentum: 0.9, WeightDecay: 5e-4, LRSteps: []int{20, 30}, LRGamma: 0.2},
	"resnet18":     {Batch: 32, Epochs: 90, LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4, LRSteps: []int{30, 60}, LRGamma: 0.1},
}

// DefaultsFor returns the defaults of the built-in network model, or
// LeNet's for any other (a spec file). Its LRSteps are the caller's.
func DefaultsFor(model string) Defaults {
	d, ok := defaults[model]
	if !ok {
		d = defaults["lenet"]
	}
	d.LRSteps = slices.Clone(d.LRSteps)
	return d
}

// LoadModel sets Spec to the network Model names: a built-in network or a
// spec file (nn.Load).
func (c *Config) LoadModel() error {
	spec, err := nn.Load(c.Model)
	if err != nil {
		return err
	}
	c.Spec = spec
	return nil
}

// LoadInit sets Init and Normalizer to the weights in the file InitFile
// (learner.LoadWeights), which must be Spec's; nothing without InitFile.
func (c *Config) LoadInit() error {
	if c.InitFile == "" {
		return nil
	}
	w, err := learner.LoadWeights(c.InitFile, c.Spec)
	if err != nil {
		return err
	}
	c.Init, c.Normalizer = w.Params, &w.Normalizer
	return nil
}

// Settings returns the settings that define the job, keyed by the flag
// that sets each (without dashes): every process of a job must have the
// same ones, which the coordinator checks at rendezvous, and a checkpoint
// records them (ResumeKeys names those a resumed job must share). A
// network that is not built in is named with the hash of its spec
// (learner.SpecHash), initial weights with the hash of their values.
// Spec must be set.
func (c *Config) Settings() Settings {
	itoa := strconv.Itoa
	steps := make([]string, len(c.Solver.LRSteps))
	for i, e := range c.Solver.LRSteps {
		steps[i] = itoa(e)
	}
	model := c.Model
	if !slices.Contains(nn.Builtins(), model) {
		model = fmt.Sprintf("%s (spec %x)", cmp.Or(model, c.Spec.Name), learner.SpecHash(c.Spec))
	}
	s := Settings{
		"model": model, "data": c.Data, "train-subset": itoa(c.TrainSubset), "test-subset": itoa(c.TestSubset),
		"epochs": itoa(c.Epochs), "batch": itoa(c.Batch), "max-steps": itoa(c.MaxSteps), "chunk": itoa(cmp.Or(c.Chunk, DefaultChunk)),
		"seed": fmt.Sprint(c.Seed), "learners": itoa(c.Learners), "shards": itoa(c.Shards),
		"protocol": c.Protocol.String(), "n": c.NString(), "max-staleness": itoa(c.MaxStaleness),
		"lr": fmt.Sprint(c.Solver.LR), "momentum": fmt.Sprint(c.Solver.Momentum), "weight-decay": fmt.Sprint(c.Solver.WeightDecay),
		"lr-steps": strings.Join(steps, ","), "lr-gamma": fmt.Sprint(c.Solver.LRGamma), "lr-mode": c.Solver.RuleString(),
		"momentum-comp": strconv.FormatBool(c.Solver.MomentumComp),
		"compress":      c.Codec.String(), "overlap": strconv.FormatBool(c.Overlap), "transport": c.Transport,
		"early-push": strconv.FormatBool(c.EarlyPush),
	}
	c.imageSettings(s)
	if c.Init != nil {
		b, _ := binary.Append(nil, binary.LittleEndian, c.Init)
		s["load"] = fmt.Sprintf("%x", sha256.Sum256(b))
		if c.InitFile != "" {
			s["load"] = fmt.Sprintf("%s (%s)", c.InitFile, s["load"])
		}
	}
	return s
}

// NString returns softsync's n as --n spells it: the schedule
// ("30@0,4@6,1@9") when there is one, else N.
func (c *Config) NString() string {
	if len(c.NSchedule) > 0 {
		return c.NSchedule.String()
	}
	return strconv.Itoa(c.N)
}

// ResumeFrom sets Resume to the newest complete checkpoint version of
// store that is of this job (LoadResume: the ResumeKeys of Settings),
// re-split onto Shards shards, with the arrays of the shards keep accepts
// (nil: every shard; a process keeps those of the shards it runs).
// skipped lists the newer versions passed over.
func (c *Config) ResumeFrom(store *checkpoint.Store, keep func(shard int) bool) (skipped []error, err error) {
	re, skipped, err := LoadResume(store, c.Settings(), ResumeKeys(), c.Spec.VectorLen(), c.Shards, keep)
	if err != nil {
		return skipped, err
	}
	c.Resume = re
	return skipped, nil
}

// JobID derives the job id stamped on every message of a job's network
// (rdma.Options.Job) from the job's secret, so that the messages of two
// jobs never mix: 1 without a secret.
func JobID(secret []byte) uint32 {
	if len(secret) == 0 {
		return 1
	}
	h := sha256.Sum256(secret)
	return binary.LittleEndian.Uint32(h[:]) | 1
}

// InitialWeights returns the network's layout and the job's initial
// weights: Init, or the spec's fillers drawn from Seed. It needs no
// engine (a shard server has none).
func (c *Config) InitialWeights() ([]param.Segment, []float32, error) {
	if c.Spec == nil {
		return nil, nil, param.Fieldf("Spec", "no network")
	}
	if c.Init != nil {
		return c.Spec.Layout(), c.Init, nil
	}
	w := make([]float32, c.Spec.VectorLen())
	c.Spec.Init(w, c.Seed)
	return c.Spec.Layout(), w, nil
}

// WeightsCodec returns the codec of the weights the shards send: the
// gradients' codec when it is lossless, else none.
func (c *Config) WeightsCodec() rdma.Codec {
	if c.Codec.ID.Lossless() {
		return c.Codec
	}
	return rdma.Codec{}
}

// EvalWorkers returns the goroutines of the evaluation network of a
// process that runs learners learners: as many as those learners use
// together (Workers each), or one learner's share in a process without
// any.
func (c *Config) EvalWorkers(learners int) int {
	return max(c.Workers, 1) * max(learners, 1)
}

// UpdateThreads returns the goroutines each of the shards shards of a
// process that runs learners learners spreads its updates over
// (ps.ServerConfig.UpdateThreads): the threads those learners use
// together (EvalWorkers; at most procs, the process's GOMAXPROCS),
// shared out among the shards, at least one. The learners wait for a
// hardsync update, and the shards of one step update at once.
func (c *Config) UpdateThreads(learners, shards, procs int) int {
	return max(1, min(c.EvalWorkers(learners), procs)/max(shards, 1))
}
