package kernels_test

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
)

// BenchmarkImageResizeCrop: a 500×375 RGB image (random bytes) resized to 341×256 and
// cropped to 224×224 into float planes, mirrored, mean subtracted (the
// training transform of a 224-pixel network), by the reference and by
// the native kernels at every level the CPU runs. Reports images per second
// of the thread's CPU time, which other processes do not distort.
func BenchmarkImageResizeCrop(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	src := make([]byte, 3*500*375)
	for i := range src {
		src[i] = byte(rng.IntN(256))
	}
	x, y := kernels.NewResizeAxis(500, 341, 60, 224), kernels.NewResizeAxis(375, 256, 16, 224)
	dst, tmp := make([]float32, 3*224*224), make([]byte, kernels.ImageTmpLen(x, y))
	mean := make([]float32, 3*224*224)
	ims := map[string]kernels.Images{"reference": kernels.ReferenceImages()}
	for _, l := range isa.All {
		if n, err := kernels.NativeImagesAt(l); err == nil && isa.Supported(l) {
			ims["native/"+l.String()] = n
		}
	}
	for name, im := range ims {
		b.Run(name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			for b.Loop() {
				im.ResizeCHW(src, 500, 375, x, y, true, 1, mean, dst, tmp)
			}
			b.ReportMetric(float64(b.N)/(threadCPU()-c0), "images/cpu-s")
		})
	}
}
