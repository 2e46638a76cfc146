package data

import (
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
)

// ErrConfig: a LoaderConfig field is invalid; the message names it.
var ErrConfig = errors.New("invalid loader configuration")

// LoaderConfig configures a Loader.
//
// Partitioning for λ learners: the data set is permuted once with a
// permutation drawn from Seed (the same for every learner), and learner r
// of λ takes the contiguous block r·N/λ … (r+1)·N/λ of that permutation as
// its shard, so shards are disjoint, cover the data set, differ in size by
// at most one image and are class-balanced in expectation. Each learner's
// epoch is one pass over its own shard, in an order drawn afresh each epoch
// from (Seed, r, epoch); all λ learners together see the data set once per
// epoch, as the paper's learners do with their partitions. With Learners
// ≤ 1 the one shard is the whole data set.
type LoaderConfig struct {
	Batch      int        // mini-batch size μ ≥ 1
	Seed       uint64     // shuffling seed
	Learner    int        // this learner's index r, 0 ≤ r < Learners
	Learners   int        // number of learners λ (0 means 1)
	Normalizer Normalizer // pixel → input mapping (see MeanNormalizer)
}

// Batch is one mini-batch. X holds μ normalised images in NCHW order
// (μ×C×H×W values), Labels their μ classes.
type Batch struct {
	X      []float32
	Labels []int32
	Epoch  int // epoch of the learner's shard this batch belongs to, from 0
	Index  int // position of the batch within its epoch, from 0
}

// Loader is an endless stream of training mini-batches over one learner's
// shard. Each epoch visits the shard in a fresh seeded order and yields
// ⌊shard/μ⌋ full batches; the remaining images (different ones each epoch)
// wait for a later epoch. A goroutine fills the next batch while the
// caller works on the current one (two buffers, no allocation per batch).
//
// A Loader is used by one goroutine; Close stops its producer.
type Loader struct {
	free, ready chan *Batch
	done        chan struct{}
	exited      chan struct{}
	cur         *Batch
	perEpoch    int
}

// NewLoader validates cfg against ds and starts the prefetching goroutine.
func NewLoader(ds *Dataset, cfg LoaderConfig) (*Loader, error) {
	if cfg.Learners <= 0 {
		cfg.Learners = 1
	}
	if cfg.Batch < 1 {
		return nil, fmt.Errorf("%w: Batch must be ≥ 1, got %d", ErrConfig, cfg.Batch)
	}
	if cfg.Learner < 0 || cfg.Learner >= cfg.Learners {
		return nil, fmt.Errorf("%w: Learner must be in [0, %d), got %d", ErrConfig, cfg.Learners, cfg.Learner)
	}
	if err := checkNormalizer(ds, cfg.Normalizer); err != nil {
		return nil, err
	}
	lo, hi := cfg.Learner*ds.N/cfg.Learners, (cfg.Learner+1)*ds.N/cfg.Learners
	if hi-lo < cfg.Batch {
		return nil, fmt.Errorf("%w: %s: shard %d of %d has %d images, fewer than the batch of %d",
			ErrConfig, ds.Source, cfg.Learner, cfg.Learners, hi-lo, cfg.Batch)
	}
	perm := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)).Perm(ds.N)
	base := perm[lo:hi:hi]

	l := &Loader{
		free:     make(chan *Batch, 2),
		ready:    make(chan *Batch, 2),
		done:     make(chan struct{}),
		exited:   make(chan struct{}),
		perEpoch: len(base) / cfg.Batch,
	}
	il := ds.ImageLen()
	for range 2 {
		l.free <- &Batch{X: make([]float32, cfg.Batch*il), Labels: make([]int32, cfg.Batch)}
	}
	p := &producer{ds: ds, cfg: cfg, base: base, order: make([]int, len(base)),
		src: rand.NewPCG(0, 0), perEpoch: l.perEpoch}
	p.rng = rand.New(p.src)
	go p.run(l)
	return l, nil
}

func checkNormalizer(ds *Dataset, z Normalizer) error {
	if z.Mean != nil && len(z.Mean) != ds.ImageLen() {
		return fmt.Errorf("%s: %w: mean image has %d values, images have %d", ds.Source, ErrShape, len(z.Mean), ds.ImageLen())
	}
	return nil
}

// BatchesPerEpoch is the number of batches in one epoch of this learner.
func (l *Loader) BatchesPerEpoch() int { return l.perEpoch }

// Next returns the next mini-batch. It stays valid until the following
// call of Next or Close; the caller must not keep it longer.
func (l *Loader) Next() *Batch {
	if l.cur != nil {
		l.free <- l.cur
	}
	l.cur = <-l.ready
	return l.cur
}

// Close stops the prefetching goroutine and waits for it. The Loader must
// not be used afterwards. Close is idempotent.
func (l *Loader) Close() {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	<-l.exited
	l.cur = nil
}

// producer is the state of the prefetching goroutine.
type producer struct {
	ds           *Dataset
	cfg          LoaderConfig
	base, order  []int
	src          *rand.PCG
	rng          *rand.Rand
	perEpoch     int
	epoch, index int
}

func (p *producer) run(l *Loader) {
	defer close(l.exited)
	p.shuffle()
	for {
		var b *Batch
		select {
		case b = <-l.free:
		case <-l.done:
			return
		}
		p.fill(b)
		select {
		case l.ready <- b:
		case <-l.done:
			return
		}
	}
}

// shuffle draws the order of the current epoch from (Seed, Learner, epoch)
// alone, so that any epoch can be reproduced without replaying earlier
// ones.
func (p *producer) shuffle() {
	p.src.Seed(p.cfg.Seed, uint64(p.cfg.Learner)<<32|uint64(uint32(p.epoch)))
	copy(p.order, p.base)
	p.rng.Shuffle(len(p.order), func(i, j int) { p.order[i], p.order[j] = p.order[j], p.order[i] })
}

func (p *producer) fill(b *Batch) {
	if p.index == p.perEpoch {
		p.epoch++
		p.index = 0
		p.shuffle()
	}
	il := p.ds.ImageLen()
	idx := p.order[p.index*p.cfg.Batch : (p.index+1)*p.cfg.Batch]
	for i, k := range idx {
		p.cfg.Normalizer.Fill(p.ds, k, b.X[i*il:(i+1)*il])
		b.Labels[i] = p.ds.Labels[k]
	}
	b.Epoch, b.Index = p.epoch, p.index
	p.index++
}

// Batches walks ds once in order, for evaluation: each step fills x with
// up to len(labels) normalised images and labels with their classes, and
// yields how many of them are valid. The last batch may be partial; its
// remaining rows are zeros with label 0, so a network built for
// len(labels) images can run on it and count only the first n rows.
// x must hold len(labels)·ds.ImageLen() values.
func Batches(ds *Dataset, z Normalizer, x []float32, labels []int32) iter.Seq[int] {
	return func(yield func(int) bool) {
		il, mu := ds.ImageLen(), len(labels)
		if mu == 0 || len(x) < mu*il {
			panic(fmt.Sprintf("data.Batches: x has %d values, need %d×%d", len(x), mu, il))
		}
		if err := checkNormalizer(ds, z); err != nil {
			panic("data.Batches: " + err.Error())
		}
		for start := 0; start < ds.N; start += mu {
			n := min(mu, ds.N-start)
			for i := 0; i < n; i++ {
				z.Fill(ds, start+i, x[i*il:(i+1)*il])
				labels[i] = ds.Labels[start+i]
			}
			clear(x[n*il : mu*il])
			clear(labels[n:])
			if !yield(n) {
				return
			}
		}
	}
}
