package main

import (
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/tools/bench"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

func init() { addBenchCommand(newBenchTrainDataCmd) }

func newBenchTrainDataCmd(app *App) *cobra.Command {
	var model, folder, pack string
	var batch, steps, repeat, images, classes, perClass int
	var threads, nice []int
	var asJSON bool
	c := &cobra.Command{
		Use:   "train-data",
		Short: "images/s of the same training job from a JPEG folder, from a pack of it and on synthetic data, and their ratios",
		Long: `Runs the same training job — softsync train in a process of its own, one
learner, --steps mini-batches of --batch, on the first --images images of
the training set — on --data synthetic (random images held in memory),
on an image folder and on a pack of it (the image pipeline decoding on the
same cores as the computation), in rounds of all three, --repeat rounds,
and prints each job's median images/s (the report's: from the first step
to the last push), its ratio to synthetic (the median over the rounds of
the ratio within a round, whose jobs see about the same load of the
machine), the time the learner waited for data and the process's CPU time
per image (start-up included).

--data DIR names the folder; when DIR has no train/, an ImageNet-like one
(JPEGs of 500×375 on average, quality 90, about 110 KB) of --classes ×
--per-class images is generated there. --pack names the pack; when it is
not one, the folder is packed into it, resized to the network's input ×
256/224 (softsync pack --resize). Without them both go into a temporary
folder, removed at the end. --data-threads 0,1,2 and --data-nice 0,10 run
the folder and pack jobs with each (every combination) side by side.`,
		Example: `  softsync bench train-data
  softsync bench train-data --data /tmp/jpegs --pack /tmp/jpegs.pack --repeat 5 --steps 60
  softsync bench train-data --data-threads 0,1 --data-nice 0,10 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, c := range []struct {
				flag string
				v    int
			}{{"--batch", batch}, {"--steps", steps}, {"--repeat", repeat}, {"--classes", classes}, {"--per-class", perClass}} {
				if c.v < 1 {
					return fmt.Errorf("%s: must be ≥ 1, got %d", c.flag, c.v)
				}
			}
			if images < 0 {
				return fmt.Errorf("--images: must be ≥ 0 (0: every training image of the folder), got %d", images)
			}
			for _, th := range threads {
				if th < 0 {
					return fmt.Errorf("--data-threads: must be ≥ 0 (0: train's default), got %d", th)
				}
			}
			for _, n := range nice {
				if n < 0 || n > 19 {
					return fmt.Errorf("--data-nice: must be 0 … 19, got %d", n)
				}
			}
			tmp, err := os.MkdirTemp("", "softsync-bench-train-data-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			if folder == "" {
				folder = filepath.Join(tmp, "folder")
			}
			if pack == "" {
				pack = filepath.Join(tmp, "pack")
			}
			ctx, stop := signalContext(cmd, app)
			defer stop()
			res, err := bench.TrainData(ctx, bench.TrainDataConfig{Model: model, Batch: batch, Steps: steps, Repeat: repeat, Folder: folder,
				Classes: classes, PerClass: perClass, Pack: pack, Images: images, DataThreads: threads, DataNice: nice, Dir: tmp, Procs: app.processes(), Log: app.Log})
			if err != nil {
				return err
			}
			if asJSON {
				return app.printJSON(res)
			}
			fmt.Fprintf(app.Out, "%s μ=%d, %d steps on %s training images (%d classes), %s, median of %d round(s):\n",
				res.Model, res.Batch, res.Steps, textfmt.Thousands(int64(res.Images)), res.Classes, res.Decoder, res.Repeat)
			tw := tabwriter.NewWriter(app.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "data\tdata threads\tdata nice\timages/s\tratio\tdata wait\tCPU s/image\tpeak RSS MiB\t\n")
			for _, r := range res.Rows {
				th, n := "-", "-"
				if r.Data != "synthetic" {
					th, n = "default", fmt.Sprint(r.DataNice)
					if r.DataThreads > 0 {
						th = fmt.Sprint(r.DataThreads)
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.3f×\t%.1f%%\t%.3f\t%.0f\t\n", r.Data, th, n, r.ImagesPerSec, r.Ratio, 100*r.DataWaitFraction,
					r.CPUPerImage, float64(r.PeakRSS)/(1<<20))
			}
			return tw.Flush()
		},
	}
	f := c.Flags()
	f.StringVar(&model, "model", "alexnet", "network (its input: the crops, and the synthetic images' shape)")
	f.IntVar(&batch, "batch", 16, "mini-batch size μ (16: the paper's ImageNet runs)")
	f.IntVar(&steps, "steps", 40, "mini-batches of each job (--max-steps)")
	f.IntVar(&repeat, "repeat", 3, "rounds of the jobs; each row is the median of its runs")
	f.StringVar(&folder, "data", "", "image folder DIR/train/CLASS/IMAGE; generated there when it has no train/ (default: a temporary folder)")
	f.StringVar(&pack, "pack", "", "pack of the folder; the folder is packed into it when it is not one (default: a temporary folder)")
	f.IntVar(&images, "images", 0, "training images of every job (--train-subset; 0: every training image of the folder)")
	f.IntVar(&classes, "classes", 8, "classes of a generated folder")
	f.IntVar(&perClass, "per-class", 80, "training images per class of a generated folder")
	f.IntSliceVar(&threads, "data-threads", []int{0}, "comma-separated --data-threads of the folder and pack jobs, side by side (0: train's default)")
	f.IntSliceVar(&nice, "data-nice", []int{cluster.DecodeNice}, "comma-separated --data-nice of the folder and pack jobs, side by side")
	f.BoolVar(&asJSON, "json", false, "print a JSON object {model, batch, steps, train_images, classes, decoder, rows: [{data, path, data_threads, data_nice, images_per_sec, runs, ratio, data_wait_fraction, cpu_seconds_per_image, peak_rss_bytes}]}")
	return c
}
