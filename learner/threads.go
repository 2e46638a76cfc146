package learner

// ThreadsPerLearner returns the compute threads (BLAS and kernel threads)
// each of learners in-process learners should use on a machine with cores
// cores: the cores divided evenly, at least one. With learners ≥ cores
// every learner runs single-threaded and the learners themselves use the
// cores; with one learner it gets every core.
func ThreadsPerLearner(cores, learners int) int {
	if learners < 1 {
		learners = 1
	}
	return max(1, cores/learners)
}
