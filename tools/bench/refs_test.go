package bench

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseTorch(t *testing.T) {
	v, res, err := parseTorch(readFixture(t, "torch.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []torchResult{{"lenet", 64, 1, 3448, 3524}, {"lenet", 4, 1, 1674, 1712}, {"cifar10_full", 4, 1, 749, 871}}
	if v != "1.13.0a0" || len(res) != len(want) {
		t.Fatalf("version %q, results %+v", v, res)
	}
	for i := range want {
		if res[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, res[i], want[i])
		}
	}
	// The output of /work/shared/bench's original script: no version, no CPU time.
	v, res, err = parseTorch(readFixture(t, "torch-original.txt"))
	if err != nil || v != "" || len(res) != 2 || res[1] != (torchResult{"cifar10_full", 100, 2, 383, 0}) {
		t.Fatalf("original format: %q %+v %v", v, res, err)
	}
	if _, _, err := parseTorch([]byte("Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n")); err == nil ||
		!strings.Contains(err.Error(), "No module named") {
		t.Fatalf("error output: %v, want an error quoting it", err)
	}
}

func TestParseIperf(t *testing.T) {
	r, err := parseIperf(readFixture(t, "iperf3.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != "iperf 3.12" || r.BufBytes != 131072 || r.Seconds < 1 || r.Seconds > 1.1 || math.Abs(r.GBps-11865369657.793236/8e9) > 1e-9 {
		t.Fatalf("%+v", r)
	}
	if _, err := parseIperf(readFixture(t, "iperf3-refused.json")); err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Fatalf("refused connection: %v", err)
	}
	if _, err := parseIperf([]byte("iperf3: error")); err == nil {
		t.Fatal("no error for output that is not JSON")
	}
}

func TestParseGoBench(t *testing.T) {
	list, err := parseGoBench(readFixture(t, "go-bench.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 11 {
		t.Fatalf("%d results: %+v", len(list), list)
	}
	c := list[0]
	if c.Pkg != "github.com/softsync/softsync/kernels" || c.Name != "Conv/native-avx512-1thread/lenet-conv1/fwd" || c.N != 20 ||
		c.Metrics["cpu-GFLOP/s"] != 108.4 || c.Metrics["allocs/op"] != 0 {
		t.Fatalf("%+v", c)
	}
	if v, u := c.primary(); v != 108.4 || u != "cpu-GFLOP/s" {
		t.Errorf("conv primary %v %s", v, u)
	}
	u := list[6] // Update/n=431080/c=1/go
	if u.Pkg != "github.com/softsync/softsync/ps/sgd" || u.Name != "Update/n=431080/c=1/go" {
		t.Fatalf("%+v", u)
	}
	if v, unit := u.primary(); unit != "GB/s" || math.Abs(v-4.61069) > 1e-9 {
		t.Errorf("update primary %v %s", v, unit)
	}
	if _, err := parseGoBench([]byte("BenchmarkX-2 10 abc ns/op\n")); err == nil {
		t.Error("no error for a bad value")
	}
}
