package data

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// threadsAtNice counts the threads of this process whose nice value is
// nice (/proc/self/task/TID/stat, field 19).
func threadsAtNice(t *testing.T, nice int) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the thread has exited
		}
		f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
		if v, err := strconv.Atoi(string(f[16])); err == nil && v == nice {
			n++
		}
	}
	return n
}

// TestPipelineNice: each thread of a pipeline with Nice lowers its own
// priority by that much, and the threads end with the pipeline — but for
// the process's main thread, if a pipeline goroutine ran there: Go parks
// it for good rather than end it, and it never runs Go code again.
func TestPipelineNice(t *testing.T) {
	cur, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := min(20-cur+3, 19)
	before := threadsAtNice(t, want)
	p, err := NewPipeline(PipelineConfig{Threads: 2, Nice: 3})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(n, slack int, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for got := threadsAtNice(t, want); got < n || got > n+slack; got = threadsAtNice(t, want) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d threads at nice %d, want %d … %d", what, threadsAtNice(t, want), want, n, n+slack)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait(before+2, 0, "pipeline started")
	p.Close()
	wait(before, 1, "pipeline closed")
}
