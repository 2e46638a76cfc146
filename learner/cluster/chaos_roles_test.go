package cluster

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
)

// The roles of the chaos simulator (chaos_sim_test.go). The head runs
// the real coordinator core; the shard servers run real shards
// (ps.Shard) and the identity, routing, eviction, finish and checkpoint
// rules of ps.Server and RunServer; learners follow RunLearner and
// ps.Client: join every shard, take chunks, pull every shard, compute,
// push every shard with the mini-batch's id, count a mini-batch delivered
// once every shard has answered a later request, resend unacknowledged
// pushes on a new connection (after joining again), rejoin a lost
// coordinator with the chunks they hold. Control messages travel as
// JSON and are decoded by the runtime's decoder.

const simTick = 100 * time.Millisecond

// encode returns a control message as the runtime sends it.
func encode(t rdma.Type, v any) ctl {
	if v == nil {
		return ctl{t: t}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return ctl{t: t, v: b}
}

// decodeInto decodes a control message's data into v.
func decodeInto(m ctl, v any) {
	if b, _ := m.v.([]byte); b != nil {
		if err := json.Unmarshal(b, v); err != nil {
			panic(err)
		}
	}
}

// The head: coordinator and evaluator.

type simHead struct {
	j     *chaosJob
	dead  bool
	core  *core
	ids   map[*simConn]connID
	conns map[connID]*simConn
	eval  *simEval
}

func (j *chaosJob) startHead() *simHead {
	h := &simHead{j: j, ids: map[*simConn]connID{}, conns: map[connID]*simConn{}}
	v, ver := j.store.latest()
	c, err := newCore(j.cfg, v+1)
	if err != nil {
		panic(err)
	}
	if ver != nil {
		if err := c.restore(*ver.coord); err != nil {
			panic(err)
		}
		c.ckpt.last = v
	}
	h.core = c
	j.logf("head starts (checkpoint %d)", v)
	h.tick()
	h.eval = j.startEval(h)
	return h
}

func (h *simHead) alive() bool { return !h.dead }

func (h *simHead) die() {
	h.dead = true
	h.j.closeAll(h)
	h.eval.die()
}

func (h *simHead) tick() {
	h.j.after(simTick, func() {
		if !h.dead {
			h.step(event{kind: evTick})
			h.tick()
		}
	})
}

func (h *simHead) deliver(c *simConn, m any) {
	id, ok := h.ids[c]
	if !ok {
		id = connID(len(h.ids) + 1)
		h.ids[c], h.conns[id] = id, c
	}
	cm := m.(ctl)
	b, _ := cm.v.([]byte)
	msg, err := decodeCtrl(cm.t, b)
	h.step(event{kind: evMsg, conn: id, peer: "sim", t: cm.t, msg: msg, err: err})
}

func (h *simHead) lost(c *simConn) {
	if id, ok := h.ids[c]; ok {
		h.step(event{kind: evLost, conn: id, err: rdma.ErrClosed})
	}
}

func (h *simHead) step(ev event) {
	j := h.j
	rd := h.core.step(ev, time.Unix(0, 0).Add(j.now))
	for _, m := range rd.sends {
		j.send(h.conns[m.conn], h, encode(m.t, m.v))
	}
	for _, id := range rd.closes {
		j.close(h.conns[id], h)
	}
	for _, l := range rd.logs {
		j.logf("coordinator: %s %v", l.msg, l.args)
	}
	if w := rd.write; w != nil {
		j.after(time.Millisecond, func() {
			if h.dead {
				return
			}
			st := w.state
			j.store.version(w.version).coord = &st
			h.step(event{kind: evWritten, version: w.version})
		})
	}
	if m := rd.commit; m != nil {
		j.after(time.Millisecond, func() {
			if h.dead {
				return
			}
			j.store.version(m.version).committed = true
			j.logf("checkpoint %d committed", m.version)
			h.step(event{kind: evCommitted, version: m.version})
		})
	}
	if rd.done {
		j.ended, j.result, j.err = true, rd.result, rd.err
	}
}

// dialHead connects node to the head, trying again every 200 ms while the
// head is dead, for the job's PSTimeout; then calls then with the
// connection (nil: it gave up).
func (j *chaosJob) dialHead(node simNode, then func(*simConn)) {
	start := j.now
	var try func()
	try = func() {
		if !node.alive() {
			return
		}
		if h := j.head; !h.dead {
			then(j.dial(node, h))
			return
		}
		if j.now-start > j.psTimeout {
			then(nil)
			return
		}
		// Processes come back at different times (their backoffs and
		// Locate differ): the coordinator sees them arrive in any order.
		j.after(time.Duration(100+j.rng.IntN(1500))*time.Millisecond, try)
	}
	try()
}

// The evaluator: in the head's process; it measures nothing but waits
// for the final weights of every shard.

type simEval struct {
	j     *chaosJob
	h     *simHead
	dead  bool
	ctrl  *simConn
	links []*simConn
	seqs  []uint64
	got   []bool
	n     uint64
	sent  bool
}

func (j *chaosJob) startEval(h *simHead) *simEval {
	e := &simEval{j: j, h: h, links: make([]*simConn, j.pc.Shards), seqs: make([]uint64, j.pc.Shards), got: make([]bool, j.pc.Shards)}
	e.ctrl = j.dial(e, h)
	e.ctrl.local = true
	j.send(e.ctrl, e, encode(tHello, hello{Process: Process{Rank: -1, Role: RoleEvaluator}, Settings: j.cfg.Settings}))
	return e
}

func (e *simEval) alive() bool { return !e.dead }
func (e *simEval) die() {
	e.dead = true
	e.j.closeAll(e)
}

func (e *simEval) deliver(c *simConn, m any) {
	if c == e.ctrl {
		cm := m.(ctl)
		switch cm.t {
		case tWelcome:
			for k := range e.links {
				e.connect(k)
			}
		case tAddr:
			var a addr
			decodeInto(cm, &a)
			e.connect(a.Shard)
		}
		return
	}
	r, ok := m.(ps.Reply)
	k := slices.Index(e.links, c)
	if !ok || k < 0 || r.Seq != e.seqs[k] || r.Weights == nil {
		return
	}
	e.got[k] = true
	if !e.sent && !slices.Contains(e.got, false) {
		e.sent = true
		e.j.send(e.ctrl, e, encode(tEpoch, epochResult{Epoch: 0}))
	}
}

// connect connects to shard k's server and asks for its final weights,
// or asks the coordinator where the server is.
func (e *simEval) connect(k int) {
	if e.got[k] {
		return
	}
	s := e.j.servers[k]
	if !s.serving() {
		e.j.after(simTick, func() {
			if !e.dead && (e.links[k] == nil || e.links[k].closed[0]) {
				e.j.send(e.ctrl, e, encode(tWhere, where{Shard: k}))
			}
		})
		return
	}
	e.links[k] = e.j.dial(e, s)
	e.n++
	e.seqs[k] = e.n
	e.j.send(e.links[k], e, simSnap{seq: e.n})
}

func (e *simEval) lost(c *simConn) {
	if k := slices.Index(e.links, c); k >= 0 && !e.got[k] {
		e.j.send(e.ctrl, e, encode(tWhere, where{Shard: k}))
	}
}

// simSnap is the evaluator's request for a shard's final weights.
type simSnap struct{ seq uint64 }

// Shard servers.

type simServer struct {
	j        *chaosJob
	k        int
	dead     bool
	shard    *ps.Shard
	life     *simLife
	binds    map[uint32]*simBind
	routes   []*simConn
	ctrl     *simConn
	joining  *simConn // rejoining: the new connection, until its welcome
	rejoined bool
	hello    hello
	welcomed bool
	finished bool
	final    bool
	stopped  bool
	waits    []struct {
		c   *simConn
		seq uint64
	}
}

// simBind is a learner's identity at a server (ps.Server's binding).
type simBind struct {
	inc  uint32
	conn *simConn
	dead bool
}

func (j *chaosJob) startServer(k int) *simServer {
	s := &simServer{j: j, k: k, binds: map[uint32]*simBind{}, routes: make([]*simConn, j.pc.Learners), life: &simLife{}}
	s.hello = hello{Process: Process{Rank: -1, Role: RoleServer, ID: k}, Addr: fmt.Sprintf("server/%d", k), Shards: []int{k},
		Settings: j.cfg.Settings, Consumed: make([][]ps.Interval, 1)}
	j.nextLife++
	v, ver := j.store.latest()
	var err error
	if f := ver.shard(k); f != nil {
		cp := *f.cp
		cp.Active = make([]bool, len(cp.Active)) // RunServer: learners join when they connect
		s.shard, err = ps.Restore(j.pc, &cp, j.nextLife)
		for l, b := range f.binds {
			s.binds[l] = &simBind{inc: b.inc, dead: b.dead}
		}
		s.life.parent, s.life.prefix = f.life, f.prefix
		s.hello.Consumed[0] = cp.Consumed
	} else {
		s.shard, err = ps.NewShard(j.pc, k, j.init, j.nextLife)
		// RunServer: a server replacing an earlier life starts with no
		// active learner (ps.ServerConfig.Inactive).
		for l := range j.pc.Learners {
			if len(j.lives[k]) > 0 && err == nil {
				s.shard.Step(ps.Msg{Type: ps.MsgLeave, Job: j.pc.Job, Shard: k, Learner: uint32(l)})
			}
		}
	}
	if err != nil {
		panic(err)
	}
	if n := len(j.lives[k]); n > 0 {
		kept := map[uint64]bool{}
		for _, id := range s.life.lineage(0) {
			kept[id] = true
		}
		for _, id := range j.lives[k][n-1].lineage(-1) {
			if !kept[id] {
				j.restartLost[k][id] = true
			}
		}
	}
	j.lives[k] = append(j.lives[k], s.life)
	j.logf("server %d starts (life %d, checkpoint %d)", k, j.nextLife, v)
	j.dialHead(s, func(c *simConn) {
		if c == nil {
			panic("a shard server found no coordinator at its start")
		}
		s.ctrl = c
		j.send(c, s, encode(tHello, s.hello))
	})
	return s
}

func (ver *simVersion) shard(k int) *simShardFile {
	if ver == nil {
		return nil
	}
	return ver.shards[k]
}

func (s *simServer) alive() bool   { return !s.dead && !s.stopped }
func (s *simServer) serving() bool { return s.alive() && s.welcomed }

func (s *simServer) die() {
	s.dead = true
	s.j.closeAll(s)
}

func (s *simServer) deliver(c *simConn, m any) {
	if c == s.joining && m.(ctl).t == tWelcome {
		s.ctrl, s.joining = c, nil
		if s.rejoined && s.final { // its counters went on the old connection, if at all
			s.j.send(c, s, encode(tFinal, s.stats()))
		}
	}
	if c == s.ctrl {
		s.command(m.(ctl))
		return
	}
	switch m := m.(type) {
	case simSnap:
		s.waits = append(s.waits, struct {
			c   *simConn
			seq uint64
		}{c, m.seq})
		s.answerSnaps()
	case ps.Msg:
		s.step(c, m)
	}
}

// step admits a learner's message (ps.Server.admit), steps the shard and
// routes the replies (ps.shardLoop), recording what the shard consumed.
func (s *simServer) step(c *simConn, m ps.Msg) {
	j := s.j
	inc := ps.Incarnation(m.Seq)
	b := s.binds[m.Learner]
	if b == nil {
		b = &simBind{}
		s.binds[m.Learner] = b
	}
	switch {
	case inc < b.inc, inc == b.inc && b.dead, inc == b.inc && b.conn != nil && b.conn != c:
		j.send(c, s, ps.Reply{To: m.Learner, Seq: m.Seq, Err: ps.ErrRefused})
		return
	}
	b.inc, b.dead, b.conn = inc, false, c
	before := s.shard.Stats()
	prev := s.routes[m.Learner]
	s.routes[m.Learner] = c
	r := s.shard.Step(m)
	after := s.shard.Stats()
	if after.Gradients+after.Dropped > before.Gradients+before.Dropped {
		s.life.consumed = append(s.life.consumed, m.Batch)
	}
	if after.StaleLife > before.StaleLife {
		j.staleLife[s.k][m.Batch] = true
	}
	rejected := false
	for _, rep := range r.Replies {
		rejected = rejected || rep.Err != nil
	}
	switch {
	case rejected:
		s.routes[m.Learner] = prev
	case m.Type == ps.MsgLeave:
		s.routes[m.Learner] = nil
	}
	s.route(r, c)
}

// route sends a step's replies: weights to their learner's route, the
// others to the connection of the message (c).
func (s *simServer) route(r ps.Ready, c *simConn) {
	for _, rep := range r.Replies {
		if rep.Weights != nil {
			rep.Weights = slices.Clone(rep.Weights)
			if to := s.routes[rep.To]; to != nil {
				s.j.send(to, s, rep)
			}
			continue
		}
		s.j.send(c, s, rep)
	}
	s.checkFinal()
}

func (s *simServer) checkFinal() {
	if s.final || !s.finished || s.shard.Active() > 0 {
		return
	}
	s.final = true
	s.j.send(s.ctrl, s, encode(tFinal, s.stats()))
	s.answerSnaps()
}

func (s *simServer) stats() ps.ServerStats {
	return ps.ServerStats{Shards: []ps.Stats{s.shard.Stats()}}
}

func (s *simServer) answerSnaps() {
	if !s.final {
		return
	}
	for _, w := range s.waits {
		s.j.send(w.c, s, ps.Reply{Seq: w.seq, Weights: slices.Clone(s.shard.Weights()), Life: s.shard.Life()})
	}
	s.waits = nil
}

// command carries out a coordinator's command (RunServer's loop).
func (s *simServer) command(m ctl) {
	j := s.j
	switch m.t {
	case tWelcome:
		s.welcomed = true
	case tEvict:
		var e member
		decodeInto(m, &e)
		b := s.binds[e.Learner]
		if b == nil {
			b = &simBind{}
			s.binds[e.Learner] = b
		}
		if e.Incarnation >= b.inc {
			b.inc, b.dead, b.conn = e.Incarnation, true, nil
			if s.shard.Member(e.Learner) {
				seq, waiting := s.shard.PullWaiting(e.Learner)
				to := s.routes[e.Learner]
				s.routes[e.Learner] = nil
				s.route(s.shard.Step(ps.Msg{Type: ps.MsgLeave, Job: j.pc.Job, Shard: s.k, Learner: e.Learner}), nil)
				if waiting && to != nil { // shardLoop.evict refuses it
					j.send(to, s, ps.Reply{To: e.Learner, Seq: seq, Err: fmt.Errorf("%w: the learner was removed from the job", ps.ErrRefused)})
				}
			}
			s.checkFinal()
		}
	case tFinish:
		s.finished = true
		s.checkFinal()
	case tStats:
		j.send(s.ctrl, s, encode(tServerStats, s.stats()))
	case tConsumedReq:
		j.send(s.ctrl, s, encode(tConsumed, consumed{Shards: [][]ps.Interval{s.shard.Consumed()}}))
	case tCheckpoint:
		var o ckptOrder
		decodeInto(m, &o)
		f := &simShardFile{cp: s.shard.Checkpoint(), binds: map[uint32]simBind{}, life: s.life, prefix: len(s.life.consumed)}
		for l, b := range s.binds {
			f.binds[l] = simBind{inc: b.inc, dead: b.dead}
		}
		j.after(time.Millisecond, func() {
			if !s.alive() {
				return
			}
			j.store.version(o.Version).shards[s.k] = f
			j.send(s.ctrl, s, encode(tCheckpointed, ckptReport{Version: o.Version, Files: nil}))
		})
	case tStop:
		s.stopped = true
	}
}

func (s *simServer) lost(c *simConn) {
	if c != s.ctrl && c != s.joining {
		for _, b := range s.binds {
			if b.conn == c {
				b.conn = nil
			}
		}
		return
	}
	// The coordinator lost: rejoin (serverRole.rejoin): its reports go
	// on the new connection once welcomed.
	s.j.logf("server %d lost the coordinator", s.k)
	s.ctrl = nil
	s.j.dialHead(s, func(c *simConn) {
		if c == nil {
			s.j.err = fmt.Errorf("server %d could not rejoin the coordinator", s.k)
			s.j.ended = true
			return
		}
		s.joining, s.rejoined = c, true
		h := s.hello
		h.Rejoin, h.Consumed = true, [][]ps.Interval{s.shard.Consumed()}
		if s.final {
			st := s.stats()
			h.Final = &st
		}
		s.j.send(c, s, encode(tHello, h))
	})
}

// Learners.

type simLearner struct {
	j        *chaosJob
	id       int
	dead     bool
	lives    int // processes started for this id, for the restart bound
	ctrl     *simConn
	joining  *simConn // rejoining: the new connection, until its welcome
	welcomed bool
	inc      uint32
	plan     data.Plan
	links    []*simConn
	n        uint64
	member   bool
	departed []bool // per shard: it acknowledged the leave in progress (ps.Client's)

	// requests awaited, per shard: its kind (MsgPull, MsgJoin, MsgLeave;
	// 0: none) and sequence; then runs once all are answered.
	reqKind []ps.MsgType
	reqSeq  []uint64
	then    func()
	stamps  []uint64
	slives  []uint64
	gens    []int // per shard, the connection the stamps came on; a new one asks for any weights
	linkGen []int // per shard, connections so far
	pushed  bool  // a push since the last pull

	unacked     [][]ps.Msg     // per shard, pushes not acknowledged, in order
	undelivered []*simDelivery // pushes not acknowledged by every shard, in order

	asking *chunkReq
	chunk  data.Chunk
	pos    int
	held   map[data.Chunk]*data.Holding
	ids    map[uint64]batchPos
	news   map[data.Chunk]bool
	report map[int]*epochLoss
	done   bool
}

type simDelivery struct {
	batch uint64
	left  []bool // per shard: not acknowledged yet
}

func (j *chaosJob) startLearner(i int) *simLearner {
	S := j.pc.Shards
	l := &simLearner{j: j, id: i, links: make([]*simConn, S), reqKind: make([]ps.MsgType, S), reqSeq: make([]uint64, S),
		stamps: make([]uint64, S), departed: make([]bool, S), slives: make([]uint64, S), gens: make([]int, S), linkGen: make([]int, S), unacked: make([][]ps.Msg, S),
		held: map[data.Chunk]*data.Holding{}, ids: map[uint64]batchPos{}, news: map[data.Chunk]bool{}, report: map[int]*epochLoss{}}
	if len(j.learners) > i {
		l.lives = j.learners[i].lives + 1
	}
	j.logf("learner %d starts", i)
	j.dialHead(l, func(c *simConn) {
		if c == nil {
			l.fail("no coordinator")
			return
		}
		l.ctrl = c
		j.send(c, l, encode(tHello, hello{Process: Process{Rank: -1, Role: RoleLearner, ID: i}, Settings: j.cfg.Settings}))
	})
	return l
}

func (l *simLearner) alive() bool { return !l.dead }

func (l *simLearner) die() {
	l.dead = true
	l.j.closeAll(l)
}

// fail ends the learner's process with an error; like launch --restarts,
// the simulator starts it again (a new incarnation), a few times at most.
func (l *simLearner) fail(why string) {
	if l.dead {
		return
	}
	j := l.j
	j.logf("learner %d fails: %s", l.id, why)
	l.die()
	if l.lives < 5 {
		j.after(500*time.Millisecond, func() { j.learners[l.id] = j.startLearner(l.id) })
	}
}

func (l *simLearner) deliver(c *simConn, m any) {
	if c == l.joining && m.(ctl).t == tWelcome {
		l.ctrl, l.joining = c, nil
	}
	if c == l.ctrl || c == l.joining {
		l.command(m.(ctl))
		return
	}
	k := slices.Index(l.links, c)
	r, ok := m.(ps.Reply)
	if k < 0 || !ok {
		return
	}
	if r.Err != nil {
		l.j.logf("learner %d: shard %d: %v", l.id, k, r.Err)
		if r.Seq == l.reqSeq[k] && l.reqKind[k] != 0 {
			l.fail(fmt.Sprintf("shard %d refused a %v: %v", k, l.reqKind[k], r.Err))
		}
		return
	}
	if r.Seq != l.reqSeq[k] || l.reqKind[k] == 0 {
		return // an older request's
	}
	if l.reqKind[k] == ps.MsgPull {
		l.stamps[k], l.slives[k], l.gens[k] = r.Clock, r.Life, l.linkGen[k]
	}
	l.departed[k] = l.reqKind[k] == ps.MsgLeave
	l.reqKind[k] = 0
	l.acked(k, r.Seq)
	if !slices.ContainsFunc(l.reqKind, func(t ps.MsgType) bool { return t != 0 }) && l.then != nil {
		then := l.then
		l.then = nil
		then()
	}
}

// acked records that shard k answered request seq: it has every push
// sent to it before.
func (l *simLearner) acked(k int, seq uint64) {
	for len(l.unacked[k]) > 0 && l.unacked[k][0].Seq < seq {
		b := l.unacked[k][0].Batch
		l.unacked[k] = l.unacked[k][1:]
		for _, d := range l.undelivered {
			if d.batch == b && d.left[k] {
				d.left[k] = false
				break
			}
		}
	}
	for len(l.undelivered) > 0 && !slices.Contains(l.undelivered[0].left, true) {
		b := l.undelivered[0].batch
		l.undelivered = l.undelivered[1:]
		l.delivered(b)
	}
}

// delivered is worker.delivered.
func (l *simLearner) delivered(id uint64) {
	p, ok := l.ids[id]
	h := l.held[p.chunk]
	if !ok || h == nil {
		return
	}
	delete(l.ids, id)
	h.Delivered = max(h.Delivered, p.pos+1)
	if h.Delivered == h.Chunk.Count {
		delete(l.news, p.chunk)
		l.j.send(l.ctrl, l, encode(tComplete, h.Chunk))
		return
	}
	l.news[p.chunk] = true
}

func (l *simLearner) seq() uint64 {
	l.n++
	return ps.Seq(l.inc, l.n)
}

// requestAll sends every shard a request of kind t and runs then once
// all have answered.
func (l *simLearner) requestAll(t ps.MsgType, then func()) {
	l.then = then
	if t == ps.MsgJoin {
		clear(l.departed)
	}
	for k := range l.links {
		l.reqKind[k] = t
		l.sendRequest(k)
	}
}

// sendRequest sends shard k its awaited request (again, with a new
// sequence).
func (l *simLearner) sendRequest(k int) {
	t := l.reqKind[k]
	m := ps.Msg{Type: t, Job: l.j.pc.Job, Shard: k, Learner: uint32(l.id), Seq: l.seq()}
	if t == ps.MsgPull && l.gens[k] == l.linkGen[k] {
		m.Clock = l.stamps[k]
		if l.pushed && l.j.pc.Protocol == ps.Hardsync {
			m.Clock++
		}
	}
	l.reqSeq[k] = m.Seq
	l.j.logf("learner %d: %v shard %d (seq %d, clock %d) on %v", l.id, t, k, m.Seq, m.Clock, l.links[k])
	if c := l.links[k]; c != nil {
		l.j.send(c, l, m)
	}
}

func (l *simLearner) command(m ctl) {
	j := l.j
	switch m.t {
	case tWelcome:
		var w welcome
		decodeInto(m, &w)
		if l.welcomed { // rejoined: worker.rejoin
			for _, key := range slices.SortedFunc(maps.Keys(l.held), cmpKey) {
				if h := l.held[key]; h.Delivered == h.Chunk.Count {
					j.send(l.ctrl, l, encode(tComplete, h.Chunk))
				} else if h.Delivered > 0 {
					l.news[key] = true
				}
			}
			if l.asking != nil {
				j.send(l.ctrl, l, encode(tChunkReq, *l.asking))
			}
			return
		}
		l.welcomed, l.inc, l.plan = true, w.Incarnation, w.Plan
		for k := range l.links {
			l.connect(k)
		}
		l.heartbeat()
		l.requestAll(ps.MsgJoin, func() {
			l.member = true
			l.ask(false)
		})
	case tAddr:
		var a addr
		decodeInto(m, &a)
		// Learners reconnect in any order (a learner notices the loss
		// when it next uses the connection).
		j.after(time.Duration(j.rng.Int64N(int64(j.compute)+1)), func() {
			if !l.dead && l.links[a.Shard] == nil {
				l.connect(a.Shard)
			}
		})
	case tChunk:
		var r chunkReply
		decodeInto(m, &r)
		l.asking = nil
		j.logf("learner %d: chunk %+v", l.id, r)
		switch {
		case r.End:
			l.leave(func() {
				l.done = true
				l.flush(true)
			})
		case r.Idle:
			l.leave(func() { l.ask(true) })
		default:
			key := r.Chunk
			l.held[key] = &data.Holding{Chunk: r.Chunk}
			for i := range r.Chunk.Count {
				l.ids[l.plan.ID(r.Chunk.Epoch, r.Chunk.Batch(i))] = batchPos{key, i}
			}
			l.chunk, l.pos = r.Chunk, 0
			if l.member {
				l.pull()
			} else {
				l.requestAll(ps.MsgJoin, func() {
					l.member = true
					l.pull()
				})
			}
		}
	case tStop:
		var st stop
		decodeInto(m, &st)
		if st.Text != "" {
			l.fail("stopped: " + st.Text)
		} else {
			l.dead = true // the job is over
		}
	}
}

func (l *simLearner) leave(then func()) {
	if !l.member {
		then()
		return
	}
	l.requestAll(ps.MsgLeave, func() {
		l.member = false
		then()
	})
}

func (l *simLearner) ask(wait bool) {
	l.asking = &chunkReq{Wait: wait}
	l.j.send(l.ctrl, l, encode(tChunkReq, *l.asking))
}

// pull pulls every shard, computes and pushes the current mini-batch.
func (l *simLearner) pull() {
	l.requestAll(ps.MsgPull, func() {
		l.pushed = false
		pos := l.pos
		l.j.after(l.j.stepTime(), func() {
			if !l.dead && l.pos == pos {
				l.push()
			}
		})
	})
}

func (l *simLearner) push() {
	j := l.j
	id := l.plan.ID(l.chunk.Epoch, l.chunk.Batch(l.pos))
	d := &simDelivery{batch: id, left: make([]bool, len(l.links))}
	for k, r := range j.ranges {
		g := make([]float32, r.Len())
		for i := range g {
			g[i] = float32(1e-3 * math.Sin(float64(id)+float64(r.Lo+i)))
		}
		m := ps.Msg{Type: ps.MsgPush, Job: j.pc.Job, Shard: k, Learner: uint32(l.id), Seq: l.seq(), Clock: l.stamps[k],
			Batch: id, Life: l.slives[k], Grad: g}
		l.unacked[k] = append(l.unacked[k], m)
		d.left[k] = true
		if c := l.links[k]; c != nil {
			j.send(c, l, m)
		}
	}
	l.undelivered = append(l.undelivered, d)
	j.logf("learner %d: push %d stamps %v", l.id, id, l.stamps)
	l.pushed = true
	e := l.report[l.chunk.Epoch]
	if e == nil {
		e = &epochLoss{Epoch: l.chunk.Epoch}
		l.report[l.chunk.Epoch] = e
	}
	e.Steps++
	l.pos++
	if l.pos < l.chunk.Count {
		l.pull()
	} else {
		l.ask(false)
	}
}

// connect connects to shard k's server; on a new connection a member
// joins again, then resends its unacknowledged pushes, then its awaited
// request (ps.Client's restore).
func (l *simLearner) connect(k int) {
	j := l.j
	s := j.servers[k]
	if !s.serving() {
		l.where(k)
		return
	}
	c := j.dial(l, s)
	l.links[k] = c
	l.linkGen[k]++
	j.logf("learner %d connects to shard %d (%v): member %v, %d unacknowledged, request %v", l.id, k, c, l.member, len(l.unacked[k]), l.reqKind[k])
	if l.member && !l.departed[k] {
		j.send(c, l, ps.Msg{Type: ps.MsgJoin, Job: j.pc.Job, Shard: k, Learner: uint32(l.id), Seq: l.seq()})
	}
	for _, m := range l.unacked[k] {
		j.send(c, l, m)
	}
	if l.reqKind[k] != 0 {
		l.sendRequest(k)
	}
}

func (l *simLearner) lost(c *simConn) {
	j := l.j
	if c == l.ctrl || c == l.joining {
		j.logf("learner %d lost the coordinator", l.id)
		l.ctrl, l.joining = nil, nil
		j.dialHead(l, func(c *simConn) {
			if c == nil {
				l.fail("could not rejoin the coordinator")
				return
			}
			h := hello{Process: Process{Rank: -1, Role: RoleLearner, ID: l.id}, Settings: j.cfg.Settings, Rejoin: true, Incarnation: l.inc}
			for _, key := range slices.SortedFunc(maps.Keys(l.held), cmpKey) {
				h.Held = append(h.Held, *l.held[key])
			}
			// Its reports and requests go on the new connection once
			// welcomed (worker.rejoin); until then they are lost.
			l.joining = c
			j.send(c, l, encode(tHello, h))
		})
		return
	}
	if k := slices.Index(l.links, c); k >= 0 {
		j.logf("learner %d lost shard %d (%v)", l.id, k, c)
		l.links[k] = nil
		l.where(k)
	}
}

// where asks the coordinator where shard k's server is, again every
// tick until the learner is connected to it (Member.redialer).
func (l *simLearner) where(k int) {
	j := l.j
	j.after(simTick, func() {
		if l.dead || l.links[k] != nil {
			return
		}
		j.send(l.ctrl, l, encode(tWhere, where{Shard: k}))
		l.where(k)
	})
}

// heartbeat sends the progress every half second.
func (l *simLearner) heartbeat() {
	l.j.after(500*time.Millisecond, func() {
		if l.dead || l.done {
			return
		}
		l.flush(false)
		l.heartbeat()
	})
}

func (l *simLearner) flush(done bool) {
	if l.ctrl == nil {
		return
	}
	p := progress{Done: done}
	for _, e := range slices.Sorted(maps.Keys(l.report)) {
		p.Epochs = append(p.Epochs, *l.report[e])
	}
	clear(l.report)
	for _, key := range slices.SortedFunc(maps.Keys(l.news), cmpKey) {
		h := l.held[key]
		p.Delivered = append(p.Delivered, delivered{Chunk: h.Chunk, N: h.Delivered})
	}
	clear(l.news)
	l.j.send(l.ctrl, l, encode(tProgress, p))
}

// cmpKey orders chunks.
func cmpKey(a, b data.Chunk) int {
	return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.First, b.First), cmp.Compare(a.Count, b.Count))
}
