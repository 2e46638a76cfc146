//go:build cgo && !noblas

package kernels_test

import (
	"fmt"
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

// TestNativeConvPlans runs the convolution tests with each method forced,
// the GEMM methods with one image per GEMM and with uneven groups, so that
// every path of csrc/conv.c and csrc/direct.c is checked whatever the
// shapes would choose.
func TestNativeConvPlans(t *testing.T) {
	if _, info, _ := kernels.New(kernels.Config{CoreType: os.Getenv("OPENBLAS_CORETYPE")}); info.Fallback {
		t.Fatal(info.FallbackErr)
	}
	for _, method := range []string{"chwn", "image", "direct"} {
		for _, budget := range []int{1, 4000, 57601, 0} {
			if method == "direct" && budget != 0 {
				continue // the direct method has no GEMM groups
			}
			e := kernels.NativeWith(budget, method)
			t.Run(fmt.Sprintf("%s/budget=%d", method, budget), func(t *testing.T) {
				kerneltest.RunConv(t, e)
			})
		}
	}
}
