package cluster

import (
	"context"
	"fmt"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
)

// BenchmarkJob measures whole training jobs on random data through the
// runner: every op is one learner step (pull, forward, backward, push,
// the server's update); images/s counts all learners. Compare λ = 1 and
// λ = 2 at the same μ (learners > 1 run softsync with n = λ). Threads
// follow PlanThreads unless the case sets threads per learner.
func BenchmarkJob(b *testing.B) {
	for _, c := range []struct {
		net             string
		batch, learners int
		threads         int // per learner; 0: PlanThreads decides
		overlap         bool
	}{
		{"lenet", 4, 1, 0, false}, {"lenet", 4, 2, 0, false},
		{"lenet", 8, 1, 0, false}, {"lenet", 8, 2, 0, false}, {"lenet", 8, 2, 0, true},
		{"lenet", 64, 1, 0, false}, {"lenet", 64, 1, 1, false}, {"lenet", 64, 2, 0, false},
	} {
		name := fmt.Sprintf("%s/batch=%d/learners=%d/threads=%d/overlap=%v", c.net, c.batch, c.learners, c.threads, c.overlap)
		b.Run(name, func(b *testing.B) {
			s := spec(b, c.net)
			ds := data.Synthetic(512, s.Input.C, s.Input.H, s.Input.W, s.Classes(), 1)
			ds.Scale = 1.0 / 256
			proto := ps.Hardsync
			if c.learners > 1 {
				proto = ps.Softsync
			}
			steps := max(1, b.N/c.learners)
			par := learner.PlanThreads(s, kernels.DefaultThreads(), c.learners, c.batch, c.threads)
			e, _, err := kernels.New(kernels.Config{Threads: par.BLAS})
			if err != nil {
				b.Fatal(err)
			}
			cfg := Config{Spec: s, Engine: e, Train: ds, Learners: c.learners, Batch: c.batch, Workers: par.Workers,
				Epochs: steps, MaxSteps: steps * c.learners, Protocol: proto, N: c.learners, Shards: 1, Overlap: c.overlap,
				Solver: sgd.Config{LR: 1e-4, Momentum: 0.9, LRMode: sgd.LRStaleness}}
			b.ReportAllocs()
			b.ResetTimer()
			res, err := Run(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(res.Images)/b.Elapsed().Seconds(), "images/s")
		})
	}
}
