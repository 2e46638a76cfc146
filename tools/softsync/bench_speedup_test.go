package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/tools/bench"
)

func TestParseModelBatches(t *testing.T) {
	ms, err := parseModelBatches("lenet, cifar10_full:100", 64)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bench.ModelBatch{{Model: "lenet", Batch: 64}, {Model: "cifar10_full", Batch: 100}}; !slices.Equal(ms, want) {
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

// TestBenchSpeedupDefaults: bench speedup measures by default over the
// transport a job uses (auto), as --help says.
func TestBenchSpeedupDefaults(t *testing.T) {
	c := newBenchSpeedupCmd(&App{})
	f := c.Flags().Lookup("transport")
	if f.DefValue != "auto" || !strings.Contains(f.Usage, "auto (the one a job uses") || !strings.Contains(c.Long, "by default auto") {
		t.Errorf("--transport: default %q, usage %q", f.DefValue, f.Usage)
	}
}

// TestBenchSpeedupJSON runs the smallest speedup benchmark over auto (a
// job's default: shm on one host) and tcp side by side, with two shard
// servers and early pushes, on synthetic data, and the independent jobs
// of the ceiling, and checks every field of its rows.
func TestBenchSpeedupJSON(t *testing.T) {
	multiProcess(t)
	out, err := runErrWithin(t, 2*time.Minute, "--log-level", "warn", "bench", "speedup", "--json", "--model", "mlp:8", "--data", "synthetic", "--steps", "3",
		"--learners", "1,2", "--protocols", "softsync", "--transport", "auto,tcp", "--shards", "2", "--early-push", "true", "--ceiling")
	if err != nil {
		t.Fatal(err)
	}
	var rows []bench.SpeedupRow
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
	for _, key := range []string{"model", "batch", "transport", "transport_used", "protocol", "learners", "shards", "early_push", "bind", "images_per_sec", "speedup", "efficiency", "processes"} {
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
		if r.Transport != bench.Independent || r.Protocol != "none" || r.ImagesPerSec <= 0 || r.Steps != int64(3*r.Learners) ||
			len(r.Processes) != 0 || r.Used != "" || (r.Learners == 1 && r.Speedup != 1) {
			t.Errorf("independent jobs: %+v", r)
		}
	}
	var got []string
	for _, r := range rows[2:] {
		got = append(got, r.Transport+":"+r.Used)
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
	if want := []string{"auto:shm", "tcp:tcp", "auto:shm", "tcp:tcp"}; !slices.Equal(got, want) {
		t.Errorf("transports asked:used %v, want %v (side by side at each λ)", got, want)
	}
}
