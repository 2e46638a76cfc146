//go:build amd64

package peak

import "github.com/softsync/softsync/kernels/isa"

// fmaLoop returns the register-only loop of level l and its FLOPs per
// iteration.
func fmaLoop(l isa.Level) (func(n int), float64) {
	switch l {
	case isa.AVX512:
		return fma512, 16 * 16 * 2
	case isa.AVX2:
		return fma256, 12 * 8 * 2
	}
	return mulAdd128, 16 * 4
}

// The loops run n iterations of: 16 VFMADD231PS on Z0-Z15 (fma512), 12
// VFMADD231PS on Y0-Y11 (fma256), 8 MULPS on X0-X7 and 8 ADDPS on X8-X15
// (mulAdd128); every accumulator is its own dependency chain.

//go:noescape
func fma512(n int)

//go:noescape
func fma256(n int)

//go:noescape
func mulAdd128(n int)
