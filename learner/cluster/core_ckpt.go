package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/softsync/softsync/ps/checkpoint"
)

// Checkpoint rounds of the core (see checkpoint.go for the files). The
// core decides when: every CheckpointEvery mini-batches or
// CheckpointInterval, when the job is interrupted, and when a shard
// server asks before it stops, but never while a shard server is away (a
// version without its files could not restore its shards: the round
// due starts once it is back). A round gets the next version number,
// orders every shard server to write its shards into it
// (tCheckpoint) and asks the runtime to write the coordinator's own file
// (ready.write); once the file is written (evWritten) and every server
// has reported (tCheckpointed) or been lost, it asks for the manifest
// that marks the version complete (ready.commit) and ends with its
// commit (evCommitted). One round runs at a time; a round that fails
// leaves the previous version as the newest.

// ckptState is the core's checkpoint bookkeeping.
type ckptState struct {
	next  uint64    // the version of the next round
	last  uint64    // the last version committed
	steps int64     // steps when the last round started
	time  time.Time // when the last round started (or the job)
	round *ckptRound
	stats CheckpointStats
}

// ckptRound is a checkpoint being written.
type ckptRound struct {
	version    uint64
	waiting    map[int]bool // shard servers that have not reported
	own        bool         // the coordinator's file is being written
	committing bool
	files      []checkpoint.FileSum
	err        error
	requesters []connID // shard servers told tCheckpointDone when the round ends
}

// startCheckpoint starts a round unless one is running or there is no
// store; requester, if not 0, is a shard server that asked and is told
// when the round ends.
func (c *core) startCheckpoint(why string, requester connID) {
	if c.cfg.Checkpoints == nil || !c.started {
		if requester != 0 {
			c.send(requester, tCheckpointDone, nil)
		}
		return
	}
	if r := c.ckpt.round; r != nil {
		if requester != 0 {
			r.requesters = append(r.requesters, requester)
		}
		return
	}
	if id := c.serverAway(); id >= 0 {
		// A version without that server's files could not restore its
		// shards: the previous version stays.
		c.log(slog.LevelWarn, "checkpoint skipped: a shard server is away", "why", why, "server", id)
		if requester != 0 {
			c.send(requester, tCheckpointDone, nil)
		}
		return
	}
	v := max(c.ckpt.next, c.ckpt.last+1)
	c.ckpt.next = v + 1
	r := &ckptRound{version: v, waiting: map[int]bool{}, own: true}
	if requester != 0 {
		r.requesters = append(r.requesters, requester)
	}
	c.ckpt.round, c.ckpt.steps, c.ckpt.time = r, c.steps, c.now
	c.rd.write = &ckptWrite{version: v, state: c.state()}
	c.log(slog.LevelInfo, "checkpoint", "version", v, "why", why, "steps", c.steps)
	for i, s := range c.servers {
		r.waiting[i] = true
		c.send(s.conn, tCheckpoint, ckptOrder{Version: v})
	}
}

// serverAway returns the id of a shard server that is not there (not
// arrived, or lost and not back), or −1.
func (c *core) serverAway() int {
	return slices.IndexFunc(c.servers, func(s *serverState) bool { return s == nil || !s.lost.IsZero() })
}

// written records the end of the write of the coordinator's file.
func (c *core) written(v uint64, file checkpoint.FileSum, err error) {
	r := c.ckpt.round
	if r == nil || r.version != v || !r.own {
		return
	}
	r.own = false
	if err != nil {
		r.err = errors.Join(r.err, fmt.Errorf("the coordinator's file: %w", err))
	} else {
		r.files = append(r.files, file)
	}
	c.maybeCommit()
}

// checkpointed records a shard server's report.
func (c *core) checkpointed(id int, rep ckptReport) {
	r := c.ckpt.round
	if r == nil || r.version != rep.Version || !r.waiting[id] {
		return
	}
	delete(r.waiting, id)
	if err := rep.Err(); err != nil {
		r.err = errors.Join(r.err, fmt.Errorf("shard server %d: %w", id, err))
	}
	r.files = append(r.files, rep.Files...)
	c.maybeCommit()
}

// maybeCommit asks for the manifest once every file is in.
func (c *core) maybeCommit() {
	r := c.ckpt.round
	if len(r.waiting) > 0 || r.own || r.committing {
		return
	}
	if r.err != nil {
		c.endRound(fmt.Errorf("checkpoint %d: %w", r.version, r.err))
		return
	}
	r.committing = true
	c.rd.commit = &ckptCommit{version: r.version, files: r.files, created: c.now}
}

// committed records the end of the manifest's commit.
func (c *core) committed(v uint64, err error) {
	r := c.ckpt.round
	if r == nil || r.version != v || !r.committing {
		return
	}
	if errors.Is(err, checkpoint.ErrPrune) { // committed; an old version stays
		c.log(slog.LevelWarn, "checkpoint: removing old versions", "err", err)
		err = nil
	}
	if err == nil {
		c.ckpt.last = v
		c.ckpt.stats.Written++
		c.log(slog.LevelInfo, "checkpoint written", "version", v, "dir", c.cfg.Checkpoints.VersionDir(v))
	}
	c.endRound(err)
}

// endRound ends the running round (err: it failed, which the job
// survives: the previous version stays; the result counts it).
func (c *core) endRound(err error) {
	if err != nil {
		c.log(slog.LevelError, "checkpoint failed; the previous version stays", "err", err)
		st := &c.ckpt.stats
		st.Failed++
		st.LastFailure = &CheckpointFailure{Version: c.ckpt.round.version, Epochs: float64(c.ckpt.steps) / float64(c.per),
			Seconds: c.elapsed().Seconds(), Time: c.now, Err: err}
	}
	for _, conn := range c.ckpt.round.requesters {
		c.send(conn, tCheckpointDone, nil)
	}
	c.ckpt.round = nil
}

// dueCheckpoint starts a round when one is due.
func (c *core) dueCheckpoint() {
	switch {
	case c.cfg.Checkpoints == nil || !c.started || c.finishing || c.interrupted || c.serverAway() >= 0:
	case c.cfg.CheckpointEvery > 0 && c.steps-c.ckpt.steps >= int64(c.cfg.CheckpointEvery):
		c.startCheckpoint(fmt.Sprintf("every %d mini-batches", c.cfg.CheckpointEvery), 0)
	case c.cfg.CheckpointInterval > 0 && c.now.Sub(c.ckpt.time) >= c.cfg.CheckpointInterval:
		c.startCheckpoint(fmt.Sprintf("every %v", c.cfg.CheckpointInterval), 0)
	}
}

// state returns the coordinator's durable state.
func (c *core) state() coordState {
	// Copies: the runtime encodes the state on another goroutine while
	// the core goes on.
	st := coordState{Dispatch: c.disp.State(), Steps: c.steps, LossSum: slices.Clone(c.lossSum), LossCnt: slices.Clone(c.lossCnt),
		Secs: slices.Clone(c.secs), Known: slices.Clone(c.known), Pushes: slices.Clone(c.pushes), Lost: c.lost, Restarts: c.restarts,
		Trained: c.elapsed().Seconds()}
	for _, l := range c.learners {
		st.Lives, st.LearnerSteps = append(st.Lives, l.lives), append(st.LearnerSteps, l.steps)
		st.LearnerPushes = append(st.LearnerPushes, slices.Clone(l.pushes))
	}
	for e, te := range c.testErr {
		st.TestErr, st.TestErr5 = append(st.TestErr, fracPtr(te)), append(st.TestErr5, fracPtr(c.testErr5[e]))
	}
	for _, h := range c.history {
		st.History = append(st.History, epochJSON{Epoch: h.Epoch, TrainLoss: h.TrainLoss, TestError: fracPtr(h.TestError),
			TestErrorTop5: fracPtr(h.TestErrorTop5), Seconds: h.Seconds})
	}
	st.Norm, st.DataWait = c.cfg.norm, c.dataWait
	st.Skipped, st.SkippedFirst = slices.Clone(c.skipped.files), slices.Clone(c.skipped.first)
	return st
}

// restore resumes the core from a checkpoint's state.
func (c *core) restore(st coordState) error {
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
		for i, l := range c.learners {
			if i < len(st.LearnerPushes) && len(st.LearnerPushes[i]) == len(c.pushes) {
				l.pushes = st.LearnerPushes[i]
				l.inc = uint32(max(l.lives-1, 0))
			}
		}
	}
	for e, te := range st.TestErr {
		c.testErr[e] = fracOf(te)
		if e < len(st.TestErr5) {
			c.testErr5[e] = fracOf(st.TestErr5[e])
		}
	}
	for _, h := range st.History {
		c.history = append(c.history, Epoch{Epoch: h.Epoch, TrainLoss: h.TrainLoss, TestError: fracOf(h.TestError),
			TestErrorTop5: fracOf(h.TestErrorTop5), Seconds: h.Seconds})
	}
	c.dataWait = st.DataWait
	c.skipped = skips{files: st.Skipped, first: st.SkippedFirst, seen: map[string]bool{}}
	for _, f := range st.Skipped {
		c.skipped.seen[f] = true
	}
	c.before = time.Duration(st.Trained * float64(time.Second))
	c.ckpt.steps = c.steps
	// Epoch ends passed but not measured before the checkpoint cannot be
	// measured any more: their weights are gone.
	c.firstEpoch = st.Dispatch.Stats.Batches/c.per + 1
	for e := range min(c.firstEpoch-1, len(c.known)) {
		c.known[e] = true
	}
	return nil
}
