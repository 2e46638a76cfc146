//go:build cgo && !noblas

package kernels_test

import (
	"os"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/kerneltest"
)

// TestNativeParallel runs the suite with the C kernels split over three
// threads down to single rows and planes, so that every parallel path is
// taken even on the suite's small shapes.
func TestNativeParallel(t *testing.T) {
	e, info, _ := kernels.New(kernels.Config{Threads: 3, CoreType: os.Getenv("OPENBLAS_CORETYPE")})
	if info.Fallback {
		t.Fatal(info.FallbackErr)
	}
	kernels.SetMinParallelFloats(1)
	defer func() {
		kernels.SetMinParallelFloats(4096)
		kernels.New(kernels.Config{CoreType: os.Getenv("OPENBLAS_CORETYPE")})
	}()
	kerneltest.Run(t, e)
}
