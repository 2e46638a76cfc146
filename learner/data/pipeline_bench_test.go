package data

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
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
// of a folder of ImageNet-like JPEGs — read, decode, resize to 256,
// random 224×224 crop, mirror, into the input tensor — with
// MeasurePipeline, one op a pass over the folder: on one pipeline thread
// (images per CPU-second is the per-core figure) and on two, with
// libjpeg-turbo (when built in) and with Go's decoder.
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
			t, err := MeasurePipeline(set, a, PipelineConfig{Threads: tc.threads, PureGo: tc.pureGo}, b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(t.ImagesPerSec(), "images/s")
			b.ReportMetric(t.ImagesPerCPUSec(), "images/cpu-s")
		})
	}
}
