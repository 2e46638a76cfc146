//go:build turbojpeg && cgo

package turbo

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// BenchmarkDecode decodes 16 JPEGs of the folder TURBO_BENCH_DIR whole at
// factors 8/8 and 4/8, with the accurate and the fast inverse DCT, and the
// rectangle a 224×224 crop of the image resized to a shorter side of 256
// reads (its middle), and reports the thread's CPU time per image.
func BenchmarkDecode(b *testing.B) {
	dir := os.Getenv("TURBO_BENCH_DIR")
	files, _ := filepath.Glob(filepath.Join(dir, "*.jpg"))
	if len(files) < 16 {
		b.Skip("TURBO_BENCH_DIR holds fewer than 16 JPEGs")
	}
	var data [][]byte
	for _, f := range files[:16] {
		d, _ := os.ReadFile(f)
		data = append(data, d)
	}
	for _, tc := range []struct {
		name string
		s    scale
		fast bool
		crop bool
	}{{"8/8", scale{1, 1}, false, false}, {"4/8", scale{1, 2}, false, false}, {"8/8-fastdct", scale{1, 1}, true, false},
		{"8/8-crop", scale{1, 1}, false, true}, {"8/8-crop-fastdct", scale{1, 1}, true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			d, _ := NewDecoder()
			defer d.Close()
			d.FastDCT = tc.fast
			dst := make([]byte, 3*1000*1000)
			i := 0
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			for b.Loop() {
				j := data[i%len(data)]
				i++
				hd, _ := d.Header(j)
				w, h := scaled(hd.W, tc.s), scaled(hd.H, tc.s)
				x0, y0, x1, y1 := 0, 0, w, h
				if tc.crop { // the middle 224/256 of each side
					cw, ch := w*224/256, h*224/256
					x0, y0 = (w-cw)/2, (h-ch)/2
					x1, y1 = x0+cw, y0+ch
				}
				if _, _, err := d.DecodeRect(j, hd, w, h, x0, y0, x1, y1, dst); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(threadCPU()-c0)/float64(i)/1e3, "cpu-µs/op")
		})
	}
}

func threadCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(1, &ru) // RUSAGE_THREAD
	return ru.Utime.Nano() + ru.Stime.Nano()
}
