package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/tools/softsync/internal/clustertest"
)

// TestMain lets the launchers start this test binary as softsync itself
// (clustertest.Self("softsync", args...)), and has the jobs of one
// process read MNIST once (readMNISTOnce).
func TestMain(m *testing.M) {
	selfArgv = clustertest.Self("softsync") // what launch starts
	findData = readMNISTOnce(findData)
	clustertest.Main(m, map[string]func([]string) int{"softsync": func(args []string) int {
		root := newRootCmd(os.Stdout)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "softsync:", err)
			return 1
		}
		return 0
	}})
}

// multiProcess skips a test that starts softsync processes when they
// would be too slow: under the race detector, or in a build without the
// native engine (make test runs these tests natively).
func multiProcess(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("race detector: the processes would run the race-instrumented binary; make test runs this natively")
	}
	if _, info, _ := kernels.New(kernels.Config{Threads: 1}); info.Fallback {
		t.Skip("no native engine in this build: make test runs this natively")
	}
}

// clusterJob is the small job the multi-process tests run: the mlp (or
// LeNet) on a subset of MNIST, one epoch, asynchronous learners.
func clusterJob(model, report string, more ...string) []string {
	args := []string{"--model", model, "--epochs", "1", "--batch", "16", "--train-subset", "2000", "--test-subset", "500",
		"--protocol", "softsync", "--lr", "0.05", "--quiet", "--json", report}
	return append(args, more...)
}

// checkClusterReport reads a cluster run's report and checks that every
// process took part: ranks (or roles) as expected, every learner reached
// every shard, the counters add up, the test error is that of a trained
// network.
func checkClusterReport(t *testing.T, path string, procs, learners, shards int) map[string]any {
	t.Helper()
	r := readReport(t, path)
	ps := r["processes"].([]any)
	if len(ps) != procs {
		t.Fatalf("%d processes in the report, want %d: %v", len(ps), procs, ps)
	}
	roles := map[string]int{}
	for _, p := range ps {
		p := p.(map[string]any)
		for _, r := range p["roles"].([]any) {
			roles[r.(string)]++
		}
		if n := len(p["learners"].([]any)); n > 0 {
			roles["learner"] += n - 1
		}
		if n := len(p["servers"].([]any)); n > 0 {
			roles["server"] += n - 1
		}
	}
	if roles["learner"] != learners || roles["server"] != shards || roles["evaluator"] != 1 {
		t.Errorf("roles %v, want %d learners, %d servers and an evaluator", roles, learners, shards)
	}
	var steps float64
	for _, n := range r["learner_steps"].([]any) {
		steps += n.(float64) // a learner that arrives last may find every chunk taken: 0 is fine
	}
	if len(r["learner_steps"].([]any)) != learners || steps != r["steps"].(float64) || steps == 0 {
		t.Errorf("learner_steps %v, steps %v", r["learner_steps"], r["steps"])
	}
	for _, st := range r["shard_stats"].([]any) {
		st := st.(map[string]any)
		if st["gradients"].(float64)+st["gradients_dropped"].(float64) != steps {
			t.Errorf("shard %v: %v accepted + %v dropped ≠ %v pushed", st["shard"], st["gradients"], st["gradients_dropped"], steps)
		}
	}
	if te, ok := r["test_error"].(float64); !ok || te > 0.3 {
		t.Errorf("test error %v, want a trained network (≤ 0.3)", r["test_error"])
	}
	// Every learner took part: it reached every shard server.
	conns := r["connections"].([]any)
	if len(conns) != learners*shards {
		t.Errorf("%d connections reported, want %d", len(conns), learners*shards)
	}
	perLearner := map[int]int{}
	for _, c := range conns {
		perLearner[int(c.(map[string]any)["learner"].(float64))] += len(c.(map[string]any)["shards"].([]any))
	}
	for l := range learners {
		if perLearner[l] != shards {
			t.Errorf("learner %d reached %d of the %d shards: connections %v", l, perLearner[l], shards, conns)
		}
	}
	return r
}

// TestLaunchers runs a job of four processes under each launcher of the
// machine: Open MPI's mpirun, MPICH's mpiexec, a throw-away Slurm's srun
// and a batch script, every process running train --cluster auto.
func TestLaunchers(t *testing.T) {
	multiProcess(t)
	dir := t.TempDir()
	launch := func(t *testing.T, l *clustertest.Launcher, name string) {
		report := filepath.Join(dir, name+".json")
		args := append([]string{"train", "--cluster", "auto"}, clusterJob("mlp", report)...)
		l.MustRun(t, clustertest.Spec{N: 4, Argv: clustertest.Self("softsync", args...), Timeout: 3 * time.Minute})
		r := checkClusterReport(t, report, 4, 3, 1) // rank 0: shard server and evaluator
		ranks := []int{}
		for _, p := range r["processes"].([]any) {
			p := p.(map[string]any)
			ranks = append(ranks, int(p["rank"].(float64)))
			if p["rank"] == 0.0 && fmt.Sprint(p["roles"]) != "[server evaluator]" {
				t.Errorf("rank 0 runs %v, want [server evaluator]", p["roles"])
			}
		}
		slices.Sort(ranks)
		if !slices.Equal(ranks, []int{0, 1, 2, 3}) {
			t.Errorf("ranks %v, want 0…3, each once", ranks)
		}
	}
	t.Run("openmpi", func(t *testing.T) { launch(t, clustertest.OpenMPI(t), "openmpi") })
	t.Run("mpich", func(t *testing.T) { launch(t, clustertest.MPICH(t), "mpich") })
	t.Run("slurm", func(t *testing.T) {
		s := clustertest.StartSlurm(t)
		launch(t, s.Srun(), "srun")
		report := filepath.Join(dir, "sbatch.json")
		args := append([]string{"train", "--cluster", "auto", "--shards", "2"}, clusterJob("mlp", report)...)
		script := "#!/bin/sh\nsrun " + shellQuote(clustertest.Self("softsync", args...)) + "\n"
		res := s.Batch(t, clustertest.BatchSpec{Script: script, Tasks: 4, Timeout: 3 * time.Minute})
		if res.State != "COMPLETED" || res.ExitCode != 0 {
			t.Fatalf("batch job %s: %s, exit %d:\n%s", res.JobID, res.State, res.ExitCode, res.Output)
		}
		checkClusterReport(t, report, 4, 2, 2) // rank 0: shard server 0 and evaluator; rank 1: shard server 1
	})
}

func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// TestLaunch runs softsync launch: two learner processes, two shard
// servers, this process as the head.
func TestLaunch(t *testing.T) {
	multiProcess(t)
	report := filepath.Join(t.TempDir(), "launch.json")
	args := append([]string{"launch", "-n", "2", "--shards", "2", "--"}, clusterJob("mlp", report)...)
	run(t, args...)
	checkClusterReport(t, report, 5, 2, 2)
}

// TestClusterMatchesInProcess: a hardsync job split into processes gives
// the weights of the same job in one process (same seed; float
// tolerance: the two gradients of a round may be summed in either order).
func TestClusterMatchesInProcess(t *testing.T) {
	multiProcess(t)
	dir := t.TempDir()
	job := []string{"--model", "lenet", "--epochs", "1", "--max-steps", "40", "--batch", "8", "--train-subset", "1000",
		"--test-subset", "100", "--protocol", "hardsync", "--quiet"}
	one, two := filepath.Join(dir, "one.weights"), filepath.Join(dir, "two.weights")
	run(t, append([]string{"train", "--learners", "2", "--save", one}, job...)...)
	run(t, append([]string{"launch", "-n", "2", "--", "--save", two}, job...)...)
	spec, err := nn.Builtin("lenet")
	if err != nil {
		t.Fatal(err)
	}
	a, err := learner.LoadWeights(one, spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := learner.LoadWeights(two, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, init, err := (&cluster.Config{Spec: spec, Seed: 1}).InitialWeights()
	if err != nil {
		t.Fatal(err)
	}
	var diff, moved float64
	for i := range a.Params {
		diff = max(diff, math.Abs(float64(a.Params[i]-b.Params[i])))
		moved = max(moved, math.Abs(float64(a.Params[i]-init[i])))
	}
	t.Logf("max |Δw| between the two: %.3g; trained weights moved up to %.3g", diff, moved)
	if moved < 1e-3 {
		t.Fatalf("the job did not train: weights moved by %.3g", moved)
	}
	if diff > 1e-5 {
		t.Errorf("weights of the job in processes differ from the job in one process by %.3g", diff)
	}
	if !slices.Equal(a.Normalizer.Mean, b.Normalizer.Mean) {
		t.Error("the normalisers differ")
	}
}

// TestClusterMismatch: a launcher that does not give the job its size
// fails at once, saying what it found.
func TestClusterMismatch(t *testing.T) {
	multiProcess(t)
	report := filepath.Join(t.TempDir(), "r.json")
	args := append([]string{"train", "--cluster", "auto", "--learners", "5"}, clusterJob("mlp", report)...)
	res := clustertest.OpenMPI(t).Run(t, clustertest.Spec{N: 4, Argv: clustertest.Self("softsync", args...), Timeout: time.Minute})
	if res.ExitCode == 0 || !strings.Contains(res.Output, "6 processes expected") || !strings.Contains(res.Output, "OMPI_COMM_WORLD_SIZE") {
		t.Errorf("4 processes for 1 shard server and 5 learners: exit %d:\n%s", res.ExitCode, res.Output)
	}
	// Without a launcher, every process would be rank 0 of 1.
	_, err := runErr(append([]string{"train", "--cluster", "auto", "--learners", "3"}, clusterJob("mlp", report)...)...)
	if err == nil || !strings.Contains(err.Error(), "no launcher variables") {
		t.Errorf("--cluster auto without a launcher: %v", err)
	}
}

// TestRendezvousTimeout: rank 0 of a job whose other ranks never come
// gives up after --rendezvous-timeout, naming the ranks it waited for.
func TestRendezvousTimeout(t *testing.T) {
	setRank0(t)
	report := filepath.Join(t.TempDir(), "r.json")
	_, err := runErr(append([]string{"train", "--cluster", "auto", "--rendezvous-timeout", "1s"}, clusterJob("mlp", report)...)...)
	if err == nil || !strings.Contains(err.Error(), "learner 0 (rank 1)") || !strings.Contains(err.Error(), "learner 1 (rank 2)") {
		t.Errorf("rank 0 alone: %v", err)
	}
}

// TestTwoHosts runs a job across two "hosts", network namespaces joined
// by a veth pair: host A runs the head (coordinator and evaluator), shard
// server 0 and learner 0, host B shard server 1 and learner 1, each
// started on its own with the job's secret file, so that non-loopback
// addresses, advertising and the secret are exercised, and auto's choice:
// shm between processes of one host, TCP between hosts. A shard server
// that advertises a loopback address to the other host is refused with a
// message that says so.
func TestTwoHosts(t *testing.T) {
	multiProcess(t)
	a, b := clustertest.TwoHosts(t, clustertest.Link{})
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, newSecret(), 0o600); err != nil {
		t.Fatal(err)
	}
	coord := a.Addr.String() + ":7777"
	report := filepath.Join(dir, "r.json")
	job := []string{"--model", "mlp", "--epochs", "1", "--batch", "16", "--train-subset", "2000", "--test-subset", "500",
		"--protocol", "softsync", "--lr", "0.05", "--learners", "2", "--shards", "2", "--secret-file", secret,
		"--coordinator", coord, "--rendezvous-timeout", "1m"}
	start := func(h *clustertest.Host, args ...string) *clustertest.Job {
		if args[0] == "eval" {
			args = append(args, "--quiet", "--json", report)
		}
		return h.In(clustertest.Exec()).Start(t, clustertest.Spec{N: 1, Argv: clustertest.Self("softsync", append(args, job...)...), Timeout: 3 * time.Minute})
	}
	jobs := []*clustertest.Job{
		start(a, "eval"),
		start(a, "ps", "--id", "0", "--listen", a.Addr.String()),
		start(b, "ps", "--id", "1", "--listen", b.Addr.String()),
		start(a, "learner", "--id", "0"),
		start(b, "learner", "--id", "1"),
	}
	for _, j := range backward(jobs) { // the head last: it waits for the others
		if res := j.Wait(); res.ExitCode != 0 {
			for _, j := range jobs {
				j.Stop()
			}
			t.Fatalf("%s", res)
		}
	}
	r := checkClusterReport(t, report, 5, 2, 2)
	hosts := map[string]bool{}
	learnerHost := []string{a.Addr.String(), b.Addr.String()}
	for _, c := range r["connections"].([]any) {
		c := c.(map[string]any)
		host := strings.Split(c["peer"].(string), ":")[0]
		hosts[host] = true
		// auto: shm to the shard server on the learner's host, TCP to
		// the other host's, which is in another network namespace.
		want, why := "tcp", "another host or network namespace"
		if host == learnerHost[int(c["learner"].(float64))] {
			want, why = "shm", "same host"
		}
		if c["transport"] != want || !strings.Contains(c["reason"].(string), why) {
			t.Errorf("learner %v to %s: %v (%v), want %s (%s)", c["learner"], host, c["transport"], c["reason"], want, why)
		}
	}
	if !hosts[a.Addr.String()] || !hosts[b.Addr.String()] {
		t.Errorf("learners connected to %v, want both hosts' shard servers", hosts)
	}

	// Shard server 1 advertises 127.0.0.1 from host B.
	head := start(a, "eval")
	bad := start(b, "ps", "--id", "1", "--listen", "127.0.0.1")
	res := head.Wait()
	bad.Stop()
	if res.ExitCode == 0 || !strings.Contains(res.Output, "advertises the loopback address") {
		t.Errorf("a loopback address advertised to another host: %s", res)
	}
}

func backward[T any](s []T) []T {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}
