package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softsync/softsync/tools/softsync/internal/clustertest"
)

// exitDeadline bounds how long a process may take to end after SIGTERM:
// the graceful end's grace (interruptGrace), the stop's (stopGrace), and
// room for a loaded machine.
const exitDeadline = interruptGrace + stopGrace + 25*time.Second

// startMarked runs softsync args as a process of its own, marked so that
// it and the processes it starts can be found, with env added to its
// environment, and returns the job and the marker.
func startMarked(t *testing.T, env []string, args ...string) (*clustertest.Job, string) {
	marker := fmt.Sprintf("job%x", rand.Uint64())
	j := clustertest.Exec().Start(t, clustertest.Spec{N: 1, Argv: clustertest.Self("softsync", args...),
		Env: append([]string{"SOFTSYNC_TEST_JOB=" + marker}, env...), Timeout: 4 * time.Minute})
	return j, marker
}

// signalProc sends sig to the marked process whose command line holds args.
func signalProc(t *testing.T, sig syscall.Signal, marker string, args ...string) int {
	t.Helper()
	pid := findProc(marker, args...)
	if pid == 0 {
		t.Fatalf("no process %v in job %s", args, marker)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitEnded waits for the job to end within exitDeadline and returns its
// result; the process must not have needed the last resort (an exit of
// a process still running stopGrace after it was stopped).
func waitEnded(t *testing.T, what string, j *clustertest.Job) clustertest.Result {
	t.Helper()
	ended := make(chan clustertest.Result, 1)
	go func() { ended <- j.Wait() }()
	select {
	case res := <-ended:
		if strings.Contains(res.Output, "still running after it was stopped") {
			t.Errorf("%s ended by the last resort, not by itself: %s", what, res)
		}
		return res
	case <-time.After(exitDeadline):
		t.Fatalf("%s still runs %v after SIGTERM:\n%s", what, exitDeadline, j.Output())
		return clustertest.Result{}
	}
}

// waitGone waits until no process of the marked job holds args, within
// exitDeadline.
func waitGone(t *testing.T, what, marker string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(exitDeadline)
	for findProc(marker, args...) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still runs %v after SIGTERM", what, exitDeadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// openMPIRank is the environment of rank r of a job of size under Open
// MPI, with a job id of its own.
func openMPIRank(r, size int) []string {
	return []string{fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", r), fmt.Sprintf("OMPI_COMM_WORLD_SIZE=%d", size),
		fmt.Sprintf("OMPI_COMM_WORLD_LOCAL_RANK=%d", r), fmt.Sprintf("OMPI_COMM_WORLD_LOCAL_SIZE=%d", size),
		fmt.Sprintf("OMPI_MCA_ess_base_jobid=sigterm-%x", rand.Uint64())}
}

// TestClusterSIGTERMAtRendezvous sends SIGTERM to each kind of process
// while it waits at rendezvous for processes that never come: the head
// (eval), a shard server and a learner that cannot reach the coordinator,
// rank 0 of --cluster auto waiting for the others, and another rank
// waiting for rank 0's rendezvous file. Each ends within exitDeadline.
func TestClusterSIGTERMAtRendezvous(t *testing.T) {
	multiProcess(t)
	dir := t.TempDir()
	secret := jobSecretFile(t, dir)
	job := []string{"--model", "mlp", "--train-subset", "2000", "--test-subset", "500", "--learners", "2", "--secret-file", secret}
	nobody := freeAddr(t)
	for _, c := range []struct {
		name  string
		env   []string
		args  []string
		ready string // in the output once it waits
	}{
		{"head", nil, append([]string{"eval", "--coordinator", "127.0.0.1:0"}, job...), "coordinator listening"},
		{"shard server", nil, append([]string{"ps", "--coordinator", nobody}, job...), "waiting for the coordinator"},
		{"learner", nil, append([]string{"learner", "--coordinator", nobody}, job...), "waiting for the coordinator"},
		{"rank 0", openMPIRank(0, 3), append([]string{"train", "--cluster", "auto"}, clusterJob("mlp", filepath.Join(dir, "r0.json"))...), "coordinator listening"},
		{"rank 2", openMPIRank(2, 3), append([]string{"train", "--cluster", "auto", "--log-level", "debug"}, clusterJob("mlp", filepath.Join(dir, "r2.json"))...), "msg=cluster"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, marker := startMarked(t, c.env, c.args...)
			waitOutput(t, j, c.ready)
			time.Sleep(200 * time.Millisecond) // into the wait
			signalProc(t, syscall.SIGTERM, marker, c.args[0])
			if res := waitEnded(t, c.name, j); res.ExitCode == 0 {
				t.Errorf("%s interrupted at rendezvous exited 0: %s", c.name, res)
			}
		})
	}
}

// TestClusterSIGTERMTraining sends SIGTERM to each kind of process of a
// running job: softsync train in one process and the head of a launched
// job end with the report so far ("interrupted"); a learner process and a
// shard server process (which writes a checkpoint first) of a launched
// job end. Each within exitDeadline.
func TestClusterSIGTERMTraining(t *testing.T) {
	multiProcess(t)
	dir := t.TempDir()
	long := []string{"--model", "mlp", "--epochs", "100000", "--train-subset", "256", "--test-subset", "100",
		"--batch", "16", "--protocol", "softsync"}
	t.Run("train", func(t *testing.T) {
		j, marker := startMarked(t, nil, append([]string{"train", "--learners", "2"}, long...)...)
		waitOutput(t, j, "msg=epoch")
		signalProc(t, syscall.SIGTERM, marker, "train")
		if res := waitEnded(t, "train", j); !strings.Contains(res.Output, "interrupted") {
			t.Errorf("train interrupted: %s", res)
		}
	})
	t.Run("launch", func(t *testing.T) {
		j, marker := startMarked(t, nil, append([]string{"launch", "-n", "2", "--"}, long...)...)
		waitOutput(t, j, "msg=epoch")
		signalProc(t, syscall.SIGTERM, marker, "launch")
		if res := waitEnded(t, "launch", j); !strings.Contains(res.Output, "interrupted") {
			t.Errorf("launch interrupted: %s", res)
		}
	})
	for _, p := range [][]string{{"learner", "--id", "0"}, {"ps", "--id", "0"}} {
		t.Run(p[0], func(t *testing.T) {
			args := append([]string{"launch", "-n", "2", "--", "--checkpoint-dir", filepath.Join(dir, p[0])}, long...)
			j, marker := startMarked(t, nil, args...)
			waitOutput(t, j, "msg=epoch")
			signalProc(t, syscall.SIGTERM, marker, p...)
			waitGone(t, strings.Join(p, " "), marker, p...)
			if p[0] == "ps" {
				waitOutput(t, j, "checkpoint written")
			}
			j.Stop()
		})
	}
}

// TestClusterSIGTERMUnresponsive interrupts the head of a launched job
// while one of its shard servers is stopped (SIGSTOP) and cannot answer:
// the graceful end cannot complete, and the head stops at once after its
// grace, within exitDeadline.
func TestClusterSIGTERMUnresponsive(t *testing.T) {
	multiProcess(t)
	j, marker := startMarked(t, nil, "launch", "-n", "1", "--", "--model", "mlp", "--epochs", "100000", "--train-subset", "256",
		"--test-subset", "100", "--batch", "16", "--protocol", "softsync")
	waitOutput(t, j, "msg=epoch")
	signalProc(t, syscall.SIGSTOP, marker, "ps", "--id", "0")
	signalProc(t, syscall.SIGTERM, marker, "launch")
	if res := waitEnded(t, "launch", j); !strings.Contains(res.Output, "stopping at once") {
		t.Errorf("launch with a stopped shard server, interrupted: %s", res)
	}
}
