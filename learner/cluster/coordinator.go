package cluster

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/rdma"
)

// CoordinatorConfig configures the coordinator of a job.
type CoordinatorConfig struct {
	Settings Settings  // the job's flags; every process must have the same
	Plan     data.Plan // the job's data
	Learners int       // λ: learner ids 0 … λ−1
	// Servers lists, per shard-server index, the shards that server runs;
	// together they run every shard exactly once.
	Servers   [][]int
	Evaluator bool // an evaluator takes part
	// Expect names the processes the job waits for at rendezvous, for
	// messages (their ranks); optional.
	Expect []Process
	// Heartbeat, if > 0, removes a learner from which nothing was heard
	// for that long (as if its connection were lost).
	Heartbeat time.Duration
	// Rendezvous, if > 0, fails the job when some process has not arrived
	// after that long.
	Rendezvous time.Duration
	// WaitWarn is how long the rendezvous lasts before the coordinator
	// warns that it still waits, naming who is missing, and again each
	// time it has lasted as long once more (0: DefaultWaitWarn); until
	// then it says so at debug level only.
	WaitWarn time.Duration
	// Checkpoints, if set, is where the job's checkpoints go (see
	// checkpoint.go): every CheckpointEvery mini-batches or
	// CheckpointInterval (0: not), when the job is interrupted, and when a
	// shard server asks before it stops.
	Checkpoints        *checkpoint.Store
	CheckpointEvery    int
	CheckpointInterval time.Duration
	// Resume, if set, continues a job from a checkpoint: the data
	// dispatcher's position, the learners' incarnations, the progress and
	// the history.
	Resume *Resume
	// ServerTimeout is how long the job waits for a shard server whose
	// connection was lost to come back (restarted from its checkpoint)
	// before it fails; 0: it fails at once.
	ServerTimeout time.Duration
	Logger        *slog.Logger
	// OnEpoch, if set, receives each epoch's history entry once it is
	// complete, in order; it is called from a coordinator goroutine and
	// must not block for long.
	OnEpoch func(Epoch)
	// OnResult, if set, receives the job's result (also that of an
	// interrupted job) before the processes are told to stop: what it
	// writes is done while they still wait, so that a coordinator that
	// dies before it returns is restarted (Resume) with them still there
	// and ends the job again. It is called from the Serve goroutine.
	OnResult func(*Result)

	// norm is the job's input normalisation, which the learners and the
	// evaluator are welcomed with (nil: none) and checkpoints keep.
	norm *inputNorm
}

// Coordinator runs a job's membership, data, progress and end (see the
// package doc). Create it with NewCoordinator and run it with Serve.
//
// It is the runtime around the coordinator's deterministic core (core.go):
// Serve's goroutine owns the core and steps it with one event at a time
// (a control message, the loss of a connection, a tick, the user's
// interruption, the end of a checkpoint write); each control connection
// has a reader goroutine that decodes its messages into events, and a
// writer goroutine that sends what the core queued for it, in order, so
// that no send ever waits on the core or the core on a send. Checkpoint
// files are written on goroutines of their own, which report back as
// events. Progress reads a snapshot taken after every step.
type Coordinator struct {
	cfg        CoordinatorConfig
	core       *core // Serve's goroutine only
	interrupt  chan struct{}
	interrupts sync.Once

	mu   sync.Mutex // guards prog and the training clock below
	prog Progress
	// running: the training clock runs since at, from elapsed then.
	running bool
	at      time.Time
	// arrived and started tell the rendezvous (for tests).
	arrived int
	started bool
}

// NewCoordinator validates cfg and, with cfg.Resume, restores the job's
// state from the checkpoint.
func NewCoordinator(cfg CoordinatorConfig) (*Coordinator, error) {
	var first uint64
	if cfg.Checkpoints != nil {
		if v, err := cfg.Checkpoints.Next(); err == nil {
			first = v
		}
	}
	core, err := newCore(cfg, first)
	if err != nil {
		return nil, err
	}
	c := &Coordinator{cfg: cfg, core: core, interrupt: make(chan struct{})}
	c.snapshot(time.Now())
	return c, nil
}

// tickEvery is how often the core's clock ticks: the granularity of the
// heartbeat, the rendezvous deadline and its warnings.
func (c *Coordinator) tickEvery() time.Duration {
	every := time.Second
	for _, d := range []time.Duration{c.cfg.Heartbeat, c.cfg.Rendezvous, c.cfg.WaitWarn} {
		if d > 0 {
			every = min(every, max(d/4, 10*time.Millisecond))
		}
	}
	return every
}

// Serve accepts the job's processes on ln and runs the job to its end:
// it returns the result once every shard server is final, every learner
// is done (or lost) and the evaluator has reported the final weights, or
// the first failure. Every process is told to stop before it returns. It
// closes ln.
func (c *Coordinator) Serve(ctx context.Context, ln rdma.Listener) (*Result, error) {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Sends outlive ctx by a moment, so that the stop of a cancelled job
	// still reaches the processes (see drain).
	sendCtx, stopSends := context.WithCancel(context.Background())
	defer stopSends()
	events := make(chan event, 64)
	post := func(ev event) {
		select {
		case events <- ev:
		case <-ctx.Done():
		}
	}
	conns := &ctrlConns{m: map[connID]*ctrlConn{}}
	wg.Go(func() {
		for id := connID(1); ; id++ {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			w := conns.add(id, conn)
			wg.Go(func() { w.write(sendCtx) })
			wg.Go(func() { readCtrl(ctx, id, w.cc, post) })
		}
	})
	tick := time.NewTicker(c.tickEvery())
	defer tick.Stop()
	interrupt := c.interrupt
	out := &serveIO{conns: conns, post: post, wg: &wg}
	ev := event{kind: evTick} // the clock of the rendezvous starts now
	for {
		rd := c.apply(ev, time.Now(), out)
		if rd.done {
			ln.Close()
			cancel()
			conns.drain(stopGrace)
			stopSends()
			return rd.result, rd.err
		}
		select {
		case ev = <-events:
		case <-tick.C:
			ev = event{kind: evTick}
		case <-interrupt:
			ev, interrupt = event{kind: evInterrupt}, nil
		case <-ctx.Done():
			ev = event{kind: evCancel, err: ctx.Err()}
		}
	}
}

// coordIO is where a coordinator's steps are carried out: Serve's
// connections and goroutines (serveIO), or the chaos simulator's.
type coordIO interface {
	// send queues m on its connection, behind the messages queued
	// before; an m without a type closes the connection after them.
	send(m outMsg)
	// spawn runs work (file I/O) elsewhere, and steps the core with the
	// event it returns.
	spawn(work func() event)
}

// apply steps the core with ev at now and carries out what it asked for,
// in this order: the job's result goes to OnResult before anything else
// (the stop of every process is among the messages: what OnResult writes
// is done while they still wait), then the messages and closes, in order,
// the log lines and completed epochs, and the checkpoint files to write
// and commit. It returns the step's ready.
func (c *Coordinator) apply(ev event, now time.Time, out coordIO) ready {
	rd := c.core.step(ev, now)
	result := rd.done && rd.result != nil && c.cfg.OnResult != nil
	if result && !revertResultAfterStop {
		c.cfg.OnResult(rd.result)
	}
	for _, m := range rd.sends {
		out.send(m)
	}
	for _, id := range rd.closes {
		out.send(outMsg{conn: id})
	}
	if result && revertResultAfterStop {
		c.cfg.OnResult(rd.result)
	}
	if log := c.cfg.Logger; log != nil {
		for _, l := range rd.logs {
			log.Log(context.Background(), l.level, l.msg, l.args...)
		}
	}
	if c.cfg.OnEpoch != nil {
		for _, e := range rd.epochs {
			c.cfg.OnEpoch(e)
		}
	}
	store := c.cfg.Checkpoints
	if w := rd.write; w != nil {
		out.spawn(func() event {
			file, err := writeCoordinatorFile(store, w.version, w.state)
			return event{kind: evWritten, version: w.version, file: file, err: err}
		})
	}
	if m := rd.commit; m != nil {
		out.spawn(func() event {
			err := store.Commit(m.version, m.files, checkpoint.Meta{Created: m.created, Job: c.cfg.Settings})
			return event{kind: evCommitted, version: m.version, err: err}
		})
	}
	c.snapshot(now)
	return rd
}

// serveIO carries out Serve's steps: each connection's writer goroutine
// sends what is queued for it; files are written on goroutines of their
// own, which post their events.
type serveIO struct {
	conns *ctrlConns
	post  func(event)
	wg    *sync.WaitGroup
}

func (s *serveIO) send(m outMsg) { s.conns.get(m.conn).queue(m) }

func (s *serveIO) spawn(work func() event) { s.wg.Go(func() { s.post(work()) }) }

// snapshot records the core's progress for Progress.
func (c *Coordinator) snapshot(now time.Time) {
	core := c.core
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prog = core.progress(core.elapsed())
	c.running, c.at = core.started && core.trained == 0 && !core.ended, now
	c.arrived, c.started = len(core.procs), core.started
}

// rendezvous returns how many processes have arrived and whether the job
// has started.
func (c *Coordinator) rendezvous() (arrived int, started bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.arrived, c.started
}

// Interrupt ends the job early (the user's Ctrl-C): the learners are
// stopped, the evaluator measures the weights as they are, and Serve
// returns the result so far with ErrInterrupted; before the job has
// started (at rendezvous), Serve returns ErrInterrupted at once, without
// a result, and the processes that arrived are stopped. It is safe to
// call from any goroutine, more than once.
func (c *Coordinator) Interrupt() {
	c.interrupts.Do(func() { close(c.interrupt) })
}

// Progress returns a snapshot of the job's progress; it is safe to call
// from any goroutine.
func (c *Coordinator) Progress() Progress {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.prog
	if c.running {
		p.Elapsed += time.Since(c.at)
	}
	return p
}

// readCtrl reads the control messages of connection id and posts them as
// events, then its loss.
func readCtrl(ctx context.Context, id connID, cc *ctrl, post func(event)) {
	peer := cc.conn.RemoteAddr()
	for {
		t, b, err := cc.recv(ctx)
		if err != nil {
			post(event{kind: evLost, conn: id, err: err})
			return
		}
		msg, err := decodeCtrl(t, b)
		post(event{kind: evMsg, conn: id, peer: peer, t: t, msg: msg, err: err})
	}
}

// ctrlConns are the coordinator's connections by id.
type ctrlConns struct {
	mu sync.Mutex
	m  map[connID]*ctrlConn
}

func (cs *ctrlConns) add(id connID, conn rdma.Conn) *ctrlConn {
	w := &ctrlConn{cc: &ctrl{conn: conn}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.m[id] = w
	return w
}

func (cs *ctrlConns) get(id connID) *ctrlConn {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.m[id]
}

// drain closes every connection once what was queued for it is sent, or
// after grace at the latest.
func (cs *ctrlConns) drain(grace time.Duration) {
	cs.mu.Lock()
	all := slices.Collect(maps.Values(cs.m))
	cs.mu.Unlock()
	deadline := time.After(grace)
	for _, w := range all {
		w.queue(outMsg{})
	}
	for _, w := range all {
		select {
		case <-w.done:
		case <-deadline:
		}
		w.cc.conn.Close()
	}
}

// ctrlConn is a control connection's writer side: the messages the core
// queued for it, sent in order by write; an outMsg with no type closes the
// connection after the messages before it.
type ctrlConn struct {
	cc   *ctrl
	mu   sync.Mutex
	q    []outMsg
	wake chan struct{}
	done chan struct{} // closed when write returns
}

func (w *ctrlConn) queue(m outMsg) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.q = append(w.q, m)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// write sends the queued messages until the queue asks to close or a
// send fails (which closes the connection: its reader reports the loss).
func (w *ctrlConn) write(ctx context.Context) {
	defer close(w.done)
	defer w.cc.conn.Close()
	for {
		select {
		case <-w.wake:
		case <-ctx.Done():
			return
		}
		w.mu.Lock()
		q := w.q
		w.q = nil
		w.mu.Unlock()
		for _, m := range q {
			if m.t == 0 {
				return
			}
			if w.cc.send(ctx, m.t, m.v) != nil {
				return
			}
		}
	}
}

// writeCoordinatorFile writes the coordinator's file of version v.
func writeCoordinatorFile(store *checkpoint.Store, v uint64, st coordState) (checkpoint.FileSum, error) {
	ver, err := store.Begin(v)
	if err != nil {
		return checkpoint.FileSum{}, err
	}
	return ver.WriteFile(coordinatorFile, func(w io.Writer) error { return json.NewEncoder(w).Encode(st) })
}
