package cluster

import (
	"context"
	"fmt"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
)

// EvaluatorConfig configures the evaluator role.
type EvaluatorConfig struct {
	Member
	Spec       *nn.Spec
	Engine     kernels.Engine
	Test       *data.Dataset // nil: no test error, only the weights
	Normalizer data.Normalizer
	Batch      int // images per evaluation forward pass (0: 100)
	Workers    int
	Shards     int
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
	final, err := evaluate(ctx, cfg, cc, w)
	if err != nil {
		cc.send(context.Background(), tFail, failure{Err: err.Error()})
		return nil, err
	}
	t, b, err := cc.recv(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w: lost the coordinator: %v", cfg.Process, ErrJobFailed, err)
	case t != tStop:
		return nil, fmt.Errorf("%s: %w: message %#x from the coordinator", cfg.Process, ErrProtocol, t)
	}
	if err := stopped(t, b); err != nil {
		return nil, err
	}
	return final, nil
}

// evaluate measures every epoch and the final weights, and returns them.
func evaluate(ctx context.Context, cfg EvaluatorConfig, cc *ctrl, w welcome) ([]float32, error) {
	total := cfg.Spec.NumParams()
	client, err := ps.Dial(ctx, cfg.Network, w.Addrs, ps.ClientConfig{Learner: evaluatorID, Total: total, Shards: cfg.Shards})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	var net *nn.Net
	if cfg.Test != nil && cfg.Test.N > 0 {
		if net, err = nn.New(cfg.Spec, cfg.Engine, nn.Config{Batch: max(cfg.Batch, 100), Workers: cfg.Workers}); err != nil {
			return nil, err
		}
		defer net.Close()
	}
	per := w.Plan.BatchesPerEpoch()
	full := w.Plan.Total() / per
	if full == w.Plan.Epochs && full > 0 {
		full-- // the last epoch is measured on the final weights
	}
	weights := make([]float32, total)
	for e := 0; e <= full; e++ {
		epoch := e + 1
		if e == full {
			epoch = 0
		}
		if _, err := client.Snapshot(ctx, epoch, weights); err != nil {
			return nil, fmt.Errorf("%s: weights of epoch %d: %w", cfg.Process, epoch, err)
		}
		// The time of the epoch's end is that of the snapshot's arrival.
		if err := cc.send(ctx, tEpoch, epochResult{Epoch: epoch, Taken: true}); err != nil {
			return nil, err
		}
		r := epochResult{Epoch: epoch}
		if net != nil {
			te := learner.Evaluate(net, weights, cfg.Test, cfg.Normalizer)
			r.TestError = &te
		}
		if err := cc.send(ctx, tEpoch, r); err != nil {
			return nil, err
		}
	}
	return weights, nil
}
