//go:build amd64 && !purego

package sgd

import "golang.org/x/sys/cpu"

// useAsm selects the AVX2+FMA kernels of kernels_amd64.s at run time.
var useAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// The assembly kernels process n floats, n a positive multiple of 8.

//go:noescape
func scaleAVX2(dst, x *float32, n int, a float32)

//go:noescape
func axpyAVX2(dst, x *float32, n int, a float32)

//go:noescape
func stepAVX2(w, v, grad, l *float32, n int, m, a, al, b float32)

//go:noescape
func nonFiniteAVX2(x *float32, n int) bool
