package data

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// ErrConfig: a LoaderConfig or Plan field is invalid; the message names it.
var ErrConfig = errors.New("invalid loader configuration")

// Source is where a learner's chunks come from: the job's Dispatcher in
// this process (Local), or the job's coordinator over the network.
type Source interface {
	// Next returns the learner's next chunk, or ErrEnd once the job's
	// data is done. With wait false it returns ErrIdle when no chunk is
	// available now; with wait true it waits for one (or for the end).
	Next(ctx context.Context, wait bool) (Chunk, error)
	// Complete reports that every mini-batch of c has been pushed.
	Complete(ctx context.Context, c Chunk) error
}

// Local is learner Learner's Source over a Dispatcher in this process.
type Local struct {
	D       *Dispatcher
	Learner int
}

// Next implements Source.
func (s Local) Next(ctx context.Context, wait bool) (Chunk, error) {
	for {
		changed := s.D.Changed()
		c, err := s.D.Next(s.Learner)
		if !errors.Is(err, ErrIdle) || !wait {
			return c, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Chunk{}, ctx.Err()
		}
	}
}

// Complete implements Source.
func (s Local) Complete(_ context.Context, c Chunk) error { return s.D.Complete(s.Learner, c) }

// LoaderConfig configures a Loader.
type LoaderConfig struct {
	Plan       Plan       // the job's plan: batch size, seed (its Images is the data set's size)
	Source     Source     // the learner's chunks
	Normalizer Normalizer // pixel → input mapping (see MeanNormalizer)
}

// Batch is one mini-batch. X holds μ normalised images in NCHW order
// (μ×C×H×W values), Labels their μ classes.
type Batch struct {
	X      []float32
	Labels []int32
	Epoch  int   // epoch the batch belongs to, from 0
	Index  int   // batch index within its epoch (see Plan)
	Chunk  Chunk // the chunk it belongs to
	Pos    int   // its position in the chunk, from 0
}

// Last reports whether b is the last mini-batch of its chunk.
func (b *Batch) Last() bool { return b.Pos == b.Chunk.Count-1 }

// Loader is a learner's stream of training mini-batches: the mini-batches
// of the chunks its Source hands out, in order (see Plan for which images
// each holds). A goroutine asks for the next chunk and fills the next
// batch while the caller works on the current one (two buffers, no
// allocation per batch).
//
// The caller reports each batch with Done once its gradient is pushed; the
// last batch of a chunk completes the chunk. When the Source has no chunk
// available now, Next returns ErrIdle once (after the batches already
// filled) and then waits for a chunk or the end; at the end it returns
// ErrEnd. A Loader is used by one goroutine; Close stops its producer.
type Loader struct {
	cfg    LoaderConfig
	waited atomic.Int64 // nanoseconds Next waited for a batch
	free   chan *Batch
	ready  chan item
	stop   context.CancelFunc
	exited chan struct{}
	cur    *Batch
	err    error // sticky: ErrEnd or the producer's failure
	close  sync.Once
}

// item is a filled batch or an event of the producer (err set).
type item struct {
	b   *Batch
	err error
}

// NewLoader validates cfg against ds and starts the prefetching goroutine.
func NewLoader(ds *Dataset, cfg LoaderConfig) (*Loader, error) {
	if err := checkNormalizer(ds, cfg.Normalizer); err != nil {
		return nil, err
	}
	z := cfg.Normalizer
	return startLoader(ds.N, ds.Source, ds.ImageLen(), 2, cfg, func(b *Batch, idx []int, _ int) error {
		il := ds.ImageLen()
		for j, img := range idx {
			z.Fill(ds, img, b.X[j*il:(j+1)*il])
			b.Labels[j] = ds.Labels[img]
		}
		return nil
	})
}

// NewImageLoader is NewLoader over an image set: each batch is decoded
// and augmented by a (a.Seed is set to the plan's seed) on p's threads,
// up to depth batches ahead of the caller (≥ 1). cfg.Normalizer is
// unused: a's Mean and Scale normalise. Memory: depth+1 batches of
// μ·3·H·W floats, beside the pipeline's own (see Pipeline).
func NewImageLoader(set *ImageSet, a Augment, p *Pipeline, depth int, cfg LoaderConfig) (*Loader, error) {
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", set.Source(), err)
	}
	if depth < 1 {
		return nil, fmt.Errorf("%w: prefetch depth must be ≥ 1, got %d", ErrConfig, depth)
	}
	a.Seed = cfg.Plan.Seed
	return startLoader(set.Len(), set.Source(), a.ImageLen(), depth+1, cfg, func(b *Batch, idx []int, epoch int) error {
		return p.Fill(set, &a, idx, epoch, b.X, b.Labels)
	})
}

// fillFunc writes the images idx (of the given epoch) into b's X and
// Labels.
type fillFunc func(b *Batch, idx []int, epoch int) error

// startLoader starts a loader over n images of il values each with bufs
// batch buffers.
func startLoader(n int, source string, il, bufs int, cfg LoaderConfig, fill fillFunc) (*Loader, error) {
	cfg.Plan.Images = n
	if err := cfg.Plan.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if cfg.Source == nil {
		return nil, fmt.Errorf("%w: no Source", ErrConfig)
	}
	ctx, stop := context.WithCancel(context.Background())
	l := &Loader{cfg: cfg, free: make(chan *Batch, bufs), ready: make(chan item, bufs), stop: stop, exited: make(chan struct{})}
	mu := cfg.Plan.Batch
	for range bufs {
		l.free <- &Batch{X: make([]float32, mu*il), Labels: make([]int32, mu)}
	}
	p := &producer{n: n, fill: fill, cfg: cfg, epoch: -1,
		base: rand.New(rand.NewPCG(cfg.Plan.Seed, 0x9e3779b97f4a7c15)).Perm(n), order: make([]int, n)}
	go p.run(ctx, l)
	return l, nil
}

// NewSingleLoader returns the loader of a lone learner that takes every
// chunk of p from a dispatcher of its own (p.Images is set to ds.N).
func NewSingleLoader(ds *Dataset, p Plan, z Normalizer) (*Loader, error) {
	p.Images = ds.N
	d, err := NewDispatcher(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ds.Source, err)
	}
	return NewLoader(ds, LoaderConfig{Plan: p, Source: Local{D: d}, Normalizer: z})
}

func checkNormalizer(ds *Dataset, z Normalizer) error {
	if z.Mean != nil && len(z.Mean) != ds.ImageLen() {
		return fmt.Errorf("%s: %w: mean image has %d values, images have %d", ds.Source, ErrShape, len(z.Mean), ds.ImageLen())
	}
	return nil
}

// Next returns the next mini-batch, valid until the following call of
// Next or Close (the caller must not keep it longer), or ErrIdle, ErrEnd,
// ctx's error or the Source's error.
func (l *Loader) Next(ctx context.Context) (*Batch, error) {
	if l.cur != nil {
		l.free <- l.cur
		l.cur = nil
	}
	if l.err != nil {
		return nil, l.err
	}
	var it item
	select {
	case it = <-l.ready:
	default:
		start := time.Now()
		select {
		case it = <-l.ready:
			l.waited.Add(int64(time.Since(start)))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if errors.Is(it.err, ErrIdle) {
		return nil, it.err
	}
	if it.err != nil {
		l.err = it.err
		return nil, it.err
	}
	l.cur = it.b
	return it.b, nil
}

// Waited returns the time Next has spent waiting for a batch to be
// filled (not for a chunk: an ErrIdle answer ends the wait). Safe to call
// from any goroutine.
func (l *Loader) Waited() time.Duration { return time.Duration(l.waited.Load()) }

// Done reports that the gradient of b, the batch Next returned last, has
// been pushed; on the last batch of a chunk it completes the chunk with
// the Source.
func (l *Loader) Done(ctx context.Context, b *Batch) error {
	if !b.Last() {
		return nil
	}
	return l.cfg.Source.Complete(ctx, b.Chunk)
}

// Close stops the prefetching goroutine and waits for it. The Loader must
// not be used afterwards. Close is idempotent.
func (l *Loader) Close() {
	l.close.Do(l.stop)
	<-l.exited
	l.cur = nil
}

// producer is the state of the prefetching goroutine.
type producer struct {
	n           int
	fill        fillFunc
	cfg         LoaderConfig
	base, order []int // the seed's permutation; the order of epoch
	epoch       int
}

func (p *producer) run(ctx context.Context, l *Loader) {
	defer close(l.exited)
	send := func(it item) bool {
		select {
		case l.ready <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		c, err := p.cfg.Source.Next(ctx, false)
		if errors.Is(err, ErrIdle) {
			if !send(item{err: err}) {
				return
			}
			c, err = p.cfg.Source.Next(ctx, true)
		}
		if err != nil {
			if ctx.Err() == nil {
				send(item{err: err})
			}
			return
		}
		for i := range c.Count {
			var b *Batch
			select {
			case b = <-l.free:
			case <-ctx.Done():
				return
			}
			if err := p.batch(b, c, i); err != nil {
				send(item{err: err})
				return
			}
			if !send(item{b: b}) {
				return
			}
		}
	}
}

// batch writes batch i of chunk c into b.
func (p *producer) batch(b *Batch, c Chunk, i int) error {
	if c.Epoch != p.epoch {
		copy(p.order, p.base)
		shuffleEpoch(p.order, p.cfg.Plan.Seed, c.Epoch)
		p.epoch = c.Epoch
	}
	mu, k := p.cfg.Plan.Batch, c.Batch(i)
	b.Epoch, b.Index, b.Chunk, b.Pos = c.Epoch, k, c, i
	return p.fill(b, p.order[k*mu:(k+1)*mu], c.Epoch)
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
