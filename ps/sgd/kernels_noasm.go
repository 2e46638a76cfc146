//go:build !amd64 || purego

package sgd

// useAsm is false: every pass runs the Go loops of kernels.go.
var useAsm = false

func scaleAVX2(dst, x *float32, n int, a float32)              { panic("sgd: no assembly kernels") }
func axpyAVX2(dst, x *float32, n int, a float32)               { panic("sgd: no assembly kernels") }
func stepAVX2(w, v, g, l *float32, n int, m, a, al, b float32) { panic("sgd: no assembly kernels") }
func nonFiniteAVX2(x *float32, n int) bool                     { panic("sgd: no assembly kernels") }
