package learner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
)

// failingPS is a checkingPS whose call fail returns err.
type failingPS struct {
	checkingPS
	fail string // "pull", "push", "leave" or "join"
	err  error
}

func (p *failingPS) Pull(ctx context.Context, w []float32) error {
	if p.fail == "pull" {
		return p.err
	}
	return p.checkingPS.Pull(ctx, w)
}

func (p *failingPS) Push(ctx context.Context, grad []float32, batch uint64) error {
	if p.fail == "push" {
		return p.err
	}
	return p.checkingPS.Push(ctx, grad, batch)
}

func (p *failingPS) Leave(ctx context.Context) error {
	if p.fail == "leave" {
		return p.err
	}
	return p.checkingPS.Leave(ctx)
}

func (p *failingPS) Join(ctx context.Context) error {
	if p.fail == "join" {
		return p.err
	}
	return p.checkingPS.Join(ctx)
}

// idleOnce is a stream that has no batch for now (data.ErrIdle) once,
// after its first batch.
type idleOnce struct {
	randomBatches
	calls int
}

func (r *idleOnce) Next(ctx context.Context) (*data.Batch, error) {
	if r.calls++; r.calls == 2 {
		return nil, data.ErrIdle
	}
	return r.randomBatches.Next(ctx)
}

// TestLearnerDivergedEverywhere: a shard's divergence (ps.ErrDiverged,
// in a rejection) is the learner's ErrDiverged whichever of its calls
// meets it: a step's pull or push, the leave at the end of its data
// (under hardsync the rejection of its last push ends that leave), the
// leave while it is idle, the join after it. Other errors are not.
func TestLearnerDivergedEverywhere(t *testing.T) {
	spec, err := nn.Parse("tiny.net", []byte("input channels=1 height=2 width=2\nfc fc1 out=2 weight=xavier\nsoftmax loss\n"))
	if err != nil {
		t.Fatal(err)
	}
	diverged := errors.Join(fmt.Errorf("%w: ps shard 0: push from learner 0 (seq 9): %w", ps.ErrRejected, ps.ErrDiverged),
		errors.New("ps client 0: leave ended"))
	other := fmt.Errorf("%w: ps shard 0: push from learner 0 (seq 9): %w", ps.ErrRejected, ps.ErrNonFinite)
	for _, tc := range []struct {
		fail string
		idle bool // the stream is idle once after its first batch
	}{{"pull", false}, {"push", false}, {"leave", false}, {"leave", true}, {"join", true}} {
		for _, cause := range []error{diverged, other} {
			const batch = 2
			net, err := nn.New(spec, kernels.Reference(), nn.Config{Batch: batch})
			if err != nil {
				t.Fatal(err)
			}
			net.Init(1)
			p := &failingPS{checkingPS: checkingPS{t: t}, fail: tc.fail, err: cause}
			src := &idleOnce{randomBatches: randomBatches{n: 3, rng: rand.New(rand.NewPCG(1, 2)),
				b: data.Batch{X: make([]float32, batch*4), Labels: make([]int32, batch)}}}
			if !tc.idle {
				src.calls = 2 // past its idle call
			}
			l, err := New(Config{Net: net, Data: src, Client: p})
			if err != nil {
				t.Fatal(err)
			}
			err = l.Run(context.Background())
			want := cause == diverged
			if err == nil || errors.Is(err, ErrDiverged) != want || errors.Is(err, ps.ErrDiverged) != want || !errors.Is(err, cause) {
				t.Errorf("%s failing (idle %v) with %v: Run returned %v; want it wrapping the cause, and ErrDiverged: %v", tc.fail, tc.idle, cause, err, want)
			}
		}
	}
}
