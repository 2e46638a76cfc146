package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/tools/bench"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

func init() { addBenchCommand(newBenchDataCmd) }

func newBenchDataCmd(app *App) *cobra.Command {
	var dir, model string
	var resize int
	var minTime time.Duration
	var asJSON, goDecoder bool
	c := &cobra.Command{
		Use:   "data",
		Short: "Images/s of the image pipeline: read, decode, resize, crop and mirror into the network's input",
		Long: `Reads every image of the training split of an image folder (--data DIR:
DIR/train/CLASS/IMAGE) and does to it what training does: decode (libjpeg-turbo
when built in, at ½, ¼ or ⅛ scale in the DCT domain when the image is at least
twice the size needed), resize so that the shorter side is --resize (PIL's
antialiased bilinear filter), crop the network's input at random, mirror at
random and write the floats of the input tensor — on --threads threads of the
pipeline (default: the cores available), in passes over every image until
--min-time has passed. It prints images/s, per thread too, and the CPU time
the process took. The reference is torchvision's Resize, RandomCrop,
RandomHorizontalFlip and ToTensor over the same folder
(bench/torch_data_throughput.py; softsync bench all runs both, docs/bench.md).
Generate a folder of ImageNet-sized JPEGs with
  go test -tags turbojpeg -run '^$' -bench ImagePipeline ./learner/data/ -args -data.benchdir=DIR`,
		Example: `  softsync bench data --data /data/imagenet --threads 2 --json
  softsync bench data --data DIR --model alexnet --threads 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("--data: name an image folder (DIR/train/CLASS/IMAGE)")
			}
			spec, err := nn.Load(model)
			if err != nil {
				return fmt.Errorf("--model: %w", err)
			}
			switch {
			case resize < 0:
				return fmt.Errorf("--resize: must be ≥ 0 (0: the network's input × 256/224), got %d", resize)
			case spec.Input.C != 3:
				return fmt.Errorf("--model %s: takes %d channels, images have 3", model, spec.Input.C)
			}
			threads := app.Threads
			if threads == 0 {
				threads = kernels.DefaultThreads()
			}
			res, err := bench.Data(bench.DataConfig{Dir: dir, Threads: threads, H: spec.Input.H, W: spec.Input.W, Resize: resize,
				MinTime: minTime, PureGo: goDecoder})
			if err != nil {
				return fmt.Errorf("--data %s: %w", dir, err)
			}
			if asJSON {
				return app.printJSON(res)
			}
			fmt.Fprintf(app.Out, "%s: %s images, resized to %d, %d×%d crops, %s, %d thread(s): %s images/s (%s per thread); %s images in %s, %.1f cores busy\n",
				res.Data, textfmt.Thousands(int64(res.Images)), res.Resize, res.H, res.W, res.Decoder, res.Threads,
				textfmt.Thousands(int64(res.ImagesPerSec+0.5)), textfmt.Thousands(int64(res.PerThread+0.5)),
				textfmt.Thousands(int64(res.Decoded)), textfmt.Duration(res.Seconds), res.CPUSeconds/res.Seconds)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dir, "data", "", "image folder whose train/ split is read (DIR/train/CLASS/IMAGE)")
	f.StringVar(&model, "model", "resnet18", "network whose input the crops fill (resnet18: 224×224 of images resized to 256)")
	f.IntVar(&resize, "resize", 0, "the shorter side images are resized to (default: the network's input × 256/224)")
	f.DurationVar(&minTime, "min-time", 2*time.Second, "passes over the folder go on until this much time has passed (at least one)")
	f.BoolVar(&goDecoder, "go-decoder", false, "decode JPEGs with Go's image/jpeg even when libjpeg-turbo is built in (for comparison)")
	f.BoolVar(&asJSON, "json", false, "print a JSON object {images_per_sec, threads, images_per_sec_per_thread, decoder, images, seconds, cpu_seconds, ...}")
	return c
}
