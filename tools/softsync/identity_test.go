package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/tools/softsync/internal/clustertest"
)

// TestClusterFailureIdentity: a learner's failure keeps its identity on
// its way to the head in another process. The job's head (eval) runs in
// this process, a shard server and a learner as processes of their own;
// with a huge rate, the fp16 codec turns the learner's second gradient
// into infinities, which its shard refuses (ps.ErrNonFinite). The head's
// error matches the shard's reason and the learner's own sentinels, and
// prints the learner's words.
func TestClusterFailureIdentity(t *testing.T) {
	multiProcess(t)
	dir := idxFolder(t, 400, 100)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, newSecret(), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	job := []string{"--data", dir, "--model", "mlp", "--batch", "16", "--epochs", "1", "--lr", "1e6", "--compress", "fp16",
		"--protocol", "softsync", "--learners", "1", "--shards", "1", "--coordinator", addr, "--secret-file", secret,
		"--rendezvous-timeout", "1m", "--ps-timeout", "0"}
	for _, role := range [][]string{{"ps", "--id", "0"}, {"learner", "--id", "0"}} {
		clustertest.Exec().Start(t, clustertest.Spec{N: 1, Argv: clustertest.Self("softsync", append(role, job...)...), Timeout: time.Minute})
	}
	_, err := runErrWithin(t, time.Minute, append([]string{"eval", "--quiet"}, job...)...)
	if err == nil {
		t.Fatal("the job did not fail")
	}
	t.Logf("the head's error: %v", err)
	for _, want := range []error{cluster.ErrJobFailed, ps.ErrNonFinite, ps.ErrRejected, rdma.ErrRemote} {
		if !errors.Is(err, want) {
			t.Errorf("the head's error does not match %q: %v", want, err)
		}
	}
	if errors.Is(err, ps.ErrDiverged) || !strings.Contains(err.Error(), "learner 0 step ") || !strings.Contains(err.Error(), "gradient has a NaN or Inf element: element ") {
		t.Errorf("the head's error: %v", err)
	}
}

// TestHardsyncRefusal: under hardsync a learner whose gradient its shard
// refuses (fp16 turns a huge rate's gradient into infinities) fails the
// job at once with the shard's reason: the round cannot close without
// that gradient, so its pull is never answered, and a learner once
// waited for it forever.
func TestHardsyncRefusal(t *testing.T) {
	dir := idxFolder(t, 400, 100)
	_, err := runErrWithin(t, time.Minute, "train", "--data", dir, "--model", "mlp", "--batch", "16", "--epochs", "1",
		"--lr", "1e6", "--compress", "fp16", "--protocol", "hardsync", "--learners", "2", "--quiet")
	if !errors.Is(err, ps.ErrNonFinite) || !errors.Is(err, ps.ErrRejected) {
		t.Fatalf("the job's error: %v, want the shard's refusal (%v)", err, ps.ErrNonFinite)
	}
}
