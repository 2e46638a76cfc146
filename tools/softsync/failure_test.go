package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softsync/softsync/tools/softsync/internal/clustertest"
)

// failureJob is the job of the failure tests: hardsync LeNet on a subset
// of MNIST, three learner processes, measured on the whole test set.
var failureJob = []string{"--model", "lenet", "--epochs", "3", "--lr-steps", "2", "--train-subset", "6000",
	"--test-subset", "10000", "--batch", "16", "--protocol", "hardsync", "--ps-timeout", "1m"}

// startLaunch runs softsync launch with args as a process of its own,
// marked so that its processes can be found, and returns the job and the
// marker.
func startLaunch(t *testing.T, args ...string) (*clustertest.Job, string) {
	return startMarked(t, nil, append([]string{"launch"}, args...)...)
}

// waitOutput waits until the job's output contains s.
func waitOutput(t *testing.T, j *clustertest.Job, s string) {
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(j.Output(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output:\n%s", s, j.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// findProc returns the pid of the process of the marked job whose command
// line holds args in order (e.g. "learner", "--id", "1"), 0 if none.
func findProc(marker string, args ...string) int {
	want := []byte("SOFTSYNC_TEST_JOB=" + marker)
	seq := strings.Join(args, "\x00") + "\x00"
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		env, err1 := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		cmd, err2 := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err1 == nil && err2 == nil && strings.Contains(string(env), string(want)) && strings.Contains(string(cmd), seq) {
			return pid
		}
	}
	return 0
}

// kill sends SIGKILL to the process findProc finds, and returns its pid.
func kill(t *testing.T, marker string, args ...string) int {
	pid := findProc(marker, args...)
	if pid == 0 {
		t.Fatalf("no process %v in job %s", args, marker)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestFailures runs the failures clusters have under softsync launch,
// each against the same job undisturbed (same seed), each process killed
// with SIGKILL after the job's first checkpoint: a learner, without and
// with --restarts (the mini-batches it had not delivered go to another);
// a shard server, restarted by launch from the checkpoint (the learners
// join it again, the mini-batches its checkpoint lacks are computed
// again); the head (coordinator and evaluator), restarted by launch (the
// shard servers and learners go on and rejoin it). In every case the job
// completes, every mini-batch is delivered once, each shard holds
// exactly one gradient of every mini-batch (accepted + dropped = the
// mini-batches), every push is accounted for (accepted + dropped +
// redone + given up for a stale life + lost = pushed), and the test
// error is at most 0.3 points worse than the undisturbed job's.
func TestFailures(t *testing.T) {
	multiProcess(t)
	dir := t.TempDir()
	report := func(name string) string { return filepath.Join(dir, name+".json") }
	base, _ := startLaunch(t, append([]string{"-n", "3", "--shards", "2", "--", "--quiet", "--json", report("base")}, failureJob...)...)
	if res := base.Wait(); res.ExitCode != 0 {
		t.Fatalf("undisturbed job: %s", res)
	}
	want := readReport(t, report("base"))
	check := func(t *testing.T, name string, r map[string]any) { checkDisturbed(t, name, want, r) }
	// disturbed runs the job with restarts, kills the process args once
	// the first checkpoint is written, and returns the report.
	disturbed := func(t *testing.T, name string, restarts int, args ...string) map[string]any {
		ckpt := filepath.Join(dir, name)
		j, marker := startLaunch(t, append([]string{"-n", "3", "--shards", "2", "--restarts", strconv.Itoa(restarts), "--",
			"--json", report(name), "--checkpoint-dir", ckpt, "--checkpoint-every", "250"}, failureJob...)...)
		waitOutput(t, j, "checkpoint written")
		kill(t, marker, args...)
		if res := j.Wait(); res.ExitCode != 0 {
			t.Fatalf("%s: %s", name, res)
		}
		return readReport(t, report(name))
	}
	for _, restarts := range []int{0, 1} {
		name := fmt.Sprintf("learner-restarts%d", restarts)
		t.Run(name, func(t *testing.T) {
			r := disturbed(t, name, restarts, "learner", "--id", "1")
			check(t, name, r)
			if r["learners_lost"] != 1.0 || r["learner_restarts"] != float64(restarts) || r["chunks"].(map[string]any)["reassigned"].(float64) < 1 {
				t.Errorf("%s: lost %v, restarts %v, chunks %v", name, r["learners_lost"], r["learner_restarts"], r["chunks"])
			}
		})
	}
	t.Run("shard-server", func(t *testing.T) {
		r := disturbed(t, "server", 1, "ps", "--id", "1")
		check(t, "server", r)
		t.Logf("mini-batches computed again for the restarted shard server: %v", r["chunks"].(map[string]any)["redone"])
	})
	t.Run("head", func(t *testing.T) {
		r := disturbed(t, "head", 1, "eval", "--coordinator")
		check(t, "head", r)
		if len(r["history"].([]any)) != 3 {
			t.Errorf("head: history %v, want the job's 3 epochs", r["history"])
		}
	})
}

// checkDisturbed checks the report r of a failure-test job that lost a
// process against want, the undisturbed job's: each shard holds exactly
// one gradient of every mini-batch of the job, every push is accounted
// for, and the test error is at most 0.3 percentage points worse.
func checkDisturbed(t *testing.T, name string, want, r map[string]any) {
	t.Helper()
	total := want["chunks"].(map[string]any)["batches"].(float64)
	got, base := r["test_error"].(float64), want["test_error"].(float64)
	t.Logf("%s: test error %.4f, undisturbed %.4f", name, got, base)
	// A recovery changes the course of the job (a restored shard, the
	// mini-batches computed again on later weights): it may end better,
	// never much worse.
	if got > base+0.003 {
		t.Errorf("%s: test error %.4f, undisturbed %.4f: more than 0.3 points worse", name, got, base)
	}
	if b := r["chunks"].(map[string]any)["batches"].(float64); b != total {
		t.Errorf("%s: %v mini-batches delivered, want every one of the %v once", name, b, total)
	}
	for _, sh := range r["shard_stats"].([]any) {
		sh := sh.(map[string]any)
		n := func(k string) float64 { return sh[k].(float64) }
		// Exactly one gradient of every mini-batch in each shard, but
		// those given up (a restart after the data was done).
		if got := n("gradients") + n("gradients_dropped") + n("given_up"); got != total {
			t.Errorf("%s: shard %v: accepted %v + dropped %v + given up %v ≠ the job's %v mini-batches", name, sh["shard"], n("gradients"), n("gradients_dropped"), n("given_up"), total)
		}
		if n("gradients")+n("gradients_dropped")+n("redone")+n("stale_life")+n("lost") != n("pushed") {
			t.Errorf("%s: shard %v: accepted %v + dropped %v + redone %v + stale life %v + lost %v ≠ pushed %v", name, sh["shard"],
				n("gradients"), n("gradients_dropped"), n("redone"), n("stale_life"), n("lost"), n("pushed"))
		}
	}
}
