package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/errcode"
)

// The coordinator's protocol is a deterministic core in the style of
// ps.Shard: core.step consumes one event (a control message that arrived
// on a connection, the loss of a connection, a tick of the clock, the
// user's interruption, the end of a checkpoint write) together with the
// time, and returns a ready batch: the messages to send and the
// connections to close, in order, the checkpoint files to write and
// commit, log lines, completed epochs and, at the end, the job's result.
// It has no goroutines, no clock and no I/O: given the same events at the
// same times it produces the same outputs. Coordinator.Serve (the
// runtime) feeds it from the job's connections on one goroutine and
// carries out its outputs on others, so that nothing is sent while any
// state is locked; the tests and the chaos simulator feed it directly.
//
// Connections are named by a connID the runtime gives each accepted
// connection. A connection's first message must be a hello; the core
// then knows it as a shard server's, a learner's or the evaluator's
// control connection.

// connID names one control connection (never 0).
type connID uint64

// eventKind says what an event is.
type eventKind uint8

const (
	evMsg       eventKind = iota + 1 // a control message (msg, decoded; its type t) arrived on conn from peer
	evLost                           // conn failed or its peer closed it (err)
	evTick                           // time passed
	evInterrupt                      // the user interrupted the job (Coordinator.Interrupt)
	evCancel                         // the coordinator's context ended (err): stop every process, no result
	evWritten                        // the coordinator's file of checkpoint version was written (file, err)
	evCommitted                      // the manifest of checkpoint version was committed (err)
)

// event is one input of the core.
type event struct {
	kind    eventKind
	conn    connID
	peer    string    // evMsg: the connection's remote address
	t       rdma.Type // evMsg
	msg     any       // evMsg: the decoded message (see decodeCtrl)
	err     error
	version uint64             // evWritten, evCommitted
	file    checkpoint.FileSum // evWritten
}

// outMsg is a message to send on a connection: type t with v as its
// JSON (v nil: no data).
type outMsg struct {
	conn connID
	t    rdma.Type
	v    any
}

// logLine is a log record of the core, for the runtime's logger.
type logLine struct {
	level slog.Level
	msg   string
	args  []any
}

// ready is the output of one step. Sends and closes are in order: a
// connection is closed after the messages queued for it before.
type ready struct {
	sends  []outMsg
	closes []connID
	// write, if set, asks for the coordinator's file of a checkpoint
	// version (evWritten reports the end); commit for the version's
	// manifest (evCommitted).
	write  *ckptWrite
	commit *ckptCommit
	logs   []logLine
	epochs []Epoch // history entries completed by this step, in order
	// done is set once the job is over: result (nil without one) and
	// err are Serve's. Every process has been sent its stop.
	done   bool
	result *Result
	err    error
}

type ckptWrite struct {
	version uint64
	state   coordState
}

type ckptCommit struct {
	version uint64
	files   []checkpoint.FileSum
	created time.Time
}

// core is the coordinator's state; see the comment at the top of the file.
type core struct {
	cfg    CoordinatorConfig
	disp   *data.Dispatcher
	total  int64
	per    int
	epochs int // complete epochs the job trains (evaluated at their ends)

	now           time.Time
	rd            ready
	ended         bool
	started       bool
	start         time.Time
	trained       time.Duration // start → last chunk completed
	finishing     bool          // the data is done: shard servers told to finish
	interrupted   bool
	interruptCkpt bool // the interruption's checkpoint was started
	firstEpoch    int  // the first epoch the evaluator measures (after a resume: not those passed)
	before        time.Duration
	rendezvousBy  time.Time // fail the rendezvous after (zero: never)
	// rejoin: processes of the job came back from a coordinator that was
	// lost (this one was restarted): the job starts once every shard
	// server and the evaluator are here, and its data goes out once the
	// learners had rejoinGrace to say which chunks they hold (see
	// dispatch).
	rejoin      bool
	learnerAt   time.Time // rejoin: a learner was live and not done then
	dispatching bool      // chunks are handed out
	waitLog     waitLog   // the rendezvous's
	err         error     // the job failed
	// dataDone: a coordinator before this one had the data done (a
	// learner rejoined told the end of the data, or a shard server
	// final); givingUp: what the shards lack is given up, no learner
	// being left to push it again (see giveUpIfIdle).
	dataDone, givingUp bool

	conns    map[connID]*connState
	servers  []*serverState
	learners []*learnerState
	eval     *evalState
	procs    []Process
	// welcomes are the learners' and the evaluator's connections that
	// registered before the job started, in order: they are welcomed when
	// it starts.
	welcomes       []connID
	chunkWaits     []chunkWait // learners waiting for a chunk, in order
	whereWaits     []whereWait // questions where a shard's server is, until it is back
	lost, restarts int

	ckpt ckptState

	// progress
	steps    int64
	ema      float64
	lossSum  []float64 // per epoch, 0-based
	lossCnt  []int64
	testErr  []float64 // per epoch, NaN until measured (or without a test set)
	testErr5 []float64 // top-5, likewise
	secs     []float64
	known    []bool // the evaluator reported the epoch
	history  []Epoch
	finalErr float64
	final5   float64 // top-5 of the final weights
	dataWait float64 // seconds the learners waited for data, all reports
	skipped  skips   // bad images reported
	traffic  rdma.Stats
	links    []Connection
	pushes   []uint64 // per shard, gradients pushed by learner incarnations that have ended (see totalPushes)
	givenUp  []uint64 // per shard, mini-batches it lost with a restart after the data was done
}

// connState is what the core knows of a connection.
type connState struct {
	role Role // "" until its hello registered it
	id   int
	gone bool // closed by the core, or lost
}

type serverState struct {
	conn     connID
	proc     Process
	addr     string
	final    bool
	welcomed bool      // its welcome was sent: it takes commands
	lost     time.Time // its connection was lost at (zero: connected)
	lives    int       // registrations (restarts + 1)
	stats    ps.ServerStats
	// polled: it answered the interruption's request for its counters.
	polled bool
	// consumed: the mini-batches every shard of the server has (nil:
	// unknown); has: how many each of its shards has, in its hello.
	consumed *ps.BatchSet
	has      []uint64
	// verified: it answered the question what its shards have consumed
	// since the data was done (see finishIfDone); asked: the question
	// is out.
	verified, asked bool
}

type learnerState struct {
	conn   connID // 0: never registered with this coordinator
	proc   Process
	inc    uint32
	lives  int  // incarnations so far
	live   bool // registered and not lost
	done   bool // sent its last progress
	last   time.Time
	steps  int64
	fresh  bool           // a new life registered, not yet welcomed: its incarnation may still change
	pushes []uint64       // per shard, as last reported by this incarnation
	held   []data.Holding // rejoined: the chunks it holds, until the data goes out
}

type evalState struct {
	conn connID
	proc Process
	done bool
}

type chunkWait struct {
	learner int
	conn    connID
	wait    bool // wait for a chunk; else answer Idle when there is none
}

type whereWait struct {
	conn  connID
	shard int
}

// newCore validates cfg and builds the core, restored from cfg.Resume if
// set.
func newCore(cfg CoordinatorConfig, firstVersion uint64) (*core, error) {
	disp, err := data.NewDispatcher(cfg.Plan)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	n := 0
	for _, shards := range cfg.Servers {
		for _, k := range shards {
			if seen[k] {
				return nil, fmt.Errorf("cluster: shard %d runs on two servers: %w", k, ErrRendezvous)
			}
			seen[k] = true
			n++
		}
	}
	if cfg.Learners < 1 || len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("cluster: %d learners and %d shard servers: %w", cfg.Learners, len(cfg.Servers), ErrRendezvous)
	}
	c := &core{cfg: cfg, disp: disp, total: int64(cfg.Plan.Total()), per: cfg.Plan.BatchesPerEpoch(),
		conns: map[connID]*connState{}, servers: make([]*serverState, len(cfg.Servers)),
		learners: make([]*learnerState, cfg.Learners), ema: math.NaN(), finalErr: math.NaN(), final5: math.NaN(), pushes: make([]uint64, n),
		givenUp: make([]uint64, n), waitLog: waitLog{warn: cfg.WaitWarn}}
	for i := range c.learners {
		c.learners[i] = &learnerState{}
	}
	c.epochs = int(c.total) / c.per
	E := cfg.Plan.Epochs
	c.lossSum, c.lossCnt = make([]float64, E), make([]int64, E)
	c.testErr, c.testErr5, c.secs, c.known = make([]float64, E), make([]float64, E), make([]float64, E), make([]bool, E)
	for e := range c.testErr {
		c.testErr[e], c.testErr5[e] = math.NaN(), math.NaN()
	}
	c.ckpt.next = firstVersion
	if cfg.Resume != nil {
		st, err := cfg.Resume.coordinatorState()
		if err == nil {
			err = c.restore(st)
		}
		if err != nil {
			return nil, fmt.Errorf("resume from %s: %w", cfg.Resume.Snapshot.Dir(), err)
		}
		c.ckpt.next = max(c.ckpt.next, cfg.Resume.Snapshot.Version()+1)
	}
	return c, nil
}

// step consumes one event at time now and returns what to do. Once the
// job is over (ready.done), later events produce nothing.
func (c *core) step(ev event, now time.Time) ready {
	c.rd, c.now = ready{}, now
	if c.ended {
		return c.rd
	}
	if !c.started {
		if c.rendezvousBy.IsZero() && c.cfg.Rendezvous > 0 {
			c.rendezvousBy = now.Add(c.cfg.Rendezvous)
		}
		c.waitLog.begin(now)
	}
	switch ev.kind {
	case evMsg:
		c.onMsg(ev)
	case evLost:
		c.onLost(ev.conn, ev.err)
	case evTick:
		c.onTick()
	case evInterrupt:
		c.interrupt()
	case evCancel:
		c.stopAll(ev.err)
		c.end(nil, ev.err)
		return c.rd
	case evWritten:
		c.written(ev.version, ev.file, ev.err)
	case evCommitted:
		c.committed(ev.version, ev.err)
	}
	c.serveWaits()
	c.giveUpIfIdle()
	c.check()
	return c.rd
}

// Outputs.

func (c *core) send(conn connID, t rdma.Type, v any) {
	if cs := c.conns[conn]; cs != nil && !cs.gone {
		c.rd.sends = append(c.rd.sends, outMsg{conn, t, v})
	}
}

func (c *core) close(conn connID) {
	if cs := c.conns[conn]; cs != nil && !cs.gone {
		cs.gone = true
		c.rd.closes = append(c.rd.closes, conn)
	}
}

func (c *core) log(level slog.Level, msg string, args ...any) {
	c.rd.logs = append(c.rd.logs, logLine{level, msg, args})
}

// fail records the job's failure (the first one wins).
func (c *core) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// end makes the job over with result res and error err.
func (c *core) end(res *Result, err error) {
	c.ended, c.rd.done, c.rd.result, c.rd.err = true, true, res, err
}

// Messages.

// onMsg handles a message: a connection's first must be a hello.
func (c *core) onMsg(ev event) {
	cs := c.conns[ev.conn]
	if cs == nil {
		cs = &connState{}
		c.conns[ev.conn] = cs
	}
	if cs.gone {
		return
	}
	if cs.role == "" {
		h, ok := ev.msg.(*hello)
		var err error
		if !ok {
			err = fmt.Errorf("%w: first message %#x from %s, want a hello", ErrProtocol, ev.t, ev.peer)
		} else if err = ev.err; err == nil {
			err = c.register(ev.conn, ev.peer, h)
		}
		switch {
		case errors.Is(err, errLateLearner):
			c.send(ev.conn, tStop, stop{Interrupted: true})
			c.close(ev.conn)
		case err != nil:
			c.send(ev.conn, tStop, stop{Wire: errcode.Encode(err)})
			c.close(ev.conn)
			if errors.Is(err, ErrRendezvous) {
				c.fail(err)
			}
		}
		return
	}
	if ev.err != nil { // a message that does not decode
		c.fail(ev.err)
		return
	}
	switch cs.role {
	case RoleServer:
		c.serverMsg(ev.conn, cs.id, ev.t, ev.msg)
	case RoleLearner:
		c.learnerMsg(ev.conn, cs.id, ev.t, ev.msg)
	case RoleEvaluator:
		c.evalMsg(ev.conn, ev.t, ev.msg)
	}
}

// register checks a hello and records the process on conn. Shard servers
// that rejoin or replace an earlier life are welcomed at once; the others,
// learners and the evaluator once every process of the job has arrived
// (see startIfAll).
func (c *core) register(conn connID, peer string, h *hello) error {
	p := h.Process
	if d := c.cfg.Settings.diff(h.Settings); d != "" {
		return fmt.Errorf("%w: %s runs with %s", ErrRendezvous, p, d)
	}
	cs := c.conns[conn]
	switch p.Role {
	case RoleServer:
		if p.ID < 0 || p.ID >= len(c.servers) {
			return fmt.Errorf("%w: %s: no such shard server (the job has %d)", ErrRendezvous, p, len(c.servers))
		}
		if !slices.Equal(h.Shards, c.cfg.Servers[p.ID]) {
			return fmt.Errorf("%w: %s runs shards %v, the coordinator expects %v", ErrRendezvous, p, h.Shards, c.cfg.Servers[p.ID])
		}
		if err := checkAdvertised(h.Addr, peer); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrRendezvous, p, err)
		}
		old := c.servers[p.ID]
		s := &serverState{conn: conn, proc: p, addr: h.Addr, lives: 1}
		if err := s.setConsumed(h); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrProtocol, p, err)
		}
		if h.Final != nil {
			s.final, s.stats = true, *h.Final
			c.dataDone = true // told to finish: the data was done
		}
		if h.Rejoin && !c.started {
			c.rejoin = true
		}
		if old != nil {
			// A new life: the old one is gone, even when the loss of its
			// connection has not been noticed yet (a restart faster than
			// the detection).
			s.lives = old.lives + 1
			c.close(old.conn)
			c.serverGone(p.ID, old)
			c.log(slog.LevelWarn, "shard server back", "server", p.ID, "addr", h.Addr, "life", s.lives)
			switch {
			case !c.dispatching || s.consumed == nil:
			case !c.finishing && !c.givingUp:
				// Restarted from a checkpoint: what it accepted after it
				// is gone from its shards; learners compute it again
				// (the other shards drop what they have).
				if n := c.disp.Redo(s.consumed.Contains); n > 0 {
					c.log(slog.LevelWarn, "mini-batches handed out again: the shard server came back without them", "server", p.ID, "mini_batches", n)
				}
			default:
				// The learners are gone: what it lacks is given up. A
				// server that comes back again (a lost connection, a
				// second restart) lacks them still: the count is what it
				// lacks now, not a sum over its returns.
				if n := c.disp.Missing(s.consumed.Contains); n > 0 {
					for _, k := range c.cfg.Servers[p.ID] {
						c.givenUp[k] = uint64(n)
					}
					c.log(slog.LevelWarn, "mini-batches given up: the shard server came back without them after the data was done", "server", p.ID, "mini_batches", n)
				}
			}
		} else {
			c.procs = append(c.procs, p)
		}
		c.servers[p.ID] = s
		c.knowIncarnations(h.Incarnations)
		cs.role, cs.id = RoleServer, p.ID
		// Its welcome goes out first: a shard server must read its
		// welcome before any command. A first hello before the job has
		// started waits for the start, when the coordinator knows whether
		// the job goes on from processes that rejoined it (it was
		// restarted): the server then counts no learner active.
		if !c.started && old == nil && !h.Rejoin {
			c.welcomes = append(c.welcomes, conn)
		} else {
			c.send(conn, tWelcome, welcome{Plan: c.cfg.Plan, Returning: old != nil || c.rejoin})
			s.welcomed = true
		}
		if old != nil {
			c.catchUp(s)
			c.finishIfDone()
		}
	case RoleLearner:
		if c.interrupted && c.started {
			// The job is ending: a learner (started again, or coming
			// back) would keep it from ending with work of its own.
			return errLateLearner
		}
		if h.Rejoin {
			if err := c.rejoinLearner(conn, h); err != nil {
				return err
			}
			break
		}
		if p.ID < 0 || p.ID >= len(c.learners) {
			return fmt.Errorf("%w: %s: learner ids are 0…%d", ErrRendezvous, p, len(c.learners)-1)
		}
		l := c.learners[p.ID]
		if l.live {
			// A new life while the old one is still registered: the old
			// one is gone (a restart was faster than its detection).
			c.removeLearner(p.ID, "restarted")
		}
		if l.lives > 0 {
			c.restarts++
		}
		c.retirePushes(l)
		// A new life holds nothing: the chunks an earlier life rejoined
		// with before a rebuild are nobody's (see rebuild).
		l.conn, l.proc, l.inc, l.live, l.done, l.last, l.held, l.fresh = conn, p, uint32(l.lives), true, false, c.now, nil, true
		l.lives++
		c.procs = append(c.procs, p)
		cs.role, cs.id = RoleLearner, p.ID
		c.welcomes = append(c.welcomes, conn)
	case RoleEvaluator:
		if c.eval != nil || !c.cfg.Evaluator {
			return fmt.Errorf("%w: %s: the job has no other evaluator", ErrRendezvous, p)
		}
		c.eval = &evalState{conn: conn, proc: p}
		c.procs = append(c.procs, p)
		cs.role = RoleEvaluator
		c.welcomes = append(c.welcomes, conn)
	default:
		return fmt.Errorf("%w: %s: unknown role", ErrRendezvous, p)
	}
	c.startIfAll()
	return nil
}

// knowIncarnations takes the latest incarnation of each learner that a
// shard server's shards have heard from: a coordinator that was
// restarted (its checkpoint older, or none) gives a new life of the
// learner a later one, also a life registered and not yet welcomed,
// whose sequence numbers would otherwise be taken for the old life's
// (duplicates) by the shards.
func (c *core) knowIncarnations(incs []uint32) {
	for i, inc := range incs {
		if i >= len(c.learners) {
			break
		}
		l := c.learners[i]
		if l.fresh && l.inc <= inc {
			l.inc, l.lives = inc+1, int(inc)+2
		}
		l.lives = max(l.lives, int(inc)+1)
	}
}

// errLateLearner refuses a learner that arrives once the job was
// interrupted: it is told to stop as interrupted.
var errLateLearner = errors.New("the job was interrupted")

// setConsumed records what a shard server's hello says its shards have:
// the mini-batches all of them consumed.
func (s *serverState) setConsumed(h *hello) error {
	if h.Consumed == nil {
		return nil
	}
	if len(h.Consumed) != len(h.Shards) {
		return fmt.Errorf("consumed mini-batches of %d shards, it runs %d", len(h.Consumed), len(h.Shards))
	}
	s.has = make([]uint64, len(h.Consumed))
	for i, iv := range h.Consumed {
		set, err := ps.MakeBatchSet(iv)
		if err != nil {
			return fmt.Errorf("shard %d's consumed mini-batches: %w", h.Shards[i], err)
		}
		s.has[i] = set.Count()
		if i > 0 {
			set = s.consumed.Intersect(&set)
		}
		s.consumed = &set
	}
	return nil
}

// rejoinLearner registers a learner that comes back from a coordinator
// it lost, in the life it lives: a life this coordinator removed is
// over (the learner stops and may start a new one); the same life on a
// new connection replaces the old connection; a life this coordinator
// never saw (it was restarted) is taken as it is, with the chunks it
// holds.
func (c *core) rejoinLearner(conn connID, h *hello) error {
	p := h.Process
	l := c.learners[p.ID]
	switch {
	case l.conn != 0 && !l.live || l.conn != 0 && l.inc != h.Incarnation:
		return fmt.Errorf("%s: incarnation %d was removed from the job (connection lost); start the learner again", p, h.Incarnation)
	case l.conn != 0: // the same life, a new connection: what it reported on the old one may be lost
		c.close(l.conn)
		c.chunkWaits = slices.DeleteFunc(c.chunkWaits, func(w chunkWait) bool { return w.conn == l.conn })
		for _, d := range h.Held {
			c.delivered(p.ID, d.Chunk, d.Delivered)
		}
		if c.dispatching {
			// A chunk handed out in a reply the old connection lost: the
			// learner does not hold it, and goes on without it.
			known := make([]data.Chunk, len(h.Held))
			for i, d := range h.Held {
				known[i] = d.Chunk
			}
			if n := c.disp.ReleaseUnknown(p.ID, known); n > 0 {
				c.log(slog.LevelInfo, "chunks handed out on a lost connection go to the next learner that asks", "learner", p.ID, "chunks", n)
			}
		}
	default:
		if !c.started {
			c.rejoin = true
		}
		if l.inc != h.Incarnation {
			c.retirePushes(l)
		}
		c.dataDone = c.dataDone || h.Ended
		l.inc, l.lives, l.live, l.done, l.held = h.Incarnation, max(l.lives, int(h.Incarnation)+1), true, false, h.Held
		c.procs = append(c.procs, p)
		if c.dispatching {
			c.claim(p.ID, h.Held)
		}
	}
	l.conn, l.proc, l.last = conn, p, c.now
	cs := c.conns[conn]
	cs.role, cs.id = RoleLearner, p.ID
	c.welcomes = append(c.welcomes, conn)
	return nil
}

// startIfAll starts the job's clock once every process has arrived, and
// welcomes the learners and the evaluator that arrived (at once, once it
// has started).
func (c *core) startIfAll() {
	if !c.started && c.missing() == "nothing" {
		c.started, c.start = true, c.now
		c.ckpt.time = c.now
		for _, l := range c.learners {
			l.last = c.now // heartbeats count from the start
		}
	}
	if !c.started {
		return
	}
	for _, conn := range c.welcomes {
		cs := c.conns[conn]
		if cs == nil || cs.gone {
			continue
		}
		if cs.role == RoleServer {
			s := c.servers[cs.id]
			c.send(conn, tWelcome, welcome{Plan: c.cfg.Plan, Returning: c.rejoin})
			s.welcomed = true
			c.catchUp(s) // the learners removed before
			continue
		}
		w := welcome{Addrs: c.addrs(), Plan: c.cfg.Plan, FirstEpoch: max(c.firstEpoch, 1), Norm: c.cfg.norm}
		if cs.role == RoleLearner {
			l := c.learners[cs.id]
			w.Incarnation, l.fresh = l.inc, false
		}
		c.send(conn, tWelcome, w)
	}
	c.welcomes = c.welcomes[:0]
	c.finishIfDone() // a job with nothing to train
}

// missing describes the processes that have not arrived.
func (c *core) missing() string {
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
		// learners have lives from before, and must come back too. A
		// restarted coordinator's job goes on with those that rejoin.
		if l.conn == 0 && !c.rejoin {
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

// addrs returns each shard's server address.
func (c *core) addrs() []string {
	a := make([]string, len(c.pushes))
	for i, shards := range c.cfg.Servers {
		for _, k := range shards {
			a[k] = c.servers[i].addr
		}
	}
	return a
}

// serverMsg handles a message of shard server id on conn.
func (c *core) serverMsg(conn connID, id int, t rdma.Type, msg any) {
	s := c.servers[id]
	if s.conn != conn {
		return // an earlier life's
	}
	switch t {
	case tLost:
		m := msg.(*member)
		c.log(slog.LevelDebug, "a learner's connection to a shard server was lost", "learner", m.Learner, "incarnation", m.Incarnation, "server", id)
	case tFinal:
		s.final, s.stats = true, *msg.(*ps.ServerStats)
	case tServerStats:
		s.stats, s.polled = *msg.(*ps.ServerStats), true
	case tCheckpointed:
		c.checkpointed(id, *msg.(*ckptReport))
	case tCheckpointReq:
		c.startCheckpoint(fmt.Sprintf("shard server %d is stopping", id), conn)
	case tConsumed:
		c.verify(id, s, msg.(*consumed))
	case tFail:
		c.fail(fmt.Errorf("%w: %s: %w", ErrJobFailed, s.proc, msg.(*failure).Err()))
	default:
		c.fail(fmt.Errorf("%w: message %#x from %s", ErrProtocol, t, s.proc))
	}
}

// learnerMsg handles a message of learner id on conn.
func (c *core) learnerMsg(conn connID, id int, t rdma.Type, msg any) {
	l := c.learners[id]
	if l.conn != conn {
		return // replaced by a new life
	}
	l.last = c.now
	switch t {
	case tChunkReq:
		wait := msg.(*chunkReq).Wait
		if wait || !c.dispatching {
			c.chunkWaits = append(c.chunkWaits, chunkWait{id, conn, wait})
			return
		}
		ch, err := c.next(id)
		c.replyChunk(conn, ch, err)
	case tComplete:
		c.delivered(id, *msg.(*data.Chunk), -1)
	case tProgress:
		c.addProgress(l, msg.(*progress))
		c.dueCheckpoint()
	case tWhere:
		c.whereWaits = append(c.whereWaits, whereWait{conn, msg.(*where).Shard})
	case tFail:
		c.fail(fmt.Errorf("%w: %s: %w", ErrJobFailed, l.proc, msg.(*failure).Err()))
	default:
		c.fail(fmt.Errorf("%w: message %#x from learner %d", ErrProtocol, t, id))
	}
}

// evalMsg handles a message of the evaluator.
func (c *core) evalMsg(conn connID, t rdma.Type, msg any) {
	if c.eval == nil || c.eval.conn != conn {
		return
	}
	switch t {
	case tEpoch:
		c.epochResult(msg.(*epochResult))
	case tWhere:
		c.whereWaits = append(c.whereWaits, whereWait{conn, msg.(*where).Shard})
	case tFail:
		c.fail(fmt.Errorf("%w: %s: %w", ErrJobFailed, c.eval.proc, msg.(*failure).Err()))
	default:
		c.fail(fmt.Errorf("%w: message %#x from the evaluator", ErrProtocol, t))
	}
}

// replyChunk answers a chunk request with the dispatcher's answer.
func (c *core) replyChunk(conn connID, ch data.Chunk, err error) {
	r := chunkReply{Chunk: ch}
	switch {
	case errors.Is(err, data.ErrEnd):
		r.End = true
	case errors.Is(err, data.ErrIdle):
		r.Idle = true
	case err != nil:
		c.fail(err)
		return
	}
	c.send(conn, tChunk, r)
}

// serveWaits answers the chunk requests that wait, once the dispatcher
// has a chunk or the end for them, and the questions where a shard's
// server is, once it is there.
func (c *core) serveWaits() {
	c.dispatch()
	c.chunkWaits = slices.DeleteFunc(c.chunkWaits, func(w chunkWait) bool {
		if l := c.learners[w.learner]; l.conn != w.conn || !l.live {
			return true
		}
		if !c.dispatching {
			return false
		}
		ch, err := c.next(w.learner)
		if errors.Is(err, data.ErrIdle) && w.wait {
			return false
		}
		c.replyChunk(w.conn, ch, err)
		return true
	})
	c.whereWaits = slices.DeleteFunc(c.whereWaits, func(w whereWait) bool {
		if cs := c.conns[w.conn]; cs == nil || cs.gone {
			return true
		}
		for i, shards := range c.cfg.Servers {
			if s := c.servers[i]; slices.Contains(shards, w.shard) && s != nil && s.lost.IsZero() {
				c.send(w.conn, tAddr, addr{Shard: w.shard, Addr: s.addr})
				return true
			}
		}
		return false
	})
}

// rejoinGrace is how long a restarted coordinator waits, after its job
// started, for the learners to rejoin and say which chunks they hold
// before it hands out data (see dispatch).
const rejoinGrace = 3 * time.Second

// dispatch starts handing out the job's data once it can: at the start
// of a job, or of a resumed one; for a restarted coordinator's job, once
// every learner it knows of has rejoined or rejoinGrace has passed. The
// dispatcher is then rebuilt from what the shards have (every shard
// server's consumed mini-batches) and what the learners hold, so that
// nothing is handed out that a shard already has or a learner computes.
func (c *core) dispatch() {
	if c.dispatching || !c.started {
		return
	}
	if c.rejoin {
		all := true
		for _, l := range c.learners {
			all = all && l.live
		}
		if !all && c.now.Sub(c.start) < rejoinGrace {
			return
		}
		if err := c.rebuild(); err != nil {
			c.fail(err)
			return
		}
	}
	c.dispatching, c.learnerAt = true, c.now
	c.finishIfDone()
}

// rebuild rebuilds the dispatcher of a restarted coordinator's job. A
// job whose shard servers are all final had its data done before (they
// are told to finish only then; its learners are gone): what a shard
// lacks was given up with its restart, and is counted so.
func (c *core) rebuild() error {
	var done ps.BatchSet
	allFinal := true
	for i, s := range c.servers {
		if s.consumed == nil {
			return fmt.Errorf("%w: %s rejoined without saying which mini-batches its shards have", ErrProtocol, s.proc)
		}
		if i == 0 {
			done = *s.consumed
		} else {
			done = done.Intersect(s.consumed)
		}
		allFinal = allFinal && s.final
	}
	if allFinal {
		done = ps.BatchSet{}
		for id := uint64(1); id <= uint64(c.total); id++ {
			done.Add(id)
		}
		for i, s := range c.servers {
			for j, k := range c.cfg.Servers[i] {
				c.givenUp[k] = uint64(c.total) - min(s.has[j], uint64(c.total))
			}
			s.verified = true // nothing is handed out again: the learners are gone
		}
	}
	var held []data.Holding
	for id, l := range c.learners {
		if l.live {
			for _, h := range l.held {
				h.Learner = id
				held = append(held, h)
			}
			l.held = nil
		}
	}
	end := uint64(0)
	if iv := done.Intervals(); len(iv) > 0 {
		end = iv[len(iv)-1].Last + 1
	}
	dropped, err := c.disp.Rebuild(end, done.Contains, held)
	if err != nil {
		return fmt.Errorf("rebuilding the data's dispatch from the shards and the learners: %w", err)
	}
	for _, h := range dropped {
		c.log(slog.LevelInfo, "a rejoining learner's chunk went to another", "learner", h.Learner, "chunk", h.Chunk)
	}
	c.log(slog.LevelInfo, "the job goes on from what the shards have", "mini_batches_done", c.disp.Stats().Batches,
		"chunks_held", len(held))
	return nil
}

// claim gives a learner that rejoined after the data went out the chunks
// it holds, where nobody else was given them since; it pushes the others
// anyway, and the shards drop what they already have.
func (c *core) claim(id int, held []data.Holding) {
	for _, h := range held {
		h.Learner = id
		if err := c.disp.Claim(h); err != nil {
			c.log(slog.LevelInfo, "a rejoining learner's chunk went to another", "learner", id, "chunk", h.Chunk, "err", err)
		}
	}
}

// delivered records a learner's report that the first n mini-batches of
// chunk ch reached every shard (n < 0: all of them).
func (c *core) delivered(id int, ch data.Chunk, n int) {
	if !c.dispatching { // a rejoined learner's, before the rebuild: it counts there
		for i, h := range c.learners[id].held {
			if h.Chunk == ch {
				if n < 0 {
					n = ch.Count
				}
				c.learners[id].held[i].Delivered = max(h.Delivered, min(n, ch.Count))
			}
		}
		return
	}
	if err := c.disp.Delivered(id, ch, n); err != nil {
		// A chunk the learner holds no longer (it was given to another
		// while the learner was away): the other's count is the one.
		c.log(slog.LevelDebug, "delivery of a chunk not held", "learner", id, "chunk", ch, "err", err)
		return
	}
	c.finishIfDone()
}

// next is the dispatcher's next chunk for learner, and the end only once
// the job is finishing (see finishIfDone).
func (c *core) next(learner int) (data.Chunk, error) {
	ch, err := c.disp.Next(learner)
	if errors.Is(err, data.ErrEnd) && !c.finishing {
		err = data.ErrIdle
	}
	return ch, err
}

// learnerActive reports whether a learner is live and has not reported
// done: one that can still be handed work.
func (c *core) learnerActive() bool {
	return slices.ContainsFunc(c.learners, func(l *learnerState) bool { return l.live && !l.done })
}

// giveUpIfIdle gives up what the shards lack (giveUp) as soon as a
// restarted coordinator that goes on from what the shards have knows
// that the data was done before it (dataDone: a shard server restarted
// since, as the head's own, lacks what it had), has mini-batches to hand
// out, and every learner of the job has rejoined it and reported done:
// told the end of the data, none will push again. With learners
// missing, it waits ServerTimeout for them first (onTick): one that
// comes back not done is handed the work.
func (c *core) giveUpIfIdle() {
	if !c.rejoin || !c.dataDone || !c.dispatching || c.finishing || c.givingUp || c.disp.Done() || c.learnerActive() {
		return
	}
	if slices.ContainsFunc(c.learners, func(l *learnerState) bool { return !l.live }) {
		return
	}
	c.giveUp("every learner reported done")
}

// giveUp ends the data of a restarted coordinator's job whose data was
// done before it and whose learners are gone or done: every mini-batch
// counts as delivered, and every shard server is asked what its shards
// consumed; what a shard lacks is given up (verify), as for a shard server
// restarted after the data was done under the same coordinator, and the
// shard servers are then told to finish.
func (c *core) giveUp(why string) {
	c.givingUp = true
	if _, err := c.disp.Rebuild(uint64(c.total)+1, func(uint64) bool { return true }, nil); err != nil {
		c.fail(err)
		return
	}
	for _, s := range c.servers {
		s.verified, s.asked = false, false
	}
	c.log(slog.LevelWarn, "the data was done before the coordinator was restarted, and no learner is left: what the shards lack is given up", "why", why)
	c.finishIfDone()
}

// finishIfDone tells every shard server that the data is done, once it
// is and every shard server has said what its shards consumed: a
// mini-batch a shard lacks (it came back from a checkpoint older than the
// mini-batch, or gave up a push computed on its earlier life's weights)
// is handed out again first (Dispatcher.Redo), while the learners are
// still there to compute it. Then the learners are told the end.
func (c *core) finishIfDone() {
	if c.finishing || !c.started || !c.dispatching || !c.disp.Done() {
		return
	}
	waiting := false
	for _, s := range c.servers {
		switch {
		case s.verified:
		case !s.lost.IsZero():
			waiting = true // asked when it is back
		case !s.asked:
			s.asked, waiting = true, true
			c.send(s.conn, tConsumedReq, nil)
		default:
			waiting = true
		}
	}
	if waiting {
		return
	}
	c.finishing, c.trained = true, c.elapsed()
	for _, s := range c.servers {
		c.send(s.conn, tFinish, nil)
	}
}

// verify takes a shard server's answer to what its shards consumed: what
// the dispatcher counts as delivered and they lack is handed out again.
func (c *core) verify(id int, s *serverState, m *consumed) {
	if !s.asked || s.verified || len(m.Shards) != len(c.cfg.Servers[id]) {
		return
	}
	var has ps.BatchSet
	var lacks []int // giving up: per shard, what it lacks of what the dispatcher counts delivered
	for i, iv := range m.Shards {
		set, err := ps.MakeBatchSet(iv)
		if err != nil {
			c.fail(fmt.Errorf("%w: %s: shard %d's consumed mini-batches: %v", ErrProtocol, s.proc, c.cfg.Servers[id][i], err))
			return
		}
		if c.givingUp {
			lacks = append(lacks, c.disp.Missing(set.Contains))
		}
		if i > 0 {
			set = has.Intersect(&set)
		}
		has = set
	}
	s.verified, s.asked = true, false
	if c.givingUp {
		// No learner is left to push it again (see giveUp).
		for i, k := range c.cfg.Servers[id] {
			c.givenUp[k] = uint64(lacks[i])
		}
		if n := slices.Max(lacks); n > 0 {
			c.log(slog.LevelWarn, "mini-batches given up: a shard server lacks them after the data was done, and no learner is left", "server", id, "mini_batches", n)
		}
		c.finishIfDone()
		return
	}
	if n := c.disp.Redo(has.Contains); n > 0 {
		c.log(slog.LevelWarn, "mini-batches handed out again: a shard server lacks them", "server", id, "mini_batches", n)
	}
	c.finishIfDone()
}

// Losses.

// onLost handles the loss of a connection.
func (c *core) onLost(conn connID, err error) {
	cs := c.conns[conn]
	if cs == nil {
		return
	}
	wasGone := cs.gone
	cs.gone = true
	if wasGone && cs.role == "" {
		return
	}
	switch cs.role {
	case RoleServer:
		if s := c.servers[cs.id]; s.conn == conn && !s.final {
			c.serverLost(cs.id, s, err)
		}
	case RoleLearner:
		l := c.learners[cs.id]
		switch {
		case l.conn != conn || !l.live || l.done:
		case c.interrupted:
			l.live = false
		default:
			c.removeLearner(cs.id, fmt.Sprintf("connection lost: %v", err))
		}
	case RoleEvaluator:
		if c.eval.conn == conn && !c.eval.done {
			c.fail(fmt.Errorf("%w: lost the evaluator (%s): %v", ErrJobFailed, c.eval.proc, err))
		}
	}
}

// serverLost handles the loss of shard server id's connection: the job
// fails, or waits ServerTimeout for it to come back.
func (c *core) serverLost(id int, s *serverState, err error) {
	if c.cfg.ServerTimeout <= 0 {
		c.fail(fmt.Errorf("%w: lost %s: %v", ErrJobFailed, s.proc, err))
		return
	}
	s.lost = c.now
	c.serverGone(id, s)
	c.log(slog.LevelWarn, "lost a shard server; waiting for it to come back", "server", id, "for", c.cfg.ServerTimeout, "err", err)
}

// serverGone ends what an old life of shard server id owed the job: its
// part of a running checkpoint round.
func (c *core) serverGone(id int, s *serverState) {
	if r := c.ckpt.round; r != nil && r.waiting[id] {
		c.checkpointed(id, ckptReport{Version: r.version, Wire: errcode.Wire{Text: "lost during the checkpoint"}})
	}
}

// removeLearner takes learner id out of the job: its chunks go back to
// the queue and every shard server evicts its incarnation.
func (c *core) removeLearner(id int, why string) {
	l := c.learners[id]
	l.live = false
	c.lost++
	n := c.disp.Release(id)
	c.log(slog.LevelWarn, "learner removed from the job", "learner", id, "incarnation", l.inc, "why", why, "chunks_reassigned", n)
	for _, s := range c.servers {
		if s != nil && s.lost.IsZero() && s.welcomed { // the others are told at their welcome
			c.send(s.conn, tEvict, member{Learner: uint32(id), Incarnation: l.inc})
		}
	}
	c.close(l.conn)
}

// catchUp tells a shard server that came back what happened while it
// was away: the learners removed since, the end of the data. A learner
// this coordinator has not heard from (restarted, it waits for the
// learners to rejoin) is not removed.
func (c *core) catchUp(s *serverState) {
	for id, l := range c.learners {
		if !l.live && l.conn != 0 {
			c.send(s.conn, tEvict, member{Learner: uint32(id), Incarnation: l.inc})
		}
	}
	if c.finishing {
		c.send(s.conn, tFinish, nil)
	}
	if c.interrupted && c.started {
		c.send(s.conn, tStats, nil) // the interrupted job ends with its counters
	}
}

// onTick fails a rendezvous that takes too long (logging who is missing
// meanwhile: at debug level, and as a warning once it lasts longer than
// WaitWarn), removes learners silent for longer than the
// heartbeat, fails the job when a lost shard server has not come back in
// time, and starts a checkpoint when one is due.
func (c *core) onTick() {
	if !c.started {
		if !c.rendezvousBy.IsZero() && !c.now.Before(c.rendezvousBy) {
			c.fail(fmt.Errorf("%w: after %v, still waiting for %s", ErrRendezvous, c.cfg.Rendezvous, c.missing()))
		} else if level, ok := c.waitLog.next(c.now); ok {
			c.log(level, "waiting at rendezvous", "for", c.missing(), "waited", c.waitLog.waited(c.now))
		}
	}
	for _, s := range c.servers {
		if s != nil && !s.lost.IsZero() && c.now.Sub(s.lost) > c.cfg.ServerTimeout {
			c.fail(fmt.Errorf("%w: %s did not come back within %v", ErrJobFailed, s.proc, c.cfg.ServerTimeout))
		}
	}
	// A restarted coordinator goes on from what the shards have, and
	// needs learners to do what they lack: with none for ServerTimeout
	// (every learner left, or died, while it was away) the job fails
	// rather than wait for ever.
	// When the data was done before it (dataDone), what the shards
	// lack is given up instead (giveUp).
	if c.rejoin && c.dispatching && !c.finishing && !c.givingUp && c.cfg.ServerTimeout > 0 {
		switch {
		case c.learnerActive():
			c.learnerAt = c.now
		case c.now.Sub(c.learnerAt) <= c.cfg.ServerTimeout:
		case c.dataDone:
			c.giveUp("no learner came back for " + c.cfg.ServerTimeout.String())
		default:
			// The dispatcher counts the mini-batches every shard has
			// (and those delivered since): the rest are lacking, cut
			// into chunks or not yet.
			c.fail(fmt.Errorf("%w: no learner for %v to do the %d mini-batches the shards lack", ErrJobFailed, c.cfg.ServerTimeout, c.total-int64(c.disp.Stats().Batches)))
		}
	}
	if c.cfg.Heartbeat > 0 && c.started {
		for id, l := range c.learners {
			if l.live && !l.done && c.now.Sub(l.last) > c.cfg.Heartbeat {
				c.removeLearner(id, fmt.Sprintf("no heartbeat for %v", c.now.Sub(l.last).Round(time.Millisecond)))
			}
		}
	}
	c.dueCheckpoint()
}

// The end.

// interrupt ends the job early (Coordinator.Interrupt): the learners are
// stopped, the shard servers asked for their counters, the evaluator
// measures the weights as they are; before the job has started, check
// ends it at once.
func (c *core) interrupt() {
	if c.interrupted {
		return
	}
	c.interrupted = true
	if !c.started {
		return
	}
	for _, l := range c.learners {
		if l.live && !l.done {
			c.send(l.conn, tStop, stop{Interrupted: true})
		}
	}
	for _, s := range c.servers {
		if s != nil && s.lost.IsZero() {
			c.send(s.conn, tStats, nil)
		}
	}
	if c.eval != nil {
		c.send(c.eval.conn, tInterrupt, nil)
	}
}

// check ends the job once it is over: every shard server final, every
// learner done (or lost) and the evaluator done; or failed; or
// interrupted, once what the learners did is checkpointed and measured.
func (c *core) check() {
	res, err, done := c.over()
	if !done {
		return
	}
	c.stopAll(err)
	c.end(res, err)
}

func (c *core) over() (*Result, error, bool) {
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
		if !c.interruptCkpt && c.ckpt.round == nil { // after a periodic round still running
			c.interruptCkpt = true
			c.startCheckpoint("the job was interrupted", 0)
		}
		if c.ckpt.round != nil {
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
	if c.cfg.Evaluator && (c.eval == nil || !c.eval.done) || c.ckpt.round != nil { // no file written after the job
		return nil, nil, false
	}
	if !c.dispatching { // a restarted coordinator counts what the shards have first
		return nil, nil, false
	}
	return c.result(), nil, true
}

// stopAll tells every process the job is over (err: it failed).
func (c *core) stopAll(err error) {
	msg := stop{}
	if err != nil && !errors.Is(err, ErrInterrupted) { // an interrupted job stops well
		msg.Wire = errcode.Encode(err)
	}
	// Interrupted before it started: the processes waiting for their
	// welcome stop as interrupted.
	msg.Interrupted = errors.Is(err, ErrInterrupted) && !c.started
	for _, s := range c.servers {
		if s != nil {
			c.send(s.conn, tStop, msg)
		}
	}
	for _, l := range c.learners {
		if l.conn != 0 && l.live {
			c.send(l.conn, tStop, msg)
		}
	}
	if c.eval != nil {
		c.send(c.eval.conn, tStop, msg)
	}
}
