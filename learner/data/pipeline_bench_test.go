package data

import (
	"flag"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

var benchDir = flag.String("data.benchdir", "", "folder of ImageNet-sized JPEGs for BenchmarkImagePipeline (generated there when it has no train/; a temporary folder when empty)")

// benchFolder returns a folder of 128 ImageNet-like JPEGs (ImageNetLike:
// 500×375 on average, about 110 KB; 8 classes), generated once.
func benchFolder(b *testing.B) string {
	dir := *benchDir
	if dir == "" {
		dir = filepath.Join(b.TempDir(), "imagenet-like")
	}
	if _, err := os.Stat(filepath.Join(dir, "train")); err != nil {
		if err := GenerateImageFolder(dir, ImageNetLike(8, 16, 1)); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// BenchmarkImagePipeline measures the training-time work on every image
// of a folder of ImageNet-sized JPEGs — read, decode, resize to 256,
// random 224×224 crop, mirror, normalise into the input tensor — on one
// pipeline thread (images/s per core) and on two, with libjpeg-turbo
// (when built in) and with Go's decoder.
func BenchmarkImagePipeline(b *testing.B) {
	train, _, err := ReadImageFolder(benchFolder(b))
	if err != nil {
		b.Fatal(err)
	}
	set := NewFolderSet(train)
	a := Augment{H: 224, W: 224, Resize: 256, Random: true, Mirror: true, Scale: 1, Seed: 1}
	for _, tc := range []struct {
		name    string
		threads int
		pureGo  bool
	}{{"decoder=default/threads=1", 1, false}, {"decoder=default/threads=2", 2, false}, {"decoder=go/threads=1", 1, true}} {
		b.Run(tc.name, func(b *testing.B) {
			p, err := NewPipeline(PipelineConfig{Threads: tc.threads, PureGo: tc.pureGo})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			const mu = 32
			x, labels, idx := make([]float32, mu*a.ImageLen()), make([]int32, mu), make([]int, mu)
			n := 0
			c0 := cpuTime()
			b.ResetTimer()
			for e := 0; b.Loop(); e++ {
				for k := range idx {
					idx[k] = (e*mu + k) % set.Len()
				}
				if err := p.Fill(set, &a, idx, e, x, labels); err != nil {
					b.Fatal(err)
				}
				n += mu
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "images/s")
			b.ReportMetric(float64(n)/b.Elapsed().Seconds()/float64(tc.threads), "images/s/thread")
			b.ReportMetric(float64(n)/(cpuTime()-c0).Seconds(), "images/cpu-s")
		})
	}
}

// cpuTime is the process's CPU time (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
