//go:build chaos

package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChaos (make chaos) runs the failure tests' job under softsync
// launch CHAOS_RUNS times (default 20) for each role it kills — a
// learner, a shard server, the head — each time with SIGKILL at a random
// moment after the job's first checkpoint (CHAOS_SEED picks the moments
// and the victims), and checks every run as TestFailures does against
// the same job undisturbed: it completes, each shard holds exactly one
// gradient of every mini-batch, every push is accounted for, and the
// test error is at most 0.3 points worse. CHAOS_ROLES (a comma-separated
// list, default all three) selects the roles killed. Every other run's
// learners push early (--early-push: in pieces during backward). It
// prints one line per role: "chaos ROLE: N runs, F failed".
func TestChaos(t *testing.T) {
	multiProcess(t)
	seed, _ := strconv.ParseUint(os.Getenv("CHAOS_SEED"), 10, 64)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	runs, _ := strconv.Atoi(os.Getenv("CHAOS_RUNS"))
	if runs <= 0 {
		runs = 20
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	report := func(name string) string { return filepath.Join(dir, name+".json") }
	base, _ := startLaunch(t, append([]string{"-n", "3", "--shards", "2", "--", "--quiet", "--json", report("base")}, failureJob...)...)
	if res := base.Wait(); res.ExitCode != 0 {
		t.Fatalf("undisturbed job: %s", res)
	}
	want := readReport(t, report("base"))
	roles := []string{"learner", "ps", "eval"}
	if r := os.Getenv("CHAOS_ROLES"); r != "" {
		roles = strings.Split(r, ",")
	}
	for _, role := range roles {
		if !slices.Contains([]string{"learner", "ps", "eval"}, role) {
			t.Fatalf("CHAOS_ROLES: %q is not learner, ps or eval", role)
		}
		failed := 0
		for i := range runs {
			name := fmt.Sprintf("%s-%d", role, i)
			args := []string{role}
			switch role {
			case "eval":
				args = append(args, "--coordinator")
			default:
				n := 3
				if role == "ps" {
					n = 2
				}
				args = append(args, "--id", strconv.Itoa(rng.IntN(n)))
			}
			ckpt := filepath.Join(dir, name)
			flags := []string{"-n", "3", "--shards", "2", "--restarts", "2", "--",
				"--json", report(name), "--checkpoint-dir", ckpt, "--checkpoint-every", "250"}
			if i%2 == 1 {
				flags = append(flags, "--early-push")
			}
			j, marker := startLaunch(t, append(flags, failureJob...)...)
			waitOutput(t, j, "checkpoint written")
			time.Sleep(time.Duration(rng.IntN(8000)) * time.Millisecond)
			pid := findProc(marker, args...)
			if pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			res := j.Wait()
			ok := t.Run(name, func(t *testing.T) {
				if res.ExitCode != 0 {
					t.Fatalf("%s (killed %v, pid %d; CHAOS_SEED=%d): %s", name, args, pid, seed, res)
				}
				checkDisturbed(t, name, want, readReport(t, report(name)))
			})
			if !ok {
				failed++
			}
			os.RemoveAll(ckpt)
		}
		fmt.Printf("chaos %s: %d runs, %d failed (CHAOS_SEED=%d)\n", role, runs, failed, seed)
	}
}
