package learner

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/param"
)

// ErrConfig is wrapped by the configuration errors of New (the same
// value as param.ErrInvalidConfig).
var ErrConfig = param.ErrInvalidConfig

// ErrDiverged reports that training diverged: a mini-batch whose loss is
// NaN or infinite (the learner stops before pushing its gradient, which
// the server would reject), or a shard that refuses updates in a row
// (ps.ErrDiverged: each would have made a weight NaN or infinite).
var ErrDiverged = errors.New("training diverged")

// Batches is a learner's stream of training mini-batches (a
// *data.Loader): Next returns the next batch, valid until the following
// call, or data.ErrIdle (no batch now: the learner leaves the parameter
// server, and the next call waits) or data.ErrEnd (the job's data is
// done); Done reports a batch whose gradient has been pushed.
type Batches interface {
	Next(ctx context.Context) (*data.Batch, error)
	Done(ctx context.Context, b *data.Batch) error
}

// PS is the learner's side of the parameter server (a *ps.Client): see
// ps.Client for the contract of each call.
type PS interface {
	Pull(ctx context.Context, w []float32) error
	PullAsync(ctx context.Context, w []float32) error
	WaitPull() error
	Push(ctx context.Context, grad []float32, batch uint64) error
	PushReady(ctx context.Context, grad []float32, batch uint64, lo int) error
	Join(ctx context.Context) error
	Leave(ctx context.Context) error
}

var _ PS = (*ps.Client)(nil)

// Config configures one Learner.
type Config struct {
	ID     int     // learner id, for messages
	Net    *nn.Net // the network the learner computes on (batch μ)
	Spare  *nn.Net // Overlap only: a second Net of the same spec and batch with its own parameters
	Data   Batches // the learner's mini-batches
	Client PS      // the learner's connection to every shard
	// Overlap prefetches the next weights (PullAsync) into the other Net
	// while this one computes.
	Overlap bool
	// EarlyPush sends each shard its slice of the gradient as soon as
	// backward has produced it (PushReady from the Net's gradient hook),
	// last layers first, while backward goes on. The shards receive
	// the same pushes.
	EarlyPush bool
	// OnStep, if set, is called after each push with the batch and its
	// loss, on the learner's goroutine; it must return quickly.
	OnStep func(b *data.Batch, loss float32)
	// BatchID, if set, returns the job-wide id of b's mini-batch (its
	// index in the job's sequence of mini-batches + 1), which the push of
	// its gradient carries so that the shards accept at most one gradient
	// per mini-batch (ps.Msg.Batch). nil: pushes carry no id (0).
	BatchID func(b *data.Batch) uint64
	// Seed is the job's seed. The dropout masks of a step are drawn from
	// it and the mini-batch's id (nn.Net.SetSeed), so that a mini-batch
	// gets the same masks whichever learner computes it; without
	// BatchID, from it, the learner's id and the step.
	Seed uint64
}

// Learner is one worker of the paper's loop: getMinibatch → pull →
// compute (forward and backward, the gradient averaged over the μ
// images) → push, with no local accumulation: each push carries one
// mini-batch's gradient, stamped with the stamps of the weights it was
// computed on. It takes mini-batches until its stream ends, so that the
// end of a job is decided by the job's data (all learners together), not
// by a count of each learner's own: faster learners simply do more steps.
// A learner whose stream has no batch for now leaves the parameter server
// while it waits and joins again before its next push, so that it never
// holds back a hardsync round.
//
// With Overlap the learner keeps two networks, A and B. It pulls into A,
// then every step: start an asynchronous pull into B, compute on A, push
// (stamped with A's stamps), wait for B, swap. The next weights thus
// travel while the gradient is computed, at the price of one step of
// extra staleness, which the stamps show: under softsync a lone learner
// measures τ = 1. Nothing is copied to switch buffers: the replies are
// received into the spare network's parameters, straight from the socket
// or ring over TCP and shm (in-memory and verbs copy each reply there
// once; docs/wire.md, "Copies of a push and a pull"). Under bounded
// staleness the server's pull gate sees the prefetch, sent while the
// learner still computes on older weights; gradients beyond the bound are
// still dropped by the shards.
//
// With EarlyPush the push leaves in pieces during backward: the Nets'
// gradient hook (nn.Net.SetGradHook) calls ps.Client.PushReady each time
// the gradients of the last layers are final, which sends every shard
// whose whole slice lies there, last shards first; the hook's last call
// sends the rest. The loss is checked at the hook's first call, after
// every forward pass, so a mini-batch whose loss is not finite sends
// nothing, as without EarlyPush.
//
// A push is sent from the network's gradient itself (see ps.Client.Push);
// a pushed gradient stays unchanged until the push is delivered, as
// ps.Client.Push requires (it keeps a reference to resend it): without
// Overlap the next step's Pull delivers it before the gradient is
// computed again; with Overlap a network's gradient is next overwritten
// two steps later, after the WaitPull of the prefetch started after the
// push.
//
// A Learner allocates nothing per step beyond what its Client and Batches
// do; it is used by one goroutine.
type Learner struct {
	cfg  Config
	nets [2]*nn.Net
	push earlyPush // the push the gradient hook sends (EarlyPush)
}

// earlyPush is the state of a step's push under EarlyPush: the gradient
// hook sends what is ready with PushReady, after checking the loss at its
// first call (all forward passes are done by then).
type earlyPush struct {
	ctx     context.Context
	net     *nn.Net
	batch   uint64
	started bool  // the loss was checked
	err     error // the first failure; nothing more is sent
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
	l := &Learner{cfg: cfg, nets: [2]*nn.Net{cfg.Net, cfg.Spare}}
	if cfg.EarlyPush {
		for _, n := range l.nets {
			if n != nil {
				n.SetGradHook(l.gradReady)
			}
		}
	}
	return l, nil
}

// gradReady is the Nets' gradient hook under EarlyPush: Grads()[lo:] of
// the network computing the step are final.
func (l *Learner) gradReady(lo int) {
	p := &l.push
	if p.err != nil {
		return
	}
	if !p.started {
		p.started = true
		if loss := p.net.Loss(); math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
			p.err = errNotFinite
			return
		}
	}
	p.err = l.cfg.Client.PushReady(p.ctx, p.net.Grads(), p.batch, lo)
}

// errNotFinite stops an early push whose mini-batch's loss is NaN or
// infinite; step reports the divergence.
var errNotFinite = errors.New("loss not finite")

// Run trains until the learner's stream ends, then leaves the parameter
// server and returns nil, or returns the first error. On an error an
// asynchronous pull may still be in flight: close the client.
func (l *Learner) Run(ctx context.Context) error {
	c, src := l.cfg.Client, l.cfg.Data
	fresh, member := true, true // fresh: the next step pulls synchronously
	for s := 0; ; s++ {
		b, err := src.Next(ctx)
		switch {
		case errors.Is(err, data.ErrEnd):
			if member {
				if err := c.Leave(ctx); err != nil {
					return l.psError("leave at the end", err)
				}
			}
			return nil
		case errors.Is(err, data.ErrIdle):
			if member {
				if err := c.Leave(ctx); err != nil {
					return l.psError("leave while idle", err)
				}
			}
			member, fresh = false, true
			continue
		case err != nil:
			return fmt.Errorf("learner %d step %d: %w", l.cfg.ID, s, err)
		}
		if !member {
			if err := c.Join(ctx); err != nil {
				return l.psError("join", err)
			}
			member = true
		}
		if err := l.step(ctx, s, b, fresh); err != nil {
			return err
		}
		fresh = false
		if err := src.Done(ctx, b); err != nil {
			return fmt.Errorf("learner %d step %d: %w", l.cfg.ID, s, err)
		}
	}
}

// psError is the error of the parameter server's call err in what (a
// step, a leave, a join): a shard's ErrDiverged rejection is the job's
// divergence (ErrDiverged), whichever call meets it. Under hardsync the
// rejection of the last push ends the leave after it, and any
// rejection is reported by the end of a later call.
func (l *Learner) psError(what string, err error) error {
	if errors.Is(err, ps.ErrDiverged) {
		return fmt.Errorf("learner %d %s: %w: %w", l.cfg.ID, what, ErrDiverged, err)
	}
	return fmt.Errorf("learner %d %s: %w", l.cfg.ID, what, err)
}

// stepError is the error of step s for err of the parameter server.
func (l *Learner) stepError(s int, err error) error { return l.psError(fmt.Sprintf("step %d", s), err) }

// step computes and pushes the gradient of b; fresh pulls the weights
// first even with Overlap (no prefetched weights are current).
func (l *Learner) step(ctx context.Context, s int, b *data.Batch, fresh bool) error {
	c, net := l.cfg.Client, l.nets[0]
	var err error
	switch {
	case !l.cfg.Overlap:
		err = c.Pull(ctx, net.Params())
	case fresh:
		if err = c.Pull(ctx, net.Params()); err == nil {
			err = c.PullAsync(ctx, l.nets[1].Params())
		}
	default:
		err = c.PullAsync(ctx, l.nets[1].Params())
	}
	if err != nil {
		return l.stepError(s, err)
	}
	var id uint64
	if l.cfg.BatchID != nil {
		id = l.cfg.BatchID(b)
	}
	l.push = earlyPush{ctx: ctx, net: net, batch: id}
	noise := id
	if l.cfg.BatchID == nil {
		noise = uint64(l.cfg.ID)<<40 | uint64(s)
	}
	net.SetSeed(l.cfg.Seed ^ noise*0x9e3779b97f4a7c15)
	loss := net.Gradient(b.X, b.Labels)
	if math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
		return fmt.Errorf("learner %d step %d (epoch %d, batch %d): loss %v (NaN or infinite): %w", l.cfg.ID, s, b.Epoch, b.Index, loss, ErrDiverged)
	}
	err = l.push.err
	if !l.cfg.EarlyPush {
		err = c.Push(ctx, net.Grads(), id)
	}
	l.push = earlyPush{}
	if err != nil {
		return l.stepError(s, err)
	}
	if l.cfg.Overlap {
		if err := c.WaitPull(); err != nil {
			return l.stepError(s, err)
		}
		l.nets[0], l.nets[1] = l.nets[1], l.nets[0]
	}
	if l.cfg.OnStep != nil {
		l.cfg.OnStep(b, loss)
	}
	return nil
}
