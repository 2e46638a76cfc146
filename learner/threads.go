package learner

// Parallelism is how in-process learners use the cores: the threads of
// the shared engine's BLAS and kernels (kernels.Config.Threads) and the
// goroutines each learner's network splits its mini-batch over
// (JobConfig.Workers, nn.Config.Workers).
type Parallelism struct {
	BLAS    int // engine threads, shared by every learner
	Workers int // network workers per learner
}

// minWorkerBatch is the smallest share of a mini-batch worth a worker of
// its own: below it the split costs about what it gains (LeNet, one
// learner on two cores: μ = 8 runs at the same speed on one worker or two,
// μ = 16 is 13% faster on two, μ = 32 57%).
const minWorkerBatch = 8

// PlanThreads decides the parallelism of learners in-process learners of
// mini-batch batch on a machine with cores cores. Each learner gets
// threads compute threads (0: the cores divided evenly among the
// learners, at least one), used as network workers over a single-threaded
// engine: concurrent calls into a multi-threaded OpenBLAS contend for its
// thread pool (two learners, or a learner and the evaluator, slow each
// other down several times), while workers of their own share nothing.
// A learner uses at most one worker per minWorkerBatch images.
func PlanThreads(cores, learners, batch, threads int) Parallelism {
	if threads <= 0 {
		threads = max(1, cores/max(learners, 1))
	}
	return Parallelism{BLAS: 1, Workers: max(1, min(threads, batch/minWorkerBatch))}
}
