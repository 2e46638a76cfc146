package data

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/kernels"
)

// smallFolder writes a folder of 3 classes × 4 training and 2 validation
// JPEGs of about 40×30 pixels.
func smallFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := GenerateImageFolder(dir, FolderGen{Classes: 3, Train: 4, Val: 2, W: 40, H: 30, Vary: 0.2, Quality: 90, Noise: 10, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReadImageFolder(t *testing.T) {
	dir := smallFolder(t)
	// Files that are not images, hidden files and deeper folders.
	os.WriteFile(filepath.Join(dir, "train", "c001", "notes.txt"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "train", "c001", ".hidden.jpg"), []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(dir, "train", "c002", "deep", "er"), 0o755)
	b, _ := os.ReadFile(filepath.Join(dir, "train", "c002", "i00000.jpg"))
	os.WriteFile(filepath.Join(dir, "train", "c002", "deep", "er", "z.JPEG"), b, 0o644)
	train, val, err := ReadImageFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(train.Classes, []string{"c000", "c001", "c002"}) || train.Len() != 13 || val.Len() != 6 {
		t.Fatalf("classes %v, %d training and %d validation images", train.Classes, train.Len(), val.Len())
	}
	if train.Paths[8] != "c002/deep/er/z.JPEG" || train.Labels[8] != 2 || train.Labels[3] != 0 || train.Labels[4] != 1 {
		t.Fatalf("paths %v labels %v", train.Paths, train.Labels)
	}
	if !sameClasses(train, val) || val.Labels[5] != 2 {
		t.Fatalf("val classes %v labels %v", val.Classes, val.Labels)
	}
}

func TestFolderErrors(t *testing.T) {
	dir := smallFolder(t)
	os.MkdirAll(filepath.Join(dir, "val", "zebra"), 0o755)
	os.WriteFile(filepath.Join(dir, "val", "zebra", "a.jpg"), []byte("x"), 0o644)
	if _, _, err := ReadImageFolder(dir); !errors.Is(err, ErrLabel) || !strings.Contains(err.Error(), filepath.Join(dir, "val", "zebra")) {
		t.Fatalf("validation class absent from training: %v", err)
	}
	if classes, err := FolderClasses(filepath.Join(dir, "train")); err != nil || !slices.Equal(classes, []string{"c000", "c001", "c002"}) {
		t.Fatalf("FolderClasses: %v, %v", classes, err)
	}
	os.MkdirAll(filepath.Join(dir, "train", "empty", ".hidden"), 0o755)
	os.WriteFile(filepath.Join(dir, "train", "empty", ".hidden", "a.jpg"), []byte("x"), 0o644)
	if _, err := ReadFolderSplit(filepath.Join(dir, "train"), nil); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), filepath.Join(dir, "train", "empty")) {
		t.Fatalf("empty class folder: %v", err)
	}
	if _, err := FolderClasses(filepath.Join(dir, "train")); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), filepath.Join(dir, "train", "empty")) {
		t.Fatalf("empty class folder, FolderClasses: %v", err)
	}
	if _, err := ReadFolderSplit(t.TempDir(), nil); !errors.Is(err, ErrFormat) {
		t.Fatalf("no class folders: %v", err)
	}
	if _, err := FolderClasses(t.TempDir()); !errors.Is(err, ErrFormat) {
		t.Fatalf("no class folders, FolderClasses: %v", err)
	}
	if _, _, err := ReadImageFolder(filepath.Join(dir, "nothing")); !errors.Is(err, ErrMissing) {
		t.Fatalf("missing folder: %v", err)
	}
}

func TestReadListFile(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "train.txt")
	os.WriteFile(list, []byte("a/x.jpg 2\n\nb c/y y.png 0\r\n/abs/z.jpg 1\n"), 0o644)
	l, err := ReadListFile(list, "/root")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.Paths, []string{"a/x.jpg", "b c/y y.png", "/abs/z.jpg"}) || !slices.Equal(l.Labels, []int32{2, 0, 1}) || len(l.Classes) != 3 {
		t.Fatalf("%+v", l)
	}
	if l.File(0) != filepath.Join("/root", "a", "x.jpg") || l.File(2) != "/abs/z.jpg" {
		t.Fatalf("files %s %s", l.File(0), l.File(2))
	}
	for _, bad := range []struct{ text, line string }{{"a.jpg 1\nb.jpg x\n", ":2:"}, {"a.jpg -1\n", ":1:"}, {"ok.jpg 0\nnolabel\n", ":2:"}} {
		os.WriteFile(list, []byte(bad.text), 0o644)
		if _, err := ReadListFile(list, dir); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), list+bad.line) {
			t.Errorf("%q: %v, want an ErrFormat naming %s%s", bad.text, err, list, bad.line)
		}
	}
}

func newPipe(t *testing.T, threads int, pureGo bool) *Pipeline {
	p, err := NewPipeline(PipelineConfig{Threads: threads, PureGo: pureGo})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// epochBatches reads every batch of one epoch from a loader over set.
func epochBatches(t *testing.T, set *ImageSet, a Augment, p *Pipeline) ([][]float32, [][]int32) {
	t.Helper()
	plan := Plan{Batch: 4, Chunk: 2, Epochs: 1, Seed: 7}
	plan.Images = set.Len()
	d, err := NewDispatcher(plan)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewImageLoader(set, a, p, 2, LoaderConfig{Plan: plan, Source: Local{D: d}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var xs [][]float32
	var ls [][]int32
	ctx, cancel := context.WithTimeout(context.Background(), 30e9)
	defer cancel()
	for {
		b, err := l.Next(ctx)
		if errors.Is(err, ErrEnd) {
			return xs, ls
		}
		if errors.Is(err, ErrIdle) {
			continue
		}
		if err != nil {
			n, first := set.Skipped()
			t.Fatal(err, n, first)
		}
		xs, ls = append(xs, slices.Clone(b.X)), append(ls, slices.Clone(b.Labels))
		if err := l.Done(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestImageLoaderSeeded: the batches of a seeded job do not depend on the
// number of threads, and hold the labels of their images.
func TestImageLoaderSeeded(t *testing.T) {
	train, _, err := ReadImageFolder(smallFolder(t))
	if err != nil {
		t.Fatal(err)
	}
	set := NewFolderSet(train)
	a := Augment{H: 16, W: 16, Resize: 20, Random: true, Mirror: true, Scale: 1}
	x1, l1 := epochBatches(t, set, a, newPipe(t, 1, false))
	x3, l3 := epochBatches(t, set, a, newPipe(t, 3, false))
	if len(x1) != 3 || !slices.EqualFunc(x1, x3, slices.Equal) || !slices.EqualFunc(l1, l3, slices.Equal) {
		t.Fatalf("%d batches; batches differ between 1 and 3 threads", len(x1))
	}
	order := EpochOrder(7, 0, set.Len())
	for b, labels := range l1 {
		for j, l := range labels {
			if want := train.Labels[order[4*b+j]]; l != want {
				t.Fatalf("batch %d image %d: label %d, want %d", b, j, l, want)
			}
		}
	}
	if n, _ := set.Skipped(); n != 0 {
		t.Fatalf("%d images skipped", n)
	}
}

// TestImageTransform checks one image through the pipeline against the
// steps done by hand: Go's decoder, the resize to the shorter side, the
// centre crop and the mean.
func TestImageTransform(t *testing.T) {
	train, _, err := ReadImageFolder(smallFolder(t))
	if err != nil {
		t.Fatal(err)
	}
	set := NewFolderSet(train)
	mean := ChannelMeanImage([3]float32{10, 20, 30}, 12, 14)
	a := Augment{H: 12, W: 14, Resize: 18, Scale: 1, Mean: mean}
	x, labels := make([]float32, a.ImageLen()), make([]int32, 1)
	if err := newPipe(t, 1, true).Fill(set, &a, []int{5}, 0, x, labels); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(train.File(5))
	m, err := newDecoder(true).decode(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	rw, rh := 18, m.H*18/m.W
	if m.W > m.H {
		rw, rh = m.W*18/m.H, 18
	}
	x0, y0 := (rw-14+1)/2, (rh-12+1)/2 // round half up; the sizes here make it exact
	ax, ay := kernels.NewResizeAxis(m.W, rw, x0, 14), kernels.NewResizeAxis(m.H, rh, y0, 12)
	want := make([]float32, a.ImageLen())
	kernels.ReferenceImages().ResizeCHW(m.Pix, m.W, m.H, ax, ay, false, 1, mean, want, make([]byte, kernels.ImageTmpLen(ax, ay)))
	if !slices.Equal(x, want) || labels[0] != train.Labels[5] {
		t.Fatalf("pipeline and hand computation differ (image %dx%d → %dx%d, label %d)", m.W, m.H, rw, rh, labels[0])
	}
}

// TestBadImagesSkipped: undecodable files are replaced, counted once,
// named, and found by Scan.
func TestBadImagesSkipped(t *testing.T) {
	dir := smallFolder(t)
	good, _ := os.ReadFile(filepath.Join(dir, "train", "c000", "i00000.jpg"))
	bad := map[string][]byte{"c000/i00001.jpg": nil, "c001/i00002.jpg": good[:len(good)/2], "c002/i00003.jpg": []byte("text")}
	for name, b := range bad {
		os.WriteFile(filepath.Join(dir, "train", filepath.FromSlash(name)), b, 0o644)
	}
	train, _, err := ReadImageFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	set := NewFolderSet(train)
	a := Augment{H: 16, W: 16, Resize: 16, Random: true, Scale: 1}
	xs, ls := epochBatches(t, set, a, newPipe(t, 2, false))
	epochBatches(t, set, a, newPipe(t, 2, false))
	n, first := set.Skipped()
	if n != 3 || len(first) != 3 {
		t.Fatalf("skipped %d (%v), want the 3 bad files", n, first)
	}
	for _, msg := range first {
		if !strings.Contains(msg, filepath.Join(dir, "train")) {
			t.Errorf("message %q names no file", msg)
		}
	}
	// A batch holding a substitute carries the substitute's label: the
	// image after a bad one (i00001 of class 0 → i00002 of class 0).
	if len(xs) != 3 || len(ls) != 3 {
		t.Fatalf("%d batches", len(xs))
	}
	errs := set.Scan(2)
	if len(errs) != 3 {
		t.Fatalf("Scan found %d bad files: %v", len(errs), errs)
	}
	for _, err := range errs {
		if !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), dir) {
			t.Errorf("scan error %v", err)
		}
	}
}

// TestChannelMean: the mean of a folder's centre crops.
func TestChannelMean(t *testing.T) {
	train, _, err := ReadImageFolder(smallFolder(t))
	if err != nil {
		t.Fatal(err)
	}
	set := NewFolderSet(train)
	a := Augment{H: 8, W: 8, Resize: 8, Scale: 1}
	p := newPipe(t, 2, false)
	m, err := ChannelMean(p, set, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	x, labels := make([]float32, set.Len()*a.ImageLen()), make([]int32, set.Len())
	idx := make([]int, set.Len())
	for i := range idx {
		idx[i] = i
	}
	p.Fill(set, &a, idx, 0, x, labels)
	for c := range 3 {
		var s float64
		for k := range set.Len() {
			for _, v := range x[k*192+c*64 : k*192+(c+1)*64] {
				s += float64(v)
			}
		}
		if want := s / float64(set.Len()*64); abs(float64(m[c])-want) > 1e-3 {
			t.Fatalf("channel %d: mean %v, want %v", c, m[c], want)
		}
	}
}

func abs(v float64) float64 { return max(v, -v) }

// TestMeasurePipeline counts every image of every pass and reports
// positive rates; bad arguments are errors.
func TestMeasurePipeline(t *testing.T) {
	train, _, err := ReadImageFolder(smallFolder(t))
	if err != nil {
		t.Fatal(err)
	}
	set := NewFolderSet(train)
	a := Augment{H: 16, W: 16, Resize: 20, Random: true, Mirror: true, Scale: 1}
	m, err := MeasurePipeline(set, a, PipelineConfig{Threads: 2}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if m.Images != 3*set.Len() || m.Threads != 2 || m.ImagesPerSec() <= 0 || m.Wall <= 0 {
		t.Fatalf("%+v", m)
	}
	if _, err := MeasurePipeline(set, a, PipelineConfig{Threads: 1}, 0); !errors.Is(err, ErrConfig) {
		t.Fatalf("no passes: %v", err)
	}
	a.Resize = 8
	if _, err := MeasurePipeline(set, a, PipelineConfig{Threads: 1}, 1); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad augmentation: %v", err)
	}
}
