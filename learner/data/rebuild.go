package data

import (
	"fmt"
	"slices"
)

// Holding is a chunk a learner holds, with the mini-batches of it
// already delivered (its first Delivered ones), as the learner reports
// it to a coordinator that was restarted.
type Holding struct {
	Learner   int   `json:"learner"`
	Chunk     Chunk `json:"chunk"`
	Delivered int   `json:"delivered"`
}

// Rebuild replaces the dispatcher's position by the one the shards tell:
// done(id) reports the mini-batches whose gradients every shard already
// has (job-wide ids, Plan.ID; none at or above horizon), held the chunks
// learners hold and go on pushing. Walking the plan's chunks in order up
// to the last one that holds a done or held mini-batch, every chunk is
// complete when all its mini-batches are done, else its mini-batches
// that are neither done nor held wait to be handed out again (as chunks
// of consecutive positions). The counters keep their handed-out and
// reassigned counts; Batches becomes the mini-batches done. A holding's
// first mini-batches that are done count as delivered. A holding that
// overlaps an earlier one in held (a learner removed while it could not
// be heard, whose chunks went to another, and the coordinator restarted
// before the learner knew) is left out and returned: its learner pushes
// it anyway and the shards drop what they already have, as after a
// Claim that failed. Holdings that hold mini-batches outside the plan
// are an error naming the first, and change nothing.
func (d *Dispatcher) Rebuild(horizon uint64, done func(id uint64) bool, held []Holding) (dropped []Holding, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var kept []Holding
	holds := map[uint64]bool{} // held mini-batches not yet delivered
	for _, h := range held {
		c := h.Chunk
		if c.Count < 1 || c.Stride != d.plan.Group || c.First < 0 || c.Epoch < 0 || h.Delivered < 0 || h.Delivered > c.Count ||
			c.Batch(c.Count-1) >= d.per || d.id(c, c.Count-1) > uint64(d.total) {
			return nil, fmt.Errorf("%w: learner %d holds chunk %+v (%d delivered), outside the job's plan", ErrChunk, h.Learner, c, h.Delivered)
		}
		// What every shard has is delivered, whatever the learner said
		// before it knew.
		for h.Delivered < c.Count && done(d.id(c, h.Delivered)) {
			h.Delivered++
		}
		overlaps := false
		for i := h.Delivered; i < c.Count; i++ {
			overlaps = overlaps || holds[d.id(c, i)]
		}
		if overlaps {
			dropped = append(dropped, h)
			continue
		}
		kept = append(kept, h)
		for i := h.Delivered; i < c.Count; i++ {
			id := d.id(c, i)
			holds[id] = true
			horizon = max(horizon, id+1)
		}
	}
	held = kept
	d.held = map[Chunk]holder{}
	for _, h := range held {
		if h.Delivered < h.Chunk.Count {
			d.held[h.Chunk] = holder{learner: h.Learner, chunk: h.Chunk, delivered: h.Delivered}
		}
	}
	d.pending, d.stats.Batches, d.stats.Completed = nil, 0, 0
	next := 0
	for next < d.total && uint64(next)+1 < horizon {
		c, after := d.cutAt(next)
		next = after
		complete := true
		for i := range c.Count {
			if done(d.id(c, i)) {
				d.stats.Batches++
			} else {
				complete = false
			}
		}
		if complete {
			d.stats.Completed++
			continue
		}
		c.runs(func(i int) bool { id := d.id(c, i); return !done(id) && !holds[id] }, func(r Chunk) {
			d.pending = append(d.pending, r)
		})
	}
	d.next = next
	d.sortPending()
	d.notify()
	return dropped, nil
}

// Redo hands out again the mini-batches the dispatcher counts as
// delivered but has misses (a shard server came back from a checkpoint
// older than them): they go to the pending chunks, first in line, and
// are counted in Stats.Redone. It returns how many.
func (d *Dispatcher) Redo(has func(id uint64) bool) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.redo(has, true)
}

// Missing returns how many mini-batches the dispatcher counts as
// delivered but has misses, and changes nothing.
func (d *Dispatcher) Missing(has func(id uint64) bool) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.redo(has, false)
}

// redo is Redo (again: hand them out) or Missing; d.mu is held.
func (d *Dispatcher) redo(has func(id uint64) bool, again bool) int {
	open := map[uint64]bool{} // not delivered: pending, or held and not yet delivered
	for _, c := range d.pending {
		for i := range c.Count {
			open[d.id(c, i)] = true
		}
	}
	for _, h := range d.held {
		for i := h.delivered; i < h.chunk.Count; i++ {
			open[d.id(h.chunk, i)] = true
		}
	}
	n := 0
	for next := 0; next < d.next; {
		c, after := d.cutAt(next)
		next = after
		c.runs(func(i int) bool { id := d.id(c, i); return !open[id] && !has(id) }, func(r Chunk) {
			if again {
				d.pending = append(d.pending, r)
			}
			n += r.Count
		})
	}
	if n > 0 && again {
		d.stats.Batches -= n
		d.stats.Redone += n
		d.sortPending()
		d.notify()
	}
	return n
}

// Undelivered returns the ids of the mini-batches handed out or waiting
// that are not delivered, in order (for tests and reports).
func (d *Dispatcher) Undelivered() []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []uint64
	for _, c := range d.pending {
		for i := range c.Count {
			ids = append(ids, d.id(c, i))
		}
	}
	for _, h := range d.held {
		for i := h.delivered; i < h.chunk.Count; i++ {
			ids = append(ids, d.id(h.chunk, i))
		}
	}
	slices.Sort(ids)
	return ids
}

// Claim gives learner h.Learner the chunk it holds (a learner that
// rejoined a restarted coordinator after the data went out): its
// mini-batches not yet delivered are taken out of the chunks waiting to
// be handed out (cutting the plan's chunks up to them). If any of them
// is not waiting (handed to another learner meanwhile, or delivered),
// it takes none and returns an error matching ErrChunk; chunks it cut
// then wait to be handed out.
func (d *Dispatcher) Claim(h Holding) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := h.Chunk
	if c.Count < 1 || c.Stride != d.plan.Group || h.Delivered < 0 || h.Delivered >= c.Count {
		return fmt.Errorf("%w: learner %d claims chunk %+v (%d delivered)", ErrChunk, h.Learner, c, h.Delivered)
	}
	mine, want := map[uint64]bool{}, 0 // the chunk's mini-batches; those not delivered
	for i := range c.Count {
		mine[d.id(c, i)] = true
	}
	last := d.id(c, c.Count-1)
	if last > uint64(d.total) {
		return fmt.Errorf("%w: learner %d claims chunk %+v, beyond the job", ErrChunk, h.Learner, c)
	}
	// Chunks not cut yet are waiting too.
	for d.next < d.total && uint64(d.next) < last {
		d.pending = append(d.pending, d.cut())
	}
	// Its delivered mini-batches are done, its others the learner's: all
	// leave the waiting chunks.
	var kept []Chunk
	done := 0 // delivered ones that were waiting
	for _, p := range d.pending {
		for i := range p.Count {
			switch id := d.id(p, i); {
			case !mine[id]:
			case id >= d.id(c, h.Delivered):
				want++
			default:
				done++
			}
		}
		p.runs(func(i int) bool { return !mine[d.id(p, i)] }, func(r Chunk) { kept = append(kept, r) })
	}
	if want != c.Count-h.Delivered {
		d.sortPending()
		return fmt.Errorf("%w: learner %d claims chunk %+v, of which %d mini-batches are no longer waiting", ErrChunk, h.Learner, c, c.Count-h.Delivered-want)
	}
	d.pending = kept
	d.stats.Batches += done
	d.sortPending()
	d.held[c] = holder{learner: h.Learner, chunk: c, delivered: h.Delivered}
	d.notify()
	return nil
}
