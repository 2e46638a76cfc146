package ps

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestClientCoreRandom drives a client core with seeded random event
// sequences against a model of its servers and network (randWorld):
// calls of a learner that follows the client's contract, messages
// delivered in order per connection, connections that break with
// messages in flight, late messages of replaced connections, servers
// restarted from an earlier checkpoint with a new life and with the
// learner gone, calls given up. After every event it checks:
//
//   - a mini-batch is reported delivered only once every shard has
//     stepped (accepted, ignored as a duplicate or given up) its push,
//     exactly once and in push order;
//   - on every connection, a push follows no pull, leave or snapshot of
//     its shard with a higher sequence, and those requests go in
//     increasing order, so that an answer acknowledges exactly the
//     pushes sent before it;
//   - a push reaches a shard only where the learner is a member (the
//     joins of a new connection come first), and a shard applies each
//     mini-batch at most once;
//   - every call ends once (refused calls at once, without sending).
//
// At the end the network heals: every call in progress must end (none
// hangs: a join, leave or snapshot lost with a connection goes again, a
// pull after a restart asks for weights the restored server has), then a
// Leave, and every push must have been reported delivered. The same seed
// gives the same outputs, bit for bit (every tenth seed runs twice).
func TestClientCoreRandom(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for _, proto := range []Protocol{Softsync, Hardsync} {
		for seed := range uint64(seeds) {
			trace := runRandWorld(t, proto, seed)
			if t.Failed() {
				return
			}
			if seed%10 != 0 {
				continue
			}
			if again := runRandWorld(t, proto, seed); again != trace {
				t.Fatalf("%v seed %d: a second run gave other outputs", proto, seed)
			}
		}
	}
}

// randWorld is a learner's client core, the servers it talks to (one per
// link: shards 0 and 1 on link 0, shard 2 on link 1) and the connections
// between them.
type randWorld struct {
	t     *testing.T
	what  string // the protocol and seed, for failures
	proto Protocol
	rng   *rand.Rand
	c     *ClientCore
	links []randLink
	shard []randShard
	ckpt  []randShard // the servers' last checkpoints, per shard
	// stepped holds, per shard, the push sequences it ever stepped, in
	// any life (a restart may lose a push acknowledged before it)
	stepped []map[uint64]bool
	lives   uint64 // lives handed out
	trace   strings.Builder

	w, grad []float32
	stamps  []uint64
	member  bool // the driver's view: pushes are allowed
	call    Call // a pull, join, leave or snapshot not ended yet (or an asynchronous pull not waited for)
	async   bool // call is an asynchronous pull
	ended   bool // the asynchronous pull has ended
	pushing int  // a push partly sent: the lo of its last part (0: none)
	pushedA bool // a push since the asynchronous pull started
	batch   uint64
	// pushSeqs maps each push's mini-batch to its sequence per shard;
	// pushedB lists the mini-batches in push order, deliveredB those
	// reported delivered.
	pushSeqs   map[uint64][]uint64
	pushedB    []uint64
	deliveredB []uint64
}

// randLink is one link: its connection's generation as the servers see
// it, the messages in flight each way, whether the core asked for a new
// connection, and the answers of its replaced connections not yet
// delivered (late).
type randLink struct {
	gen      int
	toServer []Msg
	toClient []randReply
	dial     bool
	late     []randReply
	// per shard of this connection: the highest pull, leave or
	// snapshot sequence received on it
	maxReq map[int]uint64
}

type randReply struct {
	gen, shard int
	r          Reply
}

// randShard is a server's model of one shard, with one learner.
type randShard struct {
	clock, life, lastSeq uint64
	active               bool
	seen                 map[uint64]bool // push sequences stepped (accepted, duplicate or given up)
	applied              map[uint64]int  // mini-batch → gradients applied
	waitSeq, waitMin     uint64          // a pull waiting for the clock (waitSeq 0: none)
}

func (s randShard) clone() randShard {
	s.seen, s.applied = maps.Clone(s.seen), maps.Clone(s.applied)
	s.waitSeq = 0 // waiting pulls are not in a checkpoint
	return s
}

func runRandWorld(t *testing.T, proto Protocol, seed uint64) string {
	cfg := twoLinks
	cfg.Protocol = proto
	c, err := NewClientCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wd := &randWorld{t: t, what: fmt.Sprintf("%v seed %d", proto, seed), proto: proto, rng: rand.New(rand.NewPCG(seed, 32)), c: c,
		links: make([]randLink, c.Links()), w: make([]float32, cfg.Total), grad: make([]float32, cfg.Total),
		stamps: make([]uint64, cfg.Shards), member: true, pushSeqs: map[uint64][]uint64{}}
	for li := range wd.links {
		wd.links[li].maxReq = map[int]uint64{}
	}
	for range cfg.Shards {
		wd.lives++
		wd.shard = append(wd.shard, randShard{life: wd.lives, active: true, seen: map[uint64]bool{}, applied: map[uint64]int{}})
		wd.stepped = append(wd.stepped, map[uint64]bool{})
	}
	for k := range wd.shard {
		wd.ckpt = append(wd.ckpt, wd.shard[k].clone())
	}
	for range 400 {
		if !wd.randomEvent() {
			return wd.trace.String()
		}
	}
	wd.heal()
	if wd.call != CallNone {
		wd.fail("a %v still in progress once the network healed", wd.call)
		return wd.trace.String()
	}
	if wd.pushing > 0 {
		wd.step("push, the rest", wd.c.Push(wd.grad, wd.batch, 0))
	}
	wd.startCall(CallLeave, false, wd.c.Leave())
	wd.heal()
	if wd.call != CallNone {
		wd.fail("the last leave still in progress once the network healed")
	}
	if !slices.Equal(wd.deliveredB, wd.pushedB) {
		wd.fail("delivered %v, pushed %v", wd.deliveredB, wd.pushedB)
	}
	return wd.trace.String()
}

func (wd *randWorld) fail(format string, args ...any) {
	wd.t.Helper()
	wd.t.Errorf("%s: "+format+"\ntrace:\n%s", append(append([]any{wd.what}, args...), lastLines(wd.trace.String(), 40))...)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// randomEvent makes one random event happen; false once the test failed.
func (wd *randWorld) randomEvent() bool {
	c := wd.c
	switch x := wd.rng.IntN(100); {
	case x < 30:
		wd.deliverToServer(wd.rng.IntN(len(wd.links)))
	case x < 60:
		wd.deliverToClient(wd.rng.IntN(len(wd.links)))
	case x < 63:
		li := wd.rng.IntN(len(wd.links))
		if l := &wd.links[li]; len(l.late) > 0 {
			lr := l.late[0]
			l.late = l.late[1:]
			wd.step(fmt.Sprintf("late answer on %d/%d", li, lr.gen), c.Recv(li, lr.gen, lr.shard, lr.r))
		}
	case x < 66:
		wd.breakLink(wd.rng.IntN(len(wd.links)))
	case x < 68:
		wd.restart(wd.rng.IntN(len(wd.links)))
	case x < 70:
		for k := range wd.shard {
			wd.ckpt[k] = wd.shard[k].clone()
		}
	case x < 76:
		for li := range wd.links {
			if wd.links[li].dial {
				wd.links[li].dial = false
				wd.step(fmt.Sprintf("link %d up", li), c.LinkUp(li))
				break
			}
		}
	case x < 78:
		if wd.call != CallNone && !wd.ended {
			wd.step("cancel", c.Cancel(errors.New("gave up")))
		}
	case x < 80:
		wd.refused()
	default:
		wd.randomCall()
	}
	return !wd.t.Failed()
}

// randomCall makes a call the client's contract allows now.
func (wd *randWorld) randomCall() {
	c := wd.c
	switch {
	case wd.pushing > 0:
		lo := wd.rng.IntN(wd.pushing)
		if wd.rng.IntN(2) == 0 {
			lo = 0
		}
		wd.pushing = lo
		wd.step(fmt.Sprintf("push %d from %d", wd.batch, lo), c.Push(wd.grad, wd.batch, lo))
		return
	case wd.async && wd.ended:
		wd.step("wait", c.WaitPull())
		wd.call, wd.async, wd.ended = CallNone, false, false
		return
	case wd.call != CallNone && !wd.async:
		return // the caller waits
	}
	x := wd.rng.IntN(10)
	switch {
	case x < 4 && wd.member && (wd.call == CallNone || !wd.pushedA):
		wd.batch++
		lo := 0
		if wd.rng.IntN(3) == 0 {
			lo = 1 + wd.rng.IntN(len(wd.grad)-1)
		}
		wd.pushSeqs[wd.batch] = nil
		wd.pushedB = append(wd.pushedB, wd.batch)
		wd.pushing, wd.pushedA = lo, true
		wd.step(fmt.Sprintf("push %d from %d", wd.batch, lo), c.Push(wd.grad, wd.batch, lo))
	case wd.call != CallNone:
	case x < 7:
		// Under hardsync an asynchronous pull waits for the round its
		// learner completes with a push: a member's only.
		async := wd.rng.IntN(3) == 0 && (wd.member || wd.proto == Softsync)
		wd.pushedA = false
		wd.startCall(CallPull, async, c.Pull(wd.w, async))
	case x < 8:
		wd.member = true
		wd.startCall(CallJoin, false, c.Join())
	case x < 9:
		wd.startCall(CallLeave, false, c.Leave())
	default:
		wd.startCall(CallSnapshot, false, c.Snapshot(-1, wd.w, wd.stamps))
	}
}

// refused makes a call the contract does not allow now, if there is
// one: it must end at once with ErrInvalidConfig, sending nothing.
func (wd *randWorld) refused() {
	c := wd.c
	var r ClientReady
	switch {
	case wd.pushing > 0:
		r = c.Pull(wd.w, false)
	case wd.call != CallNone && wd.async:
		r = c.Join()
	case wd.call != CallNone:
		r = c.Leave()
	default:
		r = c.Pull(make([]float32, 3), false)
	}
	wd.trace.WriteString("refused: " + strings.Join(coreOutputs(r), "; ") + "\n")
	if r.Done == CallNone || !errors.Is(r.Err, ErrInvalidConfig) || len(r.Sends) > 0 || len(r.Delivered) > 0 {
		wd.fail("a call the contract forbids: %v", coreOutputs(r))
	}
}

// startCall steps a call that waits for answers.
func (wd *randWorld) startCall(call Call, async bool, r ClientReady) {
	wd.call, wd.async, wd.ended = call, async, false
	wd.step(fmt.Sprintf("%v (async %v)", call, async), r)
}

// step records the outputs of an event and acts on them: messages go in
// flight, dials are noted, deliveries and ends checked.
func (wd *randWorld) step(what string, r ClientReady) {
	wd.t.Helper()
	wd.trace.WriteString(what + ": " + strings.Join(coreOutputs(r), "; ") + "\n")
	for _, s := range r.Sends {
		l := &wd.links[s.Link]
		if s.Gen != wd.c.Gen(s.Link) {
			wd.fail("a message for generation %d of link %d, at %d", s.Gen, s.Link, wd.c.Gen(s.Link))
		}
		if s.Msg.Type == MsgPush {
			if seqs := wd.pushSeqs[s.Msg.Batch]; seqs == nil {
				wd.pushSeqs[s.Msg.Batch] = make([]uint64, len(wd.shard))
			}
			seqs := wd.pushSeqs[s.Msg.Batch]
			if old := seqs[s.Msg.Shard]; old != 0 && old != s.Msg.Seq {
				wd.fail("push of mini-batch %d to shard %d resent as #%d, was #%d", s.Msg.Batch, s.Msg.Shard, s.Msg.Seq, old)
			}
			seqs[s.Msg.Shard] = s.Msg.Seq
		}
		l.toServer = append(l.toServer, s.Msg)
	}
	for _, li := range r.Dial {
		wd.links[li].dial = true
	}
	for _, b := range r.Delivered {
		seqs := wd.pushSeqs[b]
		for k := range wd.shard {
			if seqs == nil || seqs[k] == 0 || !wd.stepped[k][seqs[k]] {
				wd.fail("mini-batch %d reported delivered, shard %d has not stepped its push (#%v)", b, k, seqs)
			}
		}
		wd.deliveredB = append(wd.deliveredB, b)
	}
	if !slices.Equal(wd.deliveredB, wd.pushedB[:min(len(wd.deliveredB), len(wd.pushedB))]) {
		wd.fail("delivered %v, pushed %v", wd.deliveredB, wd.pushedB)
	}
	switch r.Done {
	case CallNone, CallPush, CallWaitPull:
		if r.Done == CallPush && r.Err != nil {
			wd.fail("a push failed: %v", r.Err)
		}
	default:
		if r.Done != wd.call || (wd.async && wd.ended) {
			wd.fail("%v ended, the call in progress is %v", r.Done, wd.call)
		}
		if r.Done == CallLeave {
			wd.member = false // a learner whose leave failed joins before it pushes again
		}
		if wd.async {
			wd.ended = true
		} else {
			wd.call = CallNone
		}
	}
}

// deliverToServer hands the server of link li the first message in
// flight to it.
func (wd *randWorld) deliverToServer(li int) {
	l := &wd.links[li]
	if len(l.toServer) == 0 {
		return
	}
	m := l.toServer[0]
	l.toServer = l.toServer[1:]
	sh := &wd.shard[m.Shard]
	reply := func(r Reply) { l.toClient = append(l.toClient, randReply{l.gen, m.Shard, r}) }
	switch m.Type {
	case MsgPush:
		if m.Seq < l.maxReq[m.Shard] {
			wd.fail("push #%d to shard %d after request #%d on one connection", m.Seq, m.Shard, l.maxReq[m.Shard])
		}
		switch {
		case !sh.active:
			wd.fail("push #%d to shard %d, where the learner is no member", m.Seq, m.Shard)
		case m.Seq <= sh.lastSeq:
			if !sh.seen[m.Seq] {
				wd.fail("push #%d to shard %d after #%d, never stepped", m.Seq, m.Shard, sh.lastSeq)
			}
		default:
			sh.lastSeq, sh.seen[m.Seq], wd.stepped[m.Shard][m.Seq] = m.Seq, true, true
			if m.Life == sh.life {
				sh.clock++
				if sh.applied[m.Batch]++; sh.applied[m.Batch] > 1 {
					wd.fail("shard %d applied mini-batch %d twice", m.Shard, m.Batch)
				}
				if sh.waitSeq != 0 && sh.clock >= sh.waitMin {
					reply(Reply{Seq: sh.waitSeq, Clock: sh.clock, Life: sh.life, Weights: make([]float32, 32)})
					sh.waitSeq = 0
				}
			}
		}
		return
	case MsgJoin:
		sh.active = true
		reply(Reply{Seq: m.Seq, Ack: true})
		return
	}
	if m.Seq <= l.maxReq[m.Shard] {
		wd.fail("%v #%d to shard %d after request #%d on one connection", m.Type, m.Seq, m.Shard, l.maxReq[m.Shard])
	}
	l.maxReq[m.Shard] = m.Seq
	switch m.Type {
	case MsgLeave:
		sh.active = false
		reply(Reply{Seq: m.Seq, Ack: true})
	case MsgSnapshot:
		reply(Reply{Seq: m.Seq, Clock: sh.clock, Life: sh.life, Weights: make([]float32, 32)})
	case MsgPull:
		if m.Clock > sh.clock {
			sh.waitSeq, sh.waitMin = m.Seq, m.Clock
			return
		}
		reply(Reply{Seq: m.Seq, Clock: sh.clock, Life: sh.life, Weights: make([]float32, 32)})
	}
}

// deliverToClient steps the core with the first answer in flight on
// link li.
func (wd *randWorld) deliverToClient(li int) {
	l := &wd.links[li]
	if len(l.toClient) == 0 {
		return
	}
	lr := l.toClient[0]
	l.toClient = l.toClient[1:]
	wd.step(fmt.Sprintf("answer of shard %d on %d/%d", lr.shard, li, lr.gen), wd.c.Recv(li, lr.gen, lr.shard, lr.r))
}

// breakLink breaks link li's connection, losing what is in flight on it
// but the answers, which may still arrive late (and be ignored).
func (wd *randWorld) breakLink(li int) {
	l := &wd.links[li]
	if l.dial {
		return
	}
	l.late = append(l.late, l.toClient...)
	l.toServer, l.toClient = nil, nil
	clear(l.maxReq)
	for _, k := range wd.c.LinkShards(li) {
		wd.shard[k].waitSeq = 0
	}
	gen := wd.c.Gen(li)
	l.gen = gen + 1
	wd.step(fmt.Sprintf("link %d/%d down", li, gen), wd.c.LinkDown(li, gen, errors.New("connection reset")))
	if !l.dial {
		wd.fail("a broken connection is not replaced")
	}
}

// restart restarts link li's server from its shards' last checkpoint,
// in a new life, with the learner gone: its connection breaks.
func (wd *randWorld) restart(li int) {
	if wd.links[li].dial {
		return
	}
	for _, k := range wd.c.LinkShards(li) {
		wd.lives++
		wd.shard[k] = wd.ckpt[k].clone()
		wd.shard[k].life, wd.shard[k].active = wd.lives, false
	}
	wd.trace.WriteString(fmt.Sprintf("server of link %d restarted\n", li))
	wd.breakLink(li)
}

// heal brings every link up and delivers every message until nothing
// moves: an asynchronous pull is waited for, and under hardsync pushed
// after first, as a learner does.
func (wd *randWorld) heal() {
	for range 10000 {
		moved := false
		for li := range wd.links {
			l := &wd.links[li]
			if l.dial {
				l.dial, moved = false, true
				wd.step(fmt.Sprintf("link %d up", li), wd.c.LinkUp(li))
			}
			for len(l.toServer) > 0 {
				wd.deliverToServer(li)
				moved = true
			}
			for len(l.toClient) > 0 {
				wd.deliverToClient(li)
				moved = true
			}
		}
		switch {
		case wd.t.Failed():
			return
		case wd.pushing > 0:
			wd.pushing = 0
			wd.step("push, the rest", wd.c.Push(wd.grad, wd.batch, 0))
			moved = true
		case wd.async && wd.ended:
			wd.step("wait", wd.c.WaitPull())
			wd.call, wd.async, wd.ended = CallNone, false, false
			moved = true
		case wd.async && !wd.pushedA && wd.proto == Hardsync && wd.member:
			wd.batch++
			wd.pushedB = append(wd.pushedB, wd.batch)
			wd.pushedA = true
			wd.step(fmt.Sprintf("push %d", wd.batch), wd.c.Push(wd.grad, wd.batch, 0))
			moved = true
		}
		if !moved {
			return
		}
	}
	wd.fail("the network never quietened")
}
