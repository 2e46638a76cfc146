// Package learner is the worker side of softsync.
//
// A Learner runs the loop of Zhang et al.: getMinibatch → pull → compute
// (forward and backward, the gradient averaged over the μ images of the
// mini-batch) → push, one gradient per push, never accumulated locally.
// It talks to the parameter server through the PS interface (a
// *ps.Client), takes its mini-batches from a Batches stream (a
// *data.Loader over the chunks the job hands out) until the job's data
// is done, computes on its own nn.Net (with its own kernels.Workspace and
// buffers) and may share the kernels.Engine with any number of other
// learners. With Overlap it prefetches the next weights while it
// computes, and the gradients it pushes carry the stamps of the weights
// they were computed on, so the staleness the server measures is the
// real one. With EarlyPush it sends each shard its slice of the gradient
// as soon as backward has produced it, while backward goes on.
//
// The roles of a whole job (coordinator, shard servers, learners,
// evaluator), in one process or many, are package learner/cluster.
//
// Threads: PlanThreads splits the cores among in-process learners so that
// they do not oversubscribe the machine: each learner's network splits its
// mini-batch over workers of its own (nn.Config.Workers) on a
// single-threaded engine.
//
// Weights files (SaveWeights, LoadWeights) hold a network's flat parameter
// vector with a header naming the network and a CRC32C checksum; the
// format is in docs/weights.md. Evaluate measures a network's test error.
package learner
