package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/errcode"
)

// EvaluatorConfig configures the evaluator role.
type EvaluatorConfig struct {
	Member
	Spec   *nn.Spec
	Engine kernels.Engine
	// Test is measured with the coordinator's normalisation (its
	// welcome's); nil: no test error, only the weights.
	Test    data.Set
	Batch   int // images per evaluation forward pass (0: 100)
	Workers int
	Shards  int
	// OnFinal, if set, receives the final weights (those reached, when
	// interrupted) before their test error goes to the coordinator. It is
	// the slice RunEvaluator returns.
	OnFinal func([]float32)
}

// RunEvaluator runs the evaluator: a read-only client of the shard
// servers that takes the weights at every epoch end but the last (the
// shards' snapshots) and the final weights, measures their test error and
// reports it to the coordinator. It returns the final weights once the
// coordinator has stopped the job well.
//
// The last epoch of a job that trains all its epochs is measured on the
// final weights; with a MaxSteps cut, every complete epoch is measured on
// its snapshot and the final weights after them.
func RunEvaluator(ctx context.Context, cfg EvaluatorConfig) ([]float32, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cc, w, err := cfg.join(ctx, hello{})
	if err != nil {
		return nil, err
	}
	defer cc.conn.Close()
	addrs, stopped, interrupted := make(chan addr, 1), make(chan error, 1), make(chan struct{})
	go func() { // the coordinator's answers, its interruption and its stop
		for {
			t, b, err := cc.recv(ctx)
			var cmd evalCmd
			switch {
			case err != nil:
				cmd.err = fmt.Errorf("%s: %w: lost the coordinator: %v", cfg.Process, ErrJobFailed, err)
			case t == tStop:
				cmd = evalCommand(t, b)
			default:
				if cmd = evalCommand(t, b); cmd.err != nil {
					cmd.err = fmt.Errorf("%s: %w", cfg.Process, cmd.err)
				}
			}
			switch {
			case cmd.addr != nil:
				latest(addrs, *cmd.addr)
				continue
			case cmd.interrupt:
				close(interrupted)
				continue
			}
			stopped <- cmd.err
			cancel()
			return
		}
	}()
	final, err := evaluate(ctx, cfg, cc, w, cfg.redialer(func() *ctrl { return cc }, addrs, newWaitLock()), interrupted)
	if err != nil {
		// A shard server gone is often the end of a job that failed
		// elsewhere: give the coordinator a moment to say so, as its
		// reason explains more.
		select {
		case serr := <-stopped:
			if serr != nil {
				return nil, serr
			}
		case <-time.After(stopGrace):
			cc.send(context.Background(), tFail, failure{errcode.Encode(err)})
		}
		return nil, err
	}
	if err := <-stopped; err != nil {
		return nil, err
	}
	return final, nil
}

// stopGrace is how long a role whose own work failed waits for the
// coordinator's stop before it reports its failure as the job's.
const stopGrace = 2 * time.Second

// evaluate measures every epoch and the final weights, and returns them.
// Once interrupted, it measures the weights as they are instead (epoch
// −1) and returns those.
func evaluate(ctx context.Context, cfg EvaluatorConfig, cc *ctrl, w welcome, redial func(context.Context, int) (rdma.Conn, error), interrupted <-chan struct{}) ([]float32, error) {
	total := cfg.Spec.VectorLen()
	client, err := ps.Dial(ctx, shardNetwork{cfg.Network, &cfg.Member, w.Addrs, redial}, w.Addrs, ps.ClientConfig{Learner: evaluatorID, Total: total, Shards: cfg.Shards, Redial: redial})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	var net *nn.Net
	var norm data.Normalizer
	if cfg.Test != nil && cfg.Test.Info().Len > 0 {
		if norm, err = welcomeNorm(w, cfg.Spec); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Process, err)
		}
		if net, err = nn.New(cfg.Spec, cfg.Engine, nn.Config{Batch: max(cfg.Batch, 100), Workers: cfg.Workers, Inference: true}); err != nil {
			return nil, err
		}
		defer net.Close()
	}
	skipped := 0 // the test set's bad images reported
	epochCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-interrupted:
			cancel()
		case <-epochCtx.Done():
		}
	}()
	plan := newEvalPlan(w)
	weights := make([]float32, total)
	for {
		select {
		case <-interrupted:
			plan.interrupt()
		default:
		}
		epoch, ok := plan.next()
		if !ok {
			return weights, nil
		}
		sctx := epochCtx
		if epoch < 0 {
			sctx = ctx // the weights reached, once interrupted
		}
		if _, err := client.Snapshot(sctx, epoch, weights); err != nil {
			if err := plan.failed(cfg.Process, epoch, epochCtx.Err() != nil && ctx.Err() == nil, err); err != nil {
				return nil, err
			}
			continue
		}
		// The time of the epoch's end is that of the snapshot's arrival.
		taken, r := plan.measured(epoch)
		if err := cc.send(ctx, tEpoch, taken); err != nil {
			return nil, err
		}
		if net != nil {
			te, te5, err := learner.Evaluate(net, weights, cfg.Test, norm)
			if err != nil {
				return nil, fmt.Errorf("%s: test error of epoch %d: %w", cfg.Process, epoch, err)
			}
			r.TestError, r.TestErrorTop5 = &te, &te5
			r.Skipped = cfg.Test.Skips(skipped)
			skipped += len(r.Skipped)
		}
		if epoch <= 0 && cfg.OnFinal != nil {
			cfg.OnFinal(weights)
		}
		if err := cc.send(ctx, tEpoch, r); err != nil {
			return nil, err
		}
	}
}

// evalPlan is the evaluator's schedule as a deterministic core: the
// weights of every epoch end it measures (the snapshots of a job's
// complete epochs but the last, from the first a resumed job has not
// passed), then the final weights (epoch 0), which are always measured,
// even when a resumed job has passed every epoch end before its
// checkpoint; the last epoch of a job that trains all its epochs is
// measured on the final weights. Once interrupted, the weights as they
// are (−1) instead of what is left.
type evalPlan struct {
	epochs      []int
	i           int
	interrupted bool
	now         bool // the weights as they are were measured
}

func newEvalPlan(w welcome) *evalPlan {
	per := w.Plan.BatchesPerEpoch()
	full := w.Plan.Total() / per
	if full == w.Plan.Epochs && full > 0 {
		full-- // the last epoch is measured on the final weights
	}
	p := &evalPlan{}
	for e := min(max(w.FirstEpoch-1, 0), full); e < full; e++ {
		p.epochs = append(p.epochs, e+1)
	}
	p.epochs = append(p.epochs, 0)
	return p
}

// next returns the weights to measure next: an epoch end, 0 for the final
// weights, −1 for the weights as they are; false once every one is.
func (p *evalPlan) next() (int, bool) {
	switch {
	case p.interrupted:
		return -1, !p.now
	case p.i < len(p.epochs):
		return p.epochs[p.i], true
	}
	return 0, false
}

// measured records that the weights of epoch were taken, and returns the
// reports to the coordinator: that they were taken (at their arrival),
// then their measure (the caller adds the test error).
func (p *evalPlan) measured(epoch int) (taken, result epochResult) {
	if epoch < 0 {
		p.now = true
	} else {
		p.i++
	}
	return epochResult{Epoch: epoch, Taken: true}, epochResult{Epoch: epoch}
}

// failed takes the failure (err) of the snapshot of epoch, taken by
// process who: nil if the evaluator goes on, the snapshot of an epoch
// ended by the interruption (interrupted: the weights as they are are
// measured next); else the evaluator's error.
func (p *evalPlan) failed(who Process, epoch int, interrupted bool, err error) error {
	switch {
	case epoch >= 0 && interrupted:
		p.interrupt()
		return nil
	case epoch < 0:
		return fmt.Errorf("%s: the weights reached: %w", who, err)
	}
	return fmt.Errorf("%s: weights of epoch %d: %w", who, epoch, err)
}

// interrupt takes the coordinator's interruption: the weights as they
// are are measured next, instead of the epochs left.
func (p *evalPlan) interrupt() { p.interrupted = true }

// evalCmd is what a message of the coordinator asks of the evaluator:
// to hand the redialer an address, to measure the weights as they are, or
// else to stop, with the job's failure if any.
type evalCmd struct {
	addr      *addr
	interrupt bool
	err       error
}

// evalCommand takes the coordinator's message t with data b.
func evalCommand(t rdma.Type, b []byte) evalCmd {
	switch t {
	case tAddr:
		var a addr
		if err := decode(t, b, &a); err != nil {
			return evalCmd{err: err}
		}
		return evalCmd{addr: &a}
	case tInterrupt:
		return evalCmd{interrupt: true}
	case tStop:
		return evalCmd{err: stopErr(t, b)}
	}
	return evalCmd{err: fmt.Errorf("%w: message %#x from the coordinator", ErrProtocol, t)}
}
