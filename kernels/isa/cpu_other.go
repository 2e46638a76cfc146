//go:build !amd64

package isa

// cpuHas reports no x86 features: the build has no vector kernels.
func cpuHas(string) bool { return false }
