package bench

import (
	"math"
	"testing"

	"github.com/softsync/softsync/learner/cluster"
)

func TestSpeedupRows(t *testing.T) {
	jobs := SpeedupGrid{Models: []ModelBatch{{"lenet", 64}}, Protocols: []string{"softsync"}, Learners: []int{1, 2}, Transports: []string{"tcp"},
		EarlyPush: []bool{false, true}, Shards: []int{2}, Binds: []string{"learners"}, Steps: 10}.Jobs()
	if ceil := (SpeedupGrid{Models: []ModelBatch{{"lenet", 64}}, Data: "synthetic", Protocols: []string{"softsync"}, Learners: []int{1, 2}, Transports: []string{"tcp"},
		EarlyPush: []bool{false}, Shards: []int{1}, Binds: []string{"learners"}, Steps: 10, Ceiling: true}).Jobs(); len(ceil) != 4 ||
		ceil[0].Transport != Independent || ceil[3].Data != "synthetic" || ceil[1].Transport != Independent || ceil[1].Learners != 2 || ceil[2].Transport != "tcp" {
		t.Fatalf("jobs with the ceiling: %+v", ceil)
	}
	if len(jobs) != 4 || !jobs[1].EarlyPush || jobs[2].EarlyPush || jobs[2].Learners != 2 || jobs[3].Steps != 10 || jobs[3].Shards != 2 {
		t.Fatalf("jobs %+v", jobs)
	}
	res := func(ips float64, tag string) *JobResult {
		return &JobResult{Report: &cluster.Report{ImagesPerSec: ips}, Usage: []ProcUsage{{Process: tag}}}
	}
	runs := [][]*JobResult{
		{res(1000, "a"), res(900, "b"), res(1100, "c")},
		{res(1200, "a"), res(1300, "b"), res(1250, "c")},
		{res(1700, "a"), res(1900, "b"), res(1800, "c")},
		{res(2000, "a"), res(2500, "b"), res(2400, "c")},
	}
	rows := speedupRows(jobs, runs)
	for i, want := range []struct {
		ips, speedup float64
		run          string
	}{{1000, 1, "a"}, {1250, 1, "c"}, {1800, 1.8, "c"}, {2400, 1.92, "c"}} {
		r := rows[i]
		if r.ImagesPerSec != want.ips || math.Abs(r.Speedup-want.speedup) > 1e-12 || math.Abs(r.Efficiency-want.speedup/float64(r.Learners)) > 1e-12 ||
			r.Processes[0].Process != want.run || len(r.Runs) != 3 || r.Runs[0] != runs[i][0].Report.ImagesPerSec {
			t.Errorf("row %d: %+v, want images/s %g (run %s), speedup %g", i, r, want.ips, want.run, want.speedup)
		}
	}
	// Shard counts take turns at each λ, and each is the base of its own
	// speedups.
	js := SpeedupGrid{Models: []ModelBatch{{"lenet", 64}}, Protocols: []string{"hardsync"}, Learners: []int{1, 2}, Transports: []string{"shm"},
		EarlyPush: []bool{false}, Shards: []int{1, 2}, Binds: []string{"learners"}, Steps: 10}.Jobs()
	if len(js) != 4 || js[0].Shards != 1 || js[1].Shards != 2 || js[1].Learners != 1 || js[2].Shards != 1 || js[3].Shards != 2 || js[3].Learners != 2 {
		t.Fatalf("jobs of --shards 1,2: %+v", js)
	}
	rows = speedupRows(js, [][]*JobResult{{res(1000, "a")}, {res(800, "a")}, {res(1500, "a")}, {res(1600, "a")}})
	if rows[2].Speedup != 1.5 || rows[3].Speedup != 2 || rows[3].Shards != 2 {
		t.Errorf("rows of --shards 1,2: %+v", rows)
	}
	// So do bindings.
	js = SpeedupGrid{Models: []ModelBatch{{"lenet", 64}}, Protocols: []string{"hardsync"}, Learners: []int{1, 2}, Transports: []string{"shm"},
		EarlyPush: []bool{false}, Shards: []int{1}, Binds: []string{"learners", "none"}, Steps: 10}.Jobs()
	if len(js) != 4 || js[0].Bind != "learners" || js[1].Bind != "none" || js[1].Learners != 1 || js[2].Bind != "learners" || js[3].Bind != "none" || js[3].Learners != 2 {
		t.Fatalf("jobs of --bind learners,none: %+v", js)
	}
	rows = speedupRows(js, [][]*JobResult{{res(1000, "a")}, {res(800, "a")}, {res(1500, "a")}, {res(1600, "a")}})
	if rows[2].Speedup != 1.5 || rows[3].Speedup != 2 || rows[3].Bind != "none" {
		t.Errorf("rows of --bind learners,none: %+v", rows)
	}
	// A row's transport used is its median run's: what auto chose.
	js = SpeedupGrid{Models: []ModelBatch{{"lenet", 64}}, Protocols: []string{"hardsync"}, Learners: []int{1}, Transports: []string{"auto"},
		EarlyPush: []bool{false}, Shards: []int{1}, Binds: []string{"learners"}, Steps: 10}.Jobs()
	used := func(ips float64, tr string) *JobResult {
		return &JobResult{Report: &cluster.Report{ImagesPerSec: ips, Transport: tr}}
	}
	rows = speedupRows(js, [][]*JobResult{{used(1, "tcp"), used(3, "shm"), used(2, "verbs")}})
	if rows[0].Transport != "auto" || rows[0].Used != "verbs" {
		t.Errorf("transport %q, used %q; want auto, and verbs of the median run", rows[0].Transport, rows[0].Used)
	}
}
