//go:build amd64 && !purego

package sgd

import "github.com/softsync/softsync/kernels/isa"

// asmFor returns the assembly of the highest level at most l: AVX-512
// (F), or AVX2 with FMA, or none.
func asmFor(l isa.Level) asm {
	switch {
	case l >= isa.AVX512:
		return asm{level: isa.AVX512, block: 8, scale: scaleAVX512, axpy: axpyAVX512, step: stepAVX512, maxAbs: maxAbsAVX512}
	case l >= isa.AVX2:
		return asm{level: isa.AVX2, block: 8, scale: scaleAVX2, axpy: axpyAVX2, step: stepAVX2, maxAbs: maxAbsAVX2}
	}
	return asm{level: isa.Generic}
}

// The kernels process n floats, n a positive multiple of 8.

//go:noescape
func scaleAVX2(dst, x *float32, n int, a float32)

//go:noescape
func axpyAVX2(dst, x *float32, n int, a float32)

//go:noescape
func stepAVX2(w, v, grad, l *float32, n int, m, a, al, b float32)

//go:noescape
func maxAbsAVX2(x *float32, n int) uint32

//go:noescape
func scaleAVX512(dst, x *float32, n int, a float32)

//go:noescape
func axpyAVX512(dst, x *float32, n int, a float32)

//go:noescape
func stepAVX512(w, v, grad, l *float32, n int, m, a, al, b float32)

//go:noescape
func maxAbsAVX512(x *float32, n int) uint32
