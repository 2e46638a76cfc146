package learner

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
)

// ErrDiverged reports a mini-batch whose loss is NaN or infinite: the
// learner stops before pushing its gradient (the server would reject it).
var ErrDiverged = errors.New("training diverged (loss is NaN or infinite)")

// Batches is a stream of training mini-batches (a *data.Loader). Next
// returns the next batch, valid until the following call.
type Batches interface {
	Next() *data.Batch
}

// Config configures one Learner.
type Config struct {
	ID     int        // learner id, for messages
	Net    *nn.Net    // the network the learner computes on (batch μ)
	Spare  *nn.Net    // Overlap only: a second Net of the same spec and batch with its own parameters
	Data   Batches    // the learner's mini-batches
	Client *ps.Client // the learner's connection to every shard
	// Overlap prefetches the next weights (Client.PullAsync) into the
	// other Net while this one computes.
	Overlap bool
	// OnStep, if set, is called after each push with the batch and its
	// loss, on the learner's goroutine; it must return quickly.
	OnStep func(b *data.Batch, loss float32)
}

// Learner is one worker of the paper's loop: getMinibatch → pull →
// compute (forward and backward, the gradient averaged over the μ
// images) → push, with no local accumulation: each push carries one
// mini-batch's gradient, stamped with the stamps of the weights it was
// computed on.
//
// With Overlap the learner keeps two networks, A and B. It pulls into A,
// then every step: start an asynchronous pull into B, compute on A, push
// (stamped with A's stamps), wait for B, swap. The next weights thus
// travel while the gradient is computed, at the price of one step of
// extra staleness, which the stamps show: under softsync a lone learner
// measures τ = 1. Nothing is copied to switch buffers: the replies are
// received straight into the spare network's parameters. Under bounded
// staleness the server's pull gate sees the prefetch, sent while the
// learner still computes on older weights; gradients beyond the bound are
// still dropped by the shards.
//
// A Learner allocates nothing per step beyond what its Client and Batches
// do; it is used by one goroutine.
type Learner struct {
	cfg  Config
	nets [2]*nn.Net
}

// New checks cfg and returns a learner.
func New(cfg Config) (*Learner, error) {
	switch {
	case cfg.Net == nil || cfg.Data == nil || cfg.Client == nil:
		return nil, fmt.Errorf("learner %d: Net, Data and Client are required: %w", cfg.ID, ErrConfig)
	case cfg.Overlap && (cfg.Spare == nil || cfg.Spare == cfg.Net || len(cfg.Spare.Params()) != len(cfg.Net.Params()) ||
		cfg.Spare.Batch() != cfg.Net.Batch() || &cfg.Spare.Params()[0] == &cfg.Net.Params()[0]):
		return nil, fmt.Errorf("learner %d: Overlap needs a Spare network of the same spec and batch with its own parameters: %w", cfg.ID, ErrConfig)
	}
	return &Learner{cfg: cfg, nets: [2]*nn.Net{cfg.Net, cfg.Spare}}, nil
}

// Run performs steps training steps and returns. It does not leave the
// parameter server (the caller does, once it is done with the client). On
// an error an asynchronous pull may still be in flight: close the client.
func (l *Learner) Run(ctx context.Context, steps int) error {
	c := l.cfg.Client
	if l.cfg.Overlap && steps > 0 {
		if err := c.Pull(ctx, l.nets[0].Params()); err != nil {
			return fmt.Errorf("learner %d: %w", l.cfg.ID, err)
		}
	}
	for s := range steps {
		b := l.cfg.Data.Next()
		net := l.nets[0]
		var err error
		switch {
		case !l.cfg.Overlap:
			err = c.Pull(ctx, net.Params())
		case s < steps-1:
			err = c.PullAsync(ctx, l.nets[1].Params())
		}
		if err != nil {
			return fmt.Errorf("learner %d step %d: %w", l.cfg.ID, s, err)
		}
		loss := net.Gradient(b.X, b.Labels)
		if math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
			return fmt.Errorf("learner %d step %d (epoch %d, batch %d): loss %v: %w", l.cfg.ID, s, b.Epoch, b.Index, loss, ErrDiverged)
		}
		if err := c.Push(ctx, net.Grads()); err != nil {
			return fmt.Errorf("learner %d step %d: %w", l.cfg.ID, s, err)
		}
		if l.cfg.Overlap {
			if err := c.WaitPull(); err != nil {
				return fmt.Errorf("learner %d step %d: %w", l.cfg.ID, s, err)
			}
			l.nets[0], l.nets[1] = l.nets[1], l.nets[0]
		}
		if l.cfg.OnStep != nil {
			l.cfg.OnStep(b, loss)
		}
	}
	return nil
}
