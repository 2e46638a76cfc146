package main

import (
	"bytes"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// threadPolicies returns the scheduling policy of every thread of this
// process.
func threadPolicies(t *testing.T) map[int]uint32 {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	ps := map[int]uint32{}
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		if a, err := unix.SchedGetAttr(tid, 0); err == nil {
			ps[tid] = a.Policy
		}
	}
	return ps
}

// TestSchedPolicy: --sched batch puts every thread under SCHED_BATCH,
// threads started afterwards too, but one the user put under another
// policy; normal puts them back.
func TestSchedPolicy(t *testing.T) {
	var log bytes.Buffer
	app := &App{Log: slog.New(slog.NewTextHandler(&log, nil))}
	if err := app.applySched("fifo"); err == nil || !strings.Contains(err.Error(), "--sched") {
		t.Errorf("--sched fifo: %v, want an error naming --sched", err)
	}
	// A thread the user put under another policy keeps it.
	idle := make(chan int)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		tid := unix.Gettid()
		attr, err := unix.SchedGetAttr(tid, 0)
		if err == nil {
			attr.Policy = unix.SCHED_IDLE
			err = unix.SchedSetAttr(tid, attr, 0)
		}
		if err != nil {
			tid = -1
		}
		idle <- tid
		<-release
		if tid >= 0 { // as it was, for the process's other tests
			attr.Policy = unix.SCHED_NORMAL
			unix.SchedSetAttr(tid, attr, 0)
		}
		runtime.UnlockOSThread()
		idle <- 0
	}()
	idleTid := <-idle
	defer func() {
		close(release)
		<-idle
	}()
	if idleTid < 0 {
		t.Fatal("cannot put a thread under SCHED_IDLE")
	}
	if err := app.applySched("batch"); err != nil {
		t.Fatal(err)
	}
	defer app.applySched("normal")
	// Threads started now, by goroutines that hold theirs.
	var wg sync.WaitGroup
	ready, done := make(chan struct{}), make(chan struct{})
	for range 4 {
		wg.Go(func() {
			// The goroutine's thread stays its own, and the runtime
			// starts others meanwhile.
			runtime.LockOSThread()
			ready <- struct{}{}
			<-done
		})
	}
	for range 4 {
		<-ready
	}
	for tid, p := range threadPolicies(t) {
		if want := uint32(unix.SCHED_BATCH); tid == idleTid && p != unix.SCHED_IDLE || tid != idleTid && p != want {
			t.Errorf("thread %d: policy %d, want SCHED_BATCH (%d), or SCHED_IDLE for the thread under it", tid, p, want)
		}
	}
	close(done)
	wg.Wait()
	if err := app.applySched("normal"); err != nil {
		t.Fatal(err)
	}
	if log.Len() > 0 {
		t.Errorf("warnings: %s", log.String())
	}
	for tid, p := range threadPolicies(t) {
		if p != unix.SCHED_NORMAL && tid != idleTid {
			t.Errorf("thread %d after --sched normal: policy %d, want SCHED_NORMAL", tid, p)
		}
	}
}
