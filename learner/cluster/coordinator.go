package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
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
}

// Coordinator runs a job's membership, data, progress and end (see the
// package doc). Create it with NewCoordinator and run it with Serve.
type Coordinator struct {
	cfg    CoordinatorConfig
	disp   *data.Dispatcher
	total  int64
	per    int
	epochs int // complete epochs the job trains (evaluated at their ends)

	mu             sync.Mutex
	changed        chan struct{} // closed and replaced when the job's state changes
	started        bool
	start          time.Time
	trained        time.Duration // start → last chunk completed
	finishing      bool          // the data is done: shard servers told to finish
	interrupted    bool          // Interrupt was called
	interruptCkpt  bool          // the interruption's checkpoint was started
	firstEpoch     int           // the first epoch the evaluator measures (after a resume: not those passed)
	before         time.Duration // training time of the job before it was resumed
	round          *ckptRound    // the checkpoint being written
	ckptSteps      int64         // steps at the last checkpoint
	ckptTime       time.Time     // time of the last checkpoint
	lastVersion    uint64        // the last version committed
	err            error         // the job failed
	servers        []*serverState
	learners       []*learnerState
	eval           *evalState
	procs          []Process
	lost, restarts int

	// progress
	steps    int64
	ema      float64
	lossSum  []float64 // per epoch, 0-based
	lossCnt  []int64
	testErr  []float64 // per epoch, NaN until measured (or without a test set)
	secs     []float64
	known    []bool // the evaluator reported the epoch
	history  []Epoch
	finalErr float64 // test error of the final weights (NaN: none)
	traffic  rdma.Stats
	conns    []Connection
	pushes   []uint64 // per shard, gradients pushed by learner incarnations that have ended (see totalPushes)
}

type serverState struct {
	c     *ctrl
	proc  Process
	addr  string
	final bool
	lost  time.Time // its connection was lost at (zero: connected)
	lives int       // registrations (restarts + 1)
	stats ps.ServerStats
	// polled: it answered the interruption's request for its counters.
	polled bool
}

type learnerState struct {
	c      *ctrl
	proc   Process
	inc    uint32
	lives  int  // incarnations so far
	live   bool // registered and not lost
	done   bool // sent its last progress
	last   time.Time
	steps  int64
	pushes []uint64 // per shard, as last reported by this incarnation
}

type evalState struct {
	c    *ctrl
	proc Process
	done bool
}

// NewCoordinator validates cfg.
func NewCoordinator(cfg CoordinatorConfig) (*Coordinator, error) {
	disp, err := data.NewDispatcher(cfg.Plan)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, shards := range cfg.Servers {
		for _, k := range shards {
			if seen[k] {
				return nil, fmt.Errorf("cluster: shard %d runs on two servers: %w", k, ErrRendezvous)
			}
			seen[k] = true
		}
	}
	if cfg.Learners < 1 || len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("cluster: %d learners and %d shard servers: %w", cfg.Learners, len(cfg.Servers), ErrRendezvous)
	}
	c := &Coordinator{cfg: cfg, disp: disp, total: int64(cfg.Plan.Total()), per: cfg.Plan.BatchesPerEpoch(),
		changed: make(chan struct{}), servers: make([]*serverState, len(cfg.Servers)),
		learners: make([]*learnerState, cfg.Learners), ema: math.NaN(), finalErr: math.NaN()}
	for i := range c.learners {
		c.learners[i] = &learnerState{}
	}
	c.epochs = int(c.total) / c.per
	n := 0
	for _, shards := range cfg.Servers {
		n += len(shards)
	}
	c.pushes = make([]uint64, n)
	E := cfg.Plan.Epochs
	c.lossSum, c.lossCnt = make([]float64, E), make([]int64, E)
	c.testErr, c.secs, c.known = make([]float64, E), make([]float64, E), make([]bool, E)
	for e := range c.testErr {
		c.testErr[e] = math.NaN()
	}
	if cfg.Resume != nil {
		st, err := cfg.Resume.coordinatorState()
		if err == nil {
			err = c.restore(st)
		}
		if err != nil {
			return nil, fmt.Errorf("resume from %s: %w", cfg.Resume.Snapshot.Dir(), err)
		}
		c.lastVersion = cfg.Resume.Snapshot.Version()
	}
	return c, nil
}

// notify signals a change of state; c.mu is held.
func (c *Coordinator) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// fail records the job's failure (the first one wins); c.mu is held.
func (c *Coordinator) fail(err error) {
	if c.err == nil {
		c.err = err
		c.notify()
	}
}

// Serve accepts the job's processes on ln and runs the job to its end:
// it returns the result once every shard server is final, every learner
// is done (or lost) and the evaluator has reported the final weights, or
// the first failure. Every process is told to stop before it returns.
func (c *Coordinator) Serve(ctx context.Context, ln rdma.Listener) (*Result, error) {
	var wg sync.WaitGroup
	defer wg.Wait() // after the cancel and the close below
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer ln.Close()
	wg.Go(func() {
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			wg.Go(func() { c.serveConn(ctx, conn) })
		}
	})
	deadline := time.Time{}
	if c.cfg.Rendezvous > 0 {
		deadline = time.Now().Add(c.cfg.Rendezvous)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastLog := time.Now()
	for {
		c.mu.Lock()
		res, err, done := c.check(ctx)
		changed := c.changed
		started := c.started
		c.mu.Unlock()
		if done {
			c.stopAll(ctx, err)
			return res, err
		}
		select {
		case <-ctx.Done():
			c.stopAll(context.Background(), ctx.Err())
			return nil, ctx.Err()
		case <-changed:
		case now := <-tick.C:
			if !started {
				if !deadline.IsZero() && now.After(deadline) {
					c.mu.Lock()
					c.fail(fmt.Errorf("%w: after %v, still waiting for %s", ErrRendezvous, c.cfg.Rendezvous, c.missing()))
					c.mu.Unlock()
				} else if c.cfg.Logger != nil && now.Sub(lastLog) >= 5*time.Second {
					c.mu.Lock()
					c.cfg.Logger.Info("waiting at rendezvous", "for", c.missing(), "listening", ln.Addr())
					c.mu.Unlock()
					lastLog = now
				}
			}
			c.heartbeats(ctx, now)
			c.mu.Lock()
			c.dueCheckpoint(ctx)
			c.mu.Unlock()
		}
	}
}

// check returns the result once the job is over; c.mu is held.
func (c *Coordinator) check(ctx context.Context) (*Result, error, bool) {
	if c.err != nil {
		return nil, c.err, true
	}
	if !c.started && c.interrupted {
		return nil, fmt.Errorf("%w at rendezvous, still waiting for %s", ErrInterrupted, c.missing()), true
	}
	if !c.started {
		return nil, nil, false
	}
	if c.interrupted {
		for _, l := range c.learners {
			if l.live && !l.done {
				return nil, nil, false
			}
		}
		// Every learner has stopped and reported: the checkpoint now
		// holds what they did.
		if !c.interruptCkpt && c.round == nil { // after a periodic round still running
			c.interruptCkpt = true
			c.startCheckpoint(ctx, "the job was interrupted", nil)
		}
		if c.round != nil {
			return nil, nil, false
		}
		if c.cfg.Evaluator && (c.eval == nil || !c.eval.done) {
			return nil, nil, false
		}
		for _, s := range c.servers {
			if s != nil && s.lost.IsZero() && !s.polled && !s.final {
				return nil, nil, false
			}
		}
		if c.trained == 0 {
			c.trained = c.elapsed()
		}
		return c.result(), ErrInterrupted, true
	}
	for _, s := range c.servers {
		if !s.final {
			return nil, nil, false
		}
	}
	for _, l := range c.learners {
		if l.live && !l.done {
			return nil, nil, false
		}
	}
	if c.cfg.Evaluator && (c.eval == nil || !c.eval.done) {
		return nil, nil, false
	}
	if c.round != nil { // a checkpoint still being written: the job ends once it is
		return nil, nil, false
	}
	return c.result(), nil, true
}

// missing describes the processes that have not arrived; c.mu is held.
func (c *Coordinator) missing() string {
	var out []string
	name := func(p Process) string {
		for _, e := range c.cfg.Expect {
			if e.Role == p.Role && e.ID == p.ID && e.Rank >= 0 {
				return fmt.Sprintf("%s %d (rank %d)", p.Role, p.ID, e.Rank)
			}
		}
		if p.Role == RoleEvaluator {
			return string(p.Role)
		}
		return fmt.Sprintf("%s %d", p.Role, p.ID)
	}
	for i, s := range c.servers {
		if s == nil {
			out = append(out, name(Process{Role: RoleServer, ID: i}))
		}
	}
	for i, l := range c.learners {
		// Until it registers with this coordinator: a resumed job's
		// learners have lives from before, and must come back too.
		if l.c == nil {
			out = append(out, name(Process{Role: RoleLearner, ID: i}))
		}
	}
	if c.cfg.Evaluator && c.eval == nil {
		out = append(out, name(Process{Role: RoleEvaluator}))
	}
	if len(out) == 0 {
		return "nothing"
	}
	return strings.Join(out, ", ")
}

// serveConn runs one process's control connection.
func (c *Coordinator) serveConn(ctx context.Context, conn rdma.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer conn.Close()
	cc := &ctrl{conn: conn}
	t, b, err := cc.recv(ctx)
	if err != nil {
		return
	}
	var h hello
	if t != tHello {
		err = fmt.Errorf("%w: first message %#x from %s, want a hello", ErrProtocol, t, conn.RemoteAddr())
	} else {
		err = decode(t, b, &h)
	}
	if err == nil {
		err = c.register(ctx, cc, &h)
	}
	if err != nil {
		cc.send(ctx, tStop, stop{Err: err.Error()})
		if errors.Is(err, ErrRendezvous) {
			c.mu.Lock()
			c.fail(err)
			c.mu.Unlock()
		}
		return
	}
	switch h.Process.Role {
	case RoleServer:
		c.serveServer(ctx, cc, h.Process.ID)
	case RoleLearner:
		c.serveLearner(ctx, cc, h.Process.ID)
	case RoleEvaluator:
		c.serveEvaluator(ctx, cc)
	}
}

// register checks a hello and records the process; learners and the
// evaluator are welcomed once every shard server has arrived.
func (c *Coordinator) register(ctx context.Context, cc *ctrl, h *hello) error {
	p := h.Process
	if d := c.cfg.Settings.diff(h.Settings); d != "" {
		return fmt.Errorf("%w: %s runs with %s", ErrRendezvous, p, d)
	}
	c.mu.Lock()
	switch p.Role {
	case RoleServer:
		if p.ID < 0 || p.ID >= len(c.servers) || c.servers[p.ID] != nil && c.servers[p.ID].lost.IsZero() {
			c.mu.Unlock()
			return fmt.Errorf("%w: %s: no such shard server, or it arrived twice (the job has %d)", ErrRendezvous, p, len(c.servers))
		}
		if !slices.Equal(h.Shards, c.cfg.Servers[p.ID]) {
			c.mu.Unlock()
			return fmt.Errorf("%w: %s runs shards %v, the coordinator expects %v", ErrRendezvous, p, h.Shards, c.cfg.Servers[p.ID])
		}
		if err := checkAdvertised(h.Addr, cc.conn.RemoteAddr()); err != nil {
			c.mu.Unlock()
			return fmt.Errorf("%w: %s: %v", ErrRendezvous, p, err)
		}
		back := c.servers[p.ID] != nil
		s := &serverState{c: cc, proc: p, addr: h.Addr, lives: 1}
		if back {
			s.lives = c.servers[p.ID].lives + 1
			if c.cfg.Logger != nil {
				c.cfg.Logger.Warn("shard server back", "server", p.ID, "addr", h.Addr)
			}
		} else {
			c.procs = append(c.procs, p)
		}
		c.servers[p.ID] = s
		// The welcome goes out before c.mu is released: once the job
		// has started, another role may finish it, and a shard server
		// must read its welcome before the finish.
		err := cc.send(ctx, tWelcome, welcome{Plan: c.cfg.Plan})
		c.notify()
		c.startLocked()
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if back {
			c.catchUp(ctx, s)
		}
		return nil
	case RoleLearner:
		if p.ID < 0 || p.ID >= len(c.learners) {
			c.mu.Unlock()
			return fmt.Errorf("%w: %s: learner ids are 0…%d", ErrRendezvous, p, len(c.learners)-1)
		}
		l := c.learners[p.ID]
		if l.live {
			// A new life while the old one is still registered: the old
			// one is gone (a restart was faster than its detection).
			c.removeLearner(ctx, p.ID, "restarted")
		}
		if l.lives > 0 {
			c.restarts++
		}
		c.retirePushes(l)
		l.c, l.proc, l.inc, l.live, l.done, l.last = cc, p, uint32(l.lives), true, false, time.Now()
		l.lives++
		c.procs = append(c.procs, p)
	case RoleEvaluator:
		if c.eval != nil || !c.cfg.Evaluator {
			c.mu.Unlock()
			return fmt.Errorf("%w: %s: the job has no other evaluator", ErrRendezvous, p)
		}
		c.eval = &evalState{c: cc, proc: p}
		c.procs = append(c.procs, p)
	default:
		c.mu.Unlock()
		return fmt.Errorf("%w: %s: unknown role", ErrRendezvous, p)
	}
	c.notify()
	c.startLocked()
	// Wait for every process of the job, then welcome.
	for {
		if c.started {
			break
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
	}
	c.finishIfDone(ctx) // a job with nothing to train
	w := welcome{Addrs: c.addrs(), Plan: c.cfg.Plan, FirstEpoch: max(c.firstEpoch, 1)}
	if p.Role == RoleLearner {
		w.Incarnation = c.learners[p.ID].inc
	}
	c.mu.Unlock()
	return cc.send(ctx, tWelcome, w)
}

// startLocked starts the job's clock once every process has arrived;
// c.mu is held.
func (c *Coordinator) startLocked() {
	if c.started || c.missing() != "nothing" {
		return
	}
	c.started, c.start, c.ckptTime = true, time.Now(), time.Now()
	c.notify()
}

// addrs returns each shard's server address; c.mu is held.
func (c *Coordinator) addrs() []string {
	n := 0
	for _, s := range c.cfg.Servers {
		n += len(s)
	}
	a := make([]string, n)
	for i, shards := range c.cfg.Servers {
		for _, k := range shards {
			a[k] = c.servers[i].addr
		}
	}
	return a
}

// serveServer reads a shard server's messages.
func (c *Coordinator) serveServer(ctx context.Context, cc *ctrl, id int) {
	for {
		t, b, err := cc.recv(ctx)
		if err != nil {
			c.mu.Lock()
			if s := c.servers[id]; s.c == cc && !s.final {
				if c.cfg.ServerTimeout <= 0 {
					c.fail(fmt.Errorf("%w: lost %s: %v", ErrJobFailed, s.proc, err))
				} else {
					s.lost = time.Now()
					if r := c.round; r != nil && r.waiting[id] {
						c.checkpointed(id, ckptReport{Version: r.version, Err: "lost during the checkpoint"})
					}
					if c.cfg.Logger != nil {
						c.cfg.Logger.Warn("lost a shard server; waiting for it to come back", "server", id, "for", c.cfg.ServerTimeout, "err", err)
					}
					c.notify()
				}
			}
			c.mu.Unlock()
			return
		}
		switch t {
		case tLost:
			var m member
			if decode(t, b, &m) == nil && c.cfg.Logger != nil {
				c.cfg.Logger.Debug("a learner's connection to a shard server was lost", "learner", m.Learner, "incarnation", m.Incarnation, "server", id)
			}
		case tFinal:
			var st ps.ServerStats
			if err := decode(t, b, &st); err != nil {
				c.mu.Lock()
				c.fail(err)
				c.mu.Unlock()
				return
			}
			c.mu.Lock()
			if c.servers[id].c == cc {
				c.servers[id].final, c.servers[id].stats = true, st
				c.notify()
			}
			c.mu.Unlock()
		case tCheckpointed:
			var rep ckptReport
			if err := decode(t, b, &rep); err != nil {
				c.protocolError(err)
				return
			}
			c.mu.Lock()
			c.checkpointed(id, rep)
			c.mu.Unlock()
		case tCheckpointReq:
			done := make(chan struct{})
			c.mu.Lock()
			c.startCheckpoint(ctx, fmt.Sprintf("shard server %d is stopping", id), done)
			c.mu.Unlock()
			go func() {
				<-done
				cc.send(ctx, tCheckpointDone, nil)
			}()
		case tServerStats:
			var st ps.ServerStats
			if err := decode(t, b, &st); err != nil {
				c.protocolError(err)
				return
			}
			c.mu.Lock()
			if c.servers[id].c == cc {
				c.servers[id].stats, c.servers[id].polled = st, true
				c.notify()
			}
			c.mu.Unlock()
		case tFail:
			c.failed(cc, t, b, c.servers[id].proc)
		default:
			c.mu.Lock()
			c.fail(fmt.Errorf("%w: message %#x from %s", ErrProtocol, t, c.servers[id].proc))
			c.mu.Unlock()
		}
	}
}

// failed records a role's report of its own failure.
func (c *Coordinator) failed(_ *ctrl, t rdma.Type, b []byte, p Process) {
	var f failure
	decode(t, b, &f)
	c.mu.Lock()
	c.fail(fmt.Errorf("%w: %s: %s", ErrJobFailed, p, f.Err))
	c.mu.Unlock()
}

// serveLearner reads a learner's messages. A connection lost before the
// learner's last progress report removes it from the job.
func (c *Coordinator) serveLearner(ctx context.Context, cc *ctrl, id int) {
	c.mu.Lock()
	l := c.learners[id]
	inc := l.inc
	c.mu.Unlock()
	var waiting sync.WaitGroup
	defer waiting.Wait()
	for {
		t, b, err := cc.recv(ctx)
		c.mu.Lock()
		current := l.c == cc && l.inc == inc
		if current {
			l.last = time.Now()
		}
		c.mu.Unlock()
		if err != nil {
			c.mu.Lock()
			switch {
			case current && l.live && !l.done && c.interrupted:
				l.live = false
				c.notify()
			case current && l.live && !l.done:
				c.removeLearner(ctx, id, fmt.Sprintf("connection lost: %v", err))
			}
			c.mu.Unlock()
			return
		}
		if !current {
			return // removed (missed heartbeats) or replaced by a new life
		}
		switch t {
		case tChunkReq:
			var r chunkReq
			if err := decode(t, b, &r); err != nil {
				c.protocolError(err)
				return
			}
			src := data.Local{D: c.disp, Learner: id}
			if !r.Wait {
				ch, err := src.Next(ctx, false)
				c.replyChunk(ctx, cc, ch, err)
				continue
			}
			waiting.Go(func() {
				ch, err := src.Next(ctx, true)
				c.replyChunk(ctx, cc, ch, err)
			})
		case tComplete:
			var ch data.Chunk
			if err := decode(t, b, &ch); err != nil {
				c.protocolError(err)
				return
			}
			if err := c.disp.Complete(id, ch); err != nil {
				c.protocolError(err)
				return
			}
			c.mu.Lock()
			c.finishIfDone(ctx)
			c.mu.Unlock()
		case tProgress:
			var p progress
			if err := decode(t, b, &p); err != nil {
				c.protocolError(err)
				return
			}
			c.mu.Lock()
			c.addProgress(l, &p)
			c.dueCheckpoint(ctx)
			c.mu.Unlock()
		case tWhere:
			var q where
			if err := decode(t, b, &q); err != nil {
				c.protocolError(err)
				return
			}
			waiting.Go(func() { c.serverAddr(ctx, cc, q.Shard) })
		case tFail:
			c.failed(cc, t, b, l.proc)
			return
		default:
			c.protocolError(fmt.Errorf("%w: message %#x from learner %d", ErrProtocol, t, id))
			return
		}
	}
}

func (c *Coordinator) protocolError(err error) {
	c.mu.Lock()
	c.fail(err)
	c.mu.Unlock()
}

// replyChunk answers a chunk request with the dispatcher's answer.
func (c *Coordinator) replyChunk(ctx context.Context, cc *ctrl, ch data.Chunk, err error) {
	r := chunkReply{Chunk: ch}
	switch {
	case errors.Is(err, data.ErrEnd):
		r.End = true
	case errors.Is(err, data.ErrIdle):
		r.Idle = true
	case err != nil:
		return // the connection or the job ended
	}
	cc.send(ctx, tChunk, r)
}

// finishIfDone tells every shard server that the data is done, once it
// is; c.mu is held.
func (c *Coordinator) finishIfDone(ctx context.Context) {
	if c.finishing || !c.started || !c.disp.Done() {
		return
	}
	c.finishing, c.trained = true, c.elapsed()
	for _, s := range c.servers {
		s.c.send(ctx, tFinish, nil)
	}
	c.notify()
}

// removeLearner takes learner id out of the job: its chunks go back to
// the queue and every shard server evicts its incarnation; c.mu is held.
func (c *Coordinator) removeLearner(ctx context.Context, id int, why string) {
	l := c.learners[id]
	l.live = false
	c.lost++
	n := c.disp.Release(id)
	if c.cfg.Logger != nil {
		c.cfg.Logger.Warn("learner removed from the job", "learner", id, "incarnation", l.inc, "why", why, "chunks_reassigned", n)
	}
	for _, s := range c.servers {
		if s != nil {
			s.c.send(ctx, tEvict, member{Learner: uint32(id), Incarnation: l.inc})
		}
	}
	l.c.conn.Close()
	c.notify()
}

// catchUp tells a shard server that came back what happened while it
// was away: the learners removed since, the end of the data.
func (c *Coordinator) catchUp(ctx context.Context, s *serverState) {
	c.mu.Lock()
	var evict []member
	for id, l := range c.learners {
		if !l.live && l.lives > 0 {
			evict = append(evict, member{Learner: uint32(id), Incarnation: l.inc})
		}
	}
	finishing := c.finishing
	c.mu.Unlock()
	for _, m := range evict {
		s.c.send(ctx, tEvict, m)
	}
	if finishing {
		s.c.send(ctx, tFinish, nil)
	}
}

// serverAddr answers a learner's or the evaluator's question where the
// server of shard is, once it is there (it may be coming back).
func (c *Coordinator) serverAddr(ctx context.Context, cc *ctrl, shard int) {
	for {
		c.mu.Lock()
		var a string
		for i, shards := range c.cfg.Servers {
			if slices.Contains(shards, shard) && c.servers[i] != nil && c.servers[i].lost.IsZero() {
				a = c.servers[i].addr
			}
		}
		changed := c.changed
		c.mu.Unlock()
		if a != "" {
			cc.send(ctx, tAddr, addr{Shard: shard, Addr: a})
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// heartbeats removes learners silent for longer than the heartbeat, and
// fails the job when a lost shard server has not come back in time.
func (c *Coordinator) heartbeats(ctx context.Context, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.servers {
		if s != nil && !s.lost.IsZero() && now.Sub(s.lost) > c.cfg.ServerTimeout {
			c.fail(fmt.Errorf("%w: %s did not come back within %v", ErrJobFailed, s.proc, c.cfg.ServerTimeout))
		}
	}
	if c.cfg.Heartbeat <= 0 {
		return
	}
	for id, l := range c.learners {
		if l.live && !l.done && now.Sub(l.last) > c.cfg.Heartbeat {
			c.removeLearner(ctx, id, fmt.Sprintf("no heartbeat for %v", now.Sub(l.last).Round(time.Millisecond)))
		}
	}
}

// addProgress accounts a learner's report; c.mu is held.
func (c *Coordinator) addProgress(l *learnerState, p *progress) {
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
	if p.Traffic != nil {
		c.traffic.Add(p.Traffic)
	}
	c.conns = append(c.conns, p.Connections...)
	if len(p.Pushes) == len(c.pushes) {
		l.pushes = p.Pushes // cumulative for the incarnation
	}
	if p.Done {
		l.done = true
	}
	c.emit()
	c.notify()
}

// serveEvaluator reads the evaluator's epoch results.
func (c *Coordinator) serveEvaluator(ctx context.Context, cc *ctrl) {
	for {
		t, b, err := cc.recv(ctx)
		if err != nil {
			c.mu.Lock()
			if !c.eval.done {
				c.fail(fmt.Errorf("%w: lost the evaluator (%s): %v", ErrJobFailed, c.eval.proc, err))
			}
			c.mu.Unlock()
			return
		}
		switch t {
		case tEpoch:
			var r epochResult
			if err := decode(t, b, &r); err != nil {
				c.protocolError(err)
				return
			}
			c.mu.Lock()
			c.epochResult(&r)
			c.mu.Unlock()
		case tWhere:
			var q where
			if err := decode(t, b, &q); err != nil {
				c.protocolError(err)
				return
			}
			go c.serverAddr(ctx, cc, q.Shard)
		case tFail:
			c.failed(cc, t, b, c.eval.proc)
			return
		default:
			c.protocolError(fmt.Errorf("%w: message %#x from the evaluator", ErrProtocol, t))
			return
		}
	}
}

// epochResult records an evaluator report; c.mu is held.
func (c *Coordinator) epochResult(r *epochResult) {
	te := math.NaN()
	if r.TestError != nil {
		te = *r.TestError
	}
	secs := time.Since(c.start).Seconds()
	switch {
	case r.Epoch <= 0 && !r.Taken:
		c.finalErr, c.eval.done = te, true
	case r.Epoch <= 0:
	case r.Epoch > len(c.testErr):
	case r.Taken:
		c.secs[r.Epoch-1] = secs
	default:
		c.testErr[r.Epoch-1], c.known[r.Epoch-1] = te, true
	}
	c.emit()
	c.notify()
}

// emit appends the epochs whose loss and test error are both known, in
// order; c.mu is held. An epoch's loss is known once its P mini-batches
// are reported (more when a lost learner's chunk was pushed again), or no
// learner will report any more (see reported).
func (c *Coordinator) emit() {
	for e := len(c.history); e < len(c.lossSum); e++ {
		last := e+1 == c.cfg.Plan.Epochs && e+1 == c.epochs
		switch {
		case e >= c.epochs:
			return
		case c.lossCnt[e] < int64(c.per) && !c.reported():
			return
		case last && c.cfg.Evaluator && !c.eval.done, !last && !c.known[e] && c.cfg.Evaluator:
			return
		}
		ep := Epoch{Epoch: e + 1, TestError: c.testErr[e], Seconds: c.secs[e]}
		if last {
			ep.TestError, ep.Seconds = c.finalErr, c.trained.Seconds()
		}
		if c.lossCnt[e] > 0 {
			ep.TrainLoss = c.lossSum[e] / float64(c.lossCnt[e])
		}
		c.history = append(c.history, ep)
		if c.cfg.OnEpoch != nil {
			c.cfg.OnEpoch(ep)
		}
	}
}

// totalPushes returns, per shard, the gradients the learners reported
// pushing, every incarnation; c.mu is held.
func (c *Coordinator) totalPushes() []uint64 {
	t := slices.Clone(c.pushes)
	for _, l := range c.learners {
		for k, n := range l.pushes {
			t[k] += n
		}
	}
	return t
}

// retirePushes folds the pushes of l's incarnation that ended into the
// totals; c.mu is held.
func (c *Coordinator) retirePushes(l *learnerState) {
	for k, n := range l.pushes {
		c.pushes[k] += n
	}
	l.pushes = nil
}

// reported reports whether every progress report is in: the data is done
// and every learner has sent its last report or is gone; c.mu is held.
func (c *Coordinator) reported() bool {
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

// result assembles the job's result; c.mu is held.
func (c *Coordinator) result() *Result {
	r := &Result{History: slices.Clone(c.history), TestError: math.NaN(), Steps: c.steps, Images: c.steps * int64(c.cfg.Plan.Batch),
		Seconds: c.trained.Seconds(), BatchesPerEpoch: c.per, Traffic: c.traffic, Chunks: c.disp.Stats(),
		Lost: c.lost, Restarts: c.restarts, Processes: slices.Clone(c.procs), Connections: slices.Clone(c.conns),
		Interrupted: c.interrupted}
	r.TestError = c.finalErr
	if r.Seconds > 0 {
		r.ImagesPerSec = float64(r.Images) / r.Seconds
	}
	for _, l := range c.learners {
		r.LearnerSteps = append(r.LearnerSteps, l.steps)
	}
	n := 0
	for _, s := range c.cfg.Servers {
		n += len(s)
	}
	r.Shards, r.Pushes = make([]ps.Stats, n), c.totalPushes()
	for i, s := range c.servers {
		for j, k := range c.cfg.Servers[i] {
			if j < len(s.stats.Shards) {
				r.Shards[k] = s.stats.Shards[j]
			}
		}
		r.Server.BadFrames += s.stats.BadFrames
		r.Server.ErrorsDropped += s.stats.ErrorsDropped
		r.Server.Refused += s.stats.Refused
		r.Server.NotHosted += s.stats.NotHosted
		r.Server.Lost += s.stats.Lost
	}
	// A learner that died reported its last pushes to no one: a shard
	// counted at least those it received.
	for k, st := range r.Shards {
		r.Pushes[k] = max(r.Pushes[k], st.Gradients+st.Dropped)
	}
	slices.SortStableFunc(r.Processes, func(a, b Process) int { return a.Rank - b.Rank })
	return r
}

// stopAll tells every process the job is over (err: it failed).
func (c *Coordinator) stopAll(ctx context.Context, err error) {
	msg := stop{}
	if err != nil && !errors.Is(err, ErrInterrupted) { // an interrupted job stops well
		msg.Err = err.Error()
	}
	c.mu.Lock()
	// Interrupted before it started: the processes waiting for their
	// welcome stop as interrupted.
	msg.Interrupted = errors.Is(err, ErrInterrupted) && !c.started
	var ccs []*ctrl
	for _, s := range c.servers {
		if s != nil {
			ccs = append(ccs, s.c)
		}
	}
	for _, l := range c.learners {
		if l.c != nil && l.live {
			ccs = append(ccs, l.c)
		}
	}
	if c.eval != nil {
		ccs = append(ccs, c.eval.c)
	}
	c.mu.Unlock()
	for _, cc := range ccs {
		cc.send(ctx, tStop, msg)
	}
}

// Interrupt ends the job early (the user's Ctrl-C): the learners are
// stopped, the evaluator measures the weights as they are, and Serve
// returns the result so far with ErrInterrupted; before the job has
// started (at rendezvous), Serve returns ErrInterrupted at once, without
// a result, and the processes that arrived are stopped. It is safe to call from
// any goroutine, more than once.
func (c *Coordinator) Interrupt() {
	c.mu.Lock()
	if c.interrupted {
		c.mu.Unlock()
		return
	}
	c.interrupted = true
	if !c.started { // Serve stops every process that arrived
		c.notify()
		c.mu.Unlock()
		return
	}
	var learners []*ctrl
	for _, l := range c.learners {
		if l.live && !l.done {
			learners = append(learners, l.c)
		}
	}
	var eval *ctrl
	if c.eval != nil {
		eval = c.eval.c
	}
	var servers []*ctrl
	for _, s := range c.servers {
		if s != nil && s.lost.IsZero() {
			servers = append(servers, s.c)
		}
	}
	c.notify()
	c.mu.Unlock()
	ctx := context.Background()
	for _, cc := range learners {
		cc.send(ctx, tStop, stop{Interrupted: true})
	}
	for _, cc := range servers {
		cc.send(ctx, tStats, nil)
	}
	if eval != nil {
		eval.send(ctx, tInterrupt, nil)
	}
}

// Progress returns a snapshot of the job's progress; it is safe to call
// from any goroutine.
func (c *Coordinator) Progress() Progress {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := Progress{Epochs: c.cfg.Plan.Epochs, Batches: c.per, Steps: c.steps, TotalSteps: c.total, Loss: c.ema,
		Images: c.steps * int64(c.cfg.Plan.Batch)}
	p.Elapsed = c.elapsed()
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
