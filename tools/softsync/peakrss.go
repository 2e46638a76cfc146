package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// watchPeak samples a process's peak resident set every peakFirst for
// its first peakFast samples (a process just started has not grown yet,
// and a short one may end before a slower tick), then every peakEvery.
const (
	peakFirst = 5 * time.Millisecond
	peakFast  = 200
	peakEvery = 100 * time.Millisecond
)

// watchPeak samples the peak resident set (VmHWM) of the running process
// pid (at the pace above) until stop is closed, then sends the largest sample
// in bytes (0 if none could be read). Not the child's rusage: Go starts
// a process with vfork, so its ru_maxrss counts the parent's peak as of
// the exec, whatever the child's own.
func watchPeak(pid int, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		t := time.NewTicker(peakFirst)
		defer t.Stop()
		var peak int64
		for n := 0; ; n++ {
			peak = max(peak, vmHWM(pid))
			if n == peakFast {
				t.Reset(peakEvery)
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// waitUsage waits for the started cmd and returns its peak resident set
// (watchPeak, sampled from now on) and the CPU seconds it took.
func waitUsage(cmd *exec.Cmd) (peakRSS int64, cpuSeconds float64, err error) {
	stop := make(chan struct{})
	peak := watchPeak(cmd.Process.Pid, stop)
	err = cmd.Wait()
	close(stop)
	if ps := cmd.ProcessState; ps != nil {
		cpuSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	return <-peak, cpuSeconds, err
}

// vmHWM returns the VmHWM line of /proc/pid/status in bytes, or 0 if the
// process is gone or the line cannot be read.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return parseVmHWM(b)
}

// parseVmHWM reads "VmHWM:\t   1234 kB" out of a /proc/pid/status text,
// in bytes; 0 without such a line.
func parseVmHWM(status []byte) int64 {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("VmHWM:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil || kb < 0 {
			return 0
		}
		return kb << 10
	}
	return 0
}
