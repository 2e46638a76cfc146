package bench

import (
	"context"

	"github.com/softsync/softsync/learner/cluster"
)

// Processes starts softsync itself in processes of their own on this
// host: what only the binary can do, since it knows its own command line,
// hands its jobs their secret and owns their process groups. The binary
// fills it in (tools/softsync); the benchmarks that measure whole
// processes (All, Speedup, Scale) take it.
type Processes interface {
	// RunJSON runs softsync with args (global flags, then a subcommand
	// and its flags) in a process of its own, pinned to cpus (every CPU
	// this process may use when empty), waits for it, and decodes its
	// standard output, one JSON value, into v. The error of a process
	// that failed names its command line and ends with the tail of its
	// standard error.
	RunJSON(ctx context.Context, cpus []int, v any, args ...string) error
	// Run runs softsync with args as RunJSON does, discarding its
	// standard output, and returns what the process used (its CPU time
	// and peak resident set, also when it failed).
	Run(ctx context.Context, cpus []int, args ...string) (ProcUsage, error)
	// Launch runs a training job as processes on this host, as softsync
	// launch does, and returns the head's report and what each process
	// used.
	Launch(ctx context.Context, job LaunchJob) (*JobResult, error)
}

// LaunchJob is a job for Processes.Launch: softsync launch -n Learners
// --shards Shards --bind Bind -- Train..., each process with Threads
// compute threads.
type LaunchJob struct {
	Learners, Shards int
	// Bind is launch's --bind: "learners" pins each learner to CPUs of
	// its own, "none" leaves every process to the scheduler.
	Bind string
	// Pin, when set, gives the CPUs of each process by role ("eval",
	// "ps", "learner") and id, whatever Bind says.
	Pin     func(role string, id int) []int
	Threads int      // --threads of every process
	Train   []string // softsync train's flags
}

// JobResult is what a launched job leaves: the head's report and each
// process's use of the machine, the head first, then the shard servers
// and learners in the order of cluster.Apart.
type JobResult struct {
	Report *cluster.Report
	Usage  []ProcUsage
}

// ProcUsage is what a process of a launched job used.
type ProcUsage struct {
	Process string `json:"process"` // "head", "shard server K", "learner R"
	CPUs    []int  `json:"cpus,omitempty"`
	PeakRSS int64  `json:"peak_rss_bytes"` // VmHWM, the largest of its runs
	// CPUSeconds is the CPU time (user and system) of all its runs, from
	// start to exit: start-up and data loading included.
	CPUSeconds float64 `json:"cpu_seconds"`
}
