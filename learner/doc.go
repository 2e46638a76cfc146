// Package learner is the worker side of softsync and the in-process job
// runner.
//
// A Learner runs the loop of Zhang et al.: getMinibatch → pull → compute
// (forward and backward, the gradient averaged over the μ images of the
// mini-batch) → push, one gradient per push, never accumulated locally.
// It talks to the parameter server through a ps.Client, computes on its
// own nn.Net (with its own kernels.Workspace and buffers) and may share
// the kernels.Engine with any number of other learners. With Overlap it
// prefetches the next weights while it computes, and the gradients it
// pushes carry the stamps of the weights they were computed on, so the
// staleness the server measures is the real one.
//
// A Job (StartJob, Run) runs a whole training job in one process: a
// ps.Group of Shards shard servers and Learners learners over the
// in-memory transport or loopback TCP, under hardsync or n-softsync, with
// the training set partitioned among the learners, epoch accounting, the
// test error at every epoch end and a per-epoch history. A single learner
// is the job with Learners = 1: the same code path, the same solver on
// the server side.
//
// Threads: PlanThreads splits the cores among in-process learners so that
// they do not oversubscribe the machine: each learner's network splits its
// mini-batch over workers of its own (nn.Config.Workers) on a
// single-threaded engine.
//
// Weights files (SaveWeights, LoadWeights) hold a network's flat parameter
// vector with a header naming the network and a CRC32C checksum; the
// format is in docs/weights.md.
package learner
