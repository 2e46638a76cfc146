package ps

import (
	"fmt"
	"slices"

	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/rdma"
)

// ServerCore is the deterministic core of a shard server: the decisions
// of Server, without its goroutines, locks and transport. It holds the
// shards the server runs (one ServerShard each) and the learners'
// identities, each bound to the connection it speaks on. P names a
// connection (Server's writer side of one; the simulator's connection),
// String gives its peer's address for errors; the zero P is none.
//
// The state is split so that a runtime can run the shards in parallel:
// Check reads nothing that changes, Bind, Evict, Lost and Identities
// touch the identities only (Server calls them under its lock), and each
// ServerShard is its shard's own (Server calls it on the shard's
// goroutine). Given the same calls, it produces the same outputs.
type ServerCore[P Peer] struct {
	cfg     ServerConfig
	shards  []*ServerShard[P]
	byShard map[int]*ServerShard[P]
	binds   map[uint32]*binding[P]
}

// Peer names a connection of a ServerCore.
type Peer interface {
	comparable
	String() string
}

// binding is the server's view of one learner's identity.
type binding[P Peer] struct {
	inc  uint32
	peer P    // zero: no live connection
	dead bool // incarnation inc was evicted
}

// NewServerCore validates cfg (its transport fields aside) and builds the
// shard cores: from cfg.Restore or cfg.Init, in the lives life draws (one
// per shard, in the order of cfg.Shards; see Shard.Life).
func NewServerCore[P Peer](cfg ServerConfig, life func() uint64) (*ServerCore[P], error) {
	if cfg.Shards == nil {
		for k := range cfg.PS.Shards {
			cfg.Shards = append(cfg.Shards, k)
		}
	}
	if len(cfg.Shards) == 0 {
		return nil, param.Fieldf("Shards", "no shard to run")
	}
	if cfg.Restore != nil && len(cfg.Restore) != len(cfg.Shards) {
		return nil, param.Fieldf("Restore", "%d checkpoints for %d shards", len(cfg.Restore), len(cfg.Shards))
	}
	s := &ServerCore[P]{cfg: cfg, byShard: map[int]*ServerShard[P]{}, binds: map[uint32]*binding[P]{}}
	for i, id := range cfg.Identities {
		if i < cfg.PS.Learners {
			s.binds[uint32(i)] = &binding[P]{inc: id.Incarnation, dead: id.Evicted}
		}
	}
	for i, k := range cfg.Shards {
		if s.byShard[k] != nil {
			return nil, param.Fieldf("Shards", "shard %d listed twice", k)
		}
		core, err := newServedShard(cfg, i, k, life())
		if err != nil {
			return nil, err
		}
		sh := &ServerShard[P]{core: core, snapshots: cfg.Snapshots, route: make([]P, cfg.PS.Learners), snaps: map[int]snapshot{}}
		if cfg.PS.DataSize > 0 {
			sh.perEpoch = uint64(cfg.PS.DataSize / cfg.PS.Batch)
		}
		// A shard restored with fresh counters (re-split onto another
		// layout) has consumed the gradients its samples count.
		st := core.Stats()
		sh.base = max(st.Samples/uint64(cfg.PS.Batch), st.Gradients+st.Dropped) - (st.Gradients + st.Dropped)
		sh.consumed = st.Gradients + st.Dropped + sh.base
		s.shards = append(s.shards, sh)
		s.byShard[k] = sh
	}
	return s, nil
}

// newServedShard makes shard k, the i-th of cfg.Shards, from its
// checkpoint or the initial vector; with cfg.Inactive no learner is
// active in it.
func newServedShard(cfg ServerConfig, i, k int, life uint64) (*Shard, error) {
	if cfg.Restore != nil {
		if cfg.Restore[i].Shard != k {
			return nil, param.Fieldf("Restore", "checkpoint %d is of shard %d, want %d", i, cfg.Restore[i].Shard, k)
		}
		cp := cfg.Restore[i]
		if cfg.Inactive {
			c := *cp
			c.Active = make([]bool, len(c.Active))
			cp = &c
		}
		return Restore(cfg.PS, cp, life)
	}
	core, err := NewShard(cfg.PS, k, cfg.Init, life)
	for l := range cfg.PS.Learners {
		if cfg.Inactive && err == nil {
			core.Step(Msg{Type: MsgLeave, Job: cfg.PS.Job, Shard: k, Learner: uint32(l)})
		}
	}
	return core, err
}

// Shards returns the server's shards, in the order of ServerConfig.Shards.
func (s *ServerCore[P]) Shards() []*ServerShard[P] { return s.shards }

// Refusal says why a shard server refuses a message; the runtime counts
// each kind in ServerStats.
type Refusal uint8

const (
	Admitted     Refusal = iota
	RefusedShard         // a shard the server does not run (ServerStats.NotHosted)
	RefusedFrame         // a frame that does not decode (ServerStats.BadFrames)
	RefusedID            // an identity that may not speak (ServerStats.Refused)
)

// Shard returns the ServerShard of shard k, or an error wrapping
// ErrNotHosted naming m, the message for it. It reads nothing that
// changes.
func (s *ServerCore[P]) Shard(k int, m string) (*ServerShard[P], error) {
	sh := s.byShard[k]
	if sh == nil {
		return nil, fmt.Errorf("%w: %s; this server runs shards %v", ErrNotHosted, m, s.cfg.Shards)
	}
	return sh, nil
}

// Speaker returns the learner and incarnation a message speaks for, and
// whether it speaks for a learner of the roster (push, pull, join or
// leave): only those are bound to connections; anything else (a snapshot
// request, an unknown learner or type) goes to the shard, whose core
// rejects and counts what is wrong.
func (s *ServerCore[P]) Speaker(m Msg) (learner, inc uint32, ok bool) {
	ok = m.Type >= MsgPush && m.Type <= MsgLeave && int64(m.Learner) < int64(s.cfg.PS.Learners)
	return m.Learner, Incarnation(m.Seq), ok
}

// Admit checks a message m received on p (as the shard server's readers
// do): its shard, then the identity of a message that speaks for a
// learner (Bind). It returns the shard's ServerShard, or the refusal and
// its error (to send back with m's Seq).
func (s *ServerCore[P]) Admit(m Msg, p P) (*ServerShard[P], Refusal, error) {
	what := describeMsg(rdma.Type(m.Type), m.Learner, uint32(m.Shard), m.Seq)
	sh, err := s.Shard(m.Shard, what)
	if err != nil {
		return nil, RefusedShard, err
	}
	if l, inc, ok := s.Speaker(m); ok {
		if _, err := s.Bind(l, inc, p); err != nil {
			return nil, RefusedID, fmt.Errorf("%s: %w", what, err)
		}
	}
	return sh, Admitted, nil
}

func (s *ServerCore[P]) bindingOf(learner uint32) *binding[P] {
	b := s.binds[learner]
	if b == nil {
		b = &binding[P]{}
		s.binds[learner] = b
	}
	return b
}

// Bind checks that p may speak for learner in incarnation inc and binds
// it (see Server, "Identity"); changed reports a change of the binding.
func (s *ServerCore[P]) Bind(learner, inc uint32, p P) (changed bool, err error) {
	b := s.bindingOf(learner)
	var none P
	switch {
	case inc < b.inc:
		return false, fmt.Errorf("%w: learner %d incarnation %d is over (latest %d)", ErrRefused, learner, inc, b.inc)
	case inc == b.inc && b.dead:
		return false, fmt.Errorf("%w: learner %d incarnation %d was removed from the job", ErrRefused, learner, inc)
	case inc == b.inc && b.peer != none && b.peer != p:
		return false, fmt.Errorf("%w: learner %d is bound to another connection (%s)", ErrRefused, learner, b.peer)
	}
	if b.inc != inc || b.dead || b.peer != p {
		b.inc, b.dead, b.peer = inc, false, p
		return true, nil
	}
	return false, nil
}

// Evict marks incarnation inc of learner as over and reports whether it
// did: not for a learner outside the roster or an incarnation older than
// the learner's latest. The caller then evicts it from every shard
// (ServerShard.Evict).
func (s *ServerCore[P]) Evict(learner, inc uint32) bool {
	if int64(learner) >= int64(s.cfg.PS.Learners) {
		return false
	}
	b := s.bindingOf(learner)
	if inc < b.inc {
		return false
	}
	var none P
	b.inc, b.dead, b.peer = inc, true, none
	return true
}

// Dead reports whether incarnation inc of learner is evicted and still
// its latest (no later incarnation was bound since).
func (s *ServerCore[P]) Dead(learner, inc uint32) bool {
	b := s.binds[learner]
	return b != nil && b.inc == inc && b.dead
}

// Member is a learner and an incarnation of it.
type Member struct{ Learner, Incarnation uint32 }

// Lost unbinds the learners bound to p, whose connection was lost, and
// returns them in learner order: the server's owner decides whether they
// left (ServerConfig.OnLost).
func (s *ServerCore[P]) Lost(p P) []Member {
	var gone []Member
	var none P
	for l, b := range s.binds {
		if b.peer == p && p != none {
			b.peer = none
			gone = append(gone, Member{l, b.inc})
		}
	}
	slices.SortFunc(gone, func(a, b Member) int { return int(a.Learner) - int(b.Learner) })
	return gone
}

// Identities returns the learners' identities, by learner id, for a
// checkpoint.
func (s *ServerCore[P]) Identities() []Identity {
	ids := make([]Identity, s.cfg.PS.Learners)
	for l, b := range s.binds {
		if int(l) < len(ids) {
			ids[l] = Identity{Incarnation: b.inc, Evicted: b.dead}
		}
	}
	return ids
}

// ServerShard is one shard of a ServerCore: the shard's core and what the
// server keeps for it: where each learner's weights go (the connection of
// its last accepted message on the shard; a rejected message never moves
// a route), the epoch snapshots and the snapshot requests waiting for
// them, and, once the job's data is done and every learner has left, the
// final weights. Its calls return the messages to send, in order, valid
// until the next call.
type ServerShard[P Peer] struct {
	core      *Shard
	snapshots bool
	route     []P    // where each learner's weights go
	perEpoch  uint64 // P, gradients per epoch; 0 without a data-set size
	consumed  uint64 // gradients accepted or dropped, as of the last Step
	base      uint64 // consumed before the shard was restored, beyond its counters
	snaps     map[int]snapshot
	waits     []snapWait[P] // snapshot requests for epochs not reached yet
	finishing bool          // the job's data is done
	final     bool
	finalW    []float32
	out       ShardReady[P]
}

// snapshot is a copy of the shard's weights at an epoch end.
type snapshot struct {
	clock uint64
	w     []float32
}

// snapWait is a snapshot request waiting for its epoch (0: the final
// weights).
type snapWait[P Peer] struct {
	epoch   int
	seq     uint64
	learner uint32
	p       P
}

// ShardReady is the output of one call of a ServerShard: the messages to
// send, in order, and the updates the shard applied or refused (see
// Ready). Final is set by the call that made the shard final.
type ShardReady[P Peer] struct {
	Sends   []ShardSend[P]
	Updates []Update
	Final   bool
}

// SendKind says what a ShardSend carries.
type SendKind uint8

const (
	SendWeights SendKind = iota + 1 // TypeWeights
	SendAck                         // TypeAck
	SendError                       // rdma.TypeError: a rejection
)

// ShardSend is a message of a shard to connection To. Weights replies carry
// either a snapshot's weights (Snapshot, which never change) or, without
// one, the shard's current weights, Core().Weights() when the message is
// made: the runtime may lend them to the transport until it next steps a
// message other than a pull (see Server). An error reply may be dropped
// when To's queue is full; the others may not.
type ShardSend[P Peer] struct {
	To       P
	Kind     SendKind
	Learner  uint32 // the learner it answers (an error: the learner the message claimed)
	Seq      uint64 // the Seq of the message it answers
	Clock    uint64 // the weights' stamp; an ack's or an error's: the shard clock
	Life     uint64
	Snapshot []float32
	Err      error
}

// Reply returns d as the shard core's reply (what a learner's client
// core receives), whose weights are w when d carries the shard's current
// weights: valid until the shard changes them.
func (d *ShardSend[P]) Reply(w []float32) Reply {
	r := Reply{To: d.Learner, Seq: d.Seq, Clock: d.Clock, Life: d.Life, Ack: d.Kind == SendAck, Err: d.Err}
	if d.Kind == SendWeights {
		r.Weights = w
		if d.Snapshot != nil {
			r.Weights = d.Snapshot
		}
	}
	return r
}

// Msg returns the wire message of d from shard, whose current weights
// are w (read for a weights reply without a snapshot; lent: see
// rdma.Msg.Borrow), weights encoded with codec.
func (d *ShardSend[P]) Msg(shard int, w []float32, codec rdma.Codec) *rdma.Msg {
	switch d.Kind {
	case SendError:
		return errorMsg(shard, d.Seq, d.Err)
	case SendAck:
		return ackMsg(d.Learner, shard, d.Clock, d.Seq)
	}
	if d.Snapshot != nil {
		w = d.Snapshot
	}
	return weightsMsg(d.Learner, shard, d.Clock, d.Life, d.Seq, w, codec)
}

// Core returns the shard's core.
func (h *ServerShard[P]) Core() *Shard { return h.core }

// Final reports whether the shard is final, and its final weights.
func (h *ServerShard[P]) Final() (bool, []float32) { return h.final, h.finalW }

func (h *ServerShard[P]) reset() *ShardReady[P] {
	h.out.Sends, h.out.Updates, h.out.Final = h.out.Sends[:0], nil, false
	return &h.out
}

func (h *ServerShard[P]) send(d ShardSend[P]) { h.out.Sends = append(h.out.Sends, d) }

// reject queues an error reply to p answering seq.
func (h *ServerShard[P]) reject(p P, learner uint32, seq uint64, err error) {
	h.send(ShardSend[P]{To: p, Kind: SendError, Learner: learner, Seq: seq, Clock: h.core.clock, Life: h.core.life, Err: err})
}

// Step steps a learner's message m (not a snapshot request), received on
// connection from. The connection becomes the learner's route, unless
// the message is rejected or is the learner's leave.
func (h *ServerShard[P]) Step(m Msg, from P) *ShardReady[P] {
	out := h.reset()
	var prev, none P
	known := int64(m.Learner) < int64(len(h.route))
	if known {
		prev, h.route[m.Learner] = h.route[m.Learner], from
	}
	r := h.core.Step(m)
	switch {
	case !known:
	case rejected(r):
		h.route[m.Learner] = prev
	case m.Type == MsgLeave:
		h.route[m.Learner] = none
	}
	h.deliver(r, from)
	return out
}

// Evict steps the leave the server's owner decided for learner (nothing
// for a learner that is not active). A pull of the learner that was
// waiting is refused, so that a learner still alive stops instead of
// waiting for ever (the coordinator that removed it may have died before
// telling it).
func (h *ServerShard[P]) Evict(learner uint32) *ShardReady[P] {
	out := h.reset()
	if !h.core.Member(learner) {
		return out
	}
	var none P
	seq, waiting := h.core.PullWaiting(learner)
	p := h.route[learner]
	h.route[learner] = none
	r := h.core.Step(Msg{Type: MsgLeave, Job: h.core.cfg.Job, Shard: h.core.Index(), Learner: learner})
	h.deliver(r, none)
	if waiting && p != none {
		h.reject(p, learner, seq, fmt.Errorf("ps shard %d: pull from learner %d (seq %d): %w: the learner was removed from the job", h.core.Index(), learner, seq, ErrRefused))
	}
	return out
}

// Finish says that the job's data is done: once no learner is active the
// shard is final.
func (h *ServerShard[P]) Finish() *ShardReady[P] {
	out := h.reset()
	h.finishing = true
	h.checkFinal()
	return out
}

// rejected reports whether the message of the Step that returned r was
// rejected: its error reply is the only error a Step produces.
func rejected(r Ready) bool {
	for _, rep := range r.Replies {
		if rep.Err != nil {
			return true
		}
	}
	return false
}

// deliver queues the replies of one Step (errors and acknowledgements to
// from, the connection of the message; none for a leave the server
// decided, which nobody waits for; weights to their learner's route),
// reports its updates, takes the epoch-end snapshot and checks whether
// the shard became final.
func (h *ServerShard[P]) deliver(r Ready, from P) {
	var none P
	for _, rep := range r.Replies {
		switch {
		case rep.Err != nil:
			if from != none {
				h.send(ShardSend[P]{To: from, Kind: SendError, Learner: rep.To, Seq: rep.Seq, Clock: rep.Clock, Life: rep.Life, Err: rep.Err})
			}
		case rep.Ack:
			if from != none {
				h.send(ShardSend[P]{To: from, Kind: SendAck, Learner: rep.To, Seq: rep.Seq, Clock: rep.Clock, Life: rep.Life})
			}
		default:
			if p := h.route[rep.To]; p != none {
				h.send(ShardSend[P]{To: p, Kind: SendWeights, Learner: rep.To, Seq: rep.Seq, Clock: rep.Clock, Life: rep.Life})
			}
		}
	}
	h.out.Updates = r.Updates
	st := &h.core.stats
	if n := st.Gradients + st.Dropped + h.base; n != h.consumed {
		h.consumed = n
		if h.perEpoch > 0 && n%h.perEpoch == 0 && h.snapshots {
			e := int(n / h.perEpoch)
			h.snaps[e] = snapshot{clock: h.core.Clock(), w: slices.Clone(h.core.Weights())}
			h.answerWaits()
		}
	}
	h.checkFinal()
}

// checkFinal makes the shard final once the data is done and no learner
// is active.
func (h *ServerShard[P]) checkFinal() {
	if h.final || !h.finishing || h.core.Active() > 0 {
		return
	}
	h.final, h.finalW, h.out.Final = true, slices.Clone(h.core.Weights()), true
	h.snaps[0] = snapshot{clock: h.core.Clock(), w: h.finalW}
	h.answerWaits()
}

// Snapshot takes an evaluator's snapshot request (rdma type TypeSnapshot)
// of epoch (its Timestamp: SnapshotNow, 0 for the final weights, or an
// epoch end), answering seq of learner on p: now, or once its epoch is
// reached.
func (h *ServerShard[P]) Snapshot(epoch uint64, seq uint64, learner uint32, p P) *ShardReady[P] {
	out := h.reset()
	if epoch == SnapshotNow {
		h.send(ShardSend[P]{To: p, Kind: SendWeights, Learner: learner, Seq: seq, Clock: h.core.Clock(), Life: h.core.Life()})
		return out
	}
	w := snapWait[P]{epoch: int(epoch), seq: seq, learner: learner, p: p}
	if !h.snapshots && w.epoch > 0 {
		h.reject(p, learner, seq, errSnapshotsOff)
		return out
	}
	for e := range h.snaps {
		if e > 0 && (w.epoch == 0 || e < w.epoch) {
			delete(h.snaps, e) // the evaluator is done with it
		}
	}
	h.waits = append(h.waits, w)
	h.answerWaits()
	return out
}

// answerWaits answers the waiting snapshot requests whose epoch has come.
// An epoch's snapshot is kept after it was sent, for an evaluator that
// restarts before it reported that epoch and asks again, until a later
// epoch or the final weights are asked for. Once the shard is final, an
// epoch it never reached (gradients lost with a restarted server), or
// whose snapshot was dropped, is answered with the final weights.
func (h *ServerShard[P]) answerWaits() {
	h.waits = slices.DeleteFunc(h.waits, func(w snapWait[P]) bool {
		sn, ok := h.snaps[w.epoch]
		if !ok && h.final {
			sn, ok = h.snaps[0], true
		}
		if !ok {
			return false
		}
		h.send(ShardSend[P]{To: w.p, Kind: SendWeights, Learner: w.learner, Seq: w.seq, Clock: sn.clock, Life: h.core.Life(), Snapshot: sn.w})
		return true
	})
}
