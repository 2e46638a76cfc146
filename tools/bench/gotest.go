package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// goBench is one result line of go test -bench's output.
type goBench struct {
	Pkg     string             // import path (the "pkg:" line before it)
	Name    string             // without "Benchmark" and the -GOMAXPROCS suffix, e.g. "Conv/native-avx2-1thread/lenet-conv1/fwd"
	N       int                // iterations
	Metrics map[string]float64 // unit → value: "ns/op", "MB/s", "cpu-GFLOP/s", ...
}

var goBenchProcs = regexp.MustCompile(`-\d+$`)

// parseGoBench reads go test -bench output (several packages' outputs may
// follow each other); lines that are not results are skipped.
func parseGoBench(out []byte) ([]goBench, error) {
	var res []goBench
	pkg := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		b := goBench{Pkg: pkg, Name: goBenchProcs.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), ""),
			N: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("go test -bench output: %q: bad value %q", line, f[i])
			}
			b.Metrics[f[i+1]] = v
		}
		res = append(res, b)
	}
	return res, sc.Err()
}

// primary returns the figure a benchmark is judged by: the CPU-time rates
// of the one-thread kernel benchmarks, else their wall-clock rate, else
// bytes per second, else time per operation.
func (b goBench) primary() (float64, string) {
	for _, u := range []string{"cpu-GFLOP/s", "cpu-GB/s", "GFLOP/s"} {
		if v, ok := b.Metrics[u]; ok {
			return v, u
		}
	}
	if v, ok := b.Metrics["MB/s"]; ok {
		return v / 1000, "GB/s"
	}
	return b.Metrics["ns/op"], "ns/op"
}
