package data

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/kernels"
)

// packFolder writes a folder of 3 classes × 6 training and 2 validation
// JPEGs between about 24 and 72 pixels a side (so that with a resize of 32
// some are stored as they are and some re-encoded), a PNG, and one
// truncated JPEG, which packing must skip.
func packFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := GenerateImageFolder(dir, FolderGen{Classes: 3, Train: 6, Val: 2, W: 48, H: 40, Vary: 0.5, Quality: 90, Noise: 1, Texture: 6, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	m := image.NewNRGBA(image.Rect(0, 0, 30, 26))
	for i := range m.Pix {
		m.Pix[i] = byte(i * 13)
	}
	var b bytes.Buffer
	png.Encode(&b, m)
	os.WriteFile(filepath.Join(dir, "train", "c001", "p.png"), b.Bytes(), 0o644)
	good, _ := os.ReadFile(filepath.Join(dir, "train", "c002", "i00000.jpg"))
	os.WriteFile(filepath.Join(dir, "train", "c002", "i00003.jpg"), good[:len(good)/2], 0o644)
	return dir
}

var testPackConfig = PackConfig{Resize: 32, Quality: 95, FileBytes: 8 << 10, Threads: 2}

// transformAll transforms every image of set for epoch e with a.
func transformAll(t *testing.T, set *ImageSet, a Augment, e int) [][]float32 {
	t.Helper()
	tr := &transformer{dec: newDecoder(false), img: kernels.NewImages()}
	defer tr.dec.close()
	var out [][]float32
	for i := range set.Len() {
		x := make([]float32, a.ImageLen())
		if err := tr.transform(set, &a, i, e, x); err != nil {
			t.Fatalf("%s: %v", set.List.File(i), err)
		}
		out = append(out, x)
	}
	return out
}

// TestPackEqualsFolder: a pack holds the folder's classes, labels and
// images in its order, less the bad file (reported); the pipeline over
// the pack sees the same images as over the folder — the same crops and
// mirrors, exactly the same values where the file was kept, within
// JPEG's rounding where it was re-encoded (less close with 4:2:0 chroma,
// which Go's encoder writes) — split by split.
func TestPackEqualsFolder(t *testing.T) {
	dir, out := packFolder(t), filepath.Join(t.TempDir(), "pack")
	var seen []PackProgress
	cfg := testPackConfig
	cfg.Progress = func(p PackProgress) { seen = append(seen, p) }
	m, err := PackFolder(context.Background(), dir, out, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Splits) != 2 || len(m.Splits[0].Skipped) != 1 || !strings.Contains(m.Splits[0].Skipped[0], filepath.Join("c002", "i00003.jpg")) {
		t.Fatalf("splits %+v", m.Splits)
	}
	last := map[string]PackProgress{}
	for _, p := range seen {
		last[p.Split] = p
	}
	if p := last["train"]; p.Done != 19 || p.Total != 19 || p.Skipped != 1 || p.Bytes == 0 || last["val"].Done != 6 || seen[0].Split != "train" {
		t.Fatalf("progress %+v", seen)
	}
	tr := m.Splits[0]
	if tr.Kept == 0 || tr.Kept == tr.Images || len(tr.Files) < 2 {
		t.Fatalf("train split: %d images, %d kept, %d files: want some kept, some re-encoded, several files", tr.Images, tr.Kept, len(tr.Files))
	}
	p, err := OpenPack(out)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	train, val, err := ReadImageFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	bad := slices.Index(train.Paths, "c002/i00003.jpg")
	train.Paths, train.Labels = slices.Delete(train.Paths, bad, bad+1), slices.Delete(train.Labels, bad, bad+1)
	for _, c := range []struct {
		name         string
		folder, pack *ImageSet
	}{{"train", NewFolderSet(train), p.Train}, {"val", NewFolderSet(val), p.Val}} {
		if !slices.Equal(c.pack.List.Classes, c.folder.List.Classes) || !slices.Equal(c.pack.List.Labels, c.folder.List.Labels) ||
			!slices.Equal(c.pack.List.Paths, c.folder.List.Paths) {
			t.Fatalf("%s: pack lists %v %v, folder %v %v", c.name, c.pack.List.Paths, c.pack.List.Labels, c.folder.List.Paths, c.folder.List.Labels)
		}
		for _, a := range []Augment{{H: 24, W: 24, Resize: 32, Scale: 1}, {H: 20, W: 24, Resize: 32, Random: true, Mirror: true, Scale: 1, Seed: 5}} {
			xf, xp := transformAll(t, c.folder, a, 1), transformAll(t, c.pack, a, 1)
			for i := range xf {
				f, _ := os.ReadFile(c.folder.List.File(i))
				hd, _ := decodeSize(f)
				var maxd, sum float64
				for k := range xf[i] {
					d := math.Abs(float64(xf[i][k] - xp[i][k]))
					maxd, sum = max(maxd, d), sum+d
				}
				mean := sum / float64(len(xf[i]))
				if min(hd.X, hd.Y) <= 32 && maxd != 0 {
					t.Fatalf("%s %s (kept): differs by %v", c.name, c.folder.List.Paths[i], maxd)
				}
				if tol := map[string]float64{"4:4:4": 2, "4:2:0": 6}[m.Chroma]; maxd > 32 || mean > tol {
					t.Fatalf("%s %s: pack differs from the folder by %v at most, %.2f on average", c.name, c.folder.List.Paths[i], maxd, mean)
				}
			}
		}
	}
}

// decodeSize returns the size of an encoded image.
func decodeSize(b []byte) (image.Point, error) {
	c, _, err := image.DecodeConfig(bytes.NewReader(b))
	return image.Pt(c.Width, c.Height), err
}

// stopAfter is a context that ends after its Err has been asked n times:
// an interruption at a chosen point of a pack.
type stopAfter struct {
	context.Context
	n int
}

func (c *stopAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// TestPackResume interrupts packs mid-way — cleanly, and as a killed
// process leaves them (a record written but not journaled, a torn
// journal line) — and resumes them: the result is the pack written in one
// go, byte for byte. Resuming with other options is refused; a finished
// pack is left alone.
func TestPackResume(t *testing.T) {
	dir := packFolder(t)
	root := t.TempDir()
	whole := filepath.Join(root, "whole")
	if _, err := PackFolder(context.Background(), dir, whole, testPackConfig); err != nil {
		t.Fatal(err)
	}
	for _, stop := range []int{1, 2, 3} { // after 1 and 2 batches of train, after train
		out := filepath.Join(root, "cut"+string(rune('0'+stop)))
		_, err := PackFolder(&stopAfter{context.Background(), stop}, dir, out, testPackConfig)
		if !errors.Is(err, context.Canceled) || IsPack(out) {
			t.Fatalf("stop %d: err %v, finished %v", stop, err, IsPack(out))
		}
		if stop == 2 { // as a kill leaves it
			recs, _ := filepath.Glob(filepath.Join(out, "train-*.rec"))
			f, _ := os.OpenFile(recs[len(recs)-1], os.O_APPEND|os.O_WRONLY, 0)
			f.Write(bytes.Repeat([]byte{0xee}, 300))
			f.Close()
			j, _ := os.OpenFile(filepath.Join(out, "train.journal"), os.O_APPEND|os.O_WRONLY, 0)
			j.Write([]byte(`{"i":99,"f":0,"o":1`))
			j.Close()
		}
		other := testPackConfig
		other.Quality = 80
		if _, err := PackFolder(context.Background(), dir, out, other); !errors.Is(err, ErrConfig) {
			t.Fatalf("stop %d: resumed with another quality: %v", stop, err)
		}
		if _, err := PackFolder(context.Background(), dir, out, testPackConfig); err != nil {
			t.Fatalf("stop %d: resume: %v", stop, err)
		}
		sameFiles(t, whole, out)
	}
	if m, err := PackFolder(context.Background(), dir, whole, testPackConfig); err != nil || m.Splits[0].Images != 18 {
		t.Fatalf("a finished pack again: %v", err)
	}
}

// sameFiles fails unless folders a and b hold the same files with the
// same bytes (the manifest's absolute source aside).
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	ea, _ := os.ReadDir(a)
	eb, _ := os.ReadDir(b)
	var na, nb []string
	for _, e := range ea {
		na = append(na, e.Name())
	}
	for _, e := range eb {
		nb = append(nb, e.Name())
	}
	if !slices.Equal(na, nb) {
		t.Fatalf("files %v and %v", na, nb)
	}
	for _, n := range na {
		x, _ := os.ReadFile(filepath.Join(a, n))
		y, _ := os.ReadFile(filepath.Join(b, n))
		if !bytes.Equal(x, y) {
			t.Fatalf("%s differs", n)
		}
	}
}

// TestPackDamage: a damaged record fails to read with ErrFormat naming
// its file, and the pipeline replaces and reports it as a bad image; a
// damaged index, or a folder that is not a pack, cannot be opened.
func TestPackDamage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pack")
	if _, err := PackFolder(context.Background(), packFolder(t), out, testPackConfig); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(out, "train-00000.rec")
	b, _ := os.ReadFile(rec)
	b[fileHeaderLen+recHeaderLen+40] ^= 1 // the first record's data
	os.WriteFile(rec, b, 0o644)
	p, err := OpenPack(out)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Train.rec.read(0, nil); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), rec) {
		t.Fatalf("damaged record: %v", err)
	}
	a := Augment{H: 16, W: 16, Resize: 32, Random: true, Scale: 1}
	epochBatches(t, p.Train, a, newPipe(t, 2, false))
	if n, first := p.Train.Skipped(); n != 1 || !strings.Contains(first[0], "checksum") {
		t.Fatalf("skipped %d: %v", n, first)
	}
	idx := filepath.Join(out, "val.idx")
	b, _ = os.ReadFile(idx)
	b[idxHeaderLen+3] ^= 1
	os.WriteFile(idx, b, 0o644)
	if _, err := OpenPack(out); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), idx) {
		t.Fatalf("damaged index: %v", err)
	}
	if _, err := OpenPack(t.TempDir()); !errors.Is(err, ErrMissing) {
		t.Fatalf("not a pack: %v", err)
	}
}

// TestPackLists packs Caffe list files (train and val) and reads them
// back; a val label beyond train's classes is an error.
func TestPackLists(t *testing.T) {
	dir := smallFolder(t)
	lists := t.TempDir()
	os.WriteFile(filepath.Join(lists, "train.txt"), []byte("train/c001/i00000.jpg 1\ntrain/c000/i00001.jpg 0\ntrain/c002/i00002.jpg 2\n"), 0o644)
	os.WriteFile(filepath.Join(lists, "val.txt"), []byte("val/c002/i00000.jpg 2\n"), 0o644)
	os.WriteFile(filepath.Join(lists, "bad.txt"), []byte("val/c002/i00000.jpg 7\n"), 0o644)
	train, err := ReadListFile(filepath.Join(lists, "train.txt"), dir)
	if err != nil {
		t.Fatal(err)
	}
	val, _ := ReadListFile(filepath.Join(lists, "val.txt"), dir)
	out := filepath.Join(t.TempDir(), "pack")
	if _, err := PackLists(context.Background(), lists, train, val, out, PackConfig{}); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPack(out)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !slices.Equal(p.Train.List.Labels, []int32{1, 0, 2}) || p.Val.Len() != 1 || p.Val.List.File(0) != filepath.Join(dir, "val", "c002", "i00000.jpg") {
		t.Fatalf("train %v, val %+v", p.Train.List.Labels, p.Val.List)
	}
	bad, _ := ReadListFile(filepath.Join(lists, "bad.txt"), dir)
	if _, err := PackLists(context.Background(), lists, train, bad, filepath.Join(t.TempDir(), "p"), PackConfig{}); !errors.Is(err, ErrLabel) {
		t.Fatalf("val label beyond the classes: %v", err)
	}
}
