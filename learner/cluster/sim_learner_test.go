package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma/errcode"
)

// simLearner is a learner role in the chaos simulator: RunLearner's
// runtime over the simulated network, driving the learner's cores (its
// workerCore with the coordinator, its ps.ClientCore with the shard
// servers) as worker.go and ps.Client do, and the learner loop of
// learner.Learner.Run over a data.Loader: take a mini-batch, pull, compute
// (virtual time), push; leave while idle, join again; leave at the end.
// The loader asks for the next chunk as its producer does: once it has
// filled the current chunk's last mini-batch, two buffers ahead of the
// learner.
type simLearner struct {
	j    *simJob
	p    *simProc
	id   int
	mem  *simMember
	ctrl *simEnd
	core *workerCore
	cl   *simClient
	plan data.Plan
	w, g []float32
	// w2 takes an asynchronous pull (Config.Overlap), while the step
	// computes on w; async: one is in flight, asyncOver: it has ended,
	// with asyncErr; onAsync runs at its end; fresh: the next step pulls
	// synchronously first (learner.Learner.Run).
	w2               []float32
	async, asyncOver bool
	asyncErr         error
	onAsync          func()
	fresh            bool

	member, trainDone, ended, cancelled bool
	failed                              error // the training's failure
	then                                func(error)
	// the loader
	items   []simItem
	asking  bool
	waiting bool // the learner waits for the loader
	steps   int
}

// simItem is what the loader hands the learner: a mini-batch (position
// pos of chunk), or that there is none now (idle) or any more (end).
type simItem struct {
	chunk     data.Chunk
	pos       int
	idle, end bool
}

func (j *simJob) startLearner(p *simProc, id int) {
	m := j.member(p, RoleLearner, id)
	l := &simLearner{j: j, p: p, id: id, mem: &simMember{p: p, m: m}}
	p.roles++
	l.mem.join(m, hello{}, func(jd joined) {
		if jd.err != nil {
			l.end(jd.err)
			return
		}
		l.core, l.plan = newWorkerCore(jd.w), jd.w.Plan
		l.take(jd.e)
		l.p.after(j.report, l.heartbeat)
		l.train(jd.w)
	})
}

// take makes e the control connection (worker.read).
func (l *simLearner) take(e *simEnd) {
	l.ctrl = e
	e.recv = func(m any) {
		c := m.(simCtrl)
		cmd := l.core.command(c.t, c.b)
		switch {
		case cmd.chunk != nil:
			l.chunkReply(*cmd.chunk)
		case cmd.addr != nil:
			if l.cl != nil {
				l.cl.answer(*cmd.addr)
			}
		case cmd.flush:
			l.flush(true)
		}
		if cmd.end {
			l.cancel()
		}
	}
	e.lost = func(err error) {
		if l.ctrl != e || l.ended {
			return
		}
		l.ctrl = nil
		l.mem.rejoin(l.core.rejoinHello, err, func(jd joined) {
			if l.ended {
				if jd.e != nil {
					jd.e.close(l.p.w.now, errPeerGone)
				}
				return
			}
			if jd.err != nil {
				l.core.fail(jd.err)
				l.cancel()
				return
			}
			l.take(jd.e)
			complete, asking := l.core.rejoined()
			for _, c := range complete {
				sendCtrl(jd.e, tComplete, c)
			}
			if asking != nil {
				sendCtrl(jd.e, tChunkReq, asking)
			}
		})
	}
}

// train connects to the shard servers, joins every shard and runs the
// learner loop (worker.train).
func (l *simLearner) train(w welcome) {
	j := l.j
	cfg := ps.ClientCoreConfig{Learner: uint32(l.id), Incarnation: w.Incarnation, Protocol: j.cfg.Protocol, Total: j.total, Shards: j.cfg.Shards,
		Codec: j.cfg.Codec}
	l.mem.connect(w.Addrs, cfg, func(cl *simClient, err error) {
		if err != nil {
			l.trainEnd(err)
			return
		}
		if l.ended || l.cancelled {
			cl.close()
			return
		}
		l.cl = cl
		cl.job, cl.ctrl = j.cfg.Job, func() *simEnd { return l.ctrl }
		cl.done = func(call ps.Call, err error) {
			if call == ps.CallPull && l.async && !l.asyncOver {
				l.asyncOver, l.asyncErr = true, err
				if f := l.onAsync; f != nil {
					l.onAsync = nil
					f()
				}
				return
			}
			if t := l.then; t != nil {
				l.then = nil
				t(err)
			}
		}
		cl.delivered = l.delivered
		cl.restore = j.restore
		l.w, l.g, l.w2, l.fresh = make([]float32, j.total), make([]float32, j.total), make([]float32, j.total), true
		l.do(cl.core.Join, func(err error) {
			if err != nil {
				l.trainEnd(err)
				return
			}
			l.member = true
			l.fetch(false)
			l.next()
		})
	})
}

// do steps the client core with a call and runs then at its end.
func (l *simLearner) do(call func() ps.ClientReady, then func(error)) {
	l.then = then
	l.cl.carry(call())
}

// fetch asks the coordinator for the next chunk (worker.Next).
func (l *simLearner) fetch(wait bool) {
	l.asking = true
	req := l.core.ask(wait)
	if l.ctrl != nil {
		sendCtrl(l.ctrl, tChunkReq, req) // a failure is the reader's to notice
	}
}

// chunkReply takes the coordinator's answer to a chunk request: the
// loader queues its mini-batches, or the idle or the end; after an idle
// it asks again, waiting.
func (l *simLearner) chunkReply(rep chunkReply) {
	l.asking = false
	c, err := l.core.took(rep)
	switch {
	case errors.Is(err, data.ErrIdle):
		l.items = append(l.items, simItem{idle: true})
		l.fetch(true)
	case errors.Is(err, data.ErrEnd):
		l.items = append(l.items, simItem{end: true})
	default:
		for i := range c.Count {
			l.items = append(l.items, simItem{chunk: c, pos: i})
		}
		if c.Count <= 2 {
			l.fetch(false)
		}
	}
	if l.waiting {
		l.waiting = false
		l.next()
	}
}

// next takes the loader's next item (learner.Learner.Run).
func (l *simLearner) next() {
	if l.cancelled || l.ended {
		return
	}
	if len(l.items) == 0 {
		l.waiting = true
		return
	}
	it := l.items[0]
	l.items = l.items[1:]
	switch {
	case it.end:
		if !l.member {
			l.trainEnd(nil)
			return
		}
		l.do(l.cl.core.Leave, func(err error) {
			if err != nil {
				err = fmt.Errorf("learner %d: leave at the end: %w", l.id, err)
			}
			l.member = false
			l.trainEnd(err)
		})
	case it.idle:
		if !l.member {
			l.next()
			return
		}
		l.do(l.cl.core.Leave, func(err error) {
			if err != nil {
				l.trainEnd(fmt.Errorf("learner %d: leave while idle: %w", l.id, err))
				return
			}
			l.member, l.fresh = false, true
			l.next()
		})
	case !l.member:
		l.do(l.cl.core.Join, func(err error) {
			if err != nil {
				l.trainEnd(fmt.Errorf("learner %d: join: %w", l.id, err))
				return
			}
			l.member = true
			l.step(it)
		})
	default:
		l.step(it)
	}
}

// step pulls, computes and pushes one mini-batch (learner.Learner.step):
// with Overlap, the pull of the next step's weights runs while it
// computes (a synchronous pull first when fresh); with EarlyPush, the
// gradient's upper half goes while the lower is computed.
func (l *simLearner) step(it simItem) {
	if it.pos >= it.chunk.Count-2 && !l.asking && it.chunk.Count > 2 {
		l.fetch(false) // the loader has filled the chunk's last mini-batch
	}
	overlap := l.j.cfg.Overlap
	compute := func() {
		l.fresh = false
		if overlap {
			l.async, l.asyncOver, l.asyncErr = true, false, nil
			l.cl.carry(l.cl.core.Pull(l.w2, true))
		}
		id := l.plan.ID(it.chunk.Epoch, it.chunk.Batch(it.pos))
		t := l.j.stepTime()
		l.p.after(t/2, func() {
			if l.cancelled || l.ended {
				return
			}
			loss := simGradient(l.g, l.w, id, l.j.faults.divergeFrom)
			rest := func() {
				l.p.after(t-t/2, func() {
					if l.cancelled || l.ended {
						return
					}
					l.do(func() ps.ClientReady { return l.cl.core.Push(l.g, id, 0) }, func(err error) {
						if err != nil {
							l.trainEnd(l.psError(err))
							return
						}
						l.waitPull(func() {
							l.core.stepped(it.chunk.Epoch, loss)
							l.steps++
							l.next()
						})
					})
				})
			}
			if !l.j.cfg.EarlyPush {
				rest()
				return
			}
			l.do(func() ps.ClientReady { return l.cl.core.Push(l.g, id, l.j.total/2) }, func(err error) {
				if err != nil {
					l.trainEnd(l.psError(err))
					return
				}
				rest()
			})
		})
	}
	if overlap && !l.fresh {
		compute()
		return
	}
	l.do(func() ps.ClientReady { return l.cl.core.Pull(l.w, false) }, func(err error) {
		if err != nil {
			l.trainEnd(l.psError(err))
			return
		}
		compute()
	})
}

// waitPull ends the step's asynchronous pull, if any (Client.WaitPull:
// once it has ended), and swaps its weights in; then runs next.
func (l *simLearner) waitPull(next func()) {
	if !l.async {
		next()
		return
	}
	if !l.asyncOver {
		l.onAsync = func() { l.waitPull(next) }
		return
	}
	l.async = false
	l.do(l.cl.core.WaitPull, func(err error) {
		if err != nil {
			l.trainEnd(l.psError(err))
			return
		}
		l.w, l.w2 = l.w2, l.w
		next()
	})
}

// simGradient fills g with a small gradient of mini-batch id that leans
// on the weights w, and returns its loss; from mini-batch divergeFrom on
// (0: never), a gradient that makes the weights overflow.
func simGradient(g, w []float32, id, divergeFrom uint64) float32 {
	if divergeFrom > 0 && id >= divergeFrom {
		for i := range g {
			g[i] = 1e38
		}
		return 1e30
	}
	for i := range g {
		g[i] = float32(1e-3*math.Sin(float64(id)+float64(i))) + 1e-3*w[i]
	}
	return float32(2.3 / (1 + 0.01*float64(id)))
}

// psError is learner.Learner's error of a parameter-server call.
func (l *simLearner) psError(err error) error {
	if errors.Is(err, ps.ErrDiverged) {
		return fmt.Errorf("learner %d step %d: %w: %w", l.id, l.steps, learner.ErrDiverged, err)
	}
	return fmt.Errorf("learner %d step %d: %w", l.id, l.steps, err)
}

// delivered is the client's report that every shard has the push of
// mini-batch id (worker.delivered).
func (l *simLearner) delivered(id uint64) {
	c, complete := l.core.delivered(id)
	if complete && l.ctrl != nil {
		sendCtrl(l.ctrl, tComplete, c)
	}
}

// flush sends the progress since the last report (worker.flush).
func (l *simLearner) flush(done bool) {
	p := l.core.progress(done)
	if l.cl != nil {
		p.Pushes = l.cl.core.Pushes()
		if done {
			for li := range l.cl.links {
				p.Connections = append(p.Connections, Connection{Learner: l.id, Shards: l.cl.core.LinkShards(li), Transport: "sim"})
			}
		}
	}
	if (l.ctrl == nil || !sendCtrl(l.ctrl, tProgress, p)) && !done {
		l.core.unsent(p)
	}
}

// heartbeat reports the progress every Report (worker.reportEvery).
func (l *simLearner) heartbeat() {
	if l.ended || l.cancelled || l.trainDone {
		return
	}
	l.flush(false)
	l.p.after(l.j.report, l.heartbeat)
}

// trainEnd takes the end of the training (RunLearner): with the data
// done, the last report, and the learner ends; on a failure, a moment for
// the coordinator to explain (the job may have failed elsewhere), then the
// failure is reported as the job's, unless the coordinator stopped it.
func (l *simLearner) trainEnd(err error) {
	if l.trainDone || l.ended || l.failed != nil {
		return
	}
	if err == nil {
		l.trainDone = true
		l.flush(true)
		l.end(nil)
		return
	}
	l.failed = err
	if l.cancelled {
		l.end(l.jobError(err))
		return
	}
	grace, report := trainFailed(err)
	if !report {
		l.end(err) // its life is over at a shard server: the job goes on without it
		return
	}
	l.p.after(grace, func() {
		if l.ended {
			return
		}
		if jobErr := l.core.err; jobErr != nil {
			l.end(jobErr)
			return
		}
		if l.ctrl != nil {
			sendCtrl(l.ctrl, tFail, failure{errcode.Encode(err)})
		}
		l.end(err)
	})
}

// jobError is the role's error once its context ended: the job's end, or
// what ended the training.
func (l *simLearner) jobError(err error) error {
	if l.core != nil && l.core.err != nil {
		return l.core.err
	}
	return err
}

// cancel ends the role's context: the coordinator stopped the job, or it
// could not be rejoined.
func (l *simLearner) cancel() {
	if l.ended || l.cancelled {
		return
	}
	l.cancelled = true
	switch {
	case l.failed != nil:
		l.end(l.jobError(l.failed))
	case !l.trainDone:
		l.end(l.jobError(context.Canceled))
	}
}

// end ends the role with err.
func (l *simLearner) end(err error) {
	if l.ended {
		return
	}
	l.ended = true
	if l.cl != nil {
		l.cl.close()
	}
	if l.ctrl != nil {
		l.ctrl.close(l.p.w.now, errPeerGone)
	}
	l.p.roleEnded(fmt.Sprintf("learner %d", l.id), err)
}
