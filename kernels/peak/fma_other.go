//go:build !amd64

package peak

import "github.com/softsync/softsync/kernels/isa"

// fmaLoop returns the register-only loop of level l (only Generic
// exists here) and its FLOPs per iteration: eight independent scalar
// multiply-adds in Go.
func fmaLoop(isa.Level) (func(n int), float64) { return mulAddGo, 8 * 2 }

var sink float32

func mulAddGo(n int) {
	var a0, a1, a2, a3, a4, a5, a6, a7 float32
	const b, c = 1, 1e-3
	for range n {
		a0, a1, a2, a3 = a0*b+c, a1*b+c, a2*b+c, a3*b+c
		a4, a5, a6, a7 = a4*b+c, a5*b+c, a6*b+c, a7*b+c
	}
	sink = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7
}
