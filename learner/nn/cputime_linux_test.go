package nn

import (
	"syscall"
	"time"
)

// threadCPU is the calling OS thread's CPU time so far (user and
// system), or a negative value where it cannot be read.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
