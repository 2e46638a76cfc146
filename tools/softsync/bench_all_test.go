package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestBenchAllQuick runs bench all with tiny sizes, each step in
// processes of its own: the trainings on one thread at the best level only
// (not under the race detector), without the speedup (make bench runs it)
// and the references that need Debian packages. Every step produces
// figures, beside their references.
func TestBenchAllQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several softsync processes")
	}
	out := t.TempDir()
	skip, groups := "speedup,pytorch,iperf3", []string{"peak", "gemm", "train", "transport", "kernels", "solver"}
	if raceDetector { // the trainings would take half a minute
		skip, groups = skip+",train", slices.DeleteFunc(groups, func(g string) bool { return g == "train" })
	}
	run(t, "--isa", "auto", "bench", "all", "--quick", "--out", out, "--skip", skip, "--train-threads", "1",
		"--go-bench", filepath.Join("testdata", "bench", "go-bench.txt"))
	res, err := readResults(filepath.Join(out, "results.json"))
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
	for _, g := range groups {
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
	if i := slices.IndexFunc(res.Failed, func(f benchFailure) bool { return f.Step != "transport verbs-emu" }); i >= 0 {
		t.Errorf("failed steps: %+v", res.Failed)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.md")); err != nil {
		t.Error(err)
	}
}
