package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/sgd"
)

// TestLoadResumeNonFinite writes two checkpoint versions of a one-shard
// job, the newer with a NaN in its momentum: the resume passes over the
// newer, with an error naming its shard file and the first bad index, and
// resumes from the older; with only the bad one it refuses to resume.
func TestLoadResumeNonFinite(t *testing.T) {
	const total = 40
	cfg := ps.Config{Job: 1, Learners: 2, Protocol: ps.Softsync, N: 2, Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.1, Momentum: 0.9}}
	sh, err := ps.NewShard(cfg, 0, make([]float32, total), 1)
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	write := func(v uint64, spoil func(*checkpoint.Shard)) {
		t.Helper()
		s := &checkpoint.Shard{Checkpoint: *sh.Checkpoint(), Shards: 1, Incarnations: make([]uint32, 2), Evicted: make([]bool, 2)}
		spoil(s)
		ver, err := store.Begin(v)
		if err != nil {
			t.Fatal(err)
		}
		var sums []checkpoint.FileSum
		for name, write := range map[string]func(io.Writer) error{
			checkpoint.ShardFile(0): func(w io.Writer) error { return checkpoint.EncodeShard(w, s) },
			coordinatorFile:         func(w io.Writer) error { _, err := io.WriteString(w, "{}"); return err },
		} {
			sum, err := ver.WriteFile(name, write)
			if err != nil {
				t.Fatal(err)
			}
			sums = append(sums, sum)
		}
		if err := store.Commit(v, sums, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	write(1, func(*checkpoint.Shard) {})
	write(2, func(s *checkpoint.Shard) { s.Solver.Momentum[7] = float32(math.NaN()) })
	re, skipped, err := LoadResume(store, nil, nil, total, 1, nil)
	bad := fmt.Sprintf("%s: shard file: %v: momentum element 7 (flat index 7) is NaN", filepath.Join(store.VersionDir(2), checkpoint.ShardFile(0)), checkpoint.ErrFormat)
	if err != nil || re.Snapshot.Version() != 1 || len(skipped) != 1 || !errors.Is(skipped[0], checkpoint.ErrFormat) || !strings.Contains(skipped[0].Error(), bad) {
		t.Fatalf("resume: %v, skipped %v; want version 1, version 2 skipped with %q", err, skipped, bad)
	}
	write(3, func(s *checkpoint.Shard) { s.Weights[0] = float32(math.Inf(1)) })
	write(4, func(s *checkpoint.Shard) { s.Weights[0] = float32(math.Inf(1)) }) // the store keeps the newest two: both bad
	if _, skipped, err := LoadResume(store, nil, nil, total, 1, nil); !errors.Is(err, checkpoint.ErrNone) || len(skipped) != 2 || !strings.Contains(skipped[0].Error(), "weights element 0 (flat index 0) is +Inf") {
		t.Fatalf("resume from bad versions only: %v, skipped %v", err, skipped)
	}
}

// TestCheckpointFailuresReported: a job whose first checkpoint cannot be
// written (its version's folder cannot be made: a file holds its name)
// goes on (four epochs: a round may still run when one ends), writes the
// next ones, and its result and report count the
// failure with its version, epoch, time and error, not only a log line.
func TestCheckpointFailuresReported(t *testing.T) {
	train, test := mnistSubset(t, 512, 64)
	dir := t.TempDir()
	store, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	blocked := store.VersionDir(1)
	if err := os.WriteFile(blocked, []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 1, Batch: 16, Epochs: 4, Seed: 1,
		Protocol: ps.Hardsync, N: 1, Shards: 2, Checkpoints: store, CheckpointEvery: 10, Report: 2 * time.Millisecond,
		Solver: sgd.Config{LR: 0.05, Momentum: 0.9}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := time.Now()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := res.Checkpoints
	f := st.LastFailure
	if st.Failed != 1 || st.Written < 1 || f == nil {
		t.Fatalf("checkpoints %+v, want 1 failed and at least one written", st)
	}
	if f.Version != 1 || f.Epochs <= 0 || f.Epochs >= float64(cfg.Epochs) || f.Seconds <= 0 || f.Time.Before(before) || !strings.Contains(f.Err.Error(), blocked) {
		t.Errorf("the failure %+v", f)
	}
	rep := NewReport(&cfg, res)
	rf := rep.CheckpointFailures
	if when, err := time.Parse(time.RFC3339, rf.LastTime); err != nil || when.Before(before.Add(-time.Second)) {
		t.Errorf("last_time %q: %v", rf.LastTime, err)
	}
	if rep.CheckpointsWritten != st.Written || rf.Count != 1 || rf.LastVersion != 1 || rf.LastEpoch != f.Epochs || rf.LastSeconds != f.Seconds ||
		rf.LastError != f.Err.Error() {
		t.Errorf("report: checkpoints_written %d, checkpoint_failures %+v; result %+v", rep.CheckpointsWritten, rf, st)
	}
	// Without failures the report says so with zeros.
	res.Checkpoints = CheckpointStats{Written: 2}
	if rep := NewReport(&cfg, res); rep.CheckpointsWritten != 2 || rep.CheckpointFailures != (ReportCheckpointFailures{}) {
		t.Errorf("no failure: %d written, %+v", rep.CheckpointsWritten, rep.CheckpointFailures)
	}
}

// TestLoadResumeKeeps: a process resuming the shards it runs keeps the
// arrays of those only, every shard's counters and, when the version has
// another number of shards, re-splits every old shard first; the kept
// shards' weights are the version's.
func TestLoadResumeKeeps(t *testing.T) {
	const total = 30
	cfg := ps.Config{Job: 1, Learners: 2, Protocol: ps.Softsync, N: 2, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.1, Momentum: 0.9}}
	w := make([]float32, total)
	for i := range w {
		w[i] = float32(i)
	}
	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ver, err := store.Begin(1)
	if err != nil {
		t.Fatal(err)
	}
	var sums []checkpoint.FileSum
	for k := range 2 {
		sh, err := ps.NewShard(cfg, k, w, 1)
		if err != nil {
			t.Fatal(err)
		}
		s := &checkpoint.Shard{Checkpoint: *sh.Checkpoint(), Shards: 2, Incarnations: make([]uint32, 2), Evicted: make([]bool, 2)}
		sum, err := ver.WriteFile(checkpoint.ShardFile(k), func(w io.Writer) error { return checkpoint.EncodeShard(w, s) })
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, sum)
	}
	sum, err := ver.WriteFile(coordinatorFile, func(w io.Writer) error { _, err := io.WriteString(w, "{}"); return err })
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Commit(1, append(sums, sum), checkpoint.Meta{}); err != nil {
		t.Fatal(err)
	}
	for _, shards := range []int{2, 3} {
		re, _, err := LoadResume(store, nil, nil, total, shards, func(k int) bool { return k == 1 })
		if err != nil {
			t.Fatalf("%d shards: %v", shards, err)
		}
		rs, _ := ps.Ranges(total, shards)
		for k, s := range re.Shards {
			if k != 1 {
				if !s.Dropped() || s.Weights != nil || s.Solver.Momentum != nil {
					t.Errorf("%d shards: shard %d, not run here, kept its arrays", shards, k)
				}
				continue
			}
			if s.Dropped() || !slices.Equal(s.Weights, w[rs[1].Lo:rs[1].Hi]) || len(s.Solver.Momentum) != rs[1].Len() {
				t.Errorf("%d shards: shard 1: dropped %t, weights %v, want %v", shards, s.Dropped(), s.Weights, w[rs[1].Lo:rs[1].Hi])
			}
		}
	}
}
