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
	// part is the push PushReady is sending: the values of grad[lo:] as
	// each call saw them (lo falls from call to call); calls counts them.
	part  *pushRecord
	lo    int
	calls int
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

// PushReady records a push sent in pieces: each piece as it was when
// sent, so that a piece that changes later (not yet final when sent)
// fails the delivery check.
func (p *checkingPS) PushReady(_ context.Context, grad []float32, batch uint64, lo int) error {
	p.calls++
	if p.part == nil {
		p.part, p.lo = &pushRecord{grad: grad, was: make([]float32, len(grad)), batch: batch}, len(grad)
	}
	if &grad[0] != &p.part.grad[0] || batch != p.part.batch || lo > p.lo {
		p.t.Fatalf("PushReady(mini-batch %d, lo %d) during the push of mini-batch %d at %d", batch, lo, p.part.batch, p.lo)
	}
	copy(p.part.was[lo:p.lo], grad[lo:p.lo])
	if p.lo = lo; lo == 0 {
		p.pushes, p.part = append(p.pushes, p.part), nil
	}
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
// With EarlyPush every piece is final when it is sent (the delivery check
// compares each piece as sent with the gradient), the pushes come in a
// call per layer, and they carry the gradients sent without it.
func TestLearnerKeepsPushedGradients(t *testing.T) {
	spec, err := nn.Parse("tiny.net", []byte("input channels=1 height=2 width=2\nfc fc1 out=3 weight=xavier\nrelu r1\nfc fc2 out=2 weight=xavier\nsoftmax loss\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := kernels.Reference()
	for _, overlap := range []bool{false, true} {
		var sent [][]float32 // the gradients pushed without EarlyPush
		for _, early := range []bool{false, true} {
			const batch, steps = 3, 7
			var nets [2]*nn.Net
			for i := range nets {
				if nets[i], err = nn.New(spec, e, nn.Config{Batch: batch}); err != nil {
					t.Fatal(err)
				}
				nets[i].Init(1)
			}
			ps := &checkingPS{t: t}
			src := &randomBatches{n: steps, rng: rand.New(rand.NewPCG(1, 2)),
				b: data.Batch{X: make([]float32, batch*4), Labels: make([]int32, batch)}}
			cfg := Config{Net: nets[0], Data: src, Client: ps, Overlap: overlap, EarlyPush: early,
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
				t.Fatalf("overlap %v, early %v: %d pushes, want %d", overlap, early, len(ps.pushes), steps)
			}
			if want := map[bool]int{false: 0, true: 2 * steps}[early]; ps.calls != want {
				t.Fatalf("overlap %v, early %v: %d PushReady calls, want %d", overlap, early, ps.calls, want)
			}
			for i, r := range ps.pushes {
				if !r.delivered || r.batch != uint64(i+1) {
					t.Errorf("overlap %v, early %v: push %d: delivered %v, mini-batch %d", overlap, early, i, r.delivered, r.batch)
				}
				if !early {
					sent = append(sent, r.was)
				} else if !slices.Equal(r.was, sent[i]) {
					t.Errorf("overlap %v: push %d differs with EarlyPush", overlap, i)
				}
			}
		}
	}
}
