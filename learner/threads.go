package learner

import "github.com/softsync/softsync/learner/nn"

// Parallelism is how in-process learners use the cores: the threads of
// the shared engine's BLAS and kernels (kernels.Config.Threads) and the
// goroutines each learner's network splits its mini-batch over
// (JobConfig.Workers, nn.Config.Workers).
type Parallelism struct {
	BLAS    int // engine threads, shared by every learner
	Workers int // network workers per learner
}

// PlanThreads decides the parallelism of learners in-process learners of
// mini-batch batch on a machine with cores cores. Each learner gets
// threads compute threads (0: the cores divided evenly among the
// learners, at least one), used as network workers over a single-threaded
// engine: concurrent calls into a multi-threaded OpenBLAS contend for its
// thread pool (two learners, or a learner and the evaluator, slow each
// other down several times), while workers of their own share nothing.
// A learner uses at most one worker per spec.WorkerBatch() images: below
// that share a worker costs more than it gains.
func PlanThreads(spec *nn.Spec, cores, learners, batch, threads int) Parallelism {
	if threads <= 0 {
		threads = max(1, cores/max(learners, 1))
	}
	return Parallelism{BLAS: 1, Workers: max(1, min(threads, batch/spec.WorkerBatch()))}
}
