package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
)

// TestPackCmd packs a small folder, reads the pack back, and runs the
// command again on the finished pack; bad arguments are errors.
func TestPackCmd(t *testing.T) {
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "pack")
	if err := data.GenerateImageFolder(dir, data.FolderGen{Classes: 2, Train: 3, Val: 1, W: 40, H: 30, Quality: 90, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got := run(t, "pack", dir, out, "--resize", "24", "--threads", "2")
		if !strings.Contains(got, "train: 6 images") || !strings.Contains(got, "val: 2 images") {
			t.Fatalf("output:\n%s", got)
		}
	}
	p, err := data.OpenPack(out)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Train.Len() != 6 || p.Manifest.Resize != 24 {
		t.Fatalf("%d images, resize %d", p.Train.Len(), p.Manifest.Resize)
	}
	for _, args := range [][]string{{"pack", dir}, {"pack", dir, out, "--chroma", "422"}, {"pack", "--train-list", "x.txt", out}} {
		if _, err := runErrWithin(t, 30e9, args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestTrainPack: a job reads a pack as it reads the folder packed. With
// the images' bytes kept (all are smaller than the pack's resize) and one
// learner, training from the pack and from the folder gives the same test
// errors and the same weights; a job resizing above the pack's size is
// refused naming both.
func TestTrainPack(t *testing.T) {
	dir, net, out := jpegFolder(t, 12, 4), tinyNet(t, 4), t.TempDir()
	pack := filepath.Join(out, "pack")
	run(t, "pack", dir, pack, "--resize", "40", "--threads", "2")
	reports := map[string]map[string]any{}
	weights := map[string][]float32{}
	spec, err := nn.Load(net)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{dir, pack} {
		rep, w := filepath.Join(out, filepath.Base(src)+".json"), filepath.Join(out, filepath.Base(src)+".weights")
		run(t, "train", "--data", src, "--model", net, "--epochs", "2", "--batch", "4", "--lr", "0.0002", "--lr-steps", "none",
			"--threads", "1", "--data-threads", "2", "--quiet", "--json", rep, "--save", w)
		reports[src] = readReport(t, rep)
		lw, err := learner.LoadWeights(w, spec)
		if err != nil {
			t.Fatal(err)
		}
		weights[src] = lw.Params
	}
	f, p := reports[dir], reports[pack]
	if f["train_images"] != p["train_images"] || f["test_images"] != p["test_images"] ||
		f["test_error"] != p["test_error"] || f["test_error_top5"] != p["test_error_top5"] {
		t.Errorf("folder: %v/%v images, errors %v/%v; pack: %v/%v images, errors %v/%v", f["train_images"], f["test_images"],
			f["test_error"], f["test_error_top5"], p["train_images"], p["test_images"], p["test_error"], p["test_error_top5"])
	}
	if !slices.Equal(weights[dir], weights[pack]) {
		t.Error("the weights trained from the pack differ from those trained from the folder")
	}
	_, err = runErr("train", "--data", pack, "--model", net, "--resize", "48", "--epochs", "1", "--threads", "1", "--quiet")
	if err == nil || !strings.Contains(err.Error(), "48 is larger than the 40 the pack") {
		t.Errorf("--resize above the pack's: %v", err)
	}
}
