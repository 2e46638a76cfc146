package cluster

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/errcode"
)

// simServer is a shard-server role in the chaos simulator: RunServer's
// runtime over the simulated network, driving its serverCore with the
// coordinator and, as ps.Server does, a ps.ServerCore of its shards over
// the learners' connections (simHost).
type simServer struct {
	j       *simJob
	p       *simProc
	id      int
	mem     *simMember
	cfg     ServerConfig
	ln      *simListener
	ctrl    *simEnd
	host    *simHost
	core    *serverCore
	cause   error
	ended   bool
	waiting []*simWaiting // connections accepted before it serves
}

func (j *simJob) startServer(p *simProc, id int) {
	m := j.member(p, RoleServer, id)
	s := &simServer{j: j, p: p, id: id, mem: &simMember{p: p, m: m}}
	c := j.procConfig()
	s.cfg = c.serverConfig(*m, j.topo, id, j.layout, j.init)
	p.roles++
	j.servers[id] = s
	s.ln = p.listen(8000+10*id+p.life, s.accept)
	h := s.cfg.firstHello(s.ln.addr)
	s.mem.join(m, h, func(jd joined) {
		if jd.err != nil {
			s.end(jd.err)
			return
		}
		s.serve(jd, h)
	})
}

// serve starts the shards once the coordinator welcomed the server.
func (s *simServer) serve(jd joined, h hello) {
	j := s.j
	pcfg := s.cfg.psServer(jd.w)
	core, err := ps.NewServerCore[*simEnd](pcfg, j.newLife)
	if err != nil {
		err = fmt.Errorf("%s: %w", s.cfg.Process, err)
		sendCtrl(jd.e, tFail, failure{errcode.Encode(err)})
		s.end(err)
		return
	}
	s.host = &simHost{s: s, core: core, refusals: refusalLog(slog.New(slog.DiscardHandler), j.w.clock)}
	j.served(s, pcfg)
	s.core = newServerCore(s.host, h, s.cfg.Checkpoints != nil)
	s.take(jd.e)
	s.serveWaiting()
}

// take makes e the control connection (serverRole.commands).
func (s *simServer) take(e *simEnd) {
	s.ctrl = e
	e.recv = func(m any) {
		c := m.(simCtrl)
		s.carry(s.core.command(c.t, c.b))
	}
	e.lost = func(err error) {
		if s.ctrl == e {
			s.cause = err
			s.carry(s.core.lost(err))
		}
	}
}

// carry does what the role's core asked for.
func (s *simServer) carry(rd *serverReady) {
	if s.ended {
		return
	}
	if rd.rejoin {
		s.ctrl = nil
		s.mem.rejoin(s.core.rejoinHello, s.cause, func(jd joined) {
			if s.ended {
				if jd.e != nil {
					jd.e.close(s.p.w.now, errPeerGone)
				}
				return
			}
			if jd.err != nil {
				s.end(jd.err)
				return
			}
			s.take(jd.e)
			s.carry(s.core.rejoined())
		})
		return
	}
	for _, m := range rd.sends {
		if s.ctrl != nil {
			sendCtrl(s.ctrl, m.t, m.v)
		}
	}
	if v, ok := rd.write(); ok {
		s.p.after(s.j.w.between(time.Millisecond, 30*time.Millisecond), func() {
			rep := ckptReport{Version: v}
			sums, err := writeShards(s.cfg.Checkpoints, s.host, s.cfg.PS.Shards, v)
			if err != nil {
				rep.Wire = errcode.Encode(err)
			} else {
				rep.Files = sums
				s.j.checkpointed(s, v)
			}
			s.carry(s.core.checkpointed(rep))
		})
	}
	if rd.grace {
		s.p.after(stopWait, func() { s.carry(s.core.graceOver()) })
	}
	if rd.exit {
		s.end(rd.err)
	}
}

// stop is SIGTERM (ServerConfig.Stop): a checkpoint, then the end.
func (s *simServer) stop() {
	if s.core == nil {
		s.end(fmt.Errorf("%w: %s stopped before the job started", ErrInterrupted, s.cfg.Process))
		return
	}
	s.carry(s.core.stop())
}

// accept takes a learner's or the evaluator's connection (Server.serveConn):
// until the server serves (once welcomed), what arrives waits, as a
// listener's backlog and socket buffers keep it.
func (s *simServer) accept(e *simEnd) {
	if s.host == nil {
		w := &simWaiting{e: e}
		s.waiting = append(s.waiting, w)
		e.recv = func(m any) { w.msgs = append(w.msgs, m) }
		e.lost = func(error) { w.lost = true }
		return
	}
	e.recv = func(m any) { s.host.recv(e, m.(ps.Msg)) }
	e.lost = func(error) { s.host.lost(e) }
}

// simWaiting is a connection accepted before the server serves, and
// what arrived on it.
type simWaiting struct {
	e    *simEnd
	msgs []any
	lost bool
}

// serveWaiting takes the connections accepted before the server served.
func (s *simServer) serveWaiting() {
	for _, w := range s.waiting {
		s.accept(w.e)
		for _, m := range w.msgs {
			w.e.recv(m)
		}
		if w.lost {
			w.e.lost(nil)
		}
	}
	s.waiting = nil
}

func (s *simServer) end(err error) {
	if s.ended {
		return
	}
	s.ended = true
	s.ln.close()
	if s.ctrl != nil {
		s.ctrl.close(s.p.w.now, errPeerGone)
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", s.cfg.Process, err)
	}
	s.p.roleEnded(fmt.Sprintf("server %d", s.id), err)
}

// simHost is a shard server's parameter server in the simulator: a
// ps.ServerCore over the learners' connections, carried out as ps.Server
// carries it out (its counters, the final weights once every shard is
// final, OnLost's report of a lost learner), and the shardHost its role
// drives.
type simHost struct {
	s                             *simServer
	core                          *ps.ServerCore[*simEnd]
	refusals                      func(int, ps.Update)
	final                         int
	refused, notHosted, lostConns uint64
}

// recv takes a message of a learner or the evaluator on connection e
// (Server.dispatch and shardLoop.step).
func (h *simHost) recv(e *simEnd, m ps.Msg) {
	sh, why, err := h.core.Admit(m, e)
	if err != nil {
		switch why {
		case ps.RefusedShard:
			h.notHosted++
		case ps.RefusedID:
			h.refused++
		}
		d := ps.ShardSend[*simEnd]{To: e, Kind: ps.SendError, Learner: m.Learner, Seq: m.Seq, Err: err}
		e.send(simReply{shard: m.Shard, r: wireReply(&d, m.Shard, nil)})
		return
	}
	if m.Type == ps.MsgSnapshot {
		h.carry(sh, sh.Snapshot(m.Clock, m.Seq, m.Learner, e))
		return
	}
	before := sh.Core().Stats()
	rd := sh.Step(m, e)
	h.s.j.stepped(sh.Core(), before, m)
	h.carry(sh, rd)
}

// carry sends what a shard's call returned, each message copied as a
// transport copies it, and counts the shard final.
func (h *simHost) carry(sh *ps.ServerShard[*simEnd], rd *ps.ShardReady[*simEnd]) {
	k := sh.Core().Index()
	for i := range rd.Sends {
		d := &rd.Sends[i]
		d.To.send(simReply{shard: k, r: wireReply(d, k, sh.Core().Weights())})
	}
	for _, u := range rd.Updates {
		h.refusals(k, u)
	}
	if rd.Final {
		if h.final++; h.final == len(h.core.Shards()) {
			// Server.Final closes; the role's loop takes it next.
			h.s.p.after(0, func() { h.s.carry(h.s.core.finalNow()) })
		}
	}
}

// wireReply is shard's message d, whose current weights are w, as a
// learner's client reads it from the wire, copied as a transport copies
// it.
func wireReply(d *ps.ShardSend[*simEnd], shard int, w []float32) ps.Reply {
	r, ok := ps.ReplyOf(d.Msg(shard, w, rdma.Codec{}))
	if !ok {
		panic(fmt.Sprintf("a shard's message %+v has no reply form", d))
	}
	r.Weights = slices.Clone(r.Weights)
	return r
}

// lost takes the loss of a learner's connection: the learners bound to
// it are reported to the coordinator (ServerConfig.OnLost: it decides).
func (h *simHost) lost(e *simEnd) {
	gone := h.core.Lost(e)
	if len(gone) > 0 {
		h.lostConns++
	}
	for _, g := range gone {
		if c := h.s.ctrl; c != nil {
			sendCtrl(c, tLost, member{Learner: g.Learner, Incarnation: g.Incarnation})
		}
	}
}

// The shardHost the role's core drives.

func (h *simHost) Evict(learner, inc uint32) {
	if h.core.Evict(learner, inc) {
		for _, sh := range h.core.Shards() {
			h.carry(sh, sh.Evict(learner))
		}
	}
}

func (h *simHost) Finish() {
	for _, sh := range h.core.Shards() {
		h.carry(sh, sh.Finish())
	}
}

func (h *simHost) Stats() ps.ServerStats {
	st := ps.ServerStats{Refused: h.refused, NotHosted: h.notHosted, Lost: h.lostConns}
	for _, sh := range h.core.Shards() {
		st.Shards = append(st.Shards, sh.Core().Stats())
	}
	return st
}

func (h *simHost) Consumed() [][]ps.Interval {
	var out [][]ps.Interval
	for _, sh := range h.core.Shards() {
		out = append(out, sh.Core().Consumed())
	}
	return out
}

func (h *simHost) Checkpoint() ([]*ps.Checkpoint, []ps.Identity) {
	var cps []*ps.Checkpoint
	for _, sh := range h.core.Shards() {
		cps = append(cps, sh.Core().Checkpoint())
	}
	return cps, h.core.Identities()
}

func (h *simHost) Identities() []ps.Identity { return h.core.Identities() }

var _ shardHost = (*simHost)(nil)
