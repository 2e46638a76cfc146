package cluster

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"syscall"
	"time"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
)

// The world of the chaos simulator (chaos_sim_test.go): virtual time, a
// seeded source of randomness, processes that run, pause, die and start
// again, and a network between them. Everything that happens is an
// event; events run one at a time in the order of their virtual time
// (then of their scheduling), and each one is added to the trace, so
// that a seed gives the same run, and the same trace hash, bit for bit.
//
// The network keeps what real transports promise: each direction of a
// connection delivers in order, and a connection that breaks delivers
// nothing more and tells both ends. It breaks the rest: latencies vary
// per link and over time (slow links, lossy links whose retransmissions
// hold a message and every later one back, connections reset), processes
// die at any message and their peers learn of it after what was sent
// before, or in the middle of a frame; a paused process (SIGSTOP) runs
// nothing until it resumes, while its peers' messages wait for it. A
// dial reaches what listens at the address when it arrives: nothing
// (ECONNREFUSED), or a listener that goes away before the connection is
// made (ECONNRESET), or a connection.

// simWorld is one simulated run.
type simWorld struct {
	seed     uint64
	rng      *rand.Rand
	now      time.Duration
	q        simQueue
	seq      uint64
	deadline time.Duration
	trace    simTrace

	listeners map[string]*simListener
	conns     int
	links     map[[2]int]*simLink // by the processes' indexes, lower first
	msgs      int                 // messages delivered
	// onDeliver runs after each delivery to e (the fault schedule's
	// triggers).
	onDeliver func(e *simEnd)
	// connectError classifies a failed connect as the job's transports
	// do (rdma.ConnectError; a defect test puts an older one back).
	connectError func(error) error
}

func newSimWorld(seed uint64, verbose bool) *simWorld {
	return &simWorld{seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5e1f5)), listeners: map[string]*simListener{},
		links: map[[2]int]*simLink{}, trace: simTrace{h: fnv.New64a(), verbose: verbose}, connectError: rdma.ConnectError}
}

// Events.

type simEvent struct {
	at   time.Duration
	seq  uint64
	p    *simProc // the process it runs in (nil: the world's own)
	life int      // the process's life it belongs to
	f    func()
}

type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(a, b int) bool {
	return q[a].at < q[b].at || q[a].at == q[b].at && q[a].seq < q[b].seq
}
func (q simQueue) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// at runs f at virtual time t in process p (nil: in the world itself).
func (w *simWorld) at(t time.Duration, p *simProc, f func()) {
	w.seq++
	ev := &simEvent{at: max(t, w.now), seq: w.seq, p: p, f: f}
	if p != nil {
		ev.life = p.life
	}
	heap.Push(&w.q, ev)
}

// after runs f after d in the world itself.
func (w *simWorld) after(d time.Duration, f func()) { w.at(w.now+d, nil, f) }

// errSimHung: the run did not end before its virtual deadline.
var errSimHung = errors.New("the job did not end before the virtual deadline")

// simEventBudget bounds the events of one run: a run that spins without
// reaching its deadline (messages that answer each other at once, for
// ever) hangs too.
const simEventBudget = 20_000_000

// run runs events until done reports true or the queue is empty; it
// fails with errSimHung at the deadline, or after simEventBudget events.
func (w *simWorld) run(done func() bool) error {
	for n := 0; w.q.Len() > 0 && !done(); n++ {
		ev := heap.Pop(&w.q).(*simEvent)
		if ev.at > w.deadline || n > simEventBudget {
			w.now = max(w.now, min(ev.at, w.deadline))
			return errSimHung
		}
		w.now = ev.at
		if p := ev.p; p != nil {
			switch {
			case p.life != ev.life || !p.alive:
				continue // the process died since
			case p.pausedUntil > w.now:
				w.at(p.pausedUntil, p, ev.f) // it runs once the process resumes, in order
				continue
			}
		}
		ev.f()
	}
	if !done() {
		return errSimHung
	}
	return nil
}

// rand helpers.

func (w *simWorld) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

func (w *simWorld) chance(p float64) bool { return w.rng.Float64() < p }

// The trace: every event that matters, as a hash (always) and as text
// (verbose runs).

type simTrace struct {
	h       hash.Hash64
	verbose bool
	lines   []string
	buf     [8]byte
}

func (t *simTrace) u64(v uint64) {
	binary.LittleEndian.PutUint64(t.buf[:], v)
	t.h.Write(t.buf[:])
}

// note adds an event to the trace: its time, process, kind and values,
// and bytes; the text is made only when verbose (text is not hashed:
// what it shows is).
func (w *simWorld) note(p *simProc, kind string, vals []uint64, b []byte, text func() string) {
	t := &w.trace
	t.u64(uint64(w.now))
	if p != nil {
		t.u64(uint64(p.index)<<32 | uint64(p.life))
	}
	io.WriteString(t.h, kind)
	for _, v := range vals {
		t.u64(v)
	}
	t.h.Write(b)
	if t.verbose {
		who := "world"
		if p != nil {
			who = p.name
		}
		line := fmt.Sprintf("%12v %-16s %s", w.now, who, kind)
		if text != nil {
			line += " " + text()
		}
		t.lines = append(t.lines, line)
	}
}

// logf adds a line to the trace.
func (w *simWorld) logf(p *simProc, format string, args ...any) {
	w.note(p, "log", nil, []byte(format), func() string { return fmt.Sprintf(format, args...) }) // the line's kind is hashed, at least
}

// aside adds a line to a verbose trace only, and nothing to its hash:
// what only a traced run does (the coordinator's log, which a run not
// traced does not make) must not change the hash.
func (w *simWorld) aside(p *simProc, line string) {
	if w.trace.verbose {
		w.trace.lines = append(w.trace.lines, fmt.Sprintf("%12v %-16s log %s", w.now, p.name, line))
	}
}

// Processes.

// simProc is one process of the job: the roles of its place in the
// topology, over the world's network. A process lives from its start to
// its death (killed) or its exit; the next start of the same place is a
// new life.
type simProc struct {
	w           *simWorld
	index       int
	name        string
	life        int
	alive       bool
	pausedUntil time.Duration
	busyUntil   time.Duration // it works (writes the job's outputs) until then
	host        string
	ends        []*simEnd
	lns         []*simListener
	// killed: the process was killed (a signal), not exited; termed: its
	// operator told it to stop (SIGTERM), and starts it again.
	killed, termed bool
	doneWell       bool    // its last life ended without an error
	received       int     // messages it took, every life
	roles          int     // roles running
	errs           []error // the roles' failures, in order
	cause          error
	onEnd          func(p *simProc, err error, killed bool) // the launcher's watch
}

// after runs f in p after d.
func (p *simProc) after(d time.Duration, f func()) { p.w.at(p.w.now+d, p, f) }

// busy makes p work for d: what it sends meanwhile leaves after.
func (p *simProc) busy(d time.Duration) { p.busyUntil = max(p.busyUntil, p.w.now) + d }

// start starts a new life of p.
func (p *simProc) start() {
	p.life++
	p.alive, p.killed, p.termed, p.pausedUntil, p.busyUntil = true, false, false, 0, 0
	p.ends, p.lns = nil, nil
}

// pause stops p for d (SIGSTOP, then SIGCONT).
func (p *simProc) pause(d time.Duration) {
	if p.alive {
		p.pausedUntil = max(p.pausedUntil, p.w.now+d)
	}
}

// die ends p's life: its listeners close and its connections break
// within a moment (the kernel closes a dead process's sockets one by
// one), each after what p sent on it, unless p died in the middle of a
// frame: its peer loses that message and reads a truncated frame.
func (p *simProc) die(killed bool) {
	if !p.alive {
		return
	}
	w := p.w
	p.alive, p.killed = false, killed
	window := time.Duration(0)
	if killed {
		window = w.between(0, 20*time.Millisecond)
	}
	for _, ln := range p.lns {
		if ln.open(w.now) {
			ln.closing = w.now + w.between(0, window+1)
		}
	}
	for _, e := range p.ends {
		err := error(errPeerGone)
		if killed && e.lastMsg != nil && e.lastMsg.at > w.now && w.chance(0.3) {
			e.lastMsg.cut = true
			err = errMidFrame
		}
		e.close(w.now+w.between(0, window+1), err)
	}
}

// errPeerGone and errMidFrame are what a connection's end reads once its
// peer is gone at a frame boundary, or in the middle of a frame.
var (
	errPeerGone = &rdma.OpError{Op: "recv", Err: errors.Join(rdma.ErrClosed, io.EOF)}
	errMidFrame = &rdma.OpError{Op: "recv", Err: rdma.ErrTruncated}
	errReset    = &rdma.OpError{Op: "recv", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
)

// The network.

// simLink is the path between two processes: its latency, and the
// faults it has for a while.
type simLink struct {
	base      time.Duration // one-way latency
	slowUntil time.Duration // until then a message takes slowBy times longer
	slowBy    int
	lossyTill time.Duration // until then a message is lost and sent again now and then (delay)
	local     bool          // within one process: nothing goes wrong
}

func (w *simWorld) link(a, b *simProc) *simLink {
	if a.index > b.index {
		a, b = b, a
	}
	k := [2]int{a.index, b.index}
	l := w.links[k]
	if l == nil {
		l = &simLink{base: w.between(100*time.Microsecond, 400*time.Microsecond), local: a == b}
		w.links[k] = l
	}
	return l
}

// delay returns the time a message takes on l now.
func (w *simWorld) delay(l *simLink) time.Duration {
	d := l.base + time.Duration(w.rng.Int64N(int64(l.base)/2+1))
	if l.local {
		return d / 10
	}
	if w.now < l.slowUntil {
		d *= time.Duration(l.slowBy)
	}
	if w.now < l.lossyTill && w.chance(0.05) {
		d += w.between(200*time.Millisecond, 600*time.Millisecond) // a retransmission timeout
	}
	return d
}

type simListener struct {
	addr    string
	p       *simProc
	life    int // the process's life that listens
	accept  func(*simEnd)
	closing time.Duration // closed from then on (0: open)
}

// open reports whether ln's socket is open at time at: until its
// process closes it, or the kernel does for a process that died.
func (ln *simListener) open(at time.Duration) bool { return ln.closing == 0 || at < ln.closing }

// listen makes p listen at a new address of its host; accept runs in p
// for each connection.
func (p *simProc) listen(port int, accept func(*simEnd)) *simListener {
	ln := &simListener{addr: fmt.Sprintf("%s:%d", p.host, port), p: p, life: p.life, accept: accept}
	p.w.listeners[ln.addr] = ln
	p.lns = append(p.lns, ln)
	return ln
}

// closeListener closes ln: a dial that arrives later is refused.
func (ln *simListener) close() {
	if ln.closing == 0 || ln.closing > ln.p.w.now {
		ln.closing = ln.p.w.now
	}
}

// simConn is a connection between a dialer (end 0) and a listener's
// process (end 1).
type simConn struct {
	id     int
	ends   [2]*simEnd
	link   *simLink
	broken bool
}

// simEnd is one process's end of a connection: recv takes what arrives,
// lost is told once when the connection fails (its peer closed it, died,
// or the network reset it). A role sets them when it takes the end.
type simEnd struct {
	c       *simConn
	side    int
	p       *simProc
	life    int
	recv    func(any)
	lost    func(error)
	closed  bool // closed by its process, or its process died
	told    bool // lost was told
	last    time.Duration
	lastMsg *simFlight // the last message sent, while it may be in flight
	sent    int
}

// simFlight is a message in flight.
type simFlight struct {
	at  time.Duration
	cut bool // its sender died while writing it
}

func (e *simEnd) peer() *simEnd { return e.c.ends[1-e.side] }

func (e *simEnd) String() string { return fmt.Sprintf("conn %d/%d", e.c.id, e.side) }

// send sends m to the peer: it leaves once the process is done with
// what it is busy with (and runs: a paused process sends nothing until
// it resumes, a dead one nothing at all), and arrives after the link's
// delay, after everything sent before on this end. A closed or broken
// connection sends nothing (its ends learn of it through lost): false.
func (e *simEnd) send(m any) bool {
	if e.closed || e.c.broken || !e.p.alive {
		return false
	}
	if e.p.busyUntil > e.p.w.now {
		e.p.w.at(e.p.busyUntil, e.p, func() { e.transmit(m) })
		return true
	}
	e.transmit(m)
	return true
}

// transmit puts m on the wire now.
func (e *simEnd) transmit(m any) {
	w := e.p.w
	if e.closed || e.c.broken {
		return
	}
	to := e.peer()
	at := max(w.now+w.delay(e.c.link), e.last+time.Nanosecond)
	e.last = at
	f := &simFlight{at: at}
	e.lastMsg = f
	e.sent++
	w.at(at, to.p, func() {
		if f.cut || e.c.broken || to.closed || to.life != to.p.life || to.recv == nil {
			return
		}
		w.msgs++
		to.p.received++
		w.noteMsg(to.p, to, m)
		to.recv(m)
		if w.onDeliver != nil {
			w.onDeliver(to)
		}
	})
}

// closeAfterWork closes e once its process is done with what it is busy
// with (after what it sends meanwhile).
func (e *simEnd) closeAfterWork() {
	if e.p.busyUntil > e.p.w.now {
		e.p.w.at(e.p.busyUntil, e.p, func() { e.close(e.p.w.now, errPeerGone) })
		return
	}
	e.close(e.p.w.now, errPeerGone)
}

// close closes e at at (its process closed it, or died): its peer reads
// what was sent before, then err.
func (e *simEnd) close(at time.Duration, err error) {
	if e.closed {
		return
	}
	e.closed = true
	w := e.p.w
	to := e.peer()
	when := max(at+w.delay(e.c.link), e.last+time.Nanosecond)
	w.at(when, to.p, func() {
		if to.life == to.p.life {
			to.fail(err)
		}
	})
}

// fail tells e's role that its connection failed with err, once.
func (e *simEnd) fail(err error) {
	if e.told || e.closed {
		return
	}
	e.told = true
	e.closed = true
	w := e.p.w
	w.note(e.p, "lost", []uint64{uint64(e.c.id)}, nil, func() string { return fmt.Sprintf("%v: %v", e, err) })
	if e.lost != nil {
		e.lost(err)
	}
}

// reset breaks c (a reset on the way): what is in flight is lost, and
// both ends read a reset once it reaches them.
func (c *simConn) reset(w *simWorld) {
	if c.broken || c.link.local {
		return
	}
	c.broken = true
	w.note(nil, "reset", []uint64{uint64(c.id)}, nil, func() string { return fmt.Sprintf("conn %d", c.id) })
	for _, e := range c.ends {
		e := e
		w.at(w.now+w.delay(c.link)/2, e.p, func() {
			if e.life == e.p.life {
				e.fail(errReset)
			}
		})
	}
}

// dial connects p to addr; then runs in p with the end or the error a
// real dial returns: a refused connect when nothing listens there when
// it arrives, a reset one when the listener goes away before the
// connection is made (a dying process's backlog), both classified by
// connectError.
func (p *simProc) dial(addr string, then func(*simEnd, error)) {
	w := p.w
	ln := w.listeners[addr]
	var l *simLink
	if ln != nil {
		l = w.link(p, ln.p)
	} else {
		l = &simLink{base: 200 * time.Microsecond}
	}
	half := w.delay(l) / 2
	arrive := w.now + half
	w.at(arrive+half, p, func() {
		fail := func(errno syscall.Errno) {
			err := &rdma.OpError{Op: "dial", Peer: addr, Err: w.connectError(os.NewSyscallError("connect", errno))}
			w.note(p, "dial", nil, []byte(addr), func() string { return fmt.Sprintf("%s: %v", addr, err) })
			then(nil, err)
		}
		switch {
		case ln == nil || !ln.open(arrive):
			fail(syscall.ECONNREFUSED)
			return
		case !ln.open(w.now) || !ln.p.alive || ln.p.life != ln.life:
			fail(syscall.ECONNRESET) // it was in the backlog of a listener that went away
			return
		}
		w.conns++
		c := &simConn{id: w.conns, link: l}
		a := &simEnd{c: c, side: 0, p: p, life: p.life}
		b := &simEnd{c: c, side: 1, p: ln.p, life: ln.life}
		c.ends = [2]*simEnd{a, b}
		p.ends = append(p.ends, a)
		ln.p.ends = append(ln.p.ends, b)
		w.note(p, "dial", []uint64{uint64(c.id)}, []byte(addr), func() string { return fmt.Sprintf("%s: conn %d", addr, c.id) })
		w.at(w.now, ln.p, func() {
			if b.life == ln.p.life && !b.closed {
				ln.accept(b)
			}
		})
		then(a, nil)
	})
}

// noteMsg adds a delivered message to the trace.
func (w *simWorld) noteMsg(p *simProc, to *simEnd, m any) {
	id := uint64(to.c.id)
	switch m := m.(type) {
	case simCtrl:
		w.note(p, "ctrl", []uint64{id, uint64(m.t)}, m.b, func() string { return fmt.Sprintf("%v %s %s", to, ctrlName(m.t), m.b) })
	case ps.Msg:
		vals := []uint64{id, uint64(m.Type), uint64(m.Shard), uint64(m.Learner), m.Seq, m.Clock, m.Batch, m.Life}
		for _, g := range m.Grad {
			vals = append(vals, uint64(math.Float32bits(g)))
		}
		w.note(p, "ps", vals, nil, func() string {
			return fmt.Sprintf("%v %v shard %d learner %d seq %#x clock %d batch %d", to, m.Type, m.Shard, m.Learner, m.Seq, m.Clock, m.Batch)
		})
	case simReply:
		r := m.r
		vals := []uint64{id, uint64(m.shard), uint64(r.To), r.Seq, r.Clock, r.Life, uint64(len(r.Weights))}
		if r.Ack {
			vals = append(vals, 1)
		}
		for _, x := range r.Weights {
			vals = append(vals, uint64(math.Float32bits(x)))
		}
		var b []byte
		if r.Err != nil {
			b = []byte(r.Err.Error())
		}
		w.note(p, "reply", vals, b, func() string {
			what := "weights"
			switch {
			case r.Err != nil:
				what = r.Err.Error()
			case r.Ack:
				what = "ack"
			}
			return fmt.Sprintf("%v shard %d to %d seq %#x clock %d: %s", to, m.shard, r.To, r.Seq, r.Clock, what)
		})
	}
}

// simCtrl is a control message on the simulated network: its type and
// its data as the runtime encodes it (ctrlData).
type simCtrl struct {
	t rdma.Type
	b []byte
}

// simReply is a shard's reply on the simulated network.
type simReply struct {
	shard int
	r     ps.Reply
}

// ctrlName names a control message type for traces.
func ctrlName(t rdma.Type) string {
	names := [...]string{"hello", "welcome", "chunk-req", "chunk", "complete", "progress", "epoch", "evict", "lost", "finish", "final",
		"stop", "fail", "where", "addr", "interrupt", "stats", "server-stats", "checkpoint", "checkpointed", "checkpoint-req",
		"checkpoint-done", "part", "consumed-req", "consumed"}
	if i := int(t - tHello); i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%#x", t)
}
