//go:build cgo && !noblas

package kernels_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/kernels/kerneltest"
)

// TestNativeParallel runs the suite with the C kernels split over three
// threads down to single rows and planes, so that every parallel path is
// taken even on the suite's small shapes, at every instruction-set level
// the CPU runs.
func TestNativeParallel(t *testing.T) {
	kernels.SetMinParallelFloats(1)
	defer func() {
		kernels.SetMinParallelFloats(4096)
		kernels.New(kernels.Config{CoreType: os.Getenv("OPENBLAS_CORETYPE")})
	}()
	for _, l := range isa.All {
		t.Run(l.String(), func(t *testing.T) {
			if !isa.Supported(l) {
				t.Skipf("level %v: %s", l, isa.Reason())
			}
			e, info, err := kernels.New(kernels.Config{Threads: 3, CoreType: os.Getenv("OPENBLAS_CORETYPE"), ISA: l})
			if err != nil || info.Fallback {
				t.Fatal(err, info.FallbackErr)
			}
			kerneltest.Run(t, e)
		})
	}
}

// TestNativeConvPlans runs the convolution tests with each method forced,
// the GEMM methods with one image per GEMM and with uneven groups, and the
// direct method at each level that has it (AVX2, AVX-512), so that every
// path of csrc/conv.c, csrc/direct.c and csrc/direct512.c is checked
// whatever the shapes would choose.
func TestNativeConvPlans(t *testing.T) {
	if _, info, _ := kernels.New(kernels.Config{CoreType: os.Getenv("OPENBLAS_CORETYPE")}); info.Fallback {
		t.Fatal(info.FallbackErr)
	}
	for _, method := range []string{"chwn", "image", "direct"} {
		for _, budget := range []int{1, 4000, 57601, 0} {
			if method == "direct" && budget != 0 {
				continue // the direct method has no GEMM groups
			}
			e := kernels.NativeWith(budget, method, isa.Generic)
			t.Run(fmt.Sprintf("%s/budget=%d", method, budget), func(t *testing.T) {
				if method != "direct" {
					kerneltest.RunConv(t, e)
					return
				}
				for _, l := range []isa.Level{isa.AVX512, isa.AVX2} {
					t.Run(l.String(), func(t *testing.T) {
						if !isa.Supported(l) {
							t.Skipf("level %v: %s", l, isa.Reason())
						}
						kerneltest.RunConv(t, kernels.NativeWith(0, "direct", l))
					})
				}
			})
		}
	}
}
