//go:build turbojpeg && cgo

package turbo

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// BenchmarkDecode decodes 16 JPEGs of the folder TURBO_BENCH_DIR at
// factors 8/8, 6/8 and 4/8, with the accurate and the fast settings, and
// reports the thread's CPU time per image.
func BenchmarkDecode(b *testing.B) {
	dir := os.Getenv("TURBO_BENCH_DIR")
	files, _ := filepath.Glob(filepath.Join(dir, "*.jpg"))
	if len(files) == 0 {
		b.Skip("no files")
	}
	var data [][]byte
	for _, f := range files[:16] {
		d, _ := os.ReadFile(f)
		data = append(data, d)
	}
	for _, tc := range []struct {
		name  string
		s     scale
		flags int
	}{{"8/8", scale{1, 1}, 0}, {"6/8", scale{3, 4}, 0}, {"4/8", scale{1, 2}, 0}, {"8/8-fast", scale{1, 1}, 256 | 2048}, {"6/8-fast", scale{3, 4}, 256 | 2048}} {
		b.Run(tc.name, func(b *testing.B) {
			d, _ := NewDecoder()
			dst := make([]byte, 3*1000*1000)
			i := 0
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			for b.Loop() {
				j := data[i%len(data)]
				i++
				hd, _ := d.Header(j)
				if err := d.decodeFlags(j, hd, scaled(hd.W, tc.s), scaled(hd.H, tc.s), dst, tc.flags); err != nil {
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
