package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/learner/data"
)

func init() { addCommand(newPackCmd) }

func newPackCmd(app *App) *cobra.Command {
	var trainList, valList, root, chroma string
	cfg := data.PackConfig{}
	var fileMiB int64
	cmd := &cobra.Command{
		Use:   "pack DIR OUT | pack --train-list FILE [--val-list FILE] [--data-root ROOT] OUT",
		Short: "Write an image folder (or list files) as packed records of pre-resized JPEGs",
		Long: `pack writes the images of an ImageNet-style folder (DIR/train/CLASS/..., and DIR/val/...
if present) or of Caffe list files as a pack in the folder OUT: record files of at most
--file-size MiB holding each image resized so that its shorter side is --resize (as training
resizes it) and re-encoded as a JPEG at --quality, or the file's own bytes when it is no
larger; an index with checksums per split, and pack.json. Training with --data OUT reads the
same images, in the same order, with the same labels and classes, as from the folder
(docs/data.md, "Packed records"). Train with the same --resize.

Images that cannot be decoded are skipped and named in pack.json (the first few here too).
Progress (files/s, ETA) goes to stderr. An interrupted pack (Ctrl-C, a killed process)
continues where it stopped when the same command is run again; a finished one is left as
it is. --threads sets the threads that decode, resize and encode (default: the cores).`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			lists := trainList != ""
			if lists != (len(args) == 1) {
				return fmt.Errorf("pack: give DIR and OUT, or --train-list and OUT")
			}
			switch chroma {
			case "444":
			case "420":
				cfg.Chroma420 = true
			default:
				return fmt.Errorf("pack: --chroma %q: want 444 or 420", chroma)
			}
			cfg.FileBytes = fileMiB << 20
			cfg.Threads = app.Threads
			if cfg.Threads == 0 {
				cfg.Threads = runtime.NumCPU()
			}
			cfg.Progress = packProgress(os.Stderr)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := args[len(args)-1]
			var m *data.PackManifest
			var err error
			if lists {
				if root == "" {
					return fmt.Errorf("pack: --train-list needs --data-root, the folder its paths are relative to")
				}
				m, err = packLists(ctx, trainList, valList, root, out, cfg)
			} else {
				m, err = data.PackFolder(ctx, args[0], out, cfg)
			}
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("pack: interrupted; run the same command again to continue where it stopped")
			}
			if err != nil {
				return fmt.Errorf("pack: %w", err)
			}
			printPack(app.Out, out, m)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Resize, "resize", data.DefaultPackResize, "shorter side of the stored images: the --resize of the jobs that will train from the pack")
	f.IntVar(&cfg.Quality, "quality", data.DefaultPackQuality, "JPEG quality of re-encoded images (1-100)")
	f.StringVar(&chroma, "chroma", "444", "chroma of re-encoded images: 444 (full resolution, closest to the folder) or 420 (smaller, faster to decode)")
	f.Int64Var(&fileMiB, "file-size", data.DefaultPackFile>>20, "largest record file, MiB")
	f.StringVar(&trainList, "train-list", "", "Caffe list file of the training images (PATH LABEL a line) instead of DIR")
	f.StringVar(&valList, "val-list", "", "Caffe list file of the validation images (with --train-list)")
	f.StringVar(&root, "data-root", "", "folder the list files' paths are relative to")
	return cmd
}

func packLists(ctx context.Context, trainList, valList, root, out string, cfg data.PackConfig) (*data.PackManifest, error) {
	train, err := data.ReadListFile(trainList, root)
	if err != nil {
		return nil, err
	}
	var val *data.ImageList
	if valList != "" {
		if val, err = data.ReadListFile(valList, root); err != nil {
			return nil, err
		}
	}
	return data.PackLists(ctx, trainList, train, val, out, cfg)
}

// packProgress prints a progress line every 10 seconds and at the end of
// each split.
func packProgress(w io.Writer) func(data.PackProgress) {
	var last time.Time
	return func(p data.PackProgress) {
		if p.Done < p.Total && time.Since(last) < 10*time.Second {
			return
		}
		last = time.Now()
		resumed := ""
		if p.Resumed > 0 {
			resumed = fmt.Sprintf(", %d packed before", p.Resumed)
		}
		fmt.Fprintf(w, "pack %s: %d/%d files (%.1f%%)%s, %.0f files/s, %d skipped, %.1f MiB, ETA %s\n", p.Split, p.Done, p.Total,
			100*float64(p.Done)/float64(max(p.Total, 1)), resumed, p.FilesPerSec(), p.Skipped, float64(p.Bytes)/(1<<20), p.ETA().Round(time.Second))
	}
}

// printPack prints what a pack holds and the files it skipped (the first
// few by name, then a count).
func printPack(w io.Writer, out string, m *data.PackManifest) {
	fmt.Fprintf(w, "%s: %d classes, images resized to a shorter side of %d, JPEG quality %d (%s)\n", out, len(m.Classes), m.Resize, m.Quality, m.Chroma)
	for _, s := range m.Splits {
		fmt.Fprintf(w, "  %s: %d images (%d stored as they were) in %d record files; %d skipped\n", s.Name, s.Images, s.Kept, len(s.Files), len(s.Skipped))
		for i, msg := range s.Skipped {
			if i == data.MaxNamedSkips {
				fmt.Fprintf(w, "    and %d more (pack.json lists them)\n", len(s.Skipped)-i)
				break
			}
			fmt.Fprintf(w, "    skipped %s\n", msg)
		}
	}
}
