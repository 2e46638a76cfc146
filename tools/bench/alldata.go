package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"

	"github.com/softsync/softsync/learner/data"
)

// dataFolder is the folder the data step measures: ImageNet-sized JPEGs
// (500×375 on average, ±20%, quality 90; 8 classes of 16), generated
// into a temporary folder; --quick makes 8 smaller ones.
var dataFolder = data.FolderGen{Classes: 8, Train: 16, W: 500, H: 375, Vary: 0.2, Quality: 90, Noise: 12, Seed: 1}

// torchDataResult is the JSON object torch_data_throughput.py prints.
type torchDataResult struct {
	ImagesPerSec float64 `json:"images_per_sec"`
	ImagesPerCPU float64 `json:"images_per_cpu_sec"`
	Threads      int     `json:"threads"`
	Version      string  `json:"torchvision"`
}

// data runs bench data (resnet18's input: 224×224 crops of images resized
// to 256) on each of TrainThreads threads, alternating with torchvision's
// reference on the same folder and threads, --repeat times, and adds
// their medians side by side.
func (r *benchRun) data() error {
	dir, err := os.MkdirTemp("", "softsync-bench-data-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	gen, minTime, passes := dataFolder, "2s", "2"
	if r.o.Quick {
		gen.Train, gen.W, gen.H, minTime, passes = 1, 250, 188, "10ms", "1"
	}
	if err := data.GenerateImageFolder(dir, gen); err != nil {
		return err
	}
	runs := map[int][]DataResult{}
	torch := map[int][]torchDataResult{}
	var torchErr error
	for range r.o.Repeat {
		for _, th := range r.o.TrainThreads {
			var res DataResult
			if err := r.self(&res, "--threads", strconv.Itoa(th), "bench", "data", "--data", dir, "--model", "resnet18",
				"--min-time", minTime, "--json"); err != nil {
				r.fail("data", err, true)
				continue
			}
			runs[th] = append(runs[th], res)
			if slices.Contains(r.o.Skip, "torchvision") || torchErr != nil {
				continue
			}
			t, err := runTorchData(r.ctx, r.o.Python, r.o.DataScript, dir, th, passes)
			if err != nil {
				torchErr = err
				r.fail("torchvision", err, false)
				continue
			}
			torch[th] = append(torch[th], t)
		}
	}
	r.addData(r.o.TrainThreads, runs, torch, torchErr)
	return nil
}

// addData adds the data step's figures: per thread count the median
// images/s beside torchvision's, or its reason for missing (torchErr,
// else skipped).
func (r *benchRun) addData(threads []int, runs map[int][]DataResult, torch map[int][]torchDataResult, torchErr error) {
	for _, th := range threads {
		rs := runs[th]
		if len(rs) == 0 {
			continue
		}
		ips, cpu := make([]float64, len(rs)), make([]float64, len(rs))
		for i, x := range rs {
			ips[i] = x.ImagesPerSec
			if x.CPUSeconds > 0 {
				cpu[i] = float64(x.Decoded) / x.CPUSeconds
			}
		}
		x := rs[0]
		f := Figure{Group: "data", Name: fmt.Sprintf("%d×%d crops of %d JPEGs resized to %d, %s, %s", x.H, x.W, x.Images, x.Resize, x.Decoder, plural(th, "thread")),
			Params: map[string]any{"threads": th, "images": x.Images, "resize": x.Resize, "height": x.H, "width": x.W, "decoder": x.Decoder},
			Value:  median(ips), Unit: "images/s", Stat: medianOf(len(rs)), Runs: ips,
			Extra: map[string]float64{"images_per_cpu_s": median(cpu), "images_per_s_per_thread": median(ips) / float64(th)}}
		switch ts := torch[th]; {
		case len(ts) > 0:
			tips, tcpu := make([]float64, len(ts)), make([]float64, len(ts))
			for i, t := range ts {
				tips[i], tcpu[i] = t.ImagesPerSec, t.ImagesPerCPU
			}
			f.Compare(fmt.Sprintf("torchvision %s with PIL (bench/torch_data_throughput.py), same threads", ts[0].Version), median(tips), "images/s", tips)
			f.Ref.Extra = map[string]float64{"images_per_cpu_s": median(tcpu)}
			if c := median(tcpu); c > 0 {
				f.Extra["ratio_per_cpu_s"] = median(cpu) / c
			}
		case torchErr != nil:
			f.Ref = &Ref{Name: "torchvision", Missing: torchErr.Error()}
		default:
			f.Ref = &Ref{Name: "torchvision", Missing: "not run (--skip torchvision)"}
		}
		r.add(f)
	}
}

// runTorchData runs torch_data_throughput.py over dir on threads
// threads (a DataLoader of that many workers beyond one).
func runTorchData(ctx context.Context, python, script, dir string, threads int, passes string) (torchDataResult, error) {
	var res torchDataResult
	if _, err := os.Stat(script); err != nil {
		return res, fmt.Errorf("torchvision script: %w", err)
	}
	cmd := exec.CommandContext(ctx, python, script, dir, "--threads", strconv.Itoa(threads), "--passes", passes)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	out, err := scriptOutput(cmd)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil || res.ImagesPerSec <= 0 {
		return res, fmt.Errorf("%s: no result in its output %q: %v", script, tail(out, 300), err)
	}
	return res, nil
}
