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
	// ErrEnd: there is no more data: every chunk of the job has been
	// completed.
	ErrEnd = errors.New("no more data: the job's epochs are done")
	// ErrIdle: no chunk is available now, but chunks handed out, the
	// asking learner's included, are not complete yet and may come back
	// (a learner lost, a shard server that lost mini-batches); ask again
	// to wait.
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

// ID returns the job-wide id of mini-batch b of epoch e: e·P + b + 1
// (0 names no mini-batch). Shards accept at most one gradient per id.
func (p *Plan) ID(epoch, b int) uint64 {
	return uint64(epoch)*uint64(p.BatchesPerEpoch()) + uint64(b) + 1
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

// rest returns the chunk of c's mini-batches from position i on (Count
// 0 when none is left).
func (c Chunk) rest(i int) Chunk {
	return Chunk{Epoch: c.Epoch, First: c.First + i*c.Stride, Count: max(c.Count-i, 0), Stride: c.Stride}
}

// runs yields the chunks of the longest runs of c's positions for which
// keep holds, in order.
func (c Chunk) runs(keep func(i int) bool, yield func(Chunk)) {
	for i := 0; i < c.Count; {
		if !keep(i) {
			i++
			continue
		}
		j := i
		for j < c.Count && keep(j) {
			j++
		}
		r := c.rest(i)
		r.Count = j - i
		yield(r)
		i = j
	}
}

// DispatchStats counts a dispatcher's chunks.
type DispatchStats struct {
	Handed     int `json:"handed"` // chunks handed out, reassigned ones included
	Completed  int `json:"completed"`
	Reassigned int `json:"reassigned"` // chunks released by a lost learner and handed out again
	// Batches counts the mini-batches delivered (Delivered, Complete):
	// at most those of the chunks handed out, whatever their learners
	// claim.
	Batches int `json:"batches"`
	// Redone counts the mini-batches handed out again after they were
	// delivered, because a shard server came back without them (Redo).
	Redone int `json:"redone,omitempty"`
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
	next    int              // global index of the first batch not yet cut into chunks
	pending []Chunk          // released chunks, handed out first
	held    map[Chunk]holder // outstanding chunks (distinct: each has mini-batches no other holds undelivered)
	stats   DispatchStats
	changed chan struct{} // closed and replaced on every change
}

type holder struct {
	learner   int
	chunk     Chunk
	delivered int // its first delivered mini-batches reached every shard
}

// NewDispatcher validates p and returns its dispatcher.
func NewDispatcher(p Plan) (*Dispatcher, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Group = max(p.Group, 1)
	return &Dispatcher{plan: p, per: p.BatchesPerEpoch(), total: p.Total(), held: map[Chunk]holder{}, changed: make(chan struct{})}, nil
}

// Plan returns the dispatcher's plan.
func (d *Dispatcher) Plan() Plan { return d.plan }

// Next hands learner its next chunk. It returns ErrIdle when none is
// available but chunks handed out are not complete (one whose learner is
// lost comes back; see Release), and ErrEnd once every chunk is
// completed: a learner holding the last chunks is told the end only once
// they are complete, so that it is still there for whatever comes back.
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
	case len(d.held) > 0:
		return Chunk{}, ErrIdle
	default:
		return Chunk{}, ErrEnd
	}
	d.held[c] = holder{learner: learner, chunk: c}
	d.stats.Handed++
	return c, nil
}

// cut returns the chunk that starts at d.next and advances d.next past
// the last chunk of its block once every slot of the block is handed out.
func (d *Dispatcher) cut() Chunk {
	c, next := d.cutAt(d.next)
	d.next = next
	return c
}

// cutAt returns the chunk that starts at global batch next (the next
// chunk cut in the plan's order) and the position after it.
func (d *Dispatcher) cutAt(next int) (Chunk, int) {
	g, k := d.plan.Group, d.plan.Chunk
	e, b := next/d.per, next%d.per
	// The block of batch b: starts at b0, holds size batches.
	slot := b % g
	b0 := b - slot
	size := min(g*k, d.per-b0, d.total-(e*d.per+b0))
	c := Chunk{Epoch: e, First: b0 + slot, Count: size / g, Stride: g}
	if slot+1 < g {
		return c, next + 1
	}
	return c, e*d.per + b0 + size
}

// id returns the job-wide id of c's i-th mini-batch (Plan.ID).
func (d *Dispatcher) id(c Chunk, i int) uint64 { return uint64(c.Epoch*d.per+c.Batch(i)) + 1 }

// Done reports whether every chunk of the job has been completed.
func (d *Dispatcher) Done() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.next >= d.total && len(d.pending) == 0 && len(d.held) == 0
}

// Complete records that every mini-batch of the chunk learner was handed
// as (c.Epoch, c.First) was delivered; the counters take that chunk's
// Count, whatever c.Count says.
func (d *Dispatcher) Complete(learner int, c Chunk) error {
	return d.Delivered(learner, c, -1)
}

// Delivered records that the first n mini-batches of the chunk learner
// was handed as (c.Epoch, c.First) were delivered: their gradients
// reached every shard (n < 0: all of them). Once all are, the chunk is
// complete; a learner lost before that gives back only the rest (see
// Release). A count at or below an earlier one changes nothing; one
// above the chunk's Count is an error.
func (d *Dispatcher) Delivered(learner int, c Chunk, n int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	key, ok := d.find(learner, c)
	h := d.held[key]
	switch {
	case !ok:
		return fmt.Errorf("%w: learner %d delivered chunk %+v", ErrChunk, learner, c)
	case n < 0:
		n = h.chunk.Count
	case n > h.chunk.Count:
		return fmt.Errorf("%w: learner %d delivered %d mini-batches of chunk %+v, which has %d", ErrChunk, learner, n, c, h.chunk.Count)
	}
	if n <= h.delivered {
		return nil
	}
	d.stats.Batches += n - h.delivered
	h.delivered = n
	d.held[key] = h
	if n == h.chunk.Count {
		delete(d.held, key)
		d.stats.Completed++
		d.notify()
	}
	return nil
}

// find returns the chunk learner holds that c names: c itself, or else
// its only chunk of c's epoch, first mini-batch and stride (a learner may
// misstate the count: the dispatcher counts what it handed out).
func (d *Dispatcher) find(learner int, c Chunk) (Chunk, bool) {
	if h, ok := d.held[c]; ok {
		return c, h.learner == learner
	}
	var found Chunk
	n := 0
	for k, h := range d.held {
		if h.learner == learner && k.Epoch == c.Epoch && k.First == c.First && k.Stride == c.Stride {
			found = k
			n++
		}
	}
	return found, n == 1
}

// Release gives back every chunk learner holds (it is lost): they are
// handed out again before any new chunk. It returns how many.
func (d *Dispatcher) Release(learner int) int {
	return d.release(learner, func(Chunk) bool { return true })
}

// ReleaseUnknown gives back the chunks learner holds that it does not
// know of: known are the chunks it says it holds (a chunk is known by
// its epoch, first mini-batch and stride, as Delivered finds it). A
// chunk handed out in a reply that a lost connection never delivered is
// one: the learner will never push it. They are handed out again
// before any new chunk, as Release does; it returns how many.
func (d *Dispatcher) ReleaseUnknown(learner int, known []Chunk) int {
	return d.release(learner, func(k Chunk) bool {
		return !slices.ContainsFunc(known, func(c Chunk) bool {
			return c.Epoch == k.Epoch && c.First == k.First && c.Stride == k.Stride
		})
	})
}

// release gives back the chunks learner holds that lost says are lost
// (what was delivered of them stays done).
func (d *Dispatcher) release(learner int, lost func(Chunk) bool) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for k, h := range d.held {
		if h.learner == learner && lost(k) {
			delete(d.held, k)
			d.pending = append(d.pending, h.chunk.rest(h.delivered))
			n++
		}
	}
	if n > 0 {
		d.sortPending()
		d.notify()
	}
	return n
}

// sortPending orders the pending chunks oldest first, whatever the map
// order they came from: by (epoch, first batch).
func (d *Dispatcher) sortPending() {
	slices.SortFunc(d.pending, func(a, b Chunk) int {
		return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.First, b.First))
	})
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
		st.Pending = append(st.Pending, h.chunk.rest(h.delivered))
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
	d.next, d.pending, d.stats, d.held = st.Next, slices.Clone(st.Pending), st.Stats, map[Chunk]holder{}
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
