package kernels_test

import (
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/kerneltest"
)

// FuzzNativeVsReference compares every engine of the build with the
// reference on random shapes: go test -fuzz FuzzNativeVsReference
// -fuzztime 10s ./kernels. In builds without a native engine it has
// nothing to compare and passes.
func FuzzNativeVsReference(f *testing.F) {
	for op := range uint8(kerneltest.Ops) {
		for seed := range uint64(4) {
			f.Add(op, seed)
		}
	}
	engines := kerneltest.Engines(f)
	f.Fuzz(func(t *testing.T, op uint8, seed uint64) {
		for _, e := range engines[1:] {
			kerneltest.Differential(t, kernels.Reference(), e, op, seed)
		}
	})
}
