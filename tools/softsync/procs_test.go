package main

import (
	"runtime"
	"testing"

	"github.com/softsync/softsync/learner/cluster"
)

// TestServerProcs: a process of shard servers only gets a P per shard it
// serves (at most the CPUs); every other process keeps the default.
func TestServerProcs(t *testing.T) {
	apart := cluster.Apart(3, 2)
	for i, r := range apart.Processes {
		want := 0
		if len(r.Servers) > 0 {
			want = 1
		}
		if got := serverProcs(apart, r); got != want {
			t.Errorf("process %d (%+v): %d Ps, want %d", i, r, got, want)
		}
	}
	// One process serving two servers, of one and two shards.
	two := cluster.Topology{Servers: [][]int{{0}, {1, 2}}, Processes: []cluster.Roles{{Servers: []int{0, 1}}}}
	if got, want := serverProcs(two, two.Processes[0]), min(3, runtime.NumCPU()); got != want {
		t.Errorf("a process of 3 shards: %d Ps, want %d", got, want)
	}
	for _, r := range []cluster.Roles{
		{Servers: []int{0}, Learners: []int{0}},
		{Servers: []int{0}, Evaluator: true},
		{Servers: []int{0}, Coordinator: true},
	} {
		if got := serverProcs(two, r); got != 0 {
			t.Errorf("%+v: %d Ps, want the default (0)", r, got)
		}
	}
	if got := serverProcs(cluster.InProcess(2, 2), cluster.InProcess(2, 2).Processes[0]); got != 0 {
		t.Errorf("a job in one process: %d Ps, want the default", got)
	}
}
