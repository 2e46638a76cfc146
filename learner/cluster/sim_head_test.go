package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma/errcode"
)

// The head of a job in the chaos simulator: the coordinator (its real
// Coordinator, stepped through Coordinator.apply as Serve steps it) and,
// in the same process, the evaluator (RunEvaluator's runtime over its
// evalPlan and a ps.ClientCore).

type simHead struct {
	j     *simJob
	p     *simProc
	coord *Coordinator
	ln    *simListener
	conns map[connID]*simEnd
	next  connID
	over  bool
	eval  *simEval
}

func (j *simJob) startHead(p *simProc) {
	w := j.w
	c := j.procConfig()
	cfg := c.coordinatorConfig(c.Settings(), j.topo, j.plan, data.Normalizer{})
	if cfg.Resume != nil {
		j.resumed(cfg.Resume)
	}
	h := &simHead{j: j, p: p, conns: map[connID]*simEnd{}}
	cfg.OnResult = func(res *Result) { j.result(h, res) }
	if w.trace.verbose {
		cfg.Logger = slog.New(&simLog{p: p})
	}
	coord, err := NewCoordinator(cfg)
	if err != nil {
		panic(fmt.Sprintf("seed %d: NewCoordinator: %v", w.seed, err))
	}
	h.coord = coord
	port := 7000
	if !j.fixedHead {
		port += p.life
	}
	h.ln = p.listen(port, h.accept)
	j.rendezvous = h.ln.addr
	j.head = h
	p.roles++
	w.logf(p, "coordinator listening at %s (resume %v)", h.ln.addr, cfg.Resume != nil)
	h.step(event{kind: evTick}) // the clock of the rendezvous starts now
	h.tick()
	j.startEval(p)
}

// tick steps the coordinator's clock every tickEvery.
func (h *simHead) tick() {
	h.p.after(h.coord.tickEvery(), func() {
		if !h.over {
			h.step(event{kind: evTick})
			h.tick()
		}
	})
}

// accept takes a connection to the coordinator: its messages and its
// loss become events (readCtrl).
func (h *simHead) accept(e *simEnd) {
	if h.over {
		e.close(h.p.w.now, errPeerGone)
		return
	}
	h.next++
	id := h.next
	h.conns[id] = e
	peer := fmt.Sprintf("%s:%d", e.peer().p.host, 40000+e.c.id)
	e.recv = func(m any) {
		c := m.(simCtrl)
		msg, err := decodeCtrl(c.t, c.b)
		h.step(event{kind: evMsg, conn: id, peer: peer, t: c.t, msg: msg, err: err})
	}
	e.lost = func(err error) { h.step(event{kind: evLost, conn: id, err: err}) }
}

// step steps the coordinator with ev now.
func (h *simHead) step(ev event) {
	if h.over {
		return
	}
	rd := h.coord.apply(ev, h.p.w.clock(), h)
	if rd.done {
		h.end(rd)
	}
}

// send is coordIO's: the message goes on its connection (after what the
// process is busy with).
func (h *simHead) send(m outMsg) {
	e := h.conns[m.conn]
	if e == nil {
		return
	}
	if m.t == 0 {
		e.closeAfterWork()
		return
	}
	sendCtrl(e, m.t, m.v)
}

// spawn is coordIO's: the file is written in a moment, and its event
// steps the coordinator then.
func (h *simHead) spawn(work func() event) {
	h.p.after(h.j.w.between(time.Millisecond, 20*time.Millisecond), func() { h.step(work()) })
}

// interrupt is the user's Ctrl-C.
func (h *simHead) interrupt() { h.step(event{kind: evInterrupt}) }

// end ends the coordinator's Serve: its listener closes, and every
// connection once what was queued for it is sent.
func (h *simHead) end(rd ready) {
	h.over = true
	h.ln.close()
	for _, id := range slices.Sorted(mapsKeys(h.conns)) {
		h.conns[id].closeAfterWork()
	}
	h.j.coordinatorDone(h, rd.result, rd.err)
	h.p.roleEnded("coordinator", rd.err)
}

// The evaluator.

type simEval struct {
	j           *simJob
	p           *simProc
	mem         *simMember
	ctrl        *simEnd
	cl          *simClient
	plan        *evalPlan
	w           []float32
	stamps      []uint64
	interrupted bool
	snapping    int  // the epoch of the snapshot in progress
	inFlight    bool // a snapshot is in progress
	stopped     bool
	finished    bool // evaluate returned the final weights
	stopErr     error
	failed      error
	ended       bool
	final       []float32
}

func (j *simJob) startEval(p *simProc) {
	m := j.member(p, RoleEvaluator, 0)
	e := &simEval{j: j, p: p, mem: &simMember{p: p, m: m}}
	p.roles++
	j.eval = e
	e.mem.join(m, hello{}, func(jd joined) {
		if jd.err != nil {
			e.end(jd.err)
			return
		}
		e.ctrl = jd.e
		jd.e.recv = func(msg any) {
			c := msg.(simCtrl)
			var cmd evalCmd
			if cmd = evalCommand(c.t, c.b); cmd.err != nil && c.t != tStop {
				cmd.err = fmt.Errorf("%s: %w", m.Process, cmd.err)
			}
			switch {
			case cmd.addr != nil:
				if e.cl != nil {
					e.cl.answer(*cmd.addr)
				}
			case cmd.interrupt:
				e.interrupt()
			default:
				e.stop(cmd.err)
			}
		}
		jd.e.lost = func(err error) {
			e.stop(fmt.Errorf("%s: %w: lost the coordinator: %v", m.Process, ErrJobFailed, err))
		}
		e.evaluate(jd.w)
	})
}

// evaluate connects to the shard servers and measures every weights the
// plan names (evaluate).
func (e *simEval) evaluate(w welcome) {
	j := e.j
	cfg := ps.ClientCoreConfig{Learner: evaluatorID, Total: j.total, Shards: j.cfg.Shards}
	e.mem.connect(w.Addrs, cfg, func(cl *simClient, err error) {
		if err != nil {
			e.evalEnd(err)
			return
		}
		if e.ended || e.stopped {
			cl.close()
			return
		}
		e.cl = cl
		cl.job, cl.ctrl = j.cfg.Job, func() *simEnd { return e.ctrl }
		cl.done = e.snapshotDone
		cl.restore = j.restore
		e.plan, e.w, e.stamps = newEvalPlan(w), make([]float32, j.total), make([]uint64, j.cfg.Shards)
		e.measureNext()
	})
}

// measureNext asks for the next weights of the plan.
func (e *simEval) measureNext() {
	if e.ended || e.stopped {
		return
	}
	if e.interrupted {
		e.plan.interrupt()
	}
	epoch, ok := e.plan.next()
	if !ok {
		e.evalEnd(nil)
		return
	}
	e.snapping, e.inFlight = epoch, true
	e.cl.carry(e.cl.core.Snapshot(epoch, e.w, e.stamps))
}

// snapshotDone takes the end of a snapshot: the weights are measured and
// reported (taken, then measured).
func (e *simEval) snapshotDone(_ ps.Call, err error) {
	e.inFlight = false
	epoch := e.snapping
	if err != nil {
		if err := e.plan.failed(e.mem.m.Process, epoch, e.interrupted && !e.stopped, err); err != nil {
			e.evalEnd(err)
			return
		}
		e.measureNext()
		return
	}
	taken, r := e.plan.measured(epoch)
	sendCtrl(e.ctrl, tEpoch, taken)
	if epoch <= 0 {
		e.final = slices.Clone(e.w) // EvaluatorConfig.OnFinal
	}
	sendCtrl(e.ctrl, tEpoch, r)
	e.measureNext()
}

// interrupt takes the coordinator's interruption: a snapshot of an epoch
// in progress ends (its context is cancelled).
func (e *simEval) interrupt() {
	e.interrupted = true
	if e.inFlight && e.snapping >= 0 && e.cl != nil {
		e.cl.carry(e.cl.core.Cancel(context.Canceled))
	}
}

// stop takes the coordinator's stop (err: the job's failure), or the
// loss of the coordinator: the evaluator's context ends.
func (e *simEval) stop(err error) {
	if e.stopped || e.ended {
		return
	}
	e.stopped, e.stopErr = true, err
	switch {
	case e.failed != nil:
		e.end(cmpErr(err, e.failed))
	case e.finished:
		e.end(err)
	default: // evaluate ends with its context
		e.end(cmpErr(err, fmt.Errorf("%s: weights of epoch %d: %w", e.mem.m.Process, e.snapping, context.Canceled)))
	}
}

// evalEnd takes evaluate's end (RunEvaluator): wait for the stop; on a
// failure, give the coordinator a moment to explain, then report it.
func (e *simEval) evalEnd(err error) {
	if e.ended {
		return
	}
	if err == nil {
		e.finished = true
		if e.stopped {
			e.end(e.stopErr)
		}
		return // it waits for the stop
	}
	e.failed = err
	if e.stopped {
		e.end(cmpErr(e.stopErr, err))
		return
	}
	e.p.after(stopGrace, func() {
		if e.ended {
			return
		}
		sendCtrl(e.ctrl, tFail, failure{errcode.Encode(err)})
		e.end(err)
	})
}

// cmpErr returns a if not nil, else b.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (e *simEval) end(err error) {
	if e.ended {
		return
	}
	e.ended = true
	if e.cl != nil {
		e.cl.close()
	}
	if e.ctrl != nil {
		e.ctrl.close(e.p.w.now, errPeerGone)
	}
	e.p.roleEnded("evaluator", err)
}

// result is the head's Config.OnResult, as softsync's head does it: the
// result with the evaluator's final weights (Job.onResult), the report
// written (NewReport, as JSON) while the process works on it, then the
// job marked ended (launch's --ended-file): a head that dies before is
// started again, not one that dies after.
func (j *simJob) result(h *simHead, res *Result) {
	if j.eval != nil && j.eval.p == h.p {
		res.Weights = j.eval.final
	}
	b, err := json.Marshal(NewReport(&j.cfg, res))
	if err != nil {
		panic(err)
	}
	d := j.w.between(time.Millisecond, 300*time.Millisecond)
	h.p.busy(d)
	j.w.logf(h.p, "writing the job's outputs (%d bytes of report) for %v", len(b), d)
	j.onResult(h)
	h.p.after(d, func() { j.ended(h, res) })
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// simLog writes the coordinator's log into a verbose trace.
type simLog struct {
	p     *simProc
	attrs []slog.Attr
}

func (l *simLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *simLog) WithAttrs(a []slog.Attr) slog.Handler {
	return &simLog{p: l.p, attrs: append(slices.Clone(l.attrs), a...)}
}
func (l *simLog) WithGroup(string) slog.Handler { return l }
func (l *simLog) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	l.p.w.aside(l.p, line)
	return nil
}
