//go:build chaos

package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/softsync/softsync/tools/softsync/internal/clustertest"
)

// bigJob is alexnet (244 MB of weights) under softsync launch with λ = 2
// learner processes and 2 shard servers, on 32 synthetic images of
// 227×227 a epoch: three epochs of 4 mini-batches of 8.
var bigJob = []string{"--model", "alexnet", "--data", "synthetic", "--train-subset", "32", "--test-subset", "16", "--batch", "8",
	"--epochs", "3", "--protocol", "softsync", "--ps-timeout", "5m", "--quiet"}

// startBig starts softsync launch of bigJob with args, marked so that its
// processes can be found (findProc), with a deadline for a network this
// size on a busy 2-core machine.
func startBig(t *testing.T, launch []string, args ...string) (*clustertest.Job, string) {
	marker := fmt.Sprintf("job%x", rand.Uint64())
	argv := append(append(append([]string{"launch", "-n", "2", "--shards", "2"}, launch...), "--"), append(bigJob, args...)...)
	j := clustertest.Exec().Start(t, clustertest.Spec{N: 1, Argv: clustertest.Self("softsync", argv...),
		Env: []string{"SOFTSYNC_TEST_JOB=" + marker}, Timeout: 10 * time.Minute})
	return j, marker
}

// TestChaosBigModel (make chaos) runs alexnet through the parameter
// server in processes of their own: over shm and TCP, with and without
// bf16 gradients, each job completing with every mini-batch delivered
// once and the memory plan in its report; then, with checkpoints, a
// shard server killed after the first checkpoint, restarted by launch
// from it; and a job whose shard server is killed without restarts,
// failing, resumed from its checkpoints by a second job. About 15
// minutes on a 2-core machine; one job runs at a time (5 processes,
// 4.1 GiB).
func TestChaosBigModel(t *testing.T) {
	multiProcess(t)
	dir := t.TempDir()
	report := func(name string) string { return filepath.Join(dir, name+".json") }
	// run runs bigJob with args to its end and returns its report.
	run := func(t *testing.T, name string, args ...string) map[string]any {
		j, _ := startBig(t, nil, append(args, "--json", report(name))...)
		if res := j.Wait(); res.ExitCode != 0 {
			t.Fatalf("%s: %s", name, res)
		}
		return readReport(t, report(name))
	}
	var want map[string]any // an undisturbed job's report
	for _, transport := range []string{"shm", "tcp"} {
		for _, codec := range []string{"none", "bf16"} {
			name := transport + "-" + codec
			t.Run(name, func(t *testing.T) {
				r := run(t, name, "--transport", transport, "--compress", codec)
				if r["transport"] != transport || r["compress"] != codec || r["chunks"].(map[string]any)["batches"] != 12.0 {
					t.Errorf("%s: transport %v, compress %v, chunks %v", name, r["transport"], r["compress"], r["chunks"])
				}
				m, ok := r["memory"].(map[string]any)
				if !ok || len(m["processes"].([]any)) != 5 || m["bytes"].(float64) < 3<<30 {
					t.Errorf("%s: memory plan %v, want 5 processes and at least 3 GiB", name, r["memory"])
				}
				if want == nil {
					want = r
				}
			})
		}
	}
	t.Run("shard-server-restarted", func(t *testing.T) {
		if want == nil { // the runs above were not selected (-run)
			want = run(t, "base")
		}
		j, marker := startBig(t, []string{"--restarts", "1"}, "--json", report("restarted"),
			"--checkpoint-dir", filepath.Join(dir, "restarted"), "--checkpoint-every", "2")
		waitOutput(t, j, "checkpoint written")
		kill(t, marker, "ps", "--id", "1")
		if res := j.Wait(); res.ExitCode != 0 {
			t.Fatalf("%s", res)
		}
		checkDisturbed(t, "restarted", want, readReport(t, report("restarted")))
	})
	t.Run("resumed", func(t *testing.T) {
		ckpt := filepath.Join(dir, "resumed")
		j, marker := startBig(t, nil, "--checkpoint-dir", ckpt, "--checkpoint-every", "2", "--ps-timeout", "10s")
		waitOutput(t, j, "checkpoint written")
		kill(t, marker, "ps", "--id", "1")
		if res := j.Wait(); res.ExitCode == 0 {
			t.Fatalf("the job went on without its shard server 1:\n%s", j.Output())
		}
		again, _ := startBig(t, nil, "--resume", ckpt, "--json", report("resumed"))
		if res := again.Wait(); res.ExitCode != 0 {
			t.Fatalf("resumed: %s", res)
		}
		r := readReport(t, report("resumed"))
		if r["epochs_done"] != 3.0 {
			t.Errorf("resumed: %v epochs done, want 3", r["epochs_done"])
		}
	})
}
