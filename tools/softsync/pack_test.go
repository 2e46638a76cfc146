package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner/data"
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
