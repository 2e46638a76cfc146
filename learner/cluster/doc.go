// Package cluster runs a training job as a set of roles that work the
// same in one process (Start, Run: every role over the in-memory
// transport) and as separate processes on many hosts (RunServer,
// RunLearner, RunEvaluator and a Coordinator, each over TCP or verbs).
//
// It owns a job's wiring, so that one process and many cannot drift
// apart: every command fills a Config, the job's description (the
// network, data set and initial weights by name, the model's defaults:
// DefaultsFor, LookupData or, for image data, FitImages and LookupImages,
// UseData, LoadInit), from which derive the
// Settings every process must share, the job id of the job's secret
// (JobID), the initial weights, the weights' codec, the evaluator's
// workers, the data plan and the parameter server's ps.Config. A Topology
// says which process runs which roles and shards (InProcess, Apart,
// ByHand, Ranks: one function per way of starting a job), and
// StartProcess runs one process's part of it: Start is its case of a job
// in one process. NewReport builds the run report from the Result.
//
// The roles:
//
//   - The coordinator (Coordinator) holds the job together: rendezvous
//     (every process says hello with its role and the job's settings,
//     which must be the same everywhere; learners and the evaluator are
//     welcomed with the shard servers' addresses once every process has
//     arrived: the job's clock starts then), membership (learner incarnations; a learner whose control
//     connection is lost, or that misses heartbeats, is removed: its
//     chunks go back to the queue and every shard server evicts it), the
//     job's data (a data.Dispatcher handing out chunks on request, and
//     the input normalisation every learner and the evaluator are
//     welcomed with), the progress and the epoch history, the end of
//     the job (when every chunk is done: it tells the shard servers to
//     finish) and the result.
//   - A shard server (RunServer) runs one or more shards (ps.Server)
//     behind one listener and carries out the coordinator's evictions.
//     It logs the updates its shards refuse (ps.Update.Refused: each
//     would have made a weight or its momentum NaN or infinite) to its
//     Member.Logger with the learners whose gradients they held, a
//     shard's first at once, then at most one line every 10 seconds.
//   - A learner (RunLearner) takes chunks from the coordinator, runs the
//     learner loop (learner.Learner) through the shard servers and
//     reports its progress, which is also its heartbeat.
//   - The evaluator (RunEvaluator) pulls the weights of every epoch end
//     and the final weights from the shard servers and measures them.
//
// Control messages travel over a connection from each role to the
// coordinator, as rdma messages whose Data is JSON (control.go lists
// them); gradients and weights travel only between learners and shard
// servers. docs/cluster.md describes how processes are launched and find
// each other.
//
// Monitoring: the package serves and prints nothing (it logs only to the
// caller's Logger). ServerConfig.OnServe
// and LearnerConfig.OnClient (Config.OnServe and Config.OnClient for
// StartProcess) hand the caller the live ps.Server and ps.Client
// of the roles, whose counters are safe to read from any goroutine, and
// Coordinator.Progress (Job.Progress) and OnEpoch tell the job's
// progress; softsync's --metrics serves them (docs/metrics.md).
package cluster
