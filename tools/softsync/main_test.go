package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/tools/bench"
)

func run(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		t.Fatalf("softsync %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

func TestDoctor(t *testing.T) {
	out := run(t, "doctor", "--threads", "1")
	for _, want := range []string{"CPU", "CPU features", "RDMA", "Locked memory", "Transport auto", "Engine", "Pure-Go fallback", "Kernel ISA", "Solver, codecs", "Threads", "Timer slack"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchGemmJSON(t *testing.T) {
	out := run(t, "bench", "gemm", "--json", "--sizes", "8x16x4,3x5x7", "--min-time", "1ms", "--rounds", "1")
	var rows []map[string]float64
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(rows) != 2 || rows[0]["m"] != 8 || rows[0]["n"] != 16 || rows[0]["k"] != 4 || rows[1]["k"] != 7 {
		t.Fatalf("rows %v", rows)
	}
	for _, r := range rows {
		for _, f := range []string{"gflops", "gflops_c", "gflops_ref"} {
			if _, ok := r[f]; !ok {
				t.Errorf("row %v lacks %s", r, f)
			}
		}
		if r["gflops"] <= 0 || r["gflops_ref"] <= 0 {
			t.Errorf("row %v: non-positive rate", r)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args        []string
		flag, value string
	}{
		{[]string{"doctor", "--threads", "-1"}, "--threads", "-1"},
		{[]string{"doctor", "--log-level", "loud"}, "--log-level", `"loud"`},
		{[]string{"doctor", "--engine", "gpu"}, "--engine", `"gpu"`},
		{[]string{"bench", "gemm", "--sizes", "8x8"}, "--sizes", `"8x8"`},
		{[]string{"doctor", "--isa", "avx1024"}, "--isa", `"avx1024"`},
		{[]string{"bench", "peak", "--copy-sizes", "12"}, "--copy-sizes", "12"},
		{[]string{"bench", "peak", "--rounds", "0"}, "--rounds", "0"},
		{[]string{"bench", "gemm", "--rounds", "0", "--sizes", "8x8x8"}, "--rounds", "0"},
		{[]string{"bench", "gemm", "--min-time", "-1s", "--sizes", "8x8x8"}, "--min-time", "-1s"},
		{[]string{"bench", "speedup", "--steps", "0"}, "--steps", "0"},
		{[]string{"bench", "speedup", "--batch", "-1"}, "--batch", "-1"},
		{[]string{"bench", "speedup", "--repeat", "0"}, "--repeat", "0"},
		{[]string{"bench", "speedup", "--model", "lenet:0"}, "--model", `"lenet:0"`},
		{[]string{"bench", "speedup", "--shards", "1,0"}, "--shards", `"0"`},
	} {
		_, err := runErrWithin(t, time.Minute, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.flag) || !strings.Contains(err.Error(), c.value) {
			t.Errorf("softsync %s: %v, want an error naming %s and %s", strings.Join(c.args, " "), err, c.flag, c.value)
		}
	}
}

// runErrWithin is runErr, failing the test if the command has not
// returned within d.
func runErrWithin(t *testing.T, d time.Duration, args ...string) (string, error) {
	t.Helper()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runErr(args...)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(d):
		t.Fatalf("softsync %s: still running after %v", strings.Join(args, " "), d)
		return "", nil
	}
}

func TestRetryCore(t *testing.T) {
	failed := func(core string, err error) kernels.Info {
		return kernels.Info{CoreType: core, Fallback: true, FallbackErr: fmt.Errorf("wrapped: %w", err)}
	}
	cases := []struct {
		name        string
		info        kernels.Info
		retry, user string
		want        string
	}{
		{"chosen core failed", failed("ZEN", kernels.ErrVerify), "", "", "HASWELL"},
		{"AVX-512 core failed", failed("SKYLAKEX", kernels.ErrVerify), "", "", "HASWELL"},
		{"second failure", failed("HASWELL", kernels.ErrVerify), "ZEN", "", ""},
		{"user's core failed", failed("ZEN", kernels.ErrVerify), "", "ZEN", ""},
		{"OpenBLAS's own choice failed", failed("", kernels.ErrVerify), "", "", ""},
		{"no library", failed("ZEN", kernels.ErrNoLibrary), "", "", ""},
		{"no failure", kernels.Info{CoreType: "ZEN"}, "", "", ""},
	}
	for _, c := range cases {
		if got := retryCore(c.info, c.retry, c.user); got != c.want {
			t.Errorf("%s: retryCore = %q, want %q", c.name, got, c.want)
		}
	}
}

// kernelLevel is the level the kernels run at by default: the best the
// CPU runs, or generic in builds without the native engine.
func kernelLevel() isa.Level {
	if !kernels.NativeBuilt() {
		return isa.Generic
	}
	return isa.Best()
}

// TestISA forces the generic level by flag and by environment: the
// kernels and the Go assembly follow, and the next command without it
// returns to the best level.
func TestISA(t *testing.T) {
	line := func(out, key string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, key) {
				return l
			}
		}
		return ""
	}
	if l := line(run(t, "doctor", "--threads", "1", "--isa", "generic"), "Kernel ISA"); !strings.Contains(l, "generic: --isa=generic") {
		t.Errorf("--isa generic: %q", l)
	}
	if sgd.ISA() != isa.Generic || rdma.ISA() != isa.Generic {
		t.Errorf("--isa generic: solver %v, codecs %v", sgd.ISA(), rdma.ISA())
	}
	t.Setenv(isaEnv, "generic")
	if l := line(run(t, "doctor", "--threads", "1"), "Kernel ISA"); !strings.Contains(l, "generic: "+isaEnv+"=generic") {
		t.Errorf("%s=generic: %q", isaEnv, l)
	}
	t.Setenv(isaEnv, "")
	if l := line(run(t, "doctor", "--threads", "1"), "Kernel ISA"); !strings.Contains(l, kernelLevel().String()+": ") || sgd.ISA() == isa.Generic && isa.Best() > isa.Generic {
		t.Errorf("default: %q, solver %v", l, sgd.ISA())
	}
}

func TestBenchPeakJSON(t *testing.T) {
	out := run(t, "bench", "peak", "--json", "--threads", "2", "--rounds", "1", "--min-time", "1ms", "--copy-sizes", "4KiB,64")
	var res bench.PeakResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(res.Levels) == 0 || res.Levels[0].ISA != isa.Best().String() || !res.Levels[0].KernelLevel || len(res.Copy) != 2 || res.Copy[1].Bytes != 64 {
		t.Fatalf("bench peak: %+v", res)
	}
	for _, l := range res.Levels {
		if !(l.GFlopsCore > 0 && l.GFlops > 0) || l.Cores != 2 {
			t.Errorf("level %+v", l)
		}
	}
}

// TestBenchTrainPeak checks the GFLOP/s, peak and CPU fields of bench
// train --json: consistent with each other, not their values.
func TestBenchTrainPeak(t *testing.T) {
	out := run(t, "bench", "train", "--model", "lenet", "--batch", "4", "--images", "200", "--json")
	var r bench.TrainResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	flops := 0.0
	if spec, err := nn.Load("lenet"); err == nil {
		flops = float64(spec.TrainFLOPs())
	}
	if r.ISA != kernelLevel().String() || !(r.PeakGFlops > 0) || !(r.CPUSeconds > 0) ||
		math.Abs(r.GFlops-r.ImagesPerSec*flops/1e9) > 1e-6*r.GFlops || math.Abs(r.PeakFraction-r.GFlops/r.PeakGFlops) > 1e-9 {
		t.Errorf("bench train: %+v", r)
	}
}
