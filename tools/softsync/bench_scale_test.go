package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softsync/softsync/ps/sim/costmodel"
	"github.com/softsync/softsync/tools/bench"
)

// TestStartOnPins starts a process on one CPU and reads the mask it got
// from /proc; the starting thread keeps its own mask.
func TestStartOnPins(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	last := cpus[len(cpus)-1]
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := startOn(cmd, []int{last}); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if before != after {
		t.Errorf("the starting thread's mask changed from %v to %v", before, after)
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	want := "Cpus_allowed_list:\t" + strconv.Itoa(last) + "\n"
	if !strings.Contains(string(status), want) {
		t.Errorf("the process's status lacks %q:\n%s", want, status)
	}
	if err := startOn(exec.Command("true"), []int{-1}); err == nil || !strings.Contains(err.Error(), "no CPU -1") {
		t.Errorf("CPU -1: %v", err)
	}
}

func TestBenchScaleBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--transport", "verbs"}, `--transport: "verbs"`},
		{[]string{"--protocols", "hardsync,async"}, `--protocols: "async"`},
		{[]string{"--shards", "0"}, "--shards: must be ≥ 1, got 0"},
		{[]string{"--steps", "0"}, "--steps: must be ≥ 1, got 0"},
		{[]string{"--max-learners", "-1"}, "--max-learners: must be ≥ 0, got -1"},
	} {
		_, err := runErrWithin(t, time.Minute, append([]string{"bench", "scale"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench scale %v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}

// TestBenchScaleRun runs the smallest scaling benchmark on this machine's
// CPUs and checks its plan, where each process ran, and every row.
func TestBenchScaleRun(t *testing.T) {
	multiProcess(t)
	out, err := runErrWithin(t, 2*time.Minute, "--log-level", "warn", "bench", "scale", "--json", "--model", "mlp", "--batch", "8",
		"--steps", "3", "--max-learners", "2")
	if err != nil {
		t.Fatal(err)
	}
	var res bench.ScaleResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	plan := bench.PlanScale(cpus, 1, 2)
	if !slices.Equal(res.Plan.Learners, plan.Learners) || res.Plan.Note != plan.Note || res.Model != "mlp" || res.Transport != "tcp" {
		t.Errorf("plan %+v, want %+v", res.Plan, plan)
	}
	if res.Inputs == nil || res.Inputs.ComputeSec <= 0 || res.Inputs.Bandwidth <= 0 {
		t.Fatalf("inputs %+v", res.Inputs)
	}
	if len(res.Rows) != 2*len(plan.Learners) {
		t.Fatalf("%d rows, want %d", len(res.Rows), 2*len(plan.Learners))
	}
	for i, r := range res.Rows {
		want := []string{"hardsync", "softsync"}[i/len(plan.Learners)]
		l := plan.Learners[i%len(plan.Learners)]
		if r.Protocol != want || r.Learners != l || r.ImagesPerSec <= 0 || r.Steps != int64(3*l) || r.Shared != plan.Shared(l) {
			t.Errorf("row %d: %+v", i, r)
		}
		if r.Predicted.Learners != l || r.Predicted.Protocol != bench.SimProtocolName(want) || r.Predicted.ImagesPerSec <= 0 ||
			math.Abs(r.Error-(r.Predicted.ImagesPerSec/r.ImagesPerSec-1)) > 1e-9 {
			t.Errorf("row %d: prediction %+v, error %g", i, r.Predicted, r.Error)
		}
		if r.Protocol == "hardsync" && r.MaxStaleness != 0 {
			t.Errorf("row %d: hardsync with staleness %d", i, r.MaxStaleness)
		}
		if len(r.Processes) != 2+l {
			t.Fatalf("row %d: %d processes", i, len(r.Processes))
		}
		for k, p := range r.Processes {
			role, id := "eval", 0
			switch {
			case k == 1:
				role = "ps"
			case k > 1:
				role, id = "learner", k-2
			}
			if !slices.Equal(p.CPUs, plan.CPUsOf(role, id)) || p.PeakRSS <= 0 {
				t.Errorf("row %d: %s on CPUs %v with peak RSS %d, want CPUs %v", i, p.Process, p.CPUs, p.PeakRSS, plan.CPUsOf(role, id))
			}
		}
	}
}

func TestWriteScaleText(t *testing.T) {
	plan := bench.PlanScale([]int{0, 1}, 1, 0)
	res := &bench.ScaleResult{Model: "lenet", Batch: 64, Transport: "shm", Plan: plan, Inputs: &costmodel.Inputs{ComputeSec: 0.008},
		Rows: []bench.ScaleRow{
			{Protocol: "softsync", Learners: 1, ImagesPerSec: 4000, Speedup: 1, Efficiency: 1, Predicted: costmodel.Row{ImagesPerSec: 5000, Speedup: 1}, Error: 0.25},
			{Protocol: "softsync", Learners: 2, ImagesPerSec: 7000, Speedup: 1.75, Efficiency: 0.875, MeanStaleness: 0.95, MaxStaleness: 4,
				Predicted: costmodel.Row{ImagesPerSec: 9800, Speedup: 1.96, MeanStaleness: 1}, Error: 0.4, Shared: true},
		}}
	var b strings.Builder
	writeScaleText(&b, res)
	out := b.String()
	for _, want := range []string{"2 CPU(s) [0 1], 1 shard server(s)", "too few CPUs for a scaling curve", "compute 8ms",
		"4,000", "+25%", "2 (shared)", "7,000", "1.75×", "88%", "0.95", "9,800", "1.96×", "+40%"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "1 (shared)") {
		t.Errorf("λ = 1 marked shared:\n%s", out)
	}
}
