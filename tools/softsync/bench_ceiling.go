package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
)

// independentTransport is the transport field of bench speedup's rows of
// independent jobs (--ceiling).
const independentTransport = "independent"

// runIndependent runs j.learners one-learner jobs of j's model at once in
// this process, each with one compute thread and its parameter server in
// process (bench train's job on random data), and returns them as the
// report of one job: their images over the time of the slowest. It is
// what λ learners make when nothing but the machine is shared (no
// transport, no shard server or head processes): the ceiling of the
// speedup of the same per-learner work on this machine.
func runIndependent(ctx context.Context, app *App, j benchJob) (*launchResult, error) {
	spec, err := nn.Load(j.model)
	if err != nil {
		return nil, fmt.Errorf("--model: %w", err)
	}
	app.Threads = 1
	e, _, err := app.EngineInfo()
	if err != nil {
		return nil, err
	}
	cfg := benchTrainConfig(spec, e, j.batch, 1, 1, j.steps, ps.Hardsync, "inmem")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make([]*cluster.Job, j.learners)
	for i := range jobs {
		if jobs[i], err = cluster.Start(ctx, cfg); err != nil {
			cancel()
			for _, started := range jobs[:i] {
				started.Wait()
			}
			return nil, fmt.Errorf("%s, independent job %d: %w", j.modelBatch, i, err)
		}
	}
	results, errs := make([]*cluster.Result, len(jobs)), make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() { results[i], errs[i] = job.Wait() })
	}
	wg.Wait()
	rep := &cluster.Report{}
	for i, res := range results {
		if errs[i] != nil {
			return nil, fmt.Errorf("%s, independent job %d of %d: %w", j.modelBatch, i, len(jobs), errs[i])
		}
		rep.Steps += res.Steps
		rep.Seconds = max(rep.Seconds, res.Seconds)
	}
	rep.ImagesPerSec = float64(rep.Steps*int64(j.batch)) / rep.Seconds
	return &launchResult{Report: rep, Usage: []procUsage{}}, nil
}
