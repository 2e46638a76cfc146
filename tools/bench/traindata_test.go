package bench

import (
	"slices"
	"testing"

	"github.com/softsync/softsync/learner/cluster"
)

// TestTrainDataRows: a row's ratio is the median of its runs' ratios to
// the synthetic run of the same round, not the ratio of the medians.
func TestTrainDataRows(t *testing.T) {
	jobs := []trainDataJob{{data: "synthetic"}, {data: "folder", path: "F", threads: 2, nice: 10}}
	rep := func(ips, wait float64) *cluster.Report {
		return &cluster.Report{ImagesPerSec: ips, Images: 100, DataWaitFraction: wait}
	}
	reports := [][]*cluster.Report{
		{rep(10, 0), rep(20, 0), rep(40, 0)},
		{rep(9, 0.01), rep(19, 0.03), rep(20, 0.02)},
	}
	use := func(cpu float64, rss int64) ProcUsage { return ProcUsage{CPUSeconds: cpu, PeakRSS: rss} }
	usage := [][]ProcUsage{{use(10, 5), use(10, 7), use(10, 6)}, {use(12, 9), use(14, 8), use(13, 8)}}
	rows := trainDataRows(jobs, reports, usage)
	s, f := rows[0], rows[1]
	if s.Ratio != 1 || s.ImagesPerSec != 20 || s.CPUPerImage != 0.1 || s.PeakRSS != 7 || s.Data != "synthetic" {
		t.Errorf("synthetic %+v", s)
	}
	// Ratios by round 0.9, 0.95, 0.5: median 0.9 (the medians' ratio is 0.95).
	if f.Ratio != 0.9 || f.ImagesPerSec != 19 || !slices.Equal(f.Runs, []float64{9, 19, 20}) || f.DataWaitFraction != 0.02 ||
		f.CPUPerImage != 0.13 || f.PeakRSS != 9 || f.Path != "F" || f.DataThreads != 2 || f.DataNice != 10 {
		t.Errorf("folder %+v", f)
	}
}

// TestBenchImages checks that bench train's data set covers the whole run
// (no epoch ends among the timed steps) while its pixels fit the bound,
// and falls back to 512 images or 4 rounds beyond it.
func TestBenchImages(t *testing.T) {
	alex := 3 * 227 * 227
	for _, c := range []struct{ imageLen, round, steps, want int }{
		{alex, 32, 20, 640},          // bench train --model alexnet --images 640
		{alex, 32, 625, 512},         // --images 20000: 3 GB of pixels, too many
		{28 * 28, 64, 312, 64 * 312}, // lenet's default run fits
		{28 * 28, 64, 5, 512},        // short runs keep 512 images
		{alex, 256, 100, 1024},       // four rounds when they are more than 512
	} {
		if got := benchImages(c.imageLen, c.round, c.steps); got != c.want {
			t.Errorf("benchImages(%d, %d, %d) = %d, want %d", c.imageLen, c.round, c.steps, got, c.want)
		}
	}
}
