//go:build !linux

package kernels_test

// threadCPU cannot read a thread's CPU time here.
func threadCPU() float64 { return -1 }
