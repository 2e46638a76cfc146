package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestProfile records each kind of profile around a short command, also
// after a command that failed (the profile must be stopped then too, or
// the next start would exit the process).
func TestProfile(t *testing.T) {
	dir := t.TempDir()
	if _, err := runErr("bench", "gemm", "--sizes", "8x8", "--profile", "cpu", "--profile-dir", dir); err == nil {
		t.Fatal("bad --sizes: no error")
	}
	for mode, file := range map[string]string{"cpu": "cpu.pprof", "mem": "mem.pprof", "block": "block.pprof", "mutex": "mutex.pprof", "trace": "trace.out"} {
		d := filepath.Join(dir, mode)
		run(t, "bench", "gemm", "--sizes", "16x16x16", "--min-time", "1ms", "--rounds", "1", "--profile", mode, "--profile-dir", d)
		fi, err := os.Stat(filepath.Join(d, file))
		if err != nil || fi.Size() == 0 {
			t.Errorf("--profile %s: %v, %v", mode, fi, err)
		}
	}
	if _, err := runErr("doctor", "--profile", "heap"); err == nil {
		t.Error("--profile heap: no error")
	}
}
