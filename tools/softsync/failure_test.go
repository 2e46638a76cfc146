package main

import (
	"fmt"
	"math"
	"math/rand/v2"
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
	"--test-subset", "10000", "--batch", "16", "--protocol", "hardsync", "--ps-timeout", "30s"}

// startLaunch runs softsync launch with args as a process of its own,
// marked so that its processes can be found, and returns the job and the
// marker.
func startLaunch(t *testing.T, args ...string) (*clustertest.Job, string) {
	marker := fmt.Sprintf("job%x", rand.Uint64())
	j := clustertest.Exec().Start(t, clustertest.Spec{N: 1, Argv: clustertest.Self("softsync", append([]string{"launch"}, args...)...),
		Env: []string{"SOFTSYNC_TEST_JOB=" + marker}, Timeout: 4 * time.Minute})
	return j, marker
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

// kill sends SIGKILL to the process of the marked job whose command line
// holds args in order (e.g. "learner", "--id", "1") and returns its pid.
func kill(t *testing.T, marker string, args ...string) int {
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
		if err1 != nil || err2 != nil || !strings.Contains(string(env), string(want)) || !strings.Contains(string(cmd), seq) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	t.Fatalf("no process %v in job %s", args, marker)
	return 0
}

// TestLearnerFailure kills a learner process with SIGKILL right after the
// first epoch, under softsync launch, without and with --restarts: the job
// completes, every mini-batch of every epoch is done exactly once (the
// dead learner's chunk goes to another learner), and the final test error
// is within 0.3 percentage points of the same job undisturbed.
func TestLearnerFailure(t *testing.T) {
	if raceDetector {
		t.Skip("race detector: starts the test binary as softsync; make test runs this natively")
	}
	dir := t.TempDir()
	report := func(name string) string { return filepath.Join(dir, name+".json") }
	base, _ := startLaunch(t, append([]string{"-n", "3", "--", "--quiet", "--json", report("base")}, failureJob...)...)
	if res := base.Wait(); res.ExitCode != 0 {
		t.Fatalf("undisturbed job: %s", res)
	}
	want := readReport(t, report("base"))
	for _, restarts := range []int{0, 1} {
		name := fmt.Sprintf("restarts%d", restarts)
		j, marker := startLaunch(t, append([]string{"-n", "3", "--restarts", strconv.Itoa(restarts), "--", "--json", report(name)}, failureJob...)...)
		waitOutput(t, j, "msg=epoch epoch=1 ")
		kill(t, marker, "learner", "--id", "1")
		res := j.Wait()
		if res.ExitCode != 0 {
			t.Fatalf("%s: %s", name, res)
		}
		r := readReport(t, report(name))
		chunks := r["chunks"].(map[string]any)
		total := r["epochs"].(float64) * want["steps"].(float64) / want["epochs_done"].(float64)
		if r["learners_lost"] != 1.0 || r["learner_restarts"] != float64(restarts) || chunks["reassigned"].(float64) < 1 ||
			chunks["batches"].(float64) != total {
			t.Errorf("%s: lost %v, restarts %v, chunks %v (want batches = %v)", name, r["learners_lost"], r["learner_restarts"], chunks, total)
		}
		got, base := r["test_error"].(float64), want["test_error"].(float64)
		t.Logf("%s: test error %.4f, undisturbed %.4f", name, got, base)
		if math.Abs(got-base) > 0.003 {
			t.Errorf("%s: test error %.4f, undisturbed %.4f: more than 0.3 points apart", name, got, base)
		}
	}
}
