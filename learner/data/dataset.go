package data

import (
	"errors"
	"fmt"
)

// Sentinel errors wrapped by every error this package returns for bad
// input; test them with errors.Is. The message around them names the file
// (or data set) and what is wrong.
var (
	// ErrMissing: a file or folder does not exist or cannot be opened.
	ErrMissing = errors.New("missing data file")
	// ErrFormat: a file is not of the expected format (wrong magic number,
	// bad header, trailing bytes, image and label files that disagree).
	ErrFormat = errors.New("bad data format")
	// ErrTruncated: a file ends before the data its header announces.
	ErrTruncated = errors.New("truncated data file")
	// ErrLabel: a label is outside [0, classes).
	ErrLabel = errors.New("label out of range")
	// ErrShape: images do not have the shape a network expects.
	ErrShape = errors.New("image shape mismatch")
)

// Dataset is a labelled image data set held in memory as bytes.
//
// Pixels holds N images of C×H×W bytes each in NCHW order: pixel (n, c, h,
// w) is Pixels[((n·C+c)·H+h)·W+w]. Labels holds N class indices in
// [0, Classes). Scale is the factor the format's convention applies to a
// pixel before mean subtraction (1/256 for MNIST, 1 for CIFAR-10).
// A Dataset is read-only once built and may be shared by any number of
// loaders and goroutines.
type Dataset struct {
	Source  string // the file(s) it was read from, for messages
	N       int
	C, H, W int
	Classes int
	Scale   float32
	Pixels  []uint8
	Labels  []int32
}

// ImageLen is the number of values of one image, C·H·W.
func (d *Dataset) ImageLen() int { return d.C * d.H * d.W }

// CheckShape returns an error wrapping ErrShape, naming the data set's
// source, unless its images are c×h×w and its classes fit into a network
// with the given number of outputs (SetInfo.CheckShape).
func (d *Dataset) CheckShape(c, h, w, classes int) error {
	return d.Info().CheckShape(c, h, w, classes)
}

// Subset returns a data set holding the first n images of d (all of them
// if n ≥ d.N). It shares d's memory.
func (d *Dataset) Subset(n int) *Dataset {
	if n >= d.N {
		return d
	}
	return d.Slice(0, n)
}

// Slice returns a data set holding images lo … hi−1 of d. It shares d's
// memory.
func (d *Dataset) Slice(lo, hi int) *Dataset {
	s := *d
	s.N = hi - lo
	s.Pixels = d.Pixels[lo*d.ImageLen() : hi*d.ImageLen()]
	s.Labels = d.Labels[lo:hi]
	return &s
}

// checkLabels returns an ErrLabel error naming the file and the first
// label outside [0, classes).
func checkLabels(file string, labels []int32, classes int) error {
	for i, l := range labels {
		if l < 0 || int(l) >= classes {
			return fmt.Errorf("%s: %w: label %d of item %d, want 0…%d", file, ErrLabel, l, i, classes-1)
		}
	}
	return nil
}

// Normalizer maps the bytes of a Dataset to network inputs:
// x[i] = Scale·pixel[i] − Mean[i], with Mean one value per pixel of an
// image (C·H·W values, NCHW order within the image), or nil for no mean
// subtraction.
type Normalizer struct {
	Scale float32
	Mean  []float32
}

// MeanNormalizer returns the per-pixel mean subtraction of the paper,
// computed on train (normally the training set): Scale is train.Scale and
// Mean[i] the mean over all images of Scale·pixel i. Apply the result to
// both training and test set.
func MeanNormalizer(train *Dataset) Normalizer {
	il := train.ImageLen()
	sum := make([]float64, il)
	for n := 0; n < train.N; n++ {
		img := train.Pixels[n*il : (n+1)*il]
		for i, p := range img {
			sum[i] += float64(p)
		}
	}
	mean := make([]float32, il)
	if train.N > 0 {
		f := float64(train.Scale) / float64(train.N)
		for i, s := range sum {
			mean[i] = float32(s * f)
		}
	}
	return Normalizer{Scale: train.Scale, Mean: mean}
}

// Fill writes image idx of d, normalised, into x (d.ImageLen() values).
func (z *Normalizer) Fill(d *Dataset, idx int, x []float32) {
	il := d.ImageLen()
	img := d.Pixels[idx*il : (idx+1)*il]
	x = x[:il]
	s := z.Scale
	if z.Mean == nil {
		for i, p := range img {
			x[i] = s * float32(p)
		}
		return
	}
	mean := z.Mean[:il]
	for i, p := range img {
		x[i] = s*float32(p) - mean[i]
	}
}
