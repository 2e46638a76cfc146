package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/rdma/errcode"
)

// Checkpoints of a job (ps/checkpoint, docs/checkpoint.md): the
// coordinator decides when (every CheckpointEvery mini-batches or
// CheckpointInterval, when the job is interrupted, when a shard server
// asks before it stops); it sends each shard server the version number,
// every shard server writes its shards' files into the version's folder
// and reports their checksums, the coordinator writes its own state
// (coordinatorFile: the data dispatcher's position, the learners'
// incarnations, the progress and the history) and, once every shard
// server has reported, the manifest that marks the version complete. One
// round runs at a time. Shards do not synchronise: each shard's file is
// taken on its own goroutine, between two messages.

// coordinatorFile is the coordinator's file in a checkpoint version.
const coordinatorFile = "coordinator.json"

// coordState is the coordinator's durable state (coordinatorFile).
type coordState struct {
	Dispatch     data.DispatchState `json:"dispatch"`
	Lives        []int              `json:"lives"` // per learner: incarnations so far
	Steps        int64              `json:"steps"`
	LearnerSteps []int64            `json:"learner_steps"`
	LossSum      []float64          `json:"loss_sum"` // per epoch
	LossCnt      []int64            `json:"loss_count"`
	TestErr      []*float64         `json:"test_error"` // per epoch; null: not measured
	Secs         []float64          `json:"seconds"`
	Known        []bool             `json:"known"`
	History      []epochJSON        `json:"history"`
	Pushes       []uint64           `json:"pushes"` // per shard, by learner incarnations that ended
	// LearnerPushes are, per learner, the pushes per shard its current
	// incarnation (Lives−1) reported: a learner that rejoins a restarted
	// coordinator in that incarnation reports them again, cumulative.
	LearnerPushes [][]uint64 `json:"learner_pushes,omitempty"`
	Trained       float64    `json:"trained_seconds"` // training time so far
	Lost          int        `json:"learners_lost"`
	Restarts      int        `json:"learner_restarts"`
	TestErr5      []*float64 `json:"test_error_top5,omitempty"` // per epoch, as TestErr
	// Norm is the job's input normalisation, which a resumed job keeps
	// (nil in checkpoints of earlier versions: computed again).
	Norm     *inputNorm `json:"normalizer,omitempty"`
	DataWait float64    `json:"data_wait_seconds,omitempty"`
	// Skipped are the bad images reported (files), SkippedFirst the
	// messages of the first data.MaxNamedSkips.
	Skipped      []string `json:"skipped,omitempty"`
	SkippedFirst []string `json:"skipped_first,omitempty"`
}

type epochJSON struct {
	Epoch         int      `json:"epoch"`
	TrainLoss     float64  `json:"train_loss"`
	TestError     *float64 `json:"test_error"`
	TestErrorTop5 *float64 `json:"test_error_top5,omitempty"`
	Seconds       float64  `json:"seconds"`
}

func fracPtr(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

func fracOf(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

type ckptOrder struct {
	Version uint64 `json:"version"`
}

// ckptReport: a shard server wrote its files of a version, or failed
// with its error (err and err_codes, package errcode).
type ckptReport struct {
	Version uint64               `json:"version"`
	Files   []checkpoint.FileSum `json:"files"`
	errcode.Wire
}

// writeShards writes the shards of a shard server into version v of
// store and returns their checksums.
func writeShards(store *checkpoint.Store, srv shardHost, shards int, v uint64) ([]checkpoint.FileSum, error) {
	cps, ids := srv.Checkpoint()
	if cps == nil {
		return nil, errors.New("the server has stopped")
	}
	ver, err := store.Begin(v)
	if err != nil {
		return nil, err
	}
	var sums []checkpoint.FileSum
	for _, cp := range cps {
		s := &checkpoint.Shard{Checkpoint: *cp, Shards: shards}
		for _, id := range ids {
			s.Incarnations, s.Evicted = append(s.Incarnations, id.Incarnation), append(s.Evicted, id.Evicted)
		}
		sum, err := ver.WriteFile(checkpoint.ShardFile(cp.Shard), func(w io.Writer) error { return checkpoint.EncodeShard(w, s) })
		if err != nil {
			return nil, err
		}
		sums = append(sums, sum)
	}
	return sums, nil
}

// Resume is what a job resumes from: a complete checkpoint version.
type Resume struct {
	Snapshot *checkpoint.Snapshot
	// Shards are the version's shards re-split onto the job's layout
	// (checkpoint.Resplit), by shard index.
	Shards []*checkpoint.Shard
	Info   checkpoint.ResplitInfo
}

// LoadResume finds the newest complete version of store whose job
// settings agree with settings on the keys that must not change (same
// network, data and batch) and whose shards decode, and re-splits its
// shards onto shards shards of a vector of total floats. Every shard
// file is decoded, so that every process of a job picks the same version,
// but only the shards keep accepts (nil: all) keep their arrays
// (weights, momentum, accumulation, rule state): a process holds those of
// the shards it runs, and of one more while it reads (all of them when
// the version has another number of shards, to re-split them). skipped
// lists the newer versions passed over, each naming the file at fault.
func LoadResume(store *checkpoint.Store, settings Settings, keys []string, total, shards int, keep func(shard int) bool) (*Resume, []error, error) {
	var old []*checkpoint.Shard
	snap, skipped, err := store.Latest(func(s *checkpoint.Snapshot) error {
		var diffs []string
		for _, k := range keys { // a key neither has (the classes of MNIST) agrees
			if got := s.Manifest.Job[k]; got != settings[k] {
				diffs = append(diffs, fmt.Sprintf("--%s %q, this job has %q", k, got, settings[k]))
			}
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%s: %w: a checkpoint of another job: %s", s.Path(checkpoint.ManifestName), checkpoint.ErrMismatch, strings.Join(diffs, "; "))
		}
		keepOld := keep
		if s.ShardFiles() != shards {
			keepOld = nil // every old shard's arrays make the new shards
		}
		var err error
		old, err = s.ShardsOf(keepOld)
		if err != nil {
			return err
		}
		_, err = s.ReadFile(coordinatorFile)
		return err
	})
	if err != nil {
		return nil, skipped, err
	}
	re, info, err := checkpoint.Resplit(old, total, shards)
	if err != nil {
		return nil, skipped, fmt.Errorf("%s: %w", snap.Dir(), err)
	}
	for _, s := range re {
		if keep != nil && !keep(s.Shard) && !s.Dropped() {
			s.Drop()
		}
	}
	return &Resume{Snapshot: snap, Shards: re, Info: info}, skipped, nil
}

// coordinatorOnly returns what the coordinator needs of r (nil for nil):
// the version, without the shards.
func (r *Resume) coordinatorOnly() *Resume {
	if r == nil {
		return nil
	}
	return &Resume{Snapshot: r.Snapshot, Info: r.Info}
}

// restoreConfig fills a shard server's configuration from a resume.
func (r *Resume) restoreConfig(cfg *ps.ServerConfig) {
	cfg.Restore, cfg.Identities = nil, nil
	for _, k := range cfg.Shards {
		s := r.Shards[k]
		cp := s.Checkpoint
		cfg.Restore = append(cfg.Restore, &cp)
		if cfg.Identities == nil {
			for i := range s.Incarnations {
				cfg.Identities = append(cfg.Identities, ps.Identity{Incarnation: s.Incarnations[i], Evicted: s.Evicted[i]})
			}
		}
	}
}

// consumed returns, per shard of shards, the mini-batches its checkpoint
// says it consumed.
func (r *Resume) consumed(shards []int) [][]ps.Interval {
	out := make([][]ps.Interval, len(shards))
	for i, k := range shards {
		out[i] = r.Shards[k].Consumed
	}
	return out
}

// coordinatorState reads the coordinator's file of a resume.
func (r *Resume) coordinatorState() (coordState, error) {
	var st coordState
	b, err := r.Snapshot.ReadFile(coordinatorFile)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w: %v", r.Snapshot.Path(coordinatorFile), checkpoint.ErrFormat, err)
	}
	return st, nil
}
