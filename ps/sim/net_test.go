package sim

import (
	"errors"
	"math"
	"testing"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
)

// netConfig is one learner-sized job on one shard whose 64 simulated
// values stand for a vector of elements values.
func netConfig(learners int, proto ps.Protocol, n, elements int) Config {
	return Config{
		PS: ps.Config{Learners: learners, Protocol: proto, N: n, Shards: 1, Batch: 4,
			Solver: sgd.Config{LR: 0.1, Momentum: 0.9}},
		Init:    make([]float32, 64),
		Compute: Dist{Kind: Uniform, Mean: 0.01},
		Latency: 20e-6,
		Net: &Network{Elements: elements, GradientBytes: 4, WeightBytes: 2, HeaderBytes: 64,
			LearnerBandwidth: 1e9, ShardBandwidth: 2e9,
			PushFixed: 5e-6, PushPerElem: 1e-9, PullFixed: 3e-6, PullPerElem: 0.5e-9,
			EncodePerElem: 0.2e-9, DecodePerElem: 0.1e-9},
	}
}

func near(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

// TestNetStepTime checks one learner's step time against the model written
// out by hand: under hardsync its pull waits for the push's update, so a
// step is the push's service, the pull's service, the weights' transfer,
// the compute and codec time, and the gradient's transfer, each transfer
// taking bytes over the slower link plus the latency. The period is the
// difference of two runs, which cancels the first pull and the last leave.
func TestNetStepTime(t *testing.T) {
	const E = 1e6
	cfg := netConfig(1, ps.Hardsync, 0, E)
	n := cfg.Net
	times := map[int]float64{}
	for _, steps := range []int{10, 30} {
		cfg.Steps = steps
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		times[steps] = res.Time
	}
	got := (times[30] - times[10]) / 20
	minBW := min(n.LearnerBandwidth, n.ShardBandwidth)
	want := (n.PushFixed + n.PushPerElem*E) + (n.PullFixed + n.PullPerElem*E) +
		(n.HeaderBytes+n.WeightBytes*E)/minBW + cfg.Latency +
		cfg.Compute.Mean + (n.EncodePerElem+n.DecodePerElem)*E +
		(n.HeaderBytes+n.GradientBytes*E)/minBW + cfg.Latency
	if !near(got, want, 1e-9) {
		t.Fatalf("step time %.9g s, want %.9g s", got, want)
	}
}

// TestNetSaturation checks the ceilings of a shard: its core (every step
// costs it one push and one pull) and its link (pushes in, weights out,
// each direction its own, or one link for all traffic). With learners
// enough to keep it busy, the job runs at the ceiling.
func TestNetSaturation(t *testing.T) {
	const learners, steps, E = 16, 4000, 1e6
	for _, c := range []struct {
		name string
		tune func(*Network)
		step func(*Network) float64 // seconds of the bottleneck per step
	}{
		{"core", func(n *Network) { n.PushPerElem = 20e-9 }, func(n *Network) float64 {
			return n.PushFixed + n.PushPerElem*E + n.PullFixed + n.PullPerElem*E
		}},
		{"link", func(n *Network) { n.ShardBandwidth = 0.1e9 }, func(n *Network) float64 {
			return max(n.HeaderBytes+n.GradientBytes*E, n.HeaderBytes+n.WeightBytes*E) / n.ShardBandwidth
		}},
		// One link for everything: a pull, its reply and a push per step.
		{"shared link", func(n *Network) { n.ShardBandwidth, n.SharedLink = 0.1e9, true }, func(n *Network) float64 {
			return (3*n.HeaderBytes + (n.GradientBytes+n.WeightBytes)*E) / n.ShardBandwidth
		}},
	} {
		cfg := netConfig(learners, ps.Softsync, learners, E)
		cfg.TotalSteps = steps
		c.tune(cfg.Net)
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := res.Time/steps, c.step(cfg.Net); !near(got, want, 0.01) {
			t.Errorf("%s-bound: %.6g s per step, want %.6g", c.name, got, want)
		}
	}
}

// TestNetHardsyncBarrier: with no communication cost, hardsync steps at
// the pace of the slowest of λ learners, softsync at the mean: with
// ±50% uniform compute times and λ = 8, the expected maximum of 8 draws
// is 1 + 0.5·7/9 of the mean.
func TestNetHardsyncBarrier(t *testing.T) {
	const learners, steps = 8, 4000
	for _, c := range []struct {
		proto ps.Protocol
		n     int
		want  float64 // rounds per unit of mean compute time
	}{{ps.Hardsync, 0, 1 / (1 + 0.5*7.0/9)}, {ps.Softsync, learners, 1}} {
		cfg := netConfig(learners, c.proto, c.n, 64)
		cfg.Net, cfg.Latency = &Network{}, 0
		cfg.Compute = Dist{Kind: Uniform, Mean: 1, Spread: 0.5}
		cfg.Steps = steps
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := steps / res.Time; !near(got, c.want, 0.02) {
			t.Errorf("%v: %.4f steps per learner per unit time, want %.4f", c.proto, got, c.want)
		}
	}
}

func TestStop(t *testing.T) {
	cfg := netConfig(4, ps.Softsync, 4, 0)
	cfg.TotalSteps = 1000
	events := 0
	cfg.Stop = func() bool { events++; return events > 50 }
	res, err := Run(cfg)
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("err %v, want ErrStopped", err)
	}
	total := 0
	for _, s := range res.Steps {
		total += s
	}
	if total == 0 || total >= 1000 || len(res.Steps) != 4 {
		t.Fatalf("stopped after %v steps", res.Steps)
	}
}

func TestNetConfigErrors(t *testing.T) {
	for field, mut := range map[string]func(*Network){
		"Net.Elements":       func(n *Network) { n.Elements = -1 },
		"Net.ShardBandwidth": func(n *Network) { n.ShardBandwidth = math.Inf(1) },
		"Net.PushPerElem":    func(n *Network) { n.PushPerElem = -1 },
		"Net.DecodePerElem":  func(n *Network) { n.DecodePerElem = math.NaN() },
	} {
		cfg := netConfig(2, ps.Softsync, 2, 0)
		cfg.Steps = 1
		mut(cfg.Net)
		var fe *param.FieldError
		if _, err := Run(cfg); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
}

// TestObserveWeights: the weights seen after each Step are the shard's,
// at non-decreasing times; after the last one they are the result's.
func TestObserveWeights(t *testing.T) {
	cfg := baseConfig(4, ps.Softsync, 2)
	cfg.Steps = 20
	cfg.Gradient = func(l, step int, w, grad []float32) {
		for i := range grad {
			grad[i] = float32(l+1) * 0.01 * float32(i%5)
		}
	}
	last := make([][]float32, cfg.PS.Shards)
	prev := 0.0
	cfg.ObserveWeights = func(at float64, k int, in ps.Msg, w []float32) {
		if at < prev {
			t.Fatalf("time went back from %g to %g", prev, at)
		}
		prev = at
		last[k] = append(last[k][:0], w...)
	}
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := append(last[0], last[1]...)
	for i, v := range res.Weights {
		if got[i] != v || (i%5 != 0 && v == 0) {
			t.Fatalf("weight %d: observed %g, result %g", i, got[i], v)
		}
	}
}
