package main

import (
	"bytes"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestParseVmHWM(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"Name:\tsoftsync\nVmPeak:\t  9000 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n", 1234 << 10},
		{"VmHWM:\t0 kB\n", 0},
		{"Name:\tzombie\nState:\tZ (zombie)\n", 0},
		{"VmHWM:\t12 MB\n", 0},
		{"VmHWM:\tx kB\n", 0},
		{"", 0},
	} {
		if got := parseVmHWM([]byte(c.in)); got != c.want {
			t.Errorf("parseVmHWM(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestWatchPeakChild: the peak of a small child of a large parent is the
// child's own. The child's rusage would give the parent's (Go starts it
// with vfork), which this test's parent makes at least 256 MiB.
func TestWatchPeakChild(t *testing.T) {
	// Every page written, by copying (the race detector checks a copy
	// once, where it would check a loop at every byte).
	big := bytes.Repeat([]byte{1}, 256<<20)
	cmd := exec.Command("sleep", "0.5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	peak := watchPeak(cmd.Process.Pid, stop)
	err := cmd.Wait()
	close(stop)
	var got int64
	select {
	case got = <-peak:
	case <-time.After(5 * time.Second):
		t.Fatal("no peak 5 s after the child ended")
	}
	if err != nil {
		t.Fatal(err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	t.Logf("child's VmHWM %d KiB, its ru_maxrss %d KiB, the parent holds %d MiB", got>>10, ru.Maxrss, len(big)>>20)
	if got <= 0 || got >= 64<<20 {
		t.Fatalf("peak of sleep: %d bytes, want above 0 and below 64 MiB", got)
	}
	big[len(big)-1] = 2 // keeps big alive until now
}
