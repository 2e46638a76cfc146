package bench

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the bench report tests")

// fixedResults is a results file with one figure of each kind.
func fixedResults() *Results {
	return &Results{
		Schema: Schema, Date: time.Date(2026, 12, 1, 17, 30, 0, 0, time.UTC), Seconds: 754.5,
		Commit: Commit{Hash: "0123456789abcdef0123456789abcdef01234567", Dirty: true},
		Machine: Machine{CPU: "Example CPU 9000", Vendor: "AMD", Hypervisor: true, Cores: 2,
			ISAAvailable: []string{"avx512", "avx2", "generic"}, ISAKernels: "avx512", BLASCore: "Cooperlake",
			BLASReason: "AVX-512 with BF16", Engine: "native", Go: "go1.26.0", OS: "linux/amd64",
			LoadBefore: []float64{0.5, 1.25, 2}, LoadAfter: []float64{2.5, 1.5, 1}},
		Figures: []Figure{
			{Group: "peak", Name: "FMA avx512, one core", Params: map[string]any{"isa": "avx512"}, Value: 223.4, Unit: "GFLOP/s", Stat: "best of 5 rounds", Runs: []float64{223.4}},
			{Group: "train", Name: "lenet μ=64, 2 thread(s), avx512", Params: map[string]any{"model": "lenet", "batch": 64.0},
				Value: 7186, Unit: "images/s", Stat: "median of 3 runs", Runs: []float64{7000, 7186, 7821},
				Ref:   &Ref{Name: "PyTorch 1.13", Value: 2395.3, Unit: "images/s", Ratio: 3.0, Runs: []float64{2129, 2395.3, 2601}, Extra: map[string]float64{"images_per_cpu_s": 2000}},
				Extra: map[string]float64{"images_per_cpu_s": 7500, "ratio_per_cpu_s": 3.75}},
			{Group: "train", Name: "lenet μ=4, 2 thread(s), avx512", Value: 2900, Unit: "images/s", Stat: "median of 1 runs", Runs: []float64{2900},
				Ref: &Ref{Name: "PyTorch", Missing: "bench/torch_train_throughput.py: No module named 'torch' | pipe"}},
			{Group: "transport", Name: "tcp none 16 MiB", Value: 1.11, Unit: "GB/s", Stat: "median round", Runs: []float64{1.11},
				Ref: &Ref{Name: "iperf 3.12, one TCP stream over loopback, 128 KiB buffer", Value: 1.48, Unit: "GB/s", Ratio: 0.75}},
			{Group: "misc", Name: "something else", Value: 0.000123, Unit: "s", Stat: "one run", Runs: []float64{0.000123}},
		},
		Failed: []Failure{{Step: "iperf3", Reason: "iperf3 is not installed"}},
	}
}

func TestBenchResultsRoundTrip(t *testing.T) {
	want := fixedResults()
	b, err := EncodeResults(want)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := EncodeResults(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("round trip changed the results:\n%s\n---\n%s", b, b2)
	}
	for _, key := range []string{`"schema": 1`, `"commit"`, `"machine"`, `"isa_available"`, `"openblas_core"`, `"load_before"`,
		`"figures"`, `"reference"`, `"ratio": 3`, `"missing"`, `"runs"`, `"stat": "median of 3 runs"`, `"failed"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("results.json lacks %s", key)
		}
	}
	// Another schema version is refused.
	os.WriteFile(path, bytes.Replace(b, []byte(`"schema": 1`), []byte(`"schema": 99`), 1), 0o644)
	if _, err := ReadResults(path); err == nil || !strings.Contains(err.Error(), "schema 99") {
		t.Fatalf("schema 99: %v", err)
	}
}

// TestBenchSummaryGolden checks the summary of fixedResults and its
// encoding against their golden files (the binary's tests read them too).
func TestBenchSummaryGolden(t *testing.T) {
	b, err := EncodeResults(fixedResults())
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]string{"summary.golden.md": RenderSummary(fixedResults()), "results.golden.json": string(b)} {
		golden := filepath.Join("testdata", name)
		if *updateGolden {
			if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s differs (go test -run TestBenchSummaryGolden -update rewrites it):\n%s", golden, got)
		}
	}
}

func TestReplaceGenerated(t *testing.T) {
	doc := "# Page\n\nHand-written text.\n\n" + MarkBegin + " from bench/results.json -->\nold table\nold line\n" +
		MarkEnd + " -->\n\n## Analysis\n\nMore text.\n"
	got, err := ReplaceGenerated(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Page\n\nHand-written text.\n\n" + MarkBegin + " from bench/results.json -->\nnew table\n" +
		MarkEnd + " -->\n\n## Analysis\n\nMore text.\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	again, err := ReplaceGenerated(got, "new table\n")
	if err != nil || again != got {
		t.Fatalf("regenerating twice changed the page: %v\n%s", err, again)
	}
	for _, bad := range []string{"# Page\n", MarkEnd + "\n" + MarkBegin + "\n", MarkBegin + "\n"} {
		if _, err := ReplaceGenerated(bad, "x\n"); !errors.Is(err, ErrNoMarkers) {
			t.Errorf("%q: %v, want ErrNoMarkers", bad, err)
		}
	}
}

// TestBenchGoBenchRefs checks the references of go test -bench figures:
// the level's one-core peak for convolutions, the copy bandwidth for the
// memory-bound layers, memmove for the solver.
func TestBenchGoBenchRefs(t *testing.T) {
	r := &benchRun{res: &Results{}, peakOne: map[string]float64{"avx512": 200}, copyOne: 20}
	if err := r.goBench(filepath.Join("testdata", "go-bench.txt")); err != nil {
		t.Fatal(err)
	}
	byName := map[string]Figure{}
	for _, f := range r.res.Figures {
		byName[f.Name] = f
	}
	for name, want := range map[string]struct {
		group string
		ratio float64
	}{
		"Conv/native-avx512-1thread/lenet-conv1/fwd": {"kernels", 108.4 / 200},
		"Layers/native-avx2/lenet-pool1/bwd":         {"kernels", 11.07 / 20},
		"Update/n=431080/c=1/avx2":                   {"solver", 35185.00 / 56885.06},
		"FirstNonFinite/go":                          {"solver", 2559.64 / 56885.06},
	} {
		f, ok := byName[name]
		if !ok || f.Group != want.group || f.Ref == nil || f.Ref.Missing != "" || f.Ref.Ratio < want.ratio*0.999 || f.Ref.Ratio > want.ratio*1.001 {
			t.Errorf("%s: %+v (ref %+v), want group %s ratio %.3f", name, f, f.Ref, want.group, want.ratio)
		}
	}
	if f := byName["Update/n=431080/memmove"]; f.Ref != nil || f.Group != "solver" {
		t.Errorf("memmove: %+v", f)
	}
}
