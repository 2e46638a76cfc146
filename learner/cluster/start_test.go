package cluster

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// TestJobCleanup ends jobs early, over both transports: cancelled before
// any role has joined, cancelled while training, and failed by a role (a
// learner whose loss diverges). Wait must return the reason (matching
// context.Canceled, or learner.ErrDiverged), and the job must leave
// nothing behind: its listeners closed, every goroutine it started ended.
func TestJobCleanup(t *testing.T) {
	train, test := mnistSubset(t, 2000, 200)
	for _, transport := range []string{"inmem", "tcp"} {
		for _, end := range []string{"cancelled at start", "cancelled while training", "a role fails"} {
			t.Run(transport+"/"+end, func(t *testing.T) {
				base := runtime.NumGoroutine()
				cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 3, Batch: 8,
					Protocol: ps.Softsync, N: 3, Shards: 2, Epochs: 20, Seed: 1, Transport: transport,
					Solver: sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness}}
				want := context.Canceled
				if end == "a role fails" {
					cfg.Solver.LR, want = 1e9, learner.ErrDiverged
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if end == "cancelled at start" {
					cancel()
				}
				if end == "cancelled while training" {
					cfg.Epochs = 1000 // far more than the test waits for
				}
				j, err := Start(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if end == "cancelled while training" {
					transporttest.Eventually(t, 2*time.Minute, "the job to push 50 gradients", func() bool { return j.Progress().Steps >= 50 })
					cancel()
				}
				res, err := waitJob(t, j, time.Minute)
				if !errors.Is(err, want) || res != nil {
					t.Errorf("Wait: a result (%t), error %v; want no result and %v", res != nil, err, want)
				}
				net, err := rdma.Open(transport, rdma.Options{Job: 1})
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range j.addrs {
					if c, err := net.Dial(context.Background(), a); !errors.Is(err, rdma.ErrRefused) {
						t.Errorf("dial %s after the job: %v, want refused", a, err)
						if c != nil {
							c.Close()
						}
					}
				}
				transporttest.WaitGoroutines(t, base, 10*time.Second)
			})
		}
	}
}
