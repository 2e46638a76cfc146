package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reproArgs is a tiny table: mlp on the synthetic images of dir, λ = 4 learners
// of μ = 4, n ∈ {1, 4} with both rate modes, hardsync and a single learner
// of μ = 32, 2 epochs.
func reproArgs(dir, out string, extra ...string) []string {
	return append([]string{"repro", "--data", dir, "--model", "mlp", "--learners", "4", "--batch", "4", "--n", "1,4",
		"--single-batch", "32", "--epochs", "2", "--train-subset", "0", "--out", out, "--threads", "1"}, extra...)
}

func readEntries(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var es []map[string]any
	if err := json.Unmarshal(b, &es); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return es
}

// TestReproSim runs the tiny table in the simulator twice, with one and
// with two simulations at once, and checks that the table and the report
// are the same bytes; then the files, the runs and their fields.
func TestReproSim(t *testing.T) {
	dir := idxFolder(t, 240, 60)
	a, b := t.TempDir(), t.TempDir()
	run(t, reproArgs(dir, a, "--sim", "--parallel", "1")...)
	run(t, reproArgs(dir, b, "--sim", "--parallel", "2")...)
	for _, f := range []string{"table.md", "report.json"} {
		x, err := os.ReadFile(filepath.Join(a, f))
		if err != nil {
			t.Fatal(err)
		}
		y, _ := os.ReadFile(filepath.Join(b, f))
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs of the same seed:\n%s\n---\n%s", f, x, y)
		}
	}
	for _, f := range []string{"test-error.png", "staleness.png"} {
		if fi, err := os.Stat(filepath.Join(a, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	es := readEntries(t, filepath.Join(a, "report.json"))
	want := []struct {
		run, protocol, mode string
		n, learners         float64
	}{
		{"single learner", "hardsync", "constant", 0, 1}, {"hardsync", "hardsync", "constant", 0, 4},
		{"1-softsync, α0", "softsync", "constant", 1, 4}, {"1-softsync, α0/τ", "softsync", "staleness", 1, 4},
		{"4-softsync, α0", "softsync", "constant", 4, 4}, {"4-softsync, α0/τ", "softsync", "staleness", 4, 4},
	}
	if len(es) != len(want) {
		t.Fatalf("%d runs in report.json, want %d", len(es), len(want))
	}
	for i, w := range want {
		e := es[i]
		if e["run"] != w.run || e["protocol"] != w.protocol || e["lr_mode"] != w.mode || e["n"] != w.n || e["learners"] != w.learners ||
			e["mode"] != "sim" || e["transport"] != "sim" || e["epochs"] != 2.0 {
			t.Errorf("run %d: %v", i, e)
		}
		for _, k := range []string{"test_error", "staleness", "updates", "history", "diverged", "images_per_sec", "data", "model"} {
			if _, ok := e[k]; !ok {
				t.Errorf("run %d lacks %q", i, k)
			}
		}
		if e["diverged"] == false && (e["test_error"] == nil || len(e["history"].([]any)) != 2) {
			t.Errorf("run %d: test error %v, history %v", i, e["test_error"], e["history"])
		}
	}
	// n-softsync's mean staleness is close to n (the paper's ⟨τ⟩ ≈ n).
	if st := es[5]["staleness"].(map[string]any); st["mean"].(float64) < 2.5 || st["mean"].(float64) > 4.5 {
		t.Errorf("4-softsync: mean staleness %v", st["mean"])
	}
	// Another seed, another table.
	c := t.TempDir()
	run(t, reproArgs(dir, c, "--sim", "--seed", "2", "--n", "4", "--lr-modes", "staleness")...)
	x, _ := os.ReadFile(filepath.Join(a, "report.json"))
	y, _ := os.ReadFile(filepath.Join(c, "report.json"))
	if bytes.Equal(x, y) {
		t.Error("seeds 1 and 2 gave the same report")
	}
}

// TestReproReal runs a smaller table with real learners.
func TestReproReal(t *testing.T) {
	dir := idxFolder(t, 400, 100)
	out := t.TempDir()
	run(t, reproArgs(dir, out, "--n", "4", "--lr-modes", "staleness", "--epochs", "1")...)
	es := readEntries(t, filepath.Join(out, "report.json"))
	if len(es) != 3 {
		t.Fatalf("%d runs, want 3", len(es))
	}
	for _, e := range es {
		if e["mode"] != "real" || e["transport"] != "inmem" || e["diverged"] != false || e["test_error"] == nil || e["steps"].(float64) < 1 {
			t.Errorf("run %v", e)
		}
	}
	if md, err := os.ReadFile(filepath.Join(out, "table.md")); err != nil || !bytes.Contains(md, []byte("| 4-softsync, α0/τ | 4 × 4 |")) {
		t.Errorf("table.md: %v\n%s", err, md)
	}
}

// TestReproDiverged: with a huge rate the runs diverge, in the simulator
// and with real learners alike, and are reported as such.
func TestReproDiverged(t *testing.T) {
	dir := idxFolder(t, 400, 100)
	for _, mode := range [][]string{{"--sim"}, nil} {
		out := t.TempDir()
		run(t, reproArgs(dir, out, append(mode, "--n", "4", "--lr-modes", "constant", "--lr", "1e6")...)...)
		es := readEntries(t, filepath.Join(out, "report.json"))
		e := es[len(es)-1]
		if e["run"] != "4-softsync, α0" || e["diverged"] != true || e["test_error"] != nil || e["diverged_reason"] == "" {
			t.Errorf("%v: %v", mode, e)
		}
		if md, _ := os.ReadFile(filepath.Join(out, "table.md")); !bytes.Contains(md, []byte("| 4-softsync, α0 | 4 × 4 | diverged (epoch ")) {
			t.Errorf("%v: table.md:\n%s", mode, md)
		}
	}
}

func TestReproBadFlags(t *testing.T) {
	dir := idxFolder(t, 40, 10)
	for _, extra := range [][]string{
		{"--n", "0"}, {"--n", "5"}, {"--lr-modes", "fast"}, {"--learners", "0"}, {"--epochs", "0"},
		{"--lr", "-1"}, {"--single-batch", "64"}, // 40 images are fewer than the single learner's batch
	} {
		args := append(reproArgs(dir, t.TempDir(), "--sim"), extra...)
		if _, err := runErr(args...); err == nil {
			t.Errorf("repro %v: no error", extra)
		}
	}
}

// TestReproRules runs a tiny --rules --quick table: every row is a
// softsync run of one rule, n and timing model, with the fields docs/repro.md
// lists, and rules.png is written.
func TestReproRules(t *testing.T) {
	dir := idxFolder(t, 240, 60)
	out := t.TempDir()
	rules := []string{"staleness", "hinge:4,10", "dc:0.04", "staleness+momentum-comp"}
	run(t, "repro", "--rules", "--quick", "--data", dir, "--model", "mlp", "--learners", "4", "--batch", "4", "--n", "1,4",
		"--lr-modes", strings.Join(rules, ","), "--epochs", "1", "--train-subset", "0", "--out", out, "--threads", "1", "--parallel", "2")
	for _, f := range []string{"table.md", "report.json", "rules.png", "staleness.png"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	es := readEntries(t, filepath.Join(out, "report.json"))
	if len(es) != 2*2*len(rules) {
		t.Fatalf("%d runs, want %d", len(es), 2*2*len(rules))
	}
	i := 0
	for _, timing := range []string{"homogeneous", "heterogeneous"} {
		for _, n := range []float64{1, 4} {
			for _, r := range rules {
				e := es[i]
				i++
				if e["lr_mode"] != r || e["n"] != n || e["timing"] != timing || e["protocol"] != "softsync" || e["mode"] != "sim" ||
					e["momentum_comp"] != strings.HasSuffix(r, "+momentum-comp") {
					t.Errorf("run %d: want %s, n %v, %s; got %v", i-1, r, n, timing, e)
				}
				for _, k := range []string{"data", "test_error", "diverged", "staleness"} {
					if _, ok := e[k]; !ok {
						t.Errorf("run %d lacks %q", i-1, k)
					}
				}
			}
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, "table.md"))
	for _, s := range []string{"### Test error, heterogeneous learners", "| hinge:4,10 |", "| n = 1 | n = 4 |"} {
		if !bytes.Contains(md, []byte(s)) {
			t.Errorf("table.md lacks %q:\n%s", s, md)
		}
	}
}

// TestReproRulesBadFlag: a bad rule of --rules is refused, naming the flag.
func TestReproRulesBadFlag(t *testing.T) {
	dir := idxFolder(t, 40, 10)
	if _, err := runErr(append(reproArgs(dir, t.TempDir(), "--rules"), "--lr-modes", "hinge:x")...); err == nil ||
		!strings.Contains(err.Error(), "--lr-modes") {
		t.Errorf("--rules --lr-modes hinge:x: %v", err)
	}
}
