package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestBenchAddTrain(t *testing.T) {
	r := &benchRun{res: &Results{Machine: Machine{Cores: 2}}}
	lenet2, lenet1 := trainKey{"lenet", 64, 2, "avx512"}, trainKey{"lenet", 64, 1, "avx512"}
	cifar := trainKey{"cifar10_full", 4, 2, "avx2"}
	run := func(ips, gflops, peak float64) TrainResult {
		return TrainResult{ISA: "avx512", ImagesPerSec: ips, Seconds: 2, CPUSeconds: 4, GFlops: gflops, PeakGFlops: peak}
	}
	runs := map[trainKey][]TrainResult{
		lenet2: {run(3000, 30, 200), run(1000, 10, 100), run(2000, 20, 300)},
		lenet1: {run(1500, 15, 200)},
		cifar:  {{ISA: "avx2", ImagesPerSec: 500, Seconds: 1, CPUSeconds: 1, GFlops: 40, PeakGFlops: 80}},
	}
	torch := trainRefs{version: "1.13", err: map[int]error{1: errors.New("no torch")},
		runs: map[trainKey][]torchResult{{"lenet", 64, 2, ""}: {{"lenet", 64, 2, 400, 300}, {"lenet", 64, 2, 500, 250}, {"lenet", 64, 2, 600, 200}}}}
	r.addTrain([]trainKey{lenet2, lenet1, cifar}, runs, torch, 1000)
	var names []string
	for _, f := range r.res.Figures {
		names = append(names, f.Group+": "+f.Name)
	}
	want := []string{"train: lenet μ=64, 2 threads, avx512", "train-flops: lenet μ=64, 2 threads, avx512",
		"train: lenet μ=64, 1 thread, avx512", "train: cifar10_full μ=4, 2 threads, avx2", "train-flops: cifar10_full μ=4, 2 threads, avx2"}
	if !slices.Equal(names, want) {
		t.Fatalf("figures %q, want %q", names, want)
	}
	f := r.res.Figures[0]
	if f.Value != 2000 || f.Stat != "median of 3 runs" || f.Ref == nil || f.Ref.Value != 500 || f.Ref.Ratio != 4 ||
		f.Extra["images_per_cpu_s"] != 1000 || f.Extra["ratio_per_cpu_s"] != 4 || f.Ref.Extra["images_per_cpu_s"] != 250 {
		t.Errorf("lenet, 2 threads: %+v, reference %+v", f, f.Ref)
	}
	if ff := r.res.Figures[1]; ff.Value != 20 || ff.Ref.Value != 200 || ff.Ref.Ratio != 0.1 {
		t.Errorf("FLOP rate: %+v, reference %+v", ff, ff.Ref)
	}
	if f := r.res.Figures[2]; f.Ref == nil || f.Ref.Missing != "no torch" || f.Ref.Ratio != 0 || f.Stat != "one run" {
		t.Errorf("lenet, 1 thread, PyTorch failed: %+v, reference %+v", f, f.Ref)
	}
	if f := r.res.Figures[3]; f.Ref == nil || f.Ref.Missing == "" {
		t.Errorf("cifar10_full, no PyTorch run: %+v", f.Ref)
	}
}

func TestBenchAddSpeedup(t *testing.T) {
	r := &benchRun{res: &Results{}}
	procs := func(learners int) []ProcUsage {
		u := []ProcUsage{{Process: "head", PeakRSS: 100 << 20}, {Process: "shard server 0", PeakRSS: 30 << 20}}
		for i := range learners {
			u = append(u, ProcUsage{Process: fmt.Sprintf("learner %d", i), PeakRSS: int64(90+i) << 20})
		}
		return u
	}
	row := func(tr string, l int, ips float64) SpeedupRow {
		return SpeedupRow{Model: "lenet", Batch: 64, Transport: tr, Protocol: "softsync", Learners: l, ImagesPerSec: ips,
			Runs: []float64{ips - 100, ips, ips + 50}, Processes: procs(l)}
	}
	r.addSpeedup([]SpeedupRow{row("tcp", 1, 1000), row("shm", 1, 1200), row("tcp", 2, 1800), row("shm", 2, 2300)})
	var names []string
	for _, f := range r.res.Figures {
		names = append(names, f.Name)
	}
	want := []string{"lenet μ=64, tcp, softsync, λ=1", "lenet μ=64, shm, softsync, λ=1", "lenet μ=64, tcp, softsync, λ=2", "lenet μ=64, shm, softsync, λ=2"}
	if !slices.Equal(names, want) {
		t.Fatalf("figures %q, want %q", names, want)
	}
	if f := r.res.Figures[3]; f.Ref == nil || f.Ref.Value != 2400 || f.Params["transport"] != "shm" || f.Params["model"] != "lenet" ||
		f.Stat != "median of 3 runs" || !slices.Equal(f.Runs, []float64{2200, 2300, 2350}) {
		t.Errorf("shm λ = 2: %+v, reference %+v (want 2 × shm's λ = 1)", f, f.Ref)
	}
	if f := r.res.Figures[2]; f.Extra["peak_rss_mib_head"] != 100 || f.Extra["peak_rss_mib_shard"] != 30 || f.Extra["peak_rss_mib_learner"] != 91 {
		t.Errorf("peak RSS extras %v", f.Extra)
	}
	if f := r.res.Figures[0]; f.Ref != nil {
		t.Errorf("λ = 1 has a reference: %+v", f.Ref)
	}
}

func TestBenchAddData(t *testing.T) {
	r := &benchRun{res: &Results{}}
	run := func(ips float64) DataResult {
		return DataResult{Images: 128, Threads: 2, Decoder: "libjpeg-turbo", H: 224, W: 224, Resize: 256, Decoded: 256,
			Seconds: 256 / ips, ImagesPerSec: ips, CPUSeconds: 1}
	}
	runs := map[int][]DataResult{2: {run(300), run(100), run(200)}, 1: {run(90)}}
	torch := map[int][]torchDataResult{2: {{ImagesPerSec: 50, ImagesPerCPU: 128, Version: "0.14.1"}, {ImagesPerSec: 40, ImagesPerCPU: 64}}}
	r.addData([]int{2, 1, 4}, runs, torch, nil)
	if len(r.res.Figures) != 2 {
		t.Fatalf("%d figures, want 2 (no runs of 4 threads)", len(r.res.Figures))
	}
	f := r.res.Figures[0]
	if f.Group != "data" || f.Name != "224×224 crops of 128 JPEGs resized to 256, libjpeg-turbo, 2 threads" || f.Value != 200 ||
		f.Stat != "median of 3 runs" || f.Extra["images_per_cpu_s"] != 256 || f.Extra["images_per_s_per_thread"] != 100 {
		t.Errorf("2 threads: %+v", f)
	}
	if f.Ref == nil || f.Ref.Value != 45 || f.Ref.Extra["images_per_cpu_s"] != 96 || f.Extra["ratio_per_cpu_s"] != 256.0/96 ||
		!strings.Contains(f.Ref.Name, "torchvision 0.14.1") {
		t.Errorf("2 threads, torchvision: %+v", f.Ref)
	}
	if f := r.res.Figures[1]; f.Ref == nil || f.Ref.Missing == "" || f.Stat != "one run" {
		t.Errorf("1 thread, no torchvision run: %+v, %+v", f, f.Ref)
	}
	r = &benchRun{res: &Results{}}
	r.addData([]int{1}, runs, nil, errors.New("no torchvision"))
	if f := r.res.Figures[0]; f.Ref == nil || f.Ref.Missing != "no torchvision" {
		t.Errorf("torchvision failed: %+v", f.Ref)
	}
}
