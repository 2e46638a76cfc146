package main

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/cluster"
)

func TestParseModelBatches(t *testing.T) {
	ms, err := parseModelBatches("lenet, cifar10_full:100", 64)
	if err != nil {
		t.Fatal(err)
	}
	if want := []modelBatch{{"lenet", 64}, {"cifar10_full", 100}}; !slices.Equal(ms, want) {
		t.Errorf("got %v, want %v", ms, want)
	}
	for _, bad := range []string{"lenet:0", "lenet:x", ":8", "lenet,"} {
		if _, err := parseModelBatches(bad, 64); err == nil || !strings.Contains(err.Error(), "--model") {
			t.Errorf("%q: %v, want an error naming --model", bad, err)
		}
	}
	if _, err := parseCounts("--learners", "1,0"); err == nil || !strings.Contains(err.Error(), `"0"`) {
		t.Errorf("--learners 1,0: %v", err)
	}
}

func TestSpeedupRows(t *testing.T) {
	jobs := speedupGrid{models: []modelBatch{{"lenet", 64}}, protocols: []string{"softsync"}, learners: []int{1, 2}, transports: []string{"tcp"},
		early: []bool{false, true}, shards: []int{2}, binds: []string{"learners"}, steps: 10}.cells()
	if ceil := (speedupGrid{models: []modelBatch{{"lenet", 64}}, data: "synthetic", protocols: []string{"softsync"}, learners: []int{1, 2}, transports: []string{"tcp"},
		early: []bool{false}, shards: []int{1}, binds: []string{"learners"}, steps: 10, ceiling: true}).cells(); len(ceil) != 4 ||
		ceil[0].transport != independentTransport || ceil[3].data != "synthetic" || ceil[1].transport != independentTransport || ceil[1].learners != 2 || ceil[2].transport != "tcp" {
		t.Fatalf("jobs with the ceiling: %+v", ceil)
	}
	if len(jobs) != 4 || !jobs[1].earlyPush || jobs[2].earlyPush || jobs[2].learners != 2 || jobs[3].steps != 10 || jobs[3].shards != 2 {
		t.Fatalf("jobs %+v", jobs)
	}
	res := func(ips float64, tag string) *launchResult {
		return &launchResult{Report: &cluster.Report{ImagesPerSec: ips}, Usage: []procUsage{{Process: tag}}}
	}
	runs := [][]*launchResult{
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
	js := speedupGrid{models: []modelBatch{{"lenet", 64}}, protocols: []string{"hardsync"}, learners: []int{1, 2}, transports: []string{"shm"},
		early: []bool{false}, shards: []int{1, 2}, binds: []string{"learners"}, steps: 10}.cells()
	if len(js) != 4 || js[0].shards != 1 || js[1].shards != 2 || js[1].learners != 1 || js[2].shards != 1 || js[3].shards != 2 || js[3].learners != 2 {
		t.Fatalf("jobs of --shards 1,2: %+v", js)
	}
	rows = speedupRows(js, [][]*launchResult{{res(1000, "a")}, {res(800, "a")}, {res(1500, "a")}, {res(1600, "a")}})
	if rows[2].Speedup != 1.5 || rows[3].Speedup != 2 || rows[3].Shards != 2 {
		t.Errorf("rows of --shards 1,2: %+v", rows)
	}
	// So do bindings.
	js = speedupGrid{models: []modelBatch{{"lenet", 64}}, protocols: []string{"hardsync"}, learners: []int{1, 2}, transports: []string{"shm"},
		early: []bool{false}, shards: []int{1}, binds: []string{"learners", "none"}, steps: 10}.cells()
	if len(js) != 4 || js[0].bind != "learners" || js[1].bind != "none" || js[1].learners != 1 || js[2].bind != "learners" || js[3].bind != "none" || js[3].learners != 2 {
		t.Fatalf("jobs of --bind learners,none: %+v", js)
	}
	rows = speedupRows(js, [][]*launchResult{{res(1000, "a")}, {res(800, "a")}, {res(1500, "a")}, {res(1600, "a")}})
	if rows[2].Speedup != 1.5 || rows[3].Speedup != 2 || rows[3].Bind != "none" {
		t.Errorf("rows of --bind learners,none: %+v", rows)
	}
}

// TestBenchSpeedupJSON runs the smallest speedup benchmark over tcp and
// shm side by side, with two shard servers and early pushes, on
// synthetic data, and the independent jobs of the ceiling, and checks
// every field of its rows.
func TestBenchSpeedupJSON(t *testing.T) {
	multiProcess(t)
	out, err := runErrWithin(t, 2*time.Minute, "--log-level", "warn", "bench", "speedup", "--json", "--model", "mlp:8", "--data", "synthetic", "--steps", "3",
		"--learners", "1,2", "--protocols", "softsync", "--transport", "tcp,shm", "--shards", "2", "--early-push", "true", "--ceiling")
	if err != nil {
		t.Fatal(err)
	}
	var rows []speedupRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	var raw []map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"model", "batch", "transport", "protocol", "learners", "shards", "early_push", "bind", "images_per_sec", "speedup", "efficiency", "processes"} {
		if _, ok := raw[0][key]; !ok {
			t.Errorf("a row lacks %q: %v", key, raw[0])
		}
	}
	if p := raw[2]["processes"].([]any)[0].(map[string]any); p["process"] != "head" || p["peak_rss_bytes"] == nil {
		t.Errorf("process %v lacks process or peak_rss_bytes", p)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 2 of independent jobs and 4 of jobs", len(rows))
	}
	for _, r := range rows[:2] {
		if r.Transport != independentTransport || r.Protocol != "none" || r.ImagesPerSec <= 0 || r.Steps != int64(3*r.Learners) ||
			len(r.Processes) != 0 || (r.Learners == 1 && r.Speedup != 1) {
			t.Errorf("independent jobs: %+v", r)
		}
	}
	var got []string
	for _, r := range rows[2:] {
		got = append(got, r.Transport)
		if r.Model != "mlp" || r.Batch != 8 || r.Data != "synthetic" || r.Protocol != "softsync" || r.ImagesPerSec <= 0 || r.Steps != int64(3*r.Learners) ||
			r.Shards != 2 || !r.EarlyPush {
			t.Errorf("row %+v", r)
		}
		if len(r.Processes) != 3+r.Learners {
			t.Fatalf("%d processes, want %d: %+v", len(r.Processes), 3+r.Learners, r.Processes)
		}
		for _, p := range r.Processes {
			if p.PeakRSS < 1<<20 || p.CPUSeconds <= 0 {
				t.Errorf("%s: peak RSS %d bytes, %g CPU seconds", p.Process, p.PeakRSS, p.CPUSeconds)
			}
		}
		if r.Processes[0].Process != "head" || r.Processes[1].Process != "shard server 0" || r.Processes[3].Process != "learner 0" {
			t.Errorf("processes %+v", r.Processes)
		}
		// --bind learners: each learner on CPUs of its own, the head and
		// the shard servers anywhere.
		seen := map[int]bool{}
		for _, p := range r.Processes {
			learner := strings.HasPrefix(p.Process, "learner")
			if r.Bind != "learners" || (learner != (len(p.CPUs) > 0) && len(cpus) >= r.Learners) {
				t.Errorf("bind %q, %d CPUs: %s pinned to %v", r.Bind, len(cpus), p.Process, p.CPUs)
			}
			for _, c := range p.CPUs {
				if seen[c] || !slices.Contains(cpus, c) {
					t.Errorf("%s pinned to CPU %d, shared or not among %v", p.Process, c, cpus)
				}
				seen[c] = true
			}
		}
		if len(r.Runs) != 1 || r.Runs[0] != r.ImagesPerSec {
			t.Errorf("runs %v of a job run once, images/s %g", r.Runs, r.ImagesPerSec)
		}
		if r.Learners == 1 && (r.Speedup != 1 || r.Efficiency != 1) {
			t.Errorf("λ = 1: speedup %g, efficiency %g", r.Speedup, r.Efficiency)
		}
	}
	if want := []string{"tcp", "shm", "tcp", "shm"}; !slices.Equal(got, want) {
		t.Errorf("transports %v, want %v (side by side at each λ)", got, want)
	}
}
