package data

import (
	"errors"
	"slices"
	"testing"
)

// drain hands out every chunk to learner 0 and completes it, returning
// them in order.
func drain(t *testing.T, d *Dispatcher) []Chunk {
	t.Helper()
	var out []Chunk
	for {
		c, err := d.Next(0)
		if errors.Is(err, ErrEnd) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
		if err := d.Complete(0, c); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPlanChunks checks that the chunks of a plan cover every mini-batch
// of every epoch exactly once, in blocks of Group chunks of equal counts
// whose i-th batches are consecutive, and that MaxBatches cuts the job at
// a multiple of Group.
func TestPlanChunks(t *testing.T) {
	for _, p := range []Plan{
		{Images: 103, Batch: 10, Chunk: 3, Epochs: 2},                           // P = 10, chunks of 3, 3, 3, 1
		{Images: 200, Batch: 4, Group: 4, Chunk: 3, Epochs: 2},                  // P = 48: blocks of 12 rounds... of 3
		{Images: 200, Batch: 4, Group: 3, Chunk: 5, Epochs: 3},                  // P = 48: blocks of 15, last of 3
		{Images: 200, Batch: 4, Group: 3, Chunk: 5, Epochs: 3, MaxBatches: 100}, // cut at 99
	} {
		d, err := NewDispatcher(p)
		if err != nil {
			t.Fatal(err)
		}
		g, P := max(p.Group, 1), p.BatchesPerEpoch()
		if P%g != 0 || P != p.Images/(p.Batch*g)*g {
			t.Fatalf("%+v: P = %d", p, P)
		}
		seen := map[[2]int]int{}
		chunks := drain(t, d)
		for i, c := range chunks {
			if c.Stride != g || c.Count < 1 || c.Count > p.Chunk {
				t.Fatalf("%+v: chunk %+v", p, c)
			}
			// Every chunk of a block has the block's count, and the
			// i-th batches of the block's chunks are consecutive.
			if s := c.First % g; s > 0 {
				prev := chunks[i-1]
				if prev.Count != c.Count || prev.First != c.First-1 || prev.Epoch != c.Epoch {
					t.Fatalf("%+v: chunk %+v after %+v", p, c, prev)
				}
			}
			for k := range c.Count {
				seen[[2]int{c.Epoch, c.Batch(k)}]++
			}
		}
		want := p.Total()
		if p.MaxBatches > 0 && want != p.MaxBatches/g*g {
			t.Fatalf("%+v: Total %d", p, want)
		}
		if len(seen) != want {
			t.Fatalf("%+v: %d distinct batches, want %d", p, len(seen), want)
		}
		for k, n := range seen {
			if n != 1 || k[1] >= P || k[0]*P+k[1] >= want {
				t.Fatalf("%+v: batch %v handed out %d times", p, k, n)
			}
		}
		if st := d.Stats(); st.Batches != want || st.Completed != len(chunks) || st.Reassigned != 0 {
			t.Fatalf("%+v: stats %+v", p, st)
		}
	}
}

// TestDispatcherCountsHandedOut: the mini-batches counted are those of
// the chunk handed out, whatever count the completing learner claims.
func TestDispatcherCountsHandedOut(t *testing.T) {
	d, err := NewDispatcher(Plan{Images: 40, Batch: 2, Chunk: 5, Epochs: 1}) // 20 batches: 4 chunks
	if err != nil {
		t.Fatal(err)
	}
	for _, claim := range []int{100, 0, -7, 5} {
		c, err := d.Next(0)
		if err != nil {
			t.Fatal(err)
		}
		c.Count = claim
		if err := d.Complete(0, c); err != nil {
			t.Fatal(err)
		}
	}
	if st := d.Stats(); st.Batches != 20 || st.Completed != 4 || !d.Done() {
		t.Errorf("stats %+v (done %t), want 20 batches of 4 chunks", st, d.Done())
	}
}

// TestDispatcherRelease checks reassignment: a lost learner's chunks are
// handed out again before new ones, only the holder completes a chunk, a
// learner asking while chunks are held elsewhere is told to wait, and the
// end comes once every chunk is completed.
// TestDispatcherReleaseUnknown: the chunks a learner holds but does not
// know of (named by epoch, first mini-batch and stride) are handed out
// again, first, with what was delivered of them kept; the others stay
// its own.
func TestDispatcherReleaseUnknown(t *testing.T) {
	d, err := NewDispatcher(Plan{Images: 40, Batch: 2, Chunk: 5, Epochs: 1}) // 20 batches: 4 chunks
	if err != nil {
		t.Fatal(err)
	}
	a, _ := d.Next(1)
	b, _ := d.Next(1)
	c, _ := d.Next(2)
	if err := d.Delivered(1, b, 2); err != nil {
		t.Fatal(err)
	}
	misstated := a
	misstated.Count = 1 // known by its epoch, first mini-batch and stride
	if n := d.ReleaseUnknown(1, []Chunk{misstated}); n != 1 {
		t.Fatalf("released %d chunks, want 1", n)
	}
	if n := d.ReleaseUnknown(2, []Chunk{c}); n != 0 {
		t.Fatalf("released %d of learner 2's known chunk, want 0", n)
	}
	rest, _ := d.Next(3)
	if rest.First != b.First+2 || rest.Count != b.Count-2 {
		t.Fatalf("next chunk %+v, want the undelivered rest of %+v", rest, b)
	}
	if err := d.Complete(1, a); err != nil {
		t.Fatalf("learner 1 completes the chunk it knows: %v", err)
	}
}

func TestDispatcherRelease(t *testing.T) {
	d, err := NewDispatcher(Plan{Images: 40, Batch: 2, Chunk: 5, Epochs: 1}) // 20 batches: 4 chunks
	if err != nil {
		t.Fatal(err)
	}
	a, _ := d.Next(1)
	b, _ := d.Next(1)
	c, _ := d.Next(2)
	if err := d.Complete(2, a); !errors.Is(err, ErrChunk) {
		t.Fatalf("completion by a learner that does not hold the chunk: %v", err)
	}
	changed := d.Changed()
	if n := d.Release(1); n != 2 {
		t.Fatalf("released %d chunks, want 2", n)
	}
	select {
	case <-changed:
	default:
		t.Fatal("Release did not signal a change")
	}
	if got, _ := d.Next(2); got != a {
		t.Fatalf("next chunk %+v, want the released %+v", got, a)
	}
	if got, _ := d.Next(3); got != b {
		t.Fatalf("next chunk %+v, want the released %+v", got, b)
	}
	last, _ := d.Next(3)
	if _, err := d.Next(3); !errors.Is(err, ErrIdle) {
		t.Fatalf("all handed out, some held by others: %v, want ErrIdle", err)
	}
	for _, x := range []struct {
		l int
		c Chunk
	}{{2, a}, {2, c}} {
		if err := d.Complete(x.l, x.c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Next(3); !errors.Is(err, ErrIdle) || d.Done() {
		t.Fatalf("all handed out, the rest held by the asker: %v (done %v), want ErrIdle (they may come back)", err, d.Done())
	}
	if _, err := d.Next(1); !errors.Is(err, ErrIdle) {
		t.Fatalf("learner 3 holds chunks: %v, want ErrIdle for learner 1", err)
	}
	for _, x := range []struct {
		l int
		c Chunk
	}{{3, b}, {3, last}} {
		if err := d.Complete(x.l, x.c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Next(1); !errors.Is(err, ErrEnd) || !d.Done() {
		t.Fatalf("after the last completion: %v (done %v), want ErrEnd", err, d.Done())
	}
	st := d.Stats()
	if st.Handed != 6 || st.Reassigned != 2 || st.Completed != 4 || st.Batches != 20 {
		t.Fatalf("stats %+v", st)
	}
	got := []Chunk{a, b, c, last}
	slices.SortFunc(got, func(x, y Chunk) int { return x.First - y.First })
	for i, x := range got {
		if x.First != 5*i || x.Count != 5 {
			t.Fatalf("chunks %+v", got)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	for _, p := range []Plan{
		{Images: 10, Batch: 0, Chunk: 1},
		{Images: 10, Batch: 1, Chunk: 0},
		{Images: 10, Batch: 1, Chunk: 1, Group: -1},
		{Images: 10, Batch: 4, Chunk: 1, Group: 3}, // fewer images than one round
		{Images: 10, Batch: 1, Chunk: 1, Epochs: -1},
	} {
		if _, err := NewDispatcher(p); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

// TestDispatcherState: a dispatcher restored from another's state hands
// out the chunks that were held first, then goes on where the other
// stopped, and every batch of the job is still completed exactly once.
func TestDispatcherState(t *testing.T) {
	p := Plan{Images: 200, Batch: 4, Chunk: 3, Epochs: 2}
	a, _ := NewDispatcher(p)
	seen := map[[2]int]int{}
	complete := func(d *Dispatcher, l int, c Chunk) {
		if err := d.Complete(l, c); err != nil {
			t.Fatal(err)
		}
		for k := range c.Count {
			seen[[2]int{c.Epoch, c.Batch(k)}]++
		}
	}
	for range 5 {
		c, _ := a.Next(0)
		complete(a, 0, c)
	}
	held, _ := a.Next(1) // lost with the crash
	st := a.State()
	b, _ := NewDispatcher(p)
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	if c, _ := b.Next(2); c != held {
		t.Fatalf("first chunk after the restore %+v, want the held %+v", c, held)
	}
	complete(b, 2, held)
	for {
		c, err := b.Next(0)
		if errors.Is(err, ErrEnd) {
			break
		}
		complete(b, 0, c)
	}
	if len(seen) != p.Total() {
		t.Fatalf("%d batches done, want %d", len(seen), p.Total())
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("batch %v done %d times", k, n)
		}
	}
	if bad := (DispatchState{Next: p.Total() + 1}); b.Restore(bad) == nil {
		t.Error("a position beyond the job was accepted")
	}
}
