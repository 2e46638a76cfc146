package data

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
)

// Errors of the chunk dispatch.
var (
	// ErrEnd: there is no more data for this learner: every chunk of the
	// job has been completed or is held by the learner itself.
	ErrEnd = errors.New("no more data: the job's epochs are done")
	// ErrIdle: no chunk is available now, but chunks handed to other
	// learners may still come back (a learner lost); ask again to wait.
	ErrIdle = errors.New("no chunk available now")
	// ErrChunk: a chunk was completed or released by a learner that does
	// not hold it.
	ErrChunk = errors.New("chunk not held by this learner")
)

// Plan describes how a job's training data is handed out: the order of
// every epoch, its mini-batches, and their grouping into chunks.
//
// Epoch order: the data set is permuted once with a permutation drawn
// from Seed, and epoch e visits that permutation in an order drawn from
// (Seed, e) alone (EpochOrder), so any learner can rebuild any epoch
// without replaying earlier ones. Mini-batch b of an epoch holds the
// images at positions [b·μ, (b+1)·μ) of its order; an epoch has P =
// BatchesPerEpoch mini-batches, and the images beyond P·μ wait for a later
// epoch (different ones each epoch). A single learner taking the chunks
// in order therefore sees the mini-batches of a plain shuffled loader.
//
// Chunks: an epoch's mini-batches are cut into blocks of Group·Chunk
// consecutive batches (the last block shorter), and each block into Group
// chunks: chunk s of the block starting at batch b0 holds batches b0+s,
// b0+s+Group, b0+s+2·Group, … (Count of them, Stride = Group). With Group =
// 1 (softsync) a chunk is Chunk consecutive batches. With Group = λ
// (hardsync), the λ learners each take one chunk of a block and push
// their i-th batches in the same round, so that round holds the Group
// consecutive batches b0+i·Group … b0+(i+1)·Group−1: exactly the images of
// one mini-batch of μλ of a single learner.
type Plan struct {
	Images     int    // N, images in the training set, ≥ 1
	Batch      int    // μ ≥ 1
	Group      int    // batches that form one round: λ under hardsync, 1 under softsync (0 means 1)
	Chunk      int    // mini-batches per chunk, ≥ 1
	Epochs     int    // ≥ 0
	MaxBatches int    // > 0: the job ends after this many mini-batches (rounded down to a multiple of Group); 0: no limit
	Seed       uint64 // epoch orders
}

// Validate returns an error wrapping ErrConfig that names the first bad
// field.
func (p *Plan) Validate() error {
	g := max(p.Group, 1)
	switch {
	case p.Batch < 1:
		return fmt.Errorf("%w: Batch must be ≥ 1, got %d", ErrConfig, p.Batch)
	case p.Group < 0:
		return fmt.Errorf("%w: Group must be ≥ 0, got %d", ErrConfig, p.Group)
	case p.Chunk < 1:
		return fmt.Errorf("%w: Chunk must be ≥ 1, got %d", ErrConfig, p.Chunk)
	case p.Epochs < 0 || p.MaxBatches < 0:
		return fmt.Errorf("%w: Epochs and MaxBatches must be ≥ 0, got %d and %d", ErrConfig, p.Epochs, p.MaxBatches)
	case p.Images < p.Batch*g:
		return fmt.Errorf("%w: %d images, fewer than one round of %d mini-batches of %d", ErrConfig, p.Images, g, p.Batch)
	}
	return nil
}

// BatchesPerEpoch returns P = ⌊N/(μ·Group)⌋·Group.
func (p *Plan) BatchesPerEpoch() int {
	g := max(p.Group, 1)
	return p.Images / (p.Batch * g) * g
}

// Total returns the mini-batches of the whole job: Epochs·P, or fewer
// with MaxBatches.
func (p *Plan) Total() int {
	t := p.Epochs * p.BatchesPerEpoch()
	if p.MaxBatches > 0 {
		g := max(p.Group, 1)
		t = min(t, p.MaxBatches/g*g)
	}
	return t
}

// EpochOrder returns the order in which epoch e visits the n images of a
// data set under seed (see Plan).
func EpochOrder(seed uint64, epoch, n int) []int {
	order := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)).Perm(n)
	shuffleEpoch(order, seed, epoch)
	return order
}

// shuffleEpoch shuffles the base permutation in place into epoch's order.
func shuffleEpoch(order []int, seed uint64, epoch int) {
	rng := rand.New(rand.NewPCG(seed, uint64(uint32(epoch))))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
}

// Chunk is a set of mini-batches of one epoch handed to one learner: the
// batches First, First+Stride, …, First+(Count−1)·Stride. (Epoch, First)
// identifies it within a job.
type Chunk struct {
	Epoch  int `json:"epoch"` // 0-based
	First  int `json:"first"` // batch index within the epoch
	Count  int `json:"count"` // ≥ 1
	Stride int `json:"stride"`
}

// Batch returns the epoch index of the chunk's i-th mini-batch.
func (c Chunk) Batch(i int) int { return c.First + i*c.Stride }

func (c Chunk) key() [2]int { return [2]int{c.Epoch, c.First} }

// DispatchStats counts a dispatcher's chunks.
type DispatchStats struct {
	Handed     int `json:"handed"` // chunks handed out, reassigned ones included
	Completed  int `json:"completed"`
	Reassigned int `json:"reassigned"` // chunks released by a lost learner and handed out again
	Batches    int `json:"batches"`    // mini-batches of completed chunks, as handed out
}

// Dispatcher hands out a Plan's chunks to learners on request (dynamic
// sharding): chunks released by a lost learner go first, then new ones in
// order. The job's data ends when every chunk has been completed. It is
// safe for concurrent use.
type Dispatcher struct {
	plan    Plan
	per     int // P
	total   int
	mu      sync.Mutex
	next    int               // global index of the first batch not yet cut into chunks
	pending []Chunk           // released chunks, handed out first
	held    map[[2]int]holder // outstanding chunks
	stats   DispatchStats
	changed chan struct{} // closed and replaced on every change
}

type holder struct {
	learner int
	chunk   Chunk
}

// NewDispatcher validates p and returns its dispatcher.
func NewDispatcher(p Plan) (*Dispatcher, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Group = max(p.Group, 1)
	return &Dispatcher{plan: p, per: p.BatchesPerEpoch(), total: p.Total(), held: map[[2]int]holder{}, changed: make(chan struct{})}, nil
}

// Plan returns the dispatcher's plan.
func (d *Dispatcher) Plan() Plan { return d.plan }

// Next hands learner its next chunk. It returns ErrIdle when none is
// available but other learners still hold chunks (one that is lost gives
// its chunks back; see Release), and ErrEnd when nothing is left for
// learner: every chunk is completed or held by learner itself.
func (d *Dispatcher) Next(learner int) (Chunk, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var c Chunk
	switch {
	case len(d.pending) > 0:
		c, d.pending = d.pending[0], d.pending[1:]
		d.stats.Reassigned++
	case d.next < d.total:
		c = d.cut()
	case d.heldByOthers(learner):
		return Chunk{}, ErrIdle
	default:
		return Chunk{}, ErrEnd
	}
	d.held[c.key()] = holder{learner, c}
	d.stats.Handed++
	return c, nil
}

// cut returns the chunk that starts at d.next and advances d.next past
// the last chunk of its block once every slot of the block is handed out.
func (d *Dispatcher) cut() Chunk {
	g, k := d.plan.Group, d.plan.Chunk
	e, b := d.next/d.per, d.next%d.per
	// The block of batch b: starts at b0, holds size batches.
	slot := b % g
	b0 := b - slot
	size := min(g*k, d.per-b0, d.total-(e*d.per+b0))
	c := Chunk{Epoch: e, First: b0 + slot, Count: size / g, Stride: g}
	if slot+1 < g {
		d.next++
	} else {
		d.next = e*d.per + b0 + size
	}
	return c
}

func (d *Dispatcher) heldByOthers(learner int) bool {
	for _, h := range d.held {
		if h.learner != learner {
			return true
		}
	}
	return false
}

// Done reports whether every chunk of the job has been completed.
func (d *Dispatcher) Done() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.next >= d.total && len(d.pending) == 0 && len(d.held) == 0
}

// Complete records that learner has pushed every mini-batch of the chunk
// it was handed as (c.Epoch, c.First); the counters take that chunk's
// Count, whatever c.Count says.
func (d *Dispatcher) Complete(learner int, c Chunk) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.held[c.key()]
	if !ok || h.learner != learner {
		return fmt.Errorf("%w: learner %d completed chunk %+v", ErrChunk, learner, c)
	}
	delete(d.held, c.key())
	d.stats.Completed++
	d.stats.Batches += h.chunk.Count
	d.notify()
	return nil
}

// Release gives back every chunk learner holds (it is lost): they are
// handed out again before any new chunk. It returns how many.
func (d *Dispatcher) Release(learner int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for k, h := range d.held {
		if h.learner == learner {
			delete(d.held, k)
			d.pending = append(d.pending, h.chunk)
			n++
		}
	}
	if n > 0 {
		// Oldest first, whatever the map order: by (epoch, first batch).
		slices.SortFunc(d.pending, func(a, b Chunk) int {
			return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.First, b.First))
		})
		d.notify()
	}
	return n
}

// DispatchState is a dispatcher's position, for checkpoints: the first
// batch not yet cut into chunks, the chunks not completed (handed out or
// waiting to be), and the counters.
type DispatchState struct {
	Next    int           `json:"next"`
	Pending []Chunk       `json:"pending"`
	Stats   DispatchStats `json:"stats"`
}

// State returns the dispatcher's position.
func (d *Dispatcher) State() DispatchState {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := DispatchState{Next: d.next, Pending: slices.Clone(d.pending), Stats: d.stats}
	for _, h := range d.held {
		st.Pending = append(st.Pending, h.chunk)
	}
	slices.SortFunc(st.Pending, func(a, b Chunk) int {
		return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.First, b.First))
	})
	if st.Pending == nil {
		st.Pending = []Chunk{}
	}
	return st
}

// Restore resumes the dispatcher from a state taken under the same plan:
// the chunks that were held are handed out again first (their learners
// are gone), counted as reassigned.
func (d *Dispatcher) Restore(st DispatchState) error {
	if st.Next < 0 || st.Next > d.total {
		return fmt.Errorf("%w: dispatch position %d outside the job's %d mini-batches", ErrConfig, st.Next, d.total)
	}
	for _, c := range st.Pending {
		if c.Epoch < 0 || c.First < 0 || c.Count < 1 || c.Stride != d.plan.Group || c.Epoch*d.per+c.Batch(c.Count-1) >= d.total {
			return fmt.Errorf("%w: chunk %+v does not belong to the job's plan", ErrConfig, c)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next, d.pending, d.stats, d.held = st.Next, slices.Clone(st.Pending), st.Stats, map[[2]int]holder{}
	d.notify()
	return nil
}

// Stats returns the dispatcher's counters.
func (d *Dispatcher) Stats() DispatchStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Changed returns a channel closed at the next change that may turn an
// ErrIdle answer into a chunk or ErrEnd (a completion or a release).
func (d *Dispatcher) Changed() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

func (d *Dispatcher) notify() {
	close(d.changed)
	d.changed = make(chan struct{})
}
