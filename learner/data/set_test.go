package data

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestImagesSet: an image set as a Set: the loader's batches are the
// pipeline's with the loader's normalisation, evaluation takes the
// centre crops unmirrored whatever the training augmentation, the mean
// is the per-channel mean spread over the input, and the bad files come
// from Skips once each, in the order found.
func TestImagesSet(t *testing.T) {
	dir := smallFolder(t)
	os.WriteFile(filepath.Join(dir, "train", "c001", "i00002.jpg"), []byte("no"), 0o644)
	train, _, err := ReadImageFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := newPipe(t, 2, false)
	m := &Images{Set: NewFolderSet(train), Augment: Augment{H: 8, W: 8, Resize: 10, Random: true, Mirror: true}, Pipeline: p, Depth: 1}
	info := m.Info()
	if info.Len != 12 || info.Classes != 3 || info.C != 3 || info.H != 8 || info.ImageLen() != 192 || info.Name != filepath.Join(dir, "train") {
		t.Fatalf("info %+v", info)
	}
	z, err := m.Mean(0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ChannelMean(p, m.Set, m.Augment, 0)
	if err != nil {
		t.Fatal(err)
	}
	if z.Scale != 1 || !slices.Equal(z.Mean, ChannelMeanImage(c, 8, 8)) {
		t.Fatalf("mean %v … scale %v, want %v", z.Mean[:2], z.Scale, c)
	}

	// The loader: plan seed 5, its first batch against Fill with the
	// same augmentation and normalisation.
	plan := Plan{Images: 12, Batch: 4, Chunk: 1, Epochs: 1, Seed: 5}
	d, err := NewDispatcher(plan)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Loader(LoaderConfig{Plan: plan, Source: Local{D: d}, Normalizer: z})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b, err := l.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	a := m.Augment
	a.Scale, a.Mean, a.Seed = z.Scale, z.Mean, 5
	x, labels := make([]float32, 4*192), make([]int32, 4)
	if err := p.Fill(m.Set, &a, EpochOrder(5, 0, 12)[:4], 0, x, labels); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.X, x) || !slices.Equal(b.Labels, labels) {
		t.Fatal("the loader's first batch is not the pipeline's")
	}

	// Evaluation: centre crops, unmirrored, normalised by z.
	var werr error
	var got []float32
	for n := range m.Eval(z, x, labels, &werr) {
		got = append(got, x[:n*192]...)
	}
	centre := Augment{H: 8, W: 8, Resize: 10, Scale: 1, Mean: z.Mean}
	want := make([]float32, 12*192)
	idx := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	if err := p.Fill(m.Set, &centre, idx, 0, want, make([]int32, 12)); err != nil || werr != nil {
		t.Fatal(err, werr)
	}
	if !slices.Equal(got, want) {
		t.Fatal("evaluation does not take the centre crops unmirrored")
	}
	skips := m.Skips(0)
	if len(skips) != 1 || skips[0].File != filepath.Join(dir, "train", "c001", "i00002.jpg") || m.Skips(1) != nil {
		t.Fatalf("skips %+v", skips)
	}

	// A subset spread over the classes.
	sub := Subset(m, 6).(*Images)
	if sub.Info().Len != 6 || !slices.Equal(sub.Set.List.Labels, []int32{0, 0, 1, 1, 2, 2}) || m.Info().Len != 12 {
		t.Fatalf("subset labels %v", sub.Set.List.Labels)
	}
	if Subset(m, 0) != Set(m) || Subset(m, 12) != Set(m) {
		t.Fatal("a subset of all images is not the set")
	}
}

// TestDatasetSet: a Dataset as a Set walks as Batches does, has its
// per-pixel mean and no bad images.
func TestDatasetSet(t *testing.T) {
	ds := Synthetic(10, 1, 4, 4, 3, 1)
	var s Set = ds
	if i := s.Info(); i.Len != 10 || i.Classes != 3 || i.ImageLen() != 16 {
		t.Fatalf("info %+v", i)
	}
	z, _ := s.Mean(5)
	if !slices.Equal(z.Mean, MeanNormalizer(ds).Mean) || s.Skips(0) != nil {
		t.Fatal("mean or skips")
	}
	x, labels := make([]float32, 4*16), make([]int32, 4)
	var err error
	var ns []int
	for n := range s.Eval(z, x, labels, &err) {
		ns = append(ns, n)
	}
	if !slices.Equal(ns, []int{4, 4, 2}) || err != nil {
		t.Fatalf("batches %v, %v", ns, err)
	}
	if sub := Subset(s, 4).(*Dataset); sub.N != 4 || !slices.Equal(sub.Labels, ds.Labels[:4]) {
		t.Fatalf("subset %d", sub.N)
	}
	if err := s.Info().CheckShape(1, 4, 4, 2); !errors.Is(err, ErrShape) {
		t.Fatalf("3 classes into 2 outputs: %v", err)
	}
}

// TestCentreMirror: with Mirror, centre crops are mirrored too (about
// half of them, as Caffe's mirror does), each the unmirrored crop
// flipped left to right.
func TestCentreMirror(t *testing.T) {
	train, _, err := ReadImageFolder(smallFolder(t))
	if err != nil {
		t.Fatal(err)
	}
	set, p := NewFolderSet(train), newPipe(t, 2, false)
	plain, mirror := Augment{H: 8, W: 8, Resize: 10, Scale: 1, Seed: 3}, Augment{H: 8, W: 8, Resize: 10, Scale: 1, Seed: 3, Mirror: true}
	idx := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	x, y := make([]float32, 12*192), make([]float32, 12*192)
	p.Fill(set, &plain, idx, 0, x, make([]int32, 12))
	p.Fill(set, &mirror, idx, 0, y, make([]int32, 12))
	flipped := 0
	for k := range 12 {
		a, b := x[k*192:(k+1)*192], y[k*192:(k+1)*192]
		if slices.Equal(a, b) {
			continue
		}
		flipped++
		for r := range 3 * 8 {
			for c := range 8 {
				if a[r*8+c] != b[r*8+7-c] {
					t.Fatalf("image %d: mirrored crop is not the crop flipped (row %d, column %d)", k, r, c)
				}
			}
		}
	}
	if flipped < 2 || flipped > 10 {
		t.Errorf("%d of 12 centre crops mirrored", flipped)
	}
}
