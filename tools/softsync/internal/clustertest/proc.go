package clustertest

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// sweep kills every process whose environment carries markerVar=marker:
// the processes of one job that outlived its launcher (daemonized
// slurmstepd, orphaned ranks, a helper in a network namespace). It reads
// /proc/PID/environ, the environment each process started with, so it
// finds exactly the processes this package started for that job and
// their descendants, never others.
func sweep(marker string) {
	want := []byte(markerVar + "=" + marker)
	self := os.Getpid()
	for round := 0; round < 50; round++ {
		pids := marked(want, self)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quit sends SIGQUIT to the processes of the job marker but launcher:
// Go programs print their goroutines' stacks and exit.
func quit(marker string, launcher int) {
	for _, pid := range marked([]byte(markerVar+"="+marker), os.Getpid()) {
		if pid != launcher {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	}
}

// marked lists the processes other than self whose environment holds the
// entry want.
func marked(want []byte, self int) []int {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
