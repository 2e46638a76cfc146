package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
)

// TrainDataConfig is a run of bench train-data: the same training job
// (softsync train in a process of its own: one learner, Steps
// mini-batches of Batch images of the first Images of the training
// set) on --data synthetic, on an image folder and on a pack of it, in
// rounds of all the jobs, Repeat rounds.
type TrainDataConfig struct {
	Model  string
	Batch  int
	Steps  int
	Repeat int
	// Folder is an image folder (Folder/train/CLASS/IMAGE); when it has
	// no train/, an ImageNet-like one (data.ImageNetLike: 500×375 JPEGs
	// on average) of Classes × PerClass training images and 2 validation
	// images a class is generated there.
	Folder            string
	Classes, PerClass int
	// Pack is a pack of Folder (softsync pack); when it is not one,
	// Folder is packed into it, resized to the network's input × 256/224.
	Pack string
	// Images is every job's --train-subset (0: all of Folder's training
	// images): the images synthetic makes, spread evenly over the
	// folder's and the pack's classes.
	Images int
	// DataThreads and DataNice are the --data-threads (0: train's
	// default) and --data-nice of the folder and pack jobs: every
	// combination runs, side by side.
	DataThreads, DataNice []int
	// Dir holds the jobs' reports (a temporary folder is fine).
	Dir   string
	Procs Processes
	Log   *slog.Logger
}

// TrainDataRow is one job of bench train-data over its runs.
type TrainDataRow struct {
	Data        string `json:"data"`         // "synthetic", "folder" or "pack"
	Path        string `json:"path"`         // the folder or pack ("" for synthetic)
	DataThreads int    `json:"data_threads"` // --data-threads (0: the default)
	DataNice    int    `json:"data_nice"`    // --data-nice
	// ImagesPerSec is the median of the runs' report images/s (its
	// training time: from the first step to the last push).
	ImagesPerSec float64   `json:"images_per_sec"`
	Runs         []float64 `json:"runs"` // images/s of every run, by round
	// Ratio is the median over the rounds of the run's images/s over
	// that round's synthetic run: the jobs of a round see about the same
	// load of the machine.
	Ratio float64 `json:"ratio"`
	// DataWaitFraction is the median of the runs' data_wait_fraction.
	DataWaitFraction float64 `json:"data_wait_fraction"`
	// CPUPerImage is the median of the runs' process CPU time (user and
	// system, start-up included) over the images trained.
	CPUPerImage float64 `json:"cpu_seconds_per_image"`
	PeakRSS     int64   `json:"peak_rss_bytes"` // the largest of the runs (VmHWM, sampled every 100 ms)
}

// TrainDataResult is the output of softsync bench train-data --json.
type TrainDataResult struct {
	Model   string         `json:"model"`
	Batch   int            `json:"batch"`
	Steps   int            `json:"steps"`
	Images  int            `json:"train_images"` // every job's --train-subset
	Classes int            `json:"classes"`
	Repeat  int            `json:"repeat"`
	Decoder string         `json:"decoder"` // "libjpeg-turbo" or "image/jpeg"
	Rows    []TrainDataRow `json:"rows"`    // synthetic first
}

// trainDataJob is one job of a round.
type trainDataJob struct {
	data, path    string
	threads, nice int
}

// TrainData prepares the folder and the pack (generating and packing
// what is missing), then runs the jobs cfg.Repeat times in rounds —
// synthetic, then the folder and the pack at each of cfg.DataThreads and
// cfg.DataNice —
// and returns a row per job, synthetic first.
func TrainData(ctx context.Context, cfg TrainDataConfig) (*TrainDataResult, error) {
	if cfg.Batch < 1 || cfg.Steps < 1 || cfg.Repeat < 1 || cfg.Images < 0 || len(cfg.DataThreads) == 0 || len(cfg.DataNice) == 0 {
		return nil, fmt.Errorf("%w: bench train-data: batch %d, %d steps, %d rounds, %d images, data threads %v, data nice %v",
			data.ErrConfig, cfg.Batch, cfg.Steps, cfg.Repeat, cfg.Images, cfg.DataThreads, cfg.DataNice)
	}
	spec, err := nn.Load(cfg.Model)
	if err != nil {
		return nil, err
	}
	classes, images, err := prepareTrainData(ctx, &cfg, spec)
	if err != nil {
		return nil, err
	}
	if cfg.Images == 0 || cfg.Images > images {
		cfg.Images = images
	}
	jobs := []trainDataJob{{data: "synthetic"}}
	for _, kind := range []struct{ name, path string }{{"folder", cfg.Folder}, {"pack", cfg.Pack}} {
		for _, th := range cfg.DataThreads {
			for _, nice := range cfg.DataNice {
				jobs = append(jobs, trainDataJob{data: kind.name, path: kind.path, threads: th, nice: nice})
			}
		}
	}
	reports := make([][]*cluster.Report, len(jobs))
	usage := make([][]ProcUsage, len(jobs))
	for round := range cfg.Repeat {
		for i, j := range jobs {
			rep, u, err := cfg.runTrainData(ctx, j, fmt.Sprintf("%d-%d", round, i))
			if err != nil {
				return nil, err
			}
			cfg.Log.Info("bench train-data", "round", round+1, "data", j.data, "data_threads", j.threads, "data_nice", j.nice,
				"images_per_sec", rep.ImagesPerSec, "data_wait", rep.DataWaitFraction)
			reports[i], usage[i] = append(reports[i], rep), append(usage[i], u)
		}
	}
	res := &TrainDataResult{Model: cfg.Model, Batch: cfg.Batch, Steps: cfg.Steps, Images: cfg.Images, Classes: classes, Repeat: cfg.Repeat,
		Decoder: "image/jpeg"}
	if data.TurboJPEG() {
		res.Decoder = "libjpeg-turbo"
	}
	res.Rows = trainDataRows(jobs, reports, usage)
	return res, nil
}

// trainDataRows makes a row of each job from its runs (reports[i] and
// usage[i] are job i's, by round; job 0 is synthetic).
func trainDataRows(jobs []trainDataJob, reports [][]*cluster.Report, usage [][]ProcUsage) []TrainDataRow {
	rows := make([]TrainDataRow, len(jobs))
	for i, j := range jobs {
		r := TrainDataRow{Data: j.data, Path: j.path, DataThreads: j.threads, DataNice: j.nice}
		var ratio, wait, cpu []float64
		for k, rep := range reports[i] {
			r.Runs = append(r.Runs, rep.ImagesPerSec)
			ratio = append(ratio, rep.ImagesPerSec/reports[0][k].ImagesPerSec)
			wait = append(wait, rep.DataWaitFraction)
			if rep.Images > 0 {
				cpu = append(cpu, usage[i][k].CPUSeconds/float64(rep.Images))
			}
			r.PeakRSS = max(r.PeakRSS, usage[i][k].PeakRSS)
		}
		r.ImagesPerSec, r.Ratio, r.DataWaitFraction, r.CPUPerImage = median(r.Runs), median(ratio), median(wait), median(cpu)
		rows[i] = r
	}
	return rows
}

// prepareTrainData generates cfg.Folder if it has no train/ and packs it
// into cfg.Pack if that is not a pack, and returns the folder's classes
// and training images.
func prepareTrainData(ctx context.Context, cfg *TrainDataConfig, spec *nn.Spec) (classes, images int, err error) {
	if _, err := os.Stat(filepath.Join(cfg.Folder, "train")); err != nil {
		g := data.ImageNetLike(cfg.Classes, cfg.PerClass, 1)
		g.Val = 2
		cfg.Log.Info("generating an image folder", "folder", cfg.Folder, "images", cfg.Classes*cfg.PerClass)
		if err := data.GenerateImageFolder(cfg.Folder, g); err != nil {
			return 0, 0, err
		}
	}
	train, _, err := data.ReadImageFolder(cfg.Folder)
	if err != nil {
		return 0, 0, err
	}
	if !data.IsPack(cfg.Pack) {
		cfg.Log.Info("packing the folder", "folder", cfg.Folder, "pack", cfg.Pack)
		pc := data.PackConfig{Resize: data.DefaultResize(max(spec.Input.H, spec.Input.W)), Threads: kernels.DefaultThreads()}
		if _, err := data.PackFolder(ctx, cfg.Folder, cfg.Pack, pc); err != nil {
			return 0, 0, err
		}
	}
	return len(train.Classes), train.Len(), nil
}

// runTrainData runs job j (softsync train, its report written into
// cfg.Dir under name) and returns its report and what its process used.
func (cfg *TrainDataConfig) runTrainData(ctx context.Context, j trainDataJob, name string) (*cluster.Report, ProcUsage, error) {
	out := filepath.Join(cfg.Dir, "train-data-"+name+".json")
	// Epochs enough for the steps: every job ends at --max-steps.
	epochs := (cfg.Steps*cfg.Batch+cfg.Images-1)/cfg.Images + 1
	dataArg := j.data
	if j.path != "" {
		dataArg = j.path
	}
	args := []string{"--log-level", "warn", "train", "--model", cfg.Model, "--batch", strconv.Itoa(cfg.Batch),
		"--data", dataArg, "--train-subset", strconv.Itoa(cfg.Images), "--test-subset", strconv.Itoa(cfg.Batch),
		"--max-steps", strconv.Itoa(cfg.Steps), "--epochs", strconv.Itoa(epochs), "--quiet", "--json", out}
	if j.path != "" {
		args = append(args, "--data-nice", strconv.Itoa(j.nice))
		if j.threads > 0 {
			args = append(args, "--data-threads", strconv.Itoa(j.threads))
		}
	}
	u, err := cfg.Procs.Run(ctx, nil, args...)
	if err != nil {
		return nil, u, err
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, u, err
	}
	var rep cluster.Report
	if err := json.Unmarshal(b, &rep); err != nil || rep.ImagesPerSec <= 0 {
		return nil, u, fmt.Errorf("%s: no images/s in the report of softsync train --data %s: %v", out, j.data, err)
	}
	return &rep, u, nil
}
