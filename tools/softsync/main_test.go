package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/softsync/softsync/kernels"
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
	for _, want := range []string{"CPU", "CPU features", "RDMA", "Locked memory", "Transport auto", "Engine", "Pure-Go fallback", "Threads"} {
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
	} {
		_, err := runErr(c.args...)
		if err == nil || !strings.Contains(err.Error(), c.flag) || !strings.Contains(err.Error(), c.value) {
			t.Errorf("softsync %s: %v, want an error naming %s and %s", strings.Join(c.args, " "), err, c.flag, c.value)
		}
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
