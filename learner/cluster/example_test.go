package cluster_test

import (
	"context"
	"fmt"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
)

// Four learners train the small fully connected network on synthetic
// MNIST-shaped data for two epochs under 4-softsync (fully asynchronous)
// with the staleness-aware learning rate, through an in-process
// parameter server of two shards.
func ExampleRun() {
	spec, _ := nn.Builtin("mlp")
	engine, _, _ := kernels.New(kernels.Config{Threads: 1})
	all := data.Synthetic(840, 1, 28, 28, 10, 1) // one set of class prototypes
	all.Scale = data.MNISTScale
	train, test := all.Subset(640), *all
	test.N, test.Pixels, test.Labels = 200, all.Pixels[640*784:], all.Labels[640:]
	res, err := cluster.Run(context.Background(), cluster.Config{
		Spec: spec, Engine: engine, Train: train, Test: &test,
		Learners: 4, Batch: 16, Epochs: 2, Seed: 1,
		Protocol: ps.Softsync, N: 4, Shards: 2,
		Solver: sgd.Config{LR: 0.01, Momentum: 0.9, LRMode: sgd.LRStaleness},
	})
	if err != nil {
		panic(err)
	}
	st := res.Shards[0]
	fmt.Printf("%d epochs of %d mini-batches: %d gradients pushed, %d updates\n",
		len(res.History), res.BatchesPerEpoch, res.Steps, st.Updates)
	fmt.Printf("loss fell: %v; test error below 50%%: %v\n",
		res.History[1].TrainLoss < res.History[0].TrainLoss, res.TestError < 0.5)
	// Output:
	// 2 epochs of 40 mini-batches: 80 gradients pushed, 80 updates
	// loss fell: true; test error below 50%: true
}
