package main

import (
	"os"
	"runtime"

	"github.com/softsync/softsync/learner/cluster"
)

// serverProcs returns the GOMAXPROCS of a process that runs shard servers
// and nothing else (no learner, evaluator or coordinator): one per shard
// it serves, at most the CPUs it may use; 0 for any other process. A
// shard's work is one goroutine's (its loop, fed by the connections'
// readers and writers), and a process with more Ps than that hands its
// goroutines from thread to thread, waking threads, and costs the
// learners on the same cores a context switch each time.
func serverProcs(t cluster.Topology, r cluster.Roles) int {
	if r.Coordinator || r.Evaluator || len(r.Learners) > 0 || len(r.Servers) == 0 {
		return 0
	}
	shards := 0
	for _, id := range r.Servers {
		shards += len(t.Servers[id])
	}
	return max(1, min(shards, runtime.NumCPU()))
}

// setServerProcs applies serverProcs unless $GOMAXPROCS says otherwise.
func setServerProcs(t cluster.Topology, r cluster.Roles) {
	if n := serverProcs(t, r); n > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(n)
	}
}
