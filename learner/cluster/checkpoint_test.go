package cluster

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

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
	re, skipped, err := LoadResume(store, nil, nil, total, 1)
	bad := fmt.Sprintf("%s: shard file: %v: momentum element 7 (flat index 7) is NaN", filepath.Join(store.VersionDir(2), checkpoint.ShardFile(0)), checkpoint.ErrFormat)
	if err != nil || re.Snapshot.Version() != 1 || len(skipped) != 1 || !errors.Is(skipped[0], checkpoint.ErrFormat) || !strings.Contains(skipped[0].Error(), bad) {
		t.Fatalf("resume: %v, skipped %v; want version 1, version 2 skipped with %q", err, skipped, bad)
	}
	write(3, func(s *checkpoint.Shard) { s.Weights[0] = float32(math.Inf(1)) })
	write(4, func(s *checkpoint.Shard) { s.Weights[0] = float32(math.Inf(1)) }) // the store keeps the newest two: both bad
	if _, skipped, err := LoadResume(store, nil, nil, total, 1); !errors.Is(err, checkpoint.ErrNone) || len(skipped) != 2 || !strings.Contains(skipped[0].Error(), "weights element 0 (flat index 0) is +Inf") {
		t.Fatalf("resume from bad versions only: %v, skipped %v", err, skipped)
	}
}
