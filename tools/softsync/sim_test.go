package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/ps/sim/costmodel"
)

type simOut struct {
	Inputs costmodel.Inputs `json:"inputs"`
	Rows   []costmodel.Row  `json:"rows"`
}

func runSimJSON(t *testing.T, args ...string) simOut {
	t.Helper()
	var o simOut
	out := run(t, append([]string{"sim", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return o
}

// TestSimGiven predicts from inputs given on the command line: nothing
// is measured, the inputs are the flags', and the rows are every λ and
// protocol (the predictions themselves: ps/sim/costmodel's tests).
func TestSimGiven(t *testing.T) {
	o := runSimJSON(t, "--model", "mlp", "--batch", "4", "--compute", "10ms", "--compute-spread", "0",
		"--bandwidth", "1e9", "--latency", "50us", "--shard-rate", "2e9", "--copy-rate", "4e9",
		"--learners", "1,4", "--protocols", "hardsync,2-softsync,λ-softsync", "--steps", "50")
	in := o.Inputs
	if in.Source != "given" || in.Params != 50890 || in.WireRatio != 1 || in.ComputeSec != 10e-3 || in.ComputeSpread != 0 ||
		in.Bandwidth != 1e9 || in.ShardBW != 1e9 || in.LatencySec != 50e-6 || in.ShardRate != 2e9 || in.CopyRate != 4e9 || in.Steps != 50 {
		t.Fatalf("inputs %+v", in)
	}
	if len(o.Rows) != 6 {
		t.Fatalf("%d rows, want 6", len(o.Rows))
	}
	for _, r := range o.Rows {
		if r.Learners == 1 && r.Speedup != 1 || r.Learners == 4 && r.Speedup <= 1 {
			t.Errorf("row %+v", r)
		}
	}
	if r := o.Rows[4]; r.Protocol != "λ-softsync" || r.N != 1 || o.Rows[3].N != 2 || o.Rows[5].N != 4 {
		t.Errorf("rows %+v", o.Rows)
	}
}

// TestSimPreset sweeps the paper's cluster: hardsync falls behind
// softsync, softsync lands in the paper's range at λ = 30 with staleness
// ≈ n, and the plot is written.
func TestSimPreset(t *testing.T) {
	nativeOnly(t) // a sweep of 30 learners' steps, as costmodel's TestPresetP775
	png := filepath.Join(t.TempDir(), "speedup.png")
	o := runSimJSON(t, "--preset", "p775", "--learners", "1,30", "--steps", "100", "--plot", png)
	get := func(proto string, l int) costmodel.Row {
		for _, r := range o.Rows {
			if r.Protocol == proto && r.Learners == l {
				return r
			}
		}
		t.Fatalf("no row %s λ=%d", proto, l)
		return costmodel.Row{}
	}
	hard, soft := get("hardsync", 30), get("λ-softsync", 30)
	if soft.Speedup < 22 || soft.Speedup > 28 || hard.Speedup >= soft.Speedup || math.Abs(soft.MeanStaleness-30) > 3 {
		t.Errorf("λ = 30: hardsync %+v, 30-softsync %+v", hard, soft)
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Errorf("--plot: %v", err)
	}
	out := run(t, "sim", "--preset", "p775", "--fit-speedup", "25", "--steps", "50")
	if !strings.Contains(out, "for 25× at λ = 30") || !strings.Contains(out, "ms") {
		t.Errorf("--fit-speedup: %s", out)
	}
}

// TestSimMeasure measures every input on this machine (briefly) and
// predicts λ = 1 and 2.
func TestSimMeasure(t *testing.T) {
	defer func(d time.Duration) { simMeasureTime = d }(simMeasureTime)
	simMeasureTime = 20 * time.Millisecond
	o := runSimJSON(t, "--model", "mlp", "--batch", "4", "--learners", "1,2", "--protocols", "λ-softsync",
		"--steps", "20", "--link", "inmem", "--compress", "fp16", "--threads", "1")
	in := o.Inputs
	if !strings.HasPrefix(in.Source, "measured") || in.ComputeSec <= 0 || in.ShardRate <= 0 || in.CopyRate <= 0 ||
		math.Abs(in.WireRatio-0.5) > 0.01 || in.EncodeSec <= 0 {
		t.Errorf("inputs %+v", in)
	}
	if len(o.Rows) != 2 || o.Rows[1].Speedup <= 1 {
		t.Errorf("rows %+v", o.Rows)
	}
}

func TestSimBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--preset", "bgq"}, {"--protocols", "fast"}, {"--learners", "0"}, {"--preset", "p775", "--compress", "fp16"},
		{"--compute", "-1ms", "--preset", "p775"}, {"--preset", "p775", "--fit-speedup", "40"},
	} {
		if _, err := runErr(append([]string{"sim"}, args...)...); err == nil {
			t.Errorf("sim %v: no error", args)
		}
	}
}
