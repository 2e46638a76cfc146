package kernels_test

import "syscall"

// threadCPU returns the calling OS thread's CPU time so far in seconds
// (user and system), or a negative value where it cannot be read.
func threadCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		return -1
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
