package costmodel

import (
	"math"
	"testing"
)

// TestSweepGiven predicts from given inputs and checks one learner's
// images/s against the step written out by hand: the push's and the
// pull's service at the shard, the two transfers and latencies, the
// compute time (no jitter) and the client's copies of the gradient and
// the weights. The run's first pull and last push differ from a steady
// step by a fraction of one step, a thousandth of a 50-step run.
func TestSweepGiven(t *testing.T) {
	in := &Inputs{Model: "mlp", Params: 50890, Batch: 4, ComputeSec: 10e-3, Codec: "none", WireRatio: 1,
		Bandwidth: 1e9, ShardBW: 1e9, LatencySec: 50e-6, ShardRate: 2e9, CopyRate: 4e9, Shards: 1, Steps: 50, Seed: 1}
	protos, err := ParseProtocols("hardsync,2-softsync,λ-softsync")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := Sweep(in, protos, []int{1, 4})
	if err != nil {
		t.Fatal(err)
	}
	p := float64(in.Params)
	step := 4*p/2e9 + 4*p/4e9 + 2*(56+4*p)/1e9 + 2*50e-6 + 10e-3 + 2*4*p/4e9
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	for _, r := range rows {
		if r.Learners == 1 && (math.Abs(r.ImagesPerSec-4/step) > 1e-3*4/step || r.Speedup != 1) {
			t.Errorf("λ = 1 %s: %g images/s, speedup %g; want %g and 1", r.Protocol, r.ImagesPerSec, r.Speedup, 4/step)
		}
		if r.Learners == 4 && (r.Speedup < 3 || r.Speedup > 4 || math.Abs(r.Efficiency-r.Speedup/4) > 1e-12) {
			t.Errorf("λ = 4 %s: speedup %g, efficiency %g", r.Protocol, r.Speedup, r.Efficiency)
		}
	}
	if r := rows[4]; r.Protocol != "λ-softsync" || r.N != 1 || rows[3].N != 2 || rows[5].N != 4 || rows[1].N != 0 {
		t.Errorf("rows %+v", rows)
	}
	again, _ := Sweep(in, protos, []int{1, 4})
	for i := range rows {
		if again[i] != rows[i] {
			t.Errorf("row %d differs between two sweeps of the same inputs: %+v, %+v", i, rows[i], again[i])
		}
	}
}

// TestPresetP775 sweeps the paper's cluster: hardsync falls behind
// softsync, softsync lands in the paper's range at λ = 30 with staleness
// ≈ n, and the compute time fitted to 25× is the preset's 2 ms, give or
// take the paper's range.
func TestPresetP775(t *testing.T) {
	in := Presets["p775"]
	in.Params, in.Steps, in.Seed = 89578, 100, 1 // cifar10_full's parameters
	protos, _ := ParseProtocols("hardsync,λ-softsync")
	rows, err := Sweep(&in, protos, []int{1, 30})
	if err != nil {
		t.Fatal(err)
	}
	hard, soft := rows[1], rows[3]
	if hard.Learners != 30 || soft.Protocol != "λ-softsync" || soft.Speedup < 22 || soft.Speedup > 28 ||
		hard.Speedup >= soft.Speedup || math.Abs(soft.MeanStaleness-30) > 3 {
		t.Errorf("λ = 30: hardsync %+v, 30-softsync %+v", hard, soft)
	}
	in.Steps = 50
	c, err := Fit(&in, 25, 30)
	if err != nil || c < 1.5e-3 || c > 2.7e-3 {
		t.Errorf("Fit(25×): %v s, %v", c, err)
	}
	if _, err := Fit(&in, 40, 30); err == nil {
		t.Error("Fit(40×) at λ = 30: no error")
	}
}

func TestParseProtocols(t *testing.T) {
	ps, err := ParseProtocols("hardsync, 4-softsync,lambda-softsync")
	if err != nil {
		t.Fatal(err)
	}
	if ps[0].Name != "hardsync" || ps[1].Name != "4-softsync" || ps[2].Name != "λ-softsync" {
		t.Errorf("%+v", ps)
	}
	if _, n := ps[1].At(2); n != 2 {
		t.Errorf("4-softsync at λ = 2: n = %d, want 2", n)
	}
	if _, n := ps[2].At(7); n != 7 {
		t.Errorf("λ-softsync at λ = 7: n = %d, want 7", n)
	}
	for _, bad := range []string{"fast", "0-softsync", "x-softsync", ""} {
		if _, err := ParseProtocols(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
