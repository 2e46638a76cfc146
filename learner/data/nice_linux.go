package data

import (
	"runtime"
	"syscall"
)

// lowerPriority locks the calling goroutine to its thread and raises the
// thread's nice value by n (best effort: a refusal leaves it as it was).
func lowerPriority(n int) {
	runtime.LockOSThread()
	tid := syscall.Gettid()
	if cur, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid); err == nil {
		// Getpriority returns 20 − nice on Linux.
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, min(20-cur+n, 19))
	}
}
