package learner

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
)

// pushRecord is one push a checkingPS holds: the gradient slice the
// learner handed over (the client keeps a reference until the push is
// delivered) and a copy of what it held then.
type pushRecord struct {
	grad, was []float32
	batch     uint64
	delivered bool
}

// checkingPS is a parameter server that holds each push's gradient by
// reference, as ps.Client does, and checks at each point where the
// client's contract says a push is delivered (a Pull or Leave called
// after it, the WaitPull of a PullAsync called after it) that the
// learner has not changed the gradient meanwhile.
type checkingPS struct {
	t      *testing.T
	pushes []*pushRecord
	mark   int // pushes before the PullAsync in flight
	step   float32
	w      []float32 // the PullAsync in flight's buffer
}

func (p *checkingPS) deliver(upto int) {
	for i, r := range p.pushes[:upto] {
		if !r.delivered && !slices.Equal(r.grad, r.was) {
			p.t.Errorf("push %d (mini-batch %d): the learner changed its gradient before it was delivered", i, r.batch)
		}
		r.delivered = true
	}
}

// fill gives every pull new weights, so that every step's gradient
// differs.
func (p *checkingPS) fill(w []float32) {
	p.step++
	for i := range w {
		w[i] = 0.01 * p.step * float32(i%5-2)
	}
}

func (p *checkingPS) Pull(_ context.Context, w []float32) error {
	p.deliver(len(p.pushes))
	p.fill(w)
	return nil
}

func (p *checkingPS) PullAsync(_ context.Context, w []float32) error {
	p.mark, p.w = len(p.pushes), w
	return nil
}

func (p *checkingPS) WaitPull() error {
	p.deliver(p.mark)
	p.fill(p.w)
	return nil
}

func (p *checkingPS) Push(_ context.Context, grad []float32, batch uint64) error {
	p.pushes = append(p.pushes, &pushRecord{grad: grad, was: slices.Clone(grad), batch: batch})
	return nil
}

func (p *checkingPS) Join(context.Context) error { return nil }

func (p *checkingPS) Leave(context.Context) error {
	p.deliver(len(p.pushes))
	return nil
}

// randomBatches is a stream of n random mini-batches of a 1×2×2-input,
// 2-class network, then data.ErrEnd.
type randomBatches struct {
	n, next int
	rng     *rand.Rand
	b       data.Batch
}

func (r *randomBatches) Next(context.Context) (*data.Batch, error) {
	if r.next == r.n {
		return nil, data.ErrEnd
	}
	for i := range r.b.X {
		r.b.X[i] = float32(r.rng.NormFloat64())
	}
	for i := range r.b.Labels {
		r.b.Labels[i] = int32(r.rng.IntN(2))
	}
	r.b.Index = r.next
	r.next++
	return &r.b, nil
}

func (r *randomBatches) Done(context.Context, *data.Batch) error { return nil }

// TestLearnerKeepsPushedGradients: the learner leaves each pushed
// gradient unchanged until the client's contract says the push is
// delivered (ps.Client.Push keeps a reference to resend it), with one
// network and with --overlap's two, and it pushes each mini-batch's id.
func TestLearnerKeepsPushedGradients(t *testing.T) {
	spec, err := nn.Parse("tiny.net", []byte("input channels=1 height=2 width=2\nfc fc1 out=2 weight=xavier\nsoftmax loss\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := kernels.Reference()
	for _, overlap := range []bool{false, true} {
		const batch, steps = 3, 7
		var nets [2]*nn.Net
		for i := range nets {
			if nets[i], err = nn.New(spec, e, nn.Config{Batch: batch}); err != nil {
				t.Fatal(err)
			}
		}
		ps := &checkingPS{t: t}
		src := &randomBatches{n: steps, rng: rand.New(rand.NewPCG(1, 2)),
			b: data.Batch{X: make([]float32, batch*4), Labels: make([]int32, batch)}}
		cfg := Config{Net: nets[0], Data: src, Client: ps, Overlap: overlap,
			BatchID: func(b *data.Batch) uint64 { return uint64(b.Index) + 1 }}
		if overlap {
			cfg.Spare = nets[1]
		}
		l, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(ps.pushes) != steps {
			t.Fatalf("overlap %v: %d pushes, want %d", overlap, len(ps.pushes), steps)
		}
		for i, r := range ps.pushes {
			if !r.delivered || r.batch != uint64(i+1) {
				t.Errorf("overlap %v: push %d: delivered %v, mini-batch %d", overlap, i, r.delivered, r.batch)
			}
		}
	}
}
