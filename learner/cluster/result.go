package cluster

import (
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
)

// Epoch is one entry of a job's history.
type Epoch struct {
	Epoch     int     // 1-based
	TrainLoss float64 // mean loss of the mini-batches of this epoch, over all learners
	TestError float64 // fraction of the test set misclassified (NaN without a test set)
	// TestErrorTop5 is the fraction whose label is not among the
	// network's five largest outputs (NaN without a test set).
	TestErrorTop5 float64
	Seconds       float64 // wall time from the start of training to the epoch's end
}

// Result is what a finished job reports.
type Result struct {
	History []Epoch
	// TestError and TestErrorTop5 are the top-1 and top-5 errors of the
	// final weights (NaN without a test set).
	TestError, TestErrorTop5 float64
	// Interrupted is set for the result of an interrupted job: the weights
	// and test error are those reached, the history has the epochs
	// completed.
	Interrupted bool
	// Weights are the final weights and Normalizer the input
	// normalisation, where this process has them (the evaluator's
	// process: in-process jobs and the coordinator's rank).
	Weights    []float32
	Normalizer data.Normalizer
	Steps      int64   // gradients pushed, all learners (at least the mini-batches delivered)
	Images     int64   // Steps·Batch
	Seconds    float64 // training wall time: the start of the job to its last completed chunk
	// ImagesPerSec is Images/Seconds.
	ImagesPerSec float64
	// LearnerSteps are the gradients each learner pushed, by learner id,
	// all its incarnations together.
	LearnerSteps []int64
	// BatchesPerEpoch is P, the mini-batches of one epoch over all
	// learners (data.Plan.BatchesPerEpoch).
	BatchesPerEpoch int
	Shards          []ps.Stats // each shard's counters, in shard order
	// Pushes are, per shard, the gradients the learners pushed to it: the
	// shard's accepted and dropped gradients plus those lost with a
	// connection or a restarted shard server (the pushes after its
	// checkpoint).
	Pushes []uint64
	// GivenUp are, per shard, the mini-batches whose gradients it lost
	// when its server came back from a checkpoint older than them after
	// the job's data was done (earlier, they are handed out again).
	GivenUp []uint64
	Server  ps.ServerStats // the shard servers' own counters, summed (Shards empty)
	Traffic rdma.Stats     // every learner connection, both directions
	Chunks  data.DispatchStats
	// Lost counts the times the coordinator removed a learner from the
	// job (a lost connection, missed heartbeats); Restarts the times a
	// removed learner joined again with a new incarnation.
	Lost, Restarts int
	// Processes are the roles that took part, in rank order: a process
	// that runs several (the same Host and PID) is there once for each.
	Processes []Process
	// Connections are the learners' connections to the shard servers and
	// the transport each uses (as reported when the learner finished).
	Connections []Connection
	// DataWait is the time the learners waited for their mini-batches to
	// be read and decoded, all learners together (data.Loader.Waited).
	DataWait time.Duration
	// Skipped counts the images of the training and test sets that could
	// not be read or decoded (each replaced by the next one that could);
	// SkippedFirst are the messages of the first data.MaxNamedSkips, each
	// naming its file.
	Skipped      int
	SkippedFirst []string
	// Checkpoints counts the checkpoints the coordinator wrote and those
	// that failed, since it started (a restarted coordinator counts
	// afresh).
	Checkpoints CheckpointStats
}

// CheckpointStats counts a coordinator's checkpoint rounds.
type CheckpointStats struct {
	Written int // versions committed
	Failed  int // rounds that failed: the previous version stayed the newest
	// LastFailure is the last round that failed (nil: none).
	LastFailure *CheckpointFailure
}

// CheckpointFailure is a checkpoint round that failed.
type CheckpointFailure struct {
	Version uint64
	// Epochs are the epochs trained when the round began (mini-batches
	// pushed over the mini-batches of an epoch): the state it was to keep.
	Epochs float64
	// Seconds is the training time when it failed; Time the wall clock.
	Seconds float64
	Time    time.Time
	Err     error
}

// Connection is one learner's connection to a shard server.
type Connection struct {
	Learner   int    `json:"learner"`
	Shards    []int  `json:"shards"`
	Peer      string `json:"peer"`
	Transport string `json:"transport"` // "inmem", "tcp" or "verbs"
	Reason    string `json:"reason"`    // why that transport (see rdma.TransportInfo)
}

// Progress is a snapshot of a running job.
type Progress struct {
	Epoch      int     // epoch in progress, 1-based (by gradients pushed)
	Epochs     int     // epochs of the job
	Batch      int     // mini-batches of this epoch pushed so far, all learners
	Batches    int     // mini-batches per epoch (P)
	Steps      int64   // gradients pushed so far, all learners
	TotalSteps int64   // gradients the job will push
	Loss       float64 // moving average of recent mini-batch losses (NaN before the first)
	Images     int64
	Elapsed    time.Duration // training wall time so far; it stops at the end of the data, as Result.Seconds
	// DataWait is the time the learners waited for data so far, all
	// together (as reported, every Config.Report).
	DataWait time.Duration
	// Skipped counts the bad images found so far.
	Skipped int
	// Waiting is set while the job waits for its processes: at the
	// rendezvous, or a restarted coordinator for the job's processes to
	// come back (Steps are then those of the checkpoint).
	Waiting bool
}
