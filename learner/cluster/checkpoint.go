package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
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
	Pushes       []uint64           `json:"pushes"`
	Trained      float64            `json:"trained_seconds"` // training time so far
	Lost         int                `json:"learners_lost"`
	Restarts     int                `json:"learner_restarts"`
}

type epochJSON struct {
	Epoch     int      `json:"epoch"`
	TrainLoss float64  `json:"train_loss"`
	TestError *float64 `json:"test_error"`
	Seconds   float64  `json:"seconds"`
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

// state returns the coordinator's durable state; c.mu is held.
func (c *Coordinator) state() coordState {
	st := coordState{Dispatch: c.disp.State(), Steps: c.steps, LossSum: c.lossSum, LossCnt: c.lossCnt,
		Secs: c.secs, Known: c.known, Pushes: c.totalPushes(), Lost: c.lost, Restarts: c.restarts, Trained: c.elapsed().Seconds()}
	for _, l := range c.learners {
		st.Lives, st.LearnerSteps = append(st.Lives, l.lives), append(st.LearnerSteps, l.steps)
	}
	for _, te := range c.testErr {
		st.TestErr = append(st.TestErr, fracPtr(te))
	}
	for _, h := range c.history {
		st.History = append(st.History, epochJSON{h.Epoch, h.TrainLoss, fracPtr(h.TestError), h.Seconds})
	}
	return st
}

// elapsed is the training time so far, resumed jobs included; c.mu is
// held.
func (c *Coordinator) elapsed() time.Duration {
	if !c.started {
		return c.before
	}
	return c.before + time.Since(c.start)
}

// restore resumes the coordinator from a checkpoint's state.
func (c *Coordinator) restore(st coordState) error {
	E := len(c.lossSum)
	switch {
	case len(st.Lives) != len(c.learners) || len(st.LearnerSteps) != len(c.learners):
		return fmt.Errorf("%w: %d learners, the job has %d", checkpoint.ErrMismatch, len(st.Lives), len(c.learners))
	case len(st.LossSum) != E || len(st.LossCnt) != E || len(st.TestErr) != E || len(st.Secs) != E || len(st.Known) != E:
		return fmt.Errorf("%w: %d epochs, the job has %d", checkpoint.ErrMismatch, len(st.LossSum), E)
	}
	if err := c.disp.Restore(st.Dispatch); err != nil {
		return err
	}
	for i, l := range c.learners {
		l.lives, l.steps = st.Lives[i], st.LearnerSteps[i]
	}
	c.steps, c.lost, c.restarts = st.Steps, st.Lost, st.Restarts
	copy(c.lossSum, st.LossSum)
	copy(c.lossCnt, st.LossCnt)
	copy(c.secs, st.Secs)
	copy(c.known, st.Known)
	if len(st.Pushes) == len(c.pushes) { // on another number of shards the counts start again, as the shards' do
		copy(c.pushes, st.Pushes)
	}
	for e, te := range st.TestErr {
		c.testErr[e] = fracOf(te)
	}
	for _, h := range st.History {
		c.history = append(c.history, Epoch{h.Epoch, h.TrainLoss, fracOf(h.TestError), h.Seconds})
	}
	c.before = time.Duration(st.Trained * float64(time.Second))
	c.ckptSteps = c.steps
	// Epoch ends passed but not measured before the checkpoint cannot be
	// measured any more: their weights are gone.
	c.firstEpoch = st.Dispatch.Stats.Batches/c.per + 1
	for e := range min(c.firstEpoch-1, len(c.known)) {
		c.known[e] = true
	}
	return nil
}

// ckptRound is a checkpoint being written.
type ckptRound struct {
	version uint64
	waiting map[int]bool // shard servers that have not reported
	files   []checkpoint.FileSum
	err     error
	done    []chan struct{} // closed when the round ends (committed or failed)
}

// startCheckpoint starts a checkpoint round unless one is running or
// there is no store; done, if not nil, is closed when the round ends.
// c.mu is held.
func (c *Coordinator) startCheckpoint(ctx context.Context, why string, done chan struct{}) {
	if c.cfg.Checkpoints == nil || !c.started {
		if done != nil {
			close(done)
		}
		return
	}
	if r := c.round; r != nil {
		if done != nil {
			r.done = append(r.done, done)
		}
		return
	}
	v, err := c.cfg.Checkpoints.Next()
	if err == nil && v <= c.lastVersion {
		v = c.lastVersion + 1
	}
	r := &ckptRound{version: v, waiting: map[int]bool{}}
	if done != nil {
		r.done = append(r.done, done)
	}
	c.round, c.ckptSteps, c.ckptTime = r, c.steps, time.Now()
	if err == nil {
		var ver *checkpoint.Version
		if ver, err = c.cfg.Checkpoints.Begin(v); err == nil {
			st := c.state()
			var sum checkpoint.FileSum
			sum, err = ver.WriteFile(coordinatorFile, func(w io.Writer) error { return json.NewEncoder(w).Encode(st) })
			r.files = append(r.files, sum)
		}
	}
	if err != nil {
		c.endRound(fmt.Errorf("checkpoint %d: %w", v, err))
		return
	}
	if c.cfg.Logger != nil {
		c.cfg.Logger.Info("checkpoint", "version", v, "why", why, "steps", c.steps)
	}
	for i, s := range c.servers {
		if s != nil && s.lost.IsZero() {
			r.waiting[i] = true
			s.c.send(ctx, tCheckpoint, ckptOrder{Version: v})
		}
	}
	c.maybeCommit()
}

// checkpointed records a shard server's report; c.mu is held.
func (c *Coordinator) checkpointed(id int, rep ckptReport) {
	r := c.round
	if r == nil || r.version != rep.Version || !r.waiting[id] {
		return
	}
	delete(r.waiting, id)
	if rep.Err != "" {
		r.err = errors.Join(r.err, fmt.Errorf("shard server %d: %s", id, rep.Err))
	}
	r.files = append(r.files, rep.Files...)
	c.maybeCommit()
}

// maybeCommit commits the round once every shard server has reported
// (the manifest's fsyncs run on a goroutine of their own); c.mu is held.
func (c *Coordinator) maybeCommit() {
	r := c.round
	if len(r.waiting) > 0 {
		return
	}
	if r.err != nil {
		c.endRound(fmt.Errorf("checkpoint %d: %w", r.version, r.err))
		return
	}
	go func() {
		err := c.cfg.Checkpoints.Commit(r.version, r.files, checkpoint.Meta{Created: time.Now(), Job: c.cfg.Settings})
		if errors.Is(err, checkpoint.ErrPrune) { // committed; an old version stays
			if c.cfg.Logger != nil {
				c.cfg.Logger.Warn("checkpoint: removing old versions", "err", err)
			}
			err = nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if err == nil {
			c.lastVersion = r.version
			if c.cfg.Logger != nil {
				c.cfg.Logger.Info("checkpoint written", "version", r.version, "dir", c.cfg.Checkpoints.VersionDir(r.version))
			}
		}
		c.endRound(err)
	}()
}

// endRound ends the running round (err: it failed, which the job
// survives: the previous version stays); c.mu is held.
func (c *Coordinator) endRound(err error) {
	r := c.round
	if err != nil && c.cfg.Logger != nil {
		c.cfg.Logger.Error("checkpoint failed; the previous version stays", "err", err)
	}
	for _, d := range r.done {
		close(d)
	}
	c.round = nil
	c.notify()
}

// dueCheckpoint starts a round when one is due; c.mu is held.
func (c *Coordinator) dueCheckpoint(ctx context.Context) {
	switch {
	case c.cfg.Checkpoints == nil || !c.started || c.finishing || c.interrupted:
	case c.cfg.CheckpointEvery > 0 && c.steps-c.ckptSteps >= int64(c.cfg.CheckpointEvery):
		c.startCheckpoint(ctx, fmt.Sprintf("every %d mini-batches", c.cfg.CheckpointEvery), nil)
	case c.cfg.CheckpointInterval > 0 && time.Since(c.ckptTime) >= c.cfg.CheckpointInterval:
		c.startCheckpoint(ctx, fmt.Sprintf("every %v", c.cfg.CheckpointInterval), nil)
	}
}

type ckptOrder struct {
	Version uint64 `json:"version"`
}

type ckptReport struct {
	Version uint64               `json:"version"`
	Files   []checkpoint.FileSum `json:"files"`
	Err     string               `json:"err,omitempty"`
}

// writeShards writes the shards of srv into version v of store and
// returns their checksums.
func writeShards(store *checkpoint.Store, srv *ps.Server, shards int, v uint64) ([]checkpoint.FileSum, error) {
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
// shards onto shards shards of a vector of total floats. skipped lists
// the newer versions passed over, each naming the file at fault.
func LoadResume(store *checkpoint.Store, settings Settings, keys []string, total, shards int) (*Resume, []error, error) {
	var old []*checkpoint.Shard
	snap, skipped, err := store.Latest(func(s *checkpoint.Snapshot) error {
		var diffs []string
		for _, k := range keys {
			if got, ok := s.Manifest.Job[k]; !ok || got != settings[k] {
				diffs = append(diffs, fmt.Sprintf("--%s %q, this job has %q", k, got, settings[k]))
			}
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%s: %w: a checkpoint of another job: %s", s.Path(checkpoint.ManifestName), checkpoint.ErrMismatch, strings.Join(diffs, "; "))
		}
		var err error
		old, err = s.Shards()
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
	return &Resume{Snapshot: snap, Shards: re, Info: info}, skipped, nil
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
