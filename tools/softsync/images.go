package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/data"
)

// imageFlags are the flags of image data (docs/data.md).
type imageFlags struct {
	root, valList, crop string
	resize, threads     int
	nice                int
	mirror, strict      bool
}

// imageFlagNames are the flags that apply to image data only.
var imageFlagNames = []string{"data-root", "val-list", "resize", "crop", "mirror", "strict-data", "data-threads", "data-nice"}

func addImageFlags(fl *pflag.FlagSet, f *imageFlags) {
	fl.StringVar(&f.root, "data-root", "", "image data: the folder the paths of a list file (--data FILE, --val-list) start from (default: the list file's folder)")
	fl.StringVar(&f.valList, "val-list", "", "image data: the list file of the validation images, evaluated at each epoch end (an image folder's are its val/)")
	fl.IntVar(&f.resize, "resize", 0, "image data: the shorter side images are resized to before the crop (default: the network's input × 256/224, 256 for 224)")
	fl.StringVar(&f.crop, "crop", "random", "image data: the crop of the network's input size training takes, random or center (evaluation: center)")
	fl.BoolVar(&f.mirror, "mirror", true, "image data: mirror training images left to right at random (--mirror=false: never)")
	fl.BoolVar(&f.strict, "strict-data", false, "image data: decode every image before training and refuse to start, naming every file that fails (default: skip, count and name such files)")
	fl.IntVar(&f.threads, "data-threads", 0, "image data: threads that read and decode images in each process (default: the cores available; they sleep once the learners' next mini-batches are decoded, so they take the cores only for the time decoding needs)")
	fl.IntVar(&f.nice, "data-nice", cluster.DecodeNice, "image data: how much the decoding threads lower their scheduling priority (nice, 0 … 19), so that they decode in the time the computation leaves idle rather than preempting it; 0: the computation's priority")
}

// fit sets cfg's image options and fits its network to the data's
// classes (cluster.Config.FitImages) when --data is image data; the image
// flags are an error otherwise.
func (f *imageFlags) fit(cfg *cluster.Config, fl *pflag.FlagSet) error {
	if !cluster.IsImageData(cfg.Data) {
		for _, name := range imageFlagNames {
			if fl.Changed(name) {
				return fmt.Errorf("--%s: applies to image data (an image folder or a list file), not --data %s", name, cfg.Data)
			}
		}
		return nil
	}
	switch {
	case f.crop != "random" && f.crop != "center":
		return fmt.Errorf("--crop %q: want random or center", f.crop)
	case f.threads < 0:
		return fmt.Errorf("--data-threads: must be ≥ 0 (0: the cores available), got %d", f.threads)
	case f.nice < 0 || f.nice > 19:
		return fmt.Errorf("--data-nice: must be 0 … 19, got %d", f.nice)
	case f.resize < 0:
		return fmt.Errorf("--resize: must be ≥ 0 (0: the network's input × 256/224), got %d", f.resize)
	}
	cfg.Images = cluster.ImageOptions{Root: f.root, ValList: f.valList, Resize: f.resize, CenterCrop: f.crop == "center",
		Mirror: f.mirror, Strict: f.strict}
	if err := cfg.FitImages(); err != nil {
		return fmt.Errorf("--data %s: %w", cfg.Data, err)
	}
	return nil
}

// decodeThreads is --data-threads, or the cores available.
func (f *imageFlags) decodeThreads() int {
	if f.threads > 0 {
		return f.threads
	}
	return kernels.DefaultThreads()
}

// lookupImages reads the image data of cfg (FitImages done), decoded on
// the process's pipeline.
func (app *App) lookupImages(cfg *cluster.Config, f *imageFlags) (cluster.DataSet, error) {
	p, err := app.imagePipeline(data.PipelineConfig{Threads: f.decodeThreads(), Nice: f.nice})
	if err != nil {
		return cluster.DataSet{}, err
	}
	if f.strict {
		app.Log.Info("decoding every image first (--strict-data)", "data", cfg.Data)
	}
	ds, err := cfg.LookupImages(p, f.decodeThreads())
	if ferr := flagError(err); ferr != err {
		return ds, ferr
	}
	if err != nil {
		return ds, fmt.Errorf("--data %s: %w", cfg.Data, err)
	}
	return ds, nil
}

// imagePipeline returns the process's image pipeline, started as cfg
// says on first use; it is closed when the command ends (App.release).
func (app *App) imagePipeline(cfg data.PipelineConfig) (*data.Pipeline, error) {
	if app.pipeline != nil {
		return app.pipeline, nil
	}
	p, err := data.NewPipeline(cfg)
	if err != nil {
		return nil, err
	}
	app.pipeline = p
	return p, nil
}

// closePipeline stops the image pipeline's threads, if it was started.
func (app *App) closePipeline() {
	if app.pipeline != nil {
		app.pipeline.Close()
		app.pipeline = nil
	}
}
