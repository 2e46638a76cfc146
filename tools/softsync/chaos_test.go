//go:build chaos

package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChaos (make chaos) runs a longer job under softsync launch while
// learner processes are killed at random moments and one shard server is
// killed after a checkpoint, and prints what happened and the final test
// error against the same job undisturbed. CHAOS_SEED picks the moments.
func TestChaos(t *testing.T) {
	seed, _ := strconv.ParseUint(os.Getenv("CHAOS_SEED"), 10, 64)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	job := []string{"--model", "lenet", "--epochs", "4", "--lr-steps", "3", "--train-subset", "20000", "--test-subset", "10000",
		"--batch", "16", "--protocol", "softsync", "--lr", "0.02", "--ps-timeout", "2m"}
	report := func(name string) string { return filepath.Join(dir, name+".json") }
	base, _ := startLaunch(t, append([]string{"-n", "4", "--shards", "2", "--", "--quiet", "--json", report("base")}, job...)...)
	if res := base.Wait(); res.ExitCode != 0 {
		t.Fatalf("undisturbed job: %s", res)
	}
	j, marker := startLaunch(t, append([]string{"-n", "4", "--shards", "2", "--restarts", "20", "--", "--json", report("chaos"),
		"--checkpoint-dir", filepath.Join(dir, "ckpt"), "--checkpoint-every", "600"}, job...)...)
	var events []string
	waitOutput(t, j, "checkpoint written")
	start := time.Now()
	serverKilled := false
	// startLaunch kills the job after 4 minutes: by then it has ended.
	for deadline := start.Add(4 * time.Minute); !strings.Contains(j.Output(), "model "); {
		if time.Now().After(deadline) {
			t.Fatalf("no end report after 4 minutes (CHAOS_SEED=%d):\n%s", seed, j.Output())
		}
		time.Sleep(time.Duration(2000+rng.IntN(4000)) * time.Millisecond)
		if strings.Contains(j.Output(), "model ") {
			break
		}
		if !serverKilled && rng.IntN(3) == 0 {
			id := strconv.Itoa(rng.IntN(2))
			if pid := findProc(marker, "ps", "--id", id); pid > 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
				events = append(events, fmt.Sprintf("%6.1fs  SIGKILL shard server %s (pid %d)", time.Since(start).Seconds(), id, pid))
				serverKilled = true
			}
			continue
		}
		id := strconv.Itoa(rng.IntN(4))
		if pid := findProc(marker, "learner", "--id", id); pid > 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
			events = append(events, fmt.Sprintf("%6.1fs  SIGKILL learner %s (pid %d)", time.Since(start).Seconds(), id, pid))
		}
	}
	res := j.Wait()
	fmt.Printf("chaos (CHAOS_SEED=%d):\n%s\n", seed, strings.Join(events, "\n"))
	if res.ExitCode != 0 {
		t.Fatalf("the job under chaos failed: %s", res)
	}
	b, c := readReport(t, report("base")), readReport(t, report("chaos"))
	var lost float64
	for _, sh := range c["shard_stats"].([]any) {
		lost += sh.(map[string]any)["lost"].(float64)
	}
	fmt.Printf("learners lost %v, restarted %v; chunks reassigned %v; pushes lost %v\n",
		c["learners_lost"], c["learner_restarts"], c["chunks"].(map[string]any)["reassigned"], lost)
	fmt.Printf("final test error %.2f%% under chaos, %.2f%% undisturbed\n", 100*c["test_error"].(float64), 100*b["test_error"].(float64))
}
