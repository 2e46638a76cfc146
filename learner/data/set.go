package data

import (
	"fmt"
	"iter"
)

// Set is a labelled data set as a job uses it, whatever holds it: a
// *Dataset in memory (MNIST, CIFAR-10, synthetic images) or *Images read
// from disk as needed (image folders, list files, packs). A learner
// streams its training mini-batches from it over the chunks its Source
// hands out (Loader); the evaluator walks it once in order (Eval). The
// normalisation is the caller's (a Normalizer: the one the job's
// coordinator decided, see Mean), so that every process of a job maps
// pixels to inputs alike. A Set is safe for concurrent use by any number
// of loaders and walks.
type Set interface {
	// Info describes the set.
	Info() SetInfo
	// Loader starts a learner's stream of training mini-batches (see
	// Loader and Plan); cfg.Normalizer maps pixels to inputs.
	Loader(cfg LoaderConfig) (*Loader, error)
	// Eval walks the set once in order, for evaluation, as Batches does:
	// each step fills x with up to len(labels) inputs normalised by z and
	// labels with their classes, and yields how many are valid (the rest
	// of a last, partial batch is zeros with label 0). A failure ends the
	// walk and is stored in *err.
	Eval(z Normalizer, x []float32, labels []int32, err *error) iter.Seq[int]
	// Mean returns the normalisation the set is trained with: the
	// per-pixel mean of a Dataset's training images, or the per-channel
	// mean of up to sample images of an image set (spread evenly through
	// it).
	Mean(sample int) (Normalizer, error)
	// Skips returns the images found unreadable or undecodable so far,
	// from the k-th on, in the order found (none for a Dataset).
	Skips(k int) []Skip
}

// SetInfo describes a Set.
type SetInfo struct {
	Name    string // the files it is read from, for messages
	Len     int    // images
	Classes int    // labels are 0 … Classes−1
	C, H, W int    // one input
}

// ImageLen is the number of values of one input, C·H·W.
func (i SetInfo) ImageLen() int { return i.C * i.H * i.W }

// CheckShape returns an error wrapping ErrShape, naming the set, unless
// its inputs are c×h×w and its classes fit into a network with the given
// number of outputs.
func (i SetInfo) CheckShape(c, h, w, classes int) error {
	if i.C != c || i.H != h || i.W != w {
		return fmt.Errorf("%s: %w: images are %d×%d×%d (C×H×W), the network takes %d×%d×%d",
			i.Name, ErrShape, i.C, i.H, i.W, c, h, w)
	}
	if i.Classes > classes {
		return fmt.Errorf("%s: %w: %d classes, the network has %d outputs", i.Name, ErrShape, i.Classes, classes)
	}
	return nil
}

var (
	_ Set = (*Dataset)(nil)
	_ Set = (*Images)(nil)
)

// Info implements Set.
func (d *Dataset) Info() SetInfo {
	return SetInfo{Name: d.Source, Len: d.N, Classes: d.Classes, C: d.C, H: d.H, W: d.W}
}

// Loader implements Set (NewLoader).
func (d *Dataset) Loader(cfg LoaderConfig) (*Loader, error) { return NewLoader(d, cfg) }

// Eval implements Set (Batches; it never fails).
func (d *Dataset) Eval(z Normalizer, x []float32, labels []int32, _ *error) iter.Seq[int] {
	return Batches(d, z, x, labels)
}

// Mean implements Set: MeanNormalizer of the whole set, whatever sample.
func (d *Dataset) Mean(int) (Normalizer, error) { return MeanNormalizer(d), nil }

// Skips implements Set: a Dataset has no bad images.
func (d *Dataset) Skips(int) []Skip { return nil }

// Images is an image set as a job reads it: each image decoded, resized,
// cropped and mirrored as Augment says on Pipeline's threads (shared by
// every loader and walk of a process), Depth batches ahead of each
// learner (see NewImageLoader). Augment's H and W are the network's
// input, Resize the shorter side images are resized to; Random and
// Mirror apply to training, evaluation takes the centre crop unmirrored.
// Augment's Mean and Scale are those of the Normalizer of each loader and
// walk, its Seed the plan's.
type Images struct {
	Set      *ImageSet
	Augment  Augment
	Pipeline *Pipeline
	Depth    int
}

// Info implements Set: 3×H×W inputs.
func (m *Images) Info() SetInfo {
	return SetInfo{Name: m.Set.Source(), Len: m.Set.Len(), Classes: m.Set.Classes(), C: 3, H: m.Augment.H, W: m.Augment.W}
}

// with returns m's augmentation normalised by z.
func (m *Images) with(z Normalizer) Augment {
	a := m.Augment
	a.Scale, a.Mean = z.Scale, z.Mean
	return a
}

// Loader implements Set (NewImageLoader).
func (m *Images) Loader(cfg LoaderConfig) (*Loader, error) {
	return NewImageLoader(m.Set, m.with(cfg.Normalizer), m.Pipeline, m.Depth, cfg)
}

// Eval implements Set over centre crops, unmirrored (ImageBatches).
func (m *Images) Eval(z Normalizer, x []float32, labels []int32, err *error) iter.Seq[int] {
	a := m.with(z)
	a.Random, a.Mirror = false, false
	if verr := a.Validate(); verr != nil {
		return func(func(int) bool) { *err = fmt.Errorf("%s: %w", m.Set.Source(), verr) }
	}
	return ImageBatches(m.Pipeline, m.Set, &a, x, labels, err)
}

// Mean implements Set: the per-channel mean of the centre crops of up to
// sample images (ChannelMean), spread over the input (ChannelMeanImage),
// subtracted from raw pixel values (Scale 1), as Caffe's ImageNet
// networks take them.
func (m *Images) Mean(sample int) (Normalizer, error) {
	if err := m.Augment.Validate(); err != nil {
		return Normalizer{}, fmt.Errorf("%s: %w", m.Set.Source(), err)
	}
	c, err := ChannelMean(m.Pipeline, m.Set, m.Augment, sample)
	if err != nil {
		return Normalizer{}, err
	}
	return Normalizer{Scale: 1, Mean: ChannelMeanImage(c, m.Augment.H, m.Augment.W)}, nil
}

// Skips implements Set (ImageSet.Skips).
func (m *Images) Skips(k int) []Skip { return m.Set.Skips(k) }

// Subset returns the first n images of a Dataset (Dataset.Subset), or n
// images spread evenly through an image set (ImageSet.Spread: its list is
// in class order); s itself when n ≤ 0 or n ≥ its size.
func Subset(s Set, n int) Set {
	if n <= 0 || n >= s.Info().Len {
		return s
	}
	switch s := s.(type) {
	case *Dataset:
		return s.Subset(n)
	case *Images:
		m := *s
		m.Set = s.Set.Spread(n)
		return &m
	}
	panic(fmt.Sprintf("data.Subset: %T", s))
}
