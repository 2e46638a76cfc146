package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
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
	for _, want := range []string{"CPU", "CPU features", "Engine", "Pure-Go fallback", "Threads"} {
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
	for _, args := range [][]string{
		{"doctor", "--threads", "-1"},
		{"doctor", "--log-level", "loud"},
		{"doctor", "--engine", "gpu"},
		{"bench", "gemm", "--sizes", "8x8"},
	} {
		root := newRootCmd(&bytes.Buffer{})
		root.SetArgs(args)
		if err := root.Execute(); err == nil {
			t.Errorf("softsync %s: no error", strings.Join(args, " "))
		}
	}
}
