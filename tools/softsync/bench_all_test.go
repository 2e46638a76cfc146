package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/softsync/softsync/tools/bench"
)

// TestBenchAllQuick runs bench all with tiny sizes, each step in
// processes of its own, without the trainings (TestBenchTrainJSON runs
// bench train, TestBenchAddTrain the figures bench all makes of it), the
// image pipeline (TestBenchDataJSON and TestBenchAddData likewise; its
// step measures resnet18's input), the speedup (make bench runs it) and
// the references that need Debian packages. Every step produces figures, beside their references.
func TestBenchAllQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several softsync processes")
	}
	out := t.TempDir()
	run(t, "bench", "all", "--quick", "--out", out, "--skip", "train,data,speedup,iperf3",
		"--go-bench", filepath.Join("..", "bench", "testdata", "go-bench.txt"))
	res, err := bench.ReadResults(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Quick || res.Machine.Cores < 1 || len(res.Machine.ISAAvailable) == 0 || res.Machine.Go == "" {
		t.Errorf("header: %+v", res)
	}
	seen := map[string]int{}
	for _, f := range res.Figures {
		seen[f.Group]++
		if f.Value <= 0 || f.Unit == "" || f.Stat == "" || len(f.Runs) == 0 {
			t.Errorf("figure %+v", f)
		}
	}
	for _, g := range []string{"peak", "gemm", "transport", "kernels", "solver"} {
		if seen[g] == 0 {
			t.Errorf("no %s figures: %v", g, seen)
		}
	}
	for _, f := range res.Figures {
		if f.Group == "transport" && f.Params["transport"] == "tcp" && f.Params["codec"] == "none" {
			if f.Ref == nil || f.Ref.Missing == "" {
				t.Errorf("tcp beside a skipped iperf3: %+v", f.Ref)
			}
		}
	}
	if i := slices.IndexFunc(res.Failed, func(f bench.Failure) bool { return f.Step != "transport verbs-emu" }); i >= 0 {
		t.Errorf("failed steps: %+v", res.Failed)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.md")); err != nil {
		t.Error(err)
	}
}
