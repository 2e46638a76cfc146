package sim

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
)

// ruleConfig is a softsync run of 6 learners (n = 3, c₀ = 2) on two
// shards of a quadratic, whose gradient w − target the learners compute
// from the weights they pulled, under rule (its --lr-mode spelling).
func ruleConfig(rule string, comp bool) Config {
	cfg := baseConfig(6, ps.Softsync, 3)
	cfg.Rule, cfg.PS.Solver.MomentumComp = rule, comp
	cfg.PS.DataSize, cfg.PS.Solver.LR = 60, 0.02
	cfg.Steps, cfg.TotalSteps, cfg.Jitter, cfg.Seed = 0, 240, 0.05, 3
	for k := range cfg.Init {
		cfg.Init[k] = float32(math.Sin(float64(k)))
	}
	cfg.Gradient = func(_, step int, w, grad []float32) {
		for k := range grad {
			grad[k] = w[k] - float32(k%3) + 0.01*float32(step%5)
		}
	}
	return cfg
}

// loss is ½|w − target|² of the quadratic of ruleConfig.
func loss(w []float32) float64 {
	var s float64
	for k, x := range w {
		d := float64(x) - float64(k%3)
		s += d * d / 2
	}
	return s
}

// simRules are the rules of the simulator tests, with or without
// momentum compensation; stateful: the rule keeps state across updates
// (pulled weights, running means, the window of τ).
var simRules = []struct {
	rule           string
	comp, stateful bool
}{
	{"constant", false, false}, {"staleness", false, false}, {"average", false, false}, {"poly:0.5", false, false},
	{"hinge:2,1", false, false}, {"dc:0.04", false, true}, {"dc-adaptive:2", false, true}, {"gap", false, true},
	{"dc:0.04+staleness", false, true}, {"staleness", true, true},
}

// TestRules runs every rule through the simulator: each run completes and
// lowers the loss.
func TestRules(t *testing.T) {
	for _, r := range simRules {
		cfg := ruleConfig(r.rule, r.comp)
		res, err := Run(cfg)
		if err != nil {
			t.Fatalf("%s (momentum-comp %v): %v", r.rule, r.comp, err)
		}
		if before, after := loss(cfg.Init), loss(res.Weights); !(after < before/2) {
			t.Errorf("%s (momentum-comp %v): loss %g → %g", r.rule, r.comp, before, after)
		}
	}
}

// TestRulesResume checks, for every rule that keeps state (per-learner
// pulled weights, running means, the window of τ), that a run whose
// shards are checkpointed through the shard file format and restored
// midway ends with the weights and the counters of the uninterrupted
// run, bit for bit.
func TestRulesResume(t *testing.T) {
	for _, r := range simRules {
		if !r.stateful {
			continue
		}
		name := fmt.Sprintf("%s/comp=%v", r.rule, r.comp)
		want, err := Run(ruleConfig(r.rule, r.comp))
		if err != nil {
			t.Fatal(name, err)
		}
		cfg := ruleConfig(r.rule, r.comp)
		reloads := 0
		cfg.Reload = func(k int, steps uint64, sh *ps.Shard) (*ps.Checkpoint, error) {
			if steps%97 != 0 {
				return nil, nil
			}
			reloads++
			var b bytes.Buffer
			f := &checkpoint.Shard{Checkpoint: *sh.Checkpoint(), Shards: cfg.PS.Shards, Incarnations: make([]uint32, 6), Evicted: make([]bool, 6)}
			if err := checkpoint.EncodeShard(&b, f); err != nil {
				return nil, err
			}
			got, err := checkpoint.DecodeShard(bytes.NewReader(b.Bytes()))
			if err != nil {
				return nil, err
			}
			return &got.Checkpoint, nil
		}
		got, err := Run(cfg)
		if err != nil {
			t.Fatal(name, err)
		}
		if reloads < 4 {
			t.Fatalf("%s: %d reloads", name, reloads)
		}
		for k := range want.Weights {
			if math.Float32bits(want.Weights[k]) != math.Float32bits(got.Weights[k]) {
				t.Fatalf("%s: weight %d is %v after %d reloads, %v uninterrupted", name, k, got.Weights[k], reloads, want.Weights[k])
			}
		}
		for k := range want.Shards {
			a, b := want.Shards[k], got.Shards[k]
			if a.Clock != b.Clock || a.Updates != b.Updates || !slices.Equal(a.Histogram, b.Histogram) || a.PulledBytes != b.PulledBytes {
				t.Fatalf("%s: shard %d counters %+v after reloads, %+v uninterrupted", name, k, b, a)
			}
		}
	}
}
