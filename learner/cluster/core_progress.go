package cluster

import (
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
)

// Progress, history and the result of the core.

// addProgress accounts a learner's report.
func (c *core) addProgress(l *learnerState, p *progress) {
	for _, e := range p.Epochs {
		c.steps += e.Steps
		l.steps += e.Steps
		if e.Steps > 0 {
			mean := e.Loss / float64(e.Steps)
			if math.IsNaN(c.ema) {
				c.ema = mean
			} else {
				c.ema += (1 - math.Pow(0.98, float64(e.Steps))) * (mean - c.ema)
			}
		}
		if e.Epoch >= 0 && e.Epoch < len(c.lossSum) {
			c.lossSum[e.Epoch] += e.Loss
			c.lossCnt[e.Epoch] += e.Steps
		}
	}
	for _, d := range p.Delivered {
		c.delivered(l.proc.ID, d.Chunk, d.N)
	}
	if p.Traffic != nil {
		c.traffic.Add(p.Traffic)
	}
	c.links = append(c.links, p.Connections...)
	if len(p.Pushes) == len(c.pushes) {
		l.pushes = p.Pushes // cumulative for the incarnation
	}
	if p.Done {
		l.done = true
	}
	c.dataWait += p.DataWait
	c.addSkipped(p.Skipped)
	c.emit()
}

// skips are the bad images a job's roles reported, each file once.
type skips struct {
	files []string        // in the order reported
	seen  map[string]bool // files
	first []string        // the messages of the first data.MaxNamedSkips
}

// addSkipped records bad images reported; the first data.MaxNamedSkips
// are logged by name, and that more follow once.
func (c *core) addSkipped(reported []data.Skip) {
	s := &c.skipped
	for _, k := range reported {
		if s.seen[k.File] {
			continue
		}
		if s.seen == nil {
			s.seen = map[string]bool{}
		}
		s.seen[k.File] = true
		s.files = append(s.files, k.File)
		switch n := len(s.files); {
		case n <= data.MaxNamedSkips:
			s.first = append(s.first, k.Err)
			c.log(slog.LevelWarn, "image skipped: it cannot be read or decoded", "err", k.Err)
		case n == data.MaxNamedSkips+1:
			c.log(slog.LevelWarn, "more images skipped: counted, not named (data_skipped in the report)")
		}
	}
}

// epochResult records an evaluator report.
func (c *core) epochResult(r *epochResult) {
	te, te5 := fracOf(r.TestError), fracOf(r.TestErrorTop5)
	secs := c.now.Sub(c.start).Seconds()
	switch {
	case r.Epoch <= 0 && !r.Taken:
		c.finalErr, c.final5, c.eval.done = te, te5, true
	case r.Epoch <= 0:
	case r.Epoch > len(c.testErr):
	case r.Taken:
		c.secs[r.Epoch-1] = secs
	default:
		c.testErr[r.Epoch-1], c.testErr5[r.Epoch-1], c.known[r.Epoch-1] = te, te5, true
	}
	c.addSkipped(r.Skipped)
	c.emit()
}

// emit appends the epochs whose loss and test error are both known, in
// order, to the history and to ready.epochs. An epoch's loss is known
// once its P mini-batches are reported (more when a lost learner's chunk
// was pushed again), or no learner will report any more (see reported).
func (c *core) emit() {
	for e := len(c.history); e < len(c.lossSum); e++ {
		last := e+1 == c.cfg.Plan.Epochs && e+1 == c.epochs
		switch {
		case e >= c.epochs:
			return
		case c.lossCnt[e] < int64(c.per) && !c.reported():
			return
		case last && c.cfg.Evaluator && (c.eval == nil || !c.eval.done), !last && !c.known[e] && c.cfg.Evaluator:
			return
		}
		ep := Epoch{Epoch: e + 1, TestError: c.testErr[e], TestErrorTop5: c.testErr5[e], Seconds: c.secs[e]}
		if last {
			ep.TestError, ep.TestErrorTop5, ep.Seconds = c.finalErr, c.final5, c.trained.Seconds()
		}
		if c.lossCnt[e] > 0 {
			ep.TrainLoss = c.lossSum[e] / float64(c.lossCnt[e])
		}
		c.history = append(c.history, ep)
		c.rd.epochs = append(c.rd.epochs, ep)
	}
}

// totalPushes returns, per shard, the gradients the learners reported
// pushing, every incarnation.
func (c *core) totalPushes() []uint64 {
	t := slices.Clone(c.pushes)
	for _, l := range c.learners {
		for k, n := range l.pushes {
			t[k] += n
		}
	}
	return t
}

// retirePushes folds the pushes of l's incarnation that ended into the
// totals.
func (c *core) retirePushes(l *learnerState) {
	for k, n := range l.pushes {
		c.pushes[k] += n
	}
	l.pushes = nil
}

// reported reports whether every progress report is in: the data is done
// and every learner has sent its last report or is gone.
func (c *core) reported() bool {
	if !c.disp.Done() {
		return false
	}
	for _, l := range c.learners {
		if l.live && !l.done {
			return false
		}
	}
	return true
}

// elapsed is the training time so far, resumed jobs included.
func (c *core) elapsed() time.Duration {
	if !c.started {
		return c.before
	}
	return c.before + c.now.Sub(c.start)
}

// result assembles the job's result.
func (c *core) result() *Result {
	// The learners' reports count every push; the delivered mini-batches
	// stay exact through a restarted coordinator, which lost reports.
	steps := max(c.steps, int64(c.disp.Stats().Batches))
	r := &Result{History: slices.Clone(c.history), Steps: steps, Images: steps * int64(c.cfg.Plan.Batch),
		Seconds: c.trained.Seconds(), BatchesPerEpoch: c.per, Traffic: c.traffic, Chunks: c.disp.Stats(),
		Lost: c.lost, Restarts: c.restarts, Processes: slices.Clone(c.procs), Connections: slices.Clone(c.links),
		Interrupted: c.interrupted, TestError: c.finalErr, TestErrorTop5: c.final5, Checkpoints: c.ckpt.stats,
		DataWait: seconds(c.dataWait), Skipped: len(c.skipped.files), SkippedFirst: slices.Clone(c.skipped.first)}
	if r.Seconds > 0 {
		r.ImagesPerSec = float64(r.Images) / r.Seconds
	}
	for _, l := range c.learners {
		r.LearnerSteps = append(r.LearnerSteps, l.steps)
	}
	r.Shards, r.Pushes, r.GivenUp = make([]ps.Stats, len(c.pushes)), c.totalPushes(), slices.Clone(c.givenUp)
	for i, s := range c.servers {
		for j, k := range c.cfg.Servers[i] {
			if j < len(s.stats.Shards) {
				r.Shards[k] = s.stats.Shards[j]
			}
		}
		r.Server.Add(&s.stats)
	}
	// A learner that died reported its last pushes to no one: a shard
	// counted at least those it received.
	for k, st := range r.Shards {
		r.Pushes[k] = max(r.Pushes[k], st.Gradients+st.Dropped+st.Redone+st.StaleLife)
	}
	slices.SortStableFunc(r.Processes, func(a, b Process) int { return a.Rank - b.Rank })
	return r
}

// progress returns the job's progress; elapsed is the training time now.
func (c *core) progress(elapsed time.Duration) Progress {
	p := Progress{Epochs: c.cfg.Plan.Epochs, Batches: c.per, Steps: c.steps, TotalSteps: c.total, Loss: c.ema,
		Images: c.steps * int64(c.cfg.Plan.Batch), Elapsed: elapsed, Waiting: !c.started,
		DataWait: seconds(c.dataWait), Skipped: len(c.skipped.files)}
	if c.trained > 0 {
		p.Elapsed = c.trained // the training clock stops with the data
	}
	if c.per > 0 {
		p.Epoch, p.Batch = int(c.steps/int64(c.per))+1, int(c.steps%int64(c.per))
		if p.Epoch > p.Epochs && p.Epochs > 0 {
			p.Epoch, p.Batch = p.Epochs, c.per
		}
	}
	return p
}

// seconds converts seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
