package ps

import (
	"errors"
	"fmt"
	"slices"

	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/rdma"
)

// stampLife is the stamp and the shard's life of weights.
type stampLife struct{ stamp, life uint64 }

// ClientCore is the deterministic protocol core of a learner's side of
// the parameter server: its stamps, sequence numbers, unacknowledged
// pushes and their resends, the pull clock, the requests it waits for
// and their answers, membership and the delivery of mini-batches. It
// has no goroutines, clocks, locks or I/O: every input is an event (a
// method: a call of the learner, a message received on a link, a link
// broken, replaced or given up) and every output is in the ClientReady
// the event returns, the same outputs for the same events, bit for bit.
// Client runs it over rdma connections; a simulator runs it over a
// simulated network (see the package doc, "The client core").
//
// A link is one connection to a server and the shards it carries
// (ClientCoreConfig.Links); each replacement of its connection is a new
// generation, counted from 0. It is not safe for concurrent use.
type ClientCore struct {
	cfg    ClientCoreConfig
	ranges []Range
	links  []coreLink
	n      uint64   // messages sent in this incarnation
	stamps []uint64 // per shard, the stamp of the weights last pulled
	lives  []uint64 // per shard, the shard's life those weights come from
	gens   []int    // per shard, the generation of its link those stamps come from
	pushed bool     // a push was completed since the last pull
	// pushedOn is, per shard, the stamp and life of the last push's
	// weights: a pull after a push on the current ones asks, under
	// hardsync, for the next round.
	pushedOn []stampLife
	member   bool // the learner is a member: a new connection joins it again first
	// started: a learner's call was made, so member is known (an
	// evaluator, which only asks for snapshots, never joins).
	started bool
	// departed is, per shard, whether it acknowledged the learner's
	// Leave: a connection replaced during the Leave joins the learner
	// again only to the shards that have not.
	departed []bool
	call     call
	// rejections are the rejections of earlier messages received since
	// the last call that waits for answers ended; the next one reports
	// them.
	rejections []error
	partial    partialPush
	// unacked holds, per shard, its pushes not acknowledged yet, in
	// sequence order (clientpush.go).
	unacked [][]unacked
	sels    [][]byte // selection buffers of acknowledged TopK pushes, for reuse
	// undelivered holds, from push number first on, each push's
	// mini-batch and the shards that have not acknowledged it.
	undelivered []delivery
	first       uint64
	pushes      []uint64 // per shard, gradients the learner pushed
	// feedback is, per shard, the error-feedback residual of the pushes
	// (TopK): optimizer state of the learner, kept across reconnections.
	feedback []rdma.Feedback
	enc      *rdma.Encoder // selects TopK pushes
	ready    ClientReady
}

// ClientCoreConfig configures a ClientCore: the protocol fields of a
// ClientConfig, and the links.
type ClientCoreConfig struct {
	Learner     uint32     // this learner's id
	Incarnation uint32     // its life, ≤ MaxIncarnation: the high part of every sequence number
	Protocol    Protocol   // decides the minimum clock of pulls
	Total       int        // length of the flat vector
	Shards      int        // number of shards
	Codec       rdma.Codec // encoding of the gradients it pushes (zero value: none)
	// Links gives, per shard, the link that carries it: the shards of
	// one server share one connection. Links are numbered 0 … L−1, each
	// number used. nil: one link per shard, link k carrying shard k.
	Links []int
	// Reconnect: a broken link is replaced (ClientReady.Dial); otherwise
	// it is dead from then on, and so is every call that needs it.
	Reconnect bool
}

// coreLink is the core's view of one link.
type coreLink struct {
	shards []int
	gen    int   // the generation of its connection
	up     bool  // false: broken, waiting for LinkUp or LinkDead
	cause  error // why it broke last
	dead   error // given up: every call that needs it fails with this
	// replaced counts the replacements since a message was last
	// received on it (maxReplaced).
	replaced int
}

// maxReplaced is how many times in a row a link may be replaced without
// a message received on it before the core gives it up: a server that
// takes connections and drops them at once must not keep a learner
// redialling for ever.
const maxReplaced = 8

// Call names a call of the learner in ClientReady.Done.
type Call uint8

const (
	CallNone     Call = iota // no call ended
	CallPull                 // Pull (synchronous or asynchronous)
	CallPush                 // Push (a whole push or a part of one)
	CallJoin                 // Join
	CallLeave                // Leave
	CallSnapshot             // Snapshot
	CallWaitPull             // WaitPull
)

var callNames = [...]string{CallNone: "none", CallPull: "pull", CallPush: "push", CallJoin: "join", CallLeave: "leave",
	CallSnapshot: "snapshot", CallWaitPull: "wait for the pull"}

// String returns the call's name, as errors use it.
func (c Call) String() string {
	if int(c) < len(callNames) {
		return callNames[c]
	}
	return fmt.Sprintf("Call(%d)", uint8(c))
}

// ClientReady is the output of one event of a ClientCore. Its slices,
// and the messages' gradients and selections, are valid until the next
// event: a runtime hands them to its transport (or copies them) first.
type ClientReady struct {
	// Sends are the messages to send, in order. Each names its link and
	// the generation of the link's connection it was made for: a
	// message for an older generation is not sent (its connection is
	// gone, and what the new one needs the core sends on it itself).
	// On every connection, the messages go in the order they appear
	// here, across events.
	Sends []Send
	// Dial lists the links whose connection broke and is to be
	// replaced: the runtime connects again and steps LinkUp, or
	// LinkDead if it cannot.
	Dial []int
	// Delivered lists the mini-batches (Push's batch, when not 0) of
	// the pushes every shard has acknowledged, in push order.
	Delivered []uint64
	// Done names the call that ended with this event: the call the
	// event made (a push, a WaitPull, any call refused at once), or the
	// call in progress (a pull, join, leave or snapshot, once every
	// answer is in, or at its first failure); CallNone if none. Err is
	// its error.
	Done Call
	Err  error
}

// Send is one message for a link.
type Send struct {
	Link, Gen int
	// Msg is the message, without its Job (the transport stamps it). A
	// push's Grad is the caller's gradient (see Push), lent, not a copy.
	Msg Msg
	// Sel is, for a push under TopK (ClientCoreConfig.Codec), the
	// selection it carries: k uint32 indices into the shard's range,
	// then k float32 values, little-endian (the codec's wire form,
	// docs/wire.md); the payload is those elements, zero elsewhere.
	// Msg.Grad is nil then.
	Sel []byte
}

// call is the call in progress that waits for every shard's answer (a
// pull, join, leave or snapshot), or an asynchronous pull that has ended
// and waits for WaitPull.
type call struct {
	kind    Call // CallNone: none
	async   bool // an asynchronous pull (PullAsync)
	over    bool // the asynchronous pull has ended, with err
	err     error
	next    bool // a pull asks, under hardsync, for the next round's weights
	epoch   int  // a snapshot's epoch
	w       []float32
	waiting []bool   // per shard: its answer is awaited
	asked   []uint64 // per shard, the sequence of the request whose answer is awaited (0: not sent yet)
	got     []bool   // per shard: answered (a pull's stamps below are new)
	left    int      // shards waited for
	stamps  []uint64 // the answers' stamps: pulled, or a snapshot's caller's
	pulled  []uint64 // a pull's stamps
	lives   []uint64 // a pull's: their shards' lives
	gens    []int    // a pull's: the generations of the links they came on
}

// NewClientCore returns the core of a learner's client. Errors are
// *param.FieldError values wrapping ErrInvalidConfig.
func NewClientCore(cfg ClientCoreConfig) (*ClientCore, error) {
	if err := cfg.Codec.Validate(); err != nil {
		return nil, err
	}
	if cfg.Incarnation > MaxIncarnation {
		return nil, param.Fieldf("Incarnation", "%d is above the highest a learner can have, %d", cfg.Incarnation, MaxIncarnation)
	}
	rs, err := Ranges(cfg.Total, cfg.Shards)
	if err != nil {
		return nil, err
	}
	if cfg.Links == nil {
		cfg.Links = make([]int, cfg.Shards)
		for k := range cfg.Links {
			cfg.Links[k] = k
		}
	}
	if len(cfg.Links) != cfg.Shards {
		return nil, param.Fieldf("Links", "%d links for %d shards", len(cfg.Links), cfg.Shards)
	}
	cfg.Links = slices.Clone(cfg.Links)
	S := cfg.Shards
	c := &ClientCore{cfg: cfg, ranges: rs, stamps: make([]uint64, S), lives: make([]uint64, S), gens: make([]int, S),
		departed: make([]bool, S), pushedOn: make([]stampLife, S), unacked: make([][]unacked, S), pushes: make([]uint64, S), feedback: make([]rdma.Feedback, S),
		call: call{waiting: make([]bool, S), asked: make([]uint64, S), got: make([]bool, S),
			pulled: make([]uint64, S), lives: make([]uint64, S), gens: make([]int, S)}}
	for k, li := range cfg.Links {
		if li < 0 || li >= S {
			return nil, param.Fieldf("Links", "shard %d on link %d, outside [0, %d)", k, li, S)
		}
		for len(c.links) <= li {
			c.links = append(c.links, coreLink{up: true})
		}
		c.links[li].shards = append(c.links[li].shards, k)
	}
	for li := range c.links {
		if len(c.links[li].shards) == 0 {
			return nil, param.Fieldf("Links", "link %d carries no shard", li)
		}
	}
	return c, nil
}

// Links returns the number of links.
func (c *ClientCore) Links() int { return len(c.links) }

// LinkShards returns the shards link carries, in order.
func (c *ClientCore) LinkShards(link int) []int { return slices.Clone(c.links[link].shards) }

// Gen returns the generation of link's connection.
func (c *ClientCore) Gen(link int) int { return c.links[link].gen }

// LinkErr returns the error link was given up with, or nil.
func (c *ClientCore) LinkErr(link int) error { return c.links[link].dead }

// Stamps returns, per shard, the stamp of the weights last pulled: those
// the next push carries.
func (c *ClientCore) Stamps() []uint64 { return slices.Clone(c.stamps) }

// Pushes returns, per shard, the gradients the learner pushed (resends
// are not counted again).
func (c *ClientCore) Pushes() []uint64 { return slices.Clone(c.pushes) }

// Awaits reports whether the call in progress waits for an answer on
// link: a runtime receives on it while it does.
func (c *ClientCore) Awaits(link int) bool {
	if c.call.kind == CallNone || c.call.over {
		return false
	}
	for _, k := range c.links[link].shards {
		if c.call.waiting[k] {
			return true
		}
	}
	return false
}

// Place returns where the weights of shard's answer to request seq, of
// elems floats, go: shard's range of the vector the pull or snapshot in
// progress fills, when that answer is awaited; nil otherwise. A runtime
// receives them there (rdma.Placement), and Recv then copies nothing.
func (c *ClientCore) Place(shard int, seq uint64, elems int) []float32 {
	a := &c.call
	if (a.kind != CallPull && a.kind != CallSnapshot) || a.over || shard < 0 || shard >= len(a.asked) ||
		!a.waiting[shard] || seq == 0 || seq != a.asked[shard] || elems != c.ranges[shard].Len() {
		return nil
	}
	r := c.ranges[shard]
	return a.w[r.Lo:r.Hi]
}

// reset empties the ready batch for a new event.
func (c *ClientCore) reset() {
	c.ready.Sends = c.ready.Sends[:0]
	c.ready.Dial = c.ready.Dial[:0]
	c.ready.Delivered = c.ready.Delivered[:0]
	c.ready.Done, c.ready.Err = CallNone, nil
}

// done ends the event's own call with err.
func (c *ClientCore) done(call Call, err error) ClientReady {
	c.ready.Done, c.ready.Err = call, err
	return c.ready
}

// errorf returns an error of the client, naming the learner.
func (c *ClientCore) errorf(format string, args ...any) error {
	return fmt.Errorf("ps client %d: "+format, append([]any{c.cfg.Learner}, args...)...)
}

// nextSeq returns the sequence number of the client's next message, or
// ErrSeqExhausted.
func (c *ClientCore) nextSeq() (uint64, error) {
	if c.n >= MaxMessages {
		return 0, c.errorf("incarnation %d has sent %d messages: %w", c.cfg.Incarnation, uint64(MaxMessages), ErrSeqExhausted)
	}
	c.n++
	return Seq(c.cfg.Incarnation, c.n), nil
}

// idle returns an error naming what if a call is in progress or a push
// is partly sent.
func (c *ClientCore) idle(what Call) error {
	switch {
	case c.call.kind == CallPull && c.call.async:
		return c.errorf("%v while an asynchronous pull is in flight: %w", what, ErrInvalidConfig)
	case c.call.kind != CallNone:
		return c.errorf("%v while a %v is in progress: %w", what, c.call.kind, ErrInvalidConfig)
	}
	return c.pushing(what)
}

// pushing returns an error naming what if a push is partly sent.
func (c *ClientCore) pushing(what Call) error {
	if c.partial.next > 0 {
		return c.errorf("%v while the push of mini-batch %d is partly sent: %w", what, c.partial.batch, ErrInvalidConfig)
	}
	return nil
}

// deadLink returns the error of the first link of shards given up.
func (c *ClientCore) deadLink(what Call, shards func(k int) bool) error {
	for li := range c.links {
		l := &c.links[li]
		if l.dead != nil && slices.ContainsFunc(l.shards, shards) {
			return c.errorf("%v to shards %v: %w", what, l.shards, l.dead)
		}
	}
	return nil
}

// learner records that the client is a learner's: at its first pull or
// push the learner is a member (every learner is, at the start of a
// job), so that a connection replaced from then on joins it again. A
// connection replaced before then (its server may have restarted
// without the learner) joins it now, before anything else is sent on it.
func (c *ClientCore) learner() {
	if c.started {
		return
	}
	c.started, c.member = true, true
	for li := range c.links {
		if l := &c.links[li]; l.up && l.gen > 0 {
			c.join(li)
		}
	}
}

// join sends a join to each shard of link li that has not acknowledged
// the Leave in progress; its answer answers no request.
func (c *ClientCore) join(li int) bool {
	l := &c.links[li]
	for _, k := range l.shards {
		if c.departed[k] {
			continue
		}
		seq, err := c.nextSeq()
		if err != nil {
			c.endIfWaiting(li, err)
			return false
		}
		c.ready.Sends = append(c.ready.Sends, Send{Link: li, Gen: l.gen, Msg: Msg{Type: MsgJoin, Shard: k, Learner: c.cfg.Learner, Seq: seq}})
	}
	return true
}

// Pull starts a pull of every shard's weights into w (Total floats):
// each shard's answer is written into its range as it arrives (Recv,
// unless the runtime received it there: Place). The pull ends (Done:
// CallPull) once every shard has answered, or at the first failure:
// the rejection of a request, weights of the wrong length, a link given
// up, Cancel. Rejections of earlier messages received meanwhile end it
// too, joined and wrapping ErrRejected, once every answer is in.
//
// A synchronous pull makes the stamps of the weights it received
// current when it ends (the stamps the next push carries); an
// asynchronous one (async: PullAsync) keeps them until WaitPull, so that
// a push made meanwhile carries the stamps of the weights its gradient
// was computed on. Minimum clocks: a shard's current stamp, or, under
// hardsync, that stamp + 1 after a push or for an asynchronous pull (the
// round must complete); 0 for a shard whose stamp came from a connection
// since replaced (its restarted server's clock may be behind the stamp).
// No other call may start until the pull has ended, and, if
// asynchronous, WaitPull was stepped; pushes may.
func (c *ClientCore) Pull(w []float32, async bool) ClientReady {
	c.reset()
	switch {
	case len(w) != c.cfg.Total:
		return c.done(CallPull, c.errorf("Pull into %d floats, vector has %d: %w", len(w), c.cfg.Total, ErrInvalidConfig))
	case c.call.kind == CallPull && c.call.async:
		return c.done(CallPull, c.errorf("PullAsync while a pull is in flight: %w", ErrInvalidConfig))
	}
	if err := c.idle(CallPull); err != nil {
		return c.done(CallPull, err)
	}
	if err := c.deadLink(CallPull, func(int) bool { return true }); err != nil {
		return c.done(CallPull, err)
	}
	c.learner()
	c.start(CallPull, w)
	c.call.async, c.call.next = async, c.pushed || async
	c.pushed = false
	c.askAll()
	return c.ready
}

// WaitPull ends an asynchronous pull that has ended (Done: CallPull was
// returned): the stamps of the weights it received become current. Its
// Done is CallWaitPull, with the pull's error. With no asynchronous pull
// in flight it ends at once without error.
func (c *ClientCore) WaitPull() ClientReady {
	c.reset()
	a := &c.call
	if a.kind != CallPull || !a.async {
		return c.done(CallWaitPull, nil)
	}
	if err := c.pushing(CallWaitPull); err != nil {
		return c.done(CallWaitPull, err)
	}
	if !a.over {
		return c.done(CallWaitPull, c.errorf("WaitPull before the pull has ended: %w", ErrInvalidConfig))
	}
	err := a.err
	c.adopt()
	c.clearCall()
	return c.done(CallWaitPull, err)
}

// Join announces the learner to every shard again (after a Leave or a
// reconnect) and ends once every shard has acknowledged it, or at the
// rejection of a join (rejections of earlier messages are reported as by
// Pull).
func (c *ClientCore) Join() ClientReady {
	c.reset()
	if err := c.idle(CallJoin); err != nil {
		return c.done(CallJoin, err)
	}
	if err := c.deadLink(CallJoin, func(int) bool { return true }); err != nil {
		return c.done(CallJoin, err)
	}
	c.started, c.member = true, true
	clear(c.departed)
	c.start(CallJoin, nil)
	c.askAll()
	return c.ready
}

// Leave tells every shard that the learner is done, or pauses (a later
// Join resumes it), and ends once every shard has acknowledged it: shard
// k's acknowledgement comes after shard k stepped every message sent
// before it (see the package doc, "Runtime"), so once a Leave has ended
// without error every push is delivered. The learner is then no member:
// a connection replaced from then on joins it to no shard, until Join.
func (c *ClientCore) Leave() ClientReady {
	c.reset()
	if err := c.idle(CallLeave); err != nil {
		return c.done(CallLeave, err)
	}
	if err := c.deadLink(CallLeave, func(int) bool { return true }); err != nil {
		return c.done(CallLeave, err)
	}
	c.started, c.pushed = true, false
	c.start(CallLeave, nil)
	c.askAll()
	return c.ready
}

// Snapshot asks every shard for its weights at the end of epoch (≥ 1;
// 0: the final weights; −1: the weights as they are now) into w, each
// shard's stamp into stamps (one per shard); it ends as a pull does. It
// binds no learner identity: an evaluator's client never joins.
func (c *ClientCore) Snapshot(epoch int, w []float32, stamps []uint64) ClientReady {
	c.reset()
	switch {
	case len(w) != c.cfg.Total:
		return c.done(CallSnapshot, c.errorf("Snapshot into %d floats, vector has %d: %w", len(w), c.cfg.Total, ErrInvalidConfig))
	case len(stamps) != c.cfg.Shards:
		return c.done(CallSnapshot, c.errorf("Snapshot's stamps for %d shards, there are %d: %w", len(stamps), c.cfg.Shards, ErrInvalidConfig))
	}
	if err := c.idle(CallSnapshot); err != nil {
		return c.done(CallSnapshot, err)
	}
	if err := c.deadLink(CallSnapshot, func(int) bool { return true }); err != nil {
		return c.done(CallSnapshot, err)
	}
	c.start(CallSnapshot, w)
	c.call.epoch, c.call.stamps = epoch, stamps
	c.askAll()
	return c.ready
}

// Cancel ends the call in progress with err (its caller gave up: a
// context ended, a receive failed); answers that arrive for it later
// are ignored. A pull's stamps received so far become current as at its
// end. Nothing happens if no call is in progress.
func (c *ClientCore) Cancel(err error) ClientReady {
	c.reset()
	if c.call.kind != CallNone && !c.call.over {
		c.end(err)
	}
	return c.ready
}

// Close ends the client: every link is given up with an error matching
// rdma.ErrClosed, the call in progress ends with it, and nothing is sent
// again.
func (c *ClientCore) Close() ClientReady {
	c.reset()
	for li := range c.links {
		if l := &c.links[li]; l.dead == nil {
			l.dead, l.up = errClientClosed, false
		}
	}
	c.partial.next = 0
	if c.call.kind != CallNone && !c.call.over {
		c.end(c.errorf("%v: %w", c.call.kind, errClientClosed))
	}
	return c.ready
}

// errClientClosed is the error of every use of a client after Close.
var errClientClosed = fmt.Errorf("ps client closed: %w", rdma.ErrClosed)

// start makes a call of kind that waits for every shard's answer the
// call in progress.
func (c *ClientCore) start(kind Call, w []float32) {
	a := &c.call
	a.kind, a.async, a.over, a.err, a.next, a.epoch, a.w, a.stamps = kind, false, false, nil, false, 0, w, nil
	clear(a.got)
	for k := range a.waiting {
		a.waiting[k], a.asked[k] = true, 0
	}
	a.left = len(a.waiting)
	if kind == CallPull {
		a.stamps = a.pulled
	}
}

// clearCall makes the client idle, dropping the reference to the
// caller's vector.
func (c *ClientCore) clearCall() {
	a := &c.call
	a.kind, a.async, a.over, a.err, a.w, a.stamps, a.left = CallNone, false, false, nil, nil, nil, 0
	clear(a.waiting)
	clear(a.asked)
}

// askAll sends the call's request to every shard whose link is up; the
// others are asked when their link comes up again (LinkUp).
func (c *ClientCore) askAll() {
	for li := range c.links {
		if c.links[li].up {
			for _, k := range c.links[li].shards {
				if !c.ask(k) {
					return
				}
			}
		}
	}
}

// ask sends shard k the request of the call in progress, with a new
// sequence number; false if the call ended (the sequence numbers are
// used up).
func (c *ClientCore) ask(k int) bool {
	a := &c.call
	seq, err := c.nextSeq()
	if err != nil {
		c.end(err)
		return false
	}
	a.asked[k] = seq
	li := c.cfg.Links[k]
	m := Msg{Shard: k, Learner: c.cfg.Learner, Seq: seq}
	switch a.kind {
	case CallPull:
		m.Type = MsgPull
		if c.gens[k] == c.links[li].gen {
			m.Clock = c.stamps[k]
			if a.next && c.cfg.Protocol == Hardsync && (a.async || c.pushedOn[k] == stampLife{c.stamps[k], c.lives[k]}) {
				m.Clock++
			}
		}
	case CallJoin:
		m.Type = MsgJoin
	case CallLeave:
		m.Type = MsgLeave
	case CallSnapshot:
		m.Type, m.Clock = MsgSnapshot, uint64(a.epoch) // −1: SnapshotNow
	}
	c.ready.Sends = append(c.ready.Sends, Send{Link: li, Gen: c.links[li].gen, Msg: m})
	return true
}

// end ends the call in progress with err, joined after the rejections
// of earlier messages received meanwhile.
func (c *ClientCore) end(err error) {
	a := &c.call
	if len(c.rejections) > 0 {
		rs := append(c.rejections, err)
		err = errors.Join(rs...)
		clear(rs)
		c.rejections = rs[:0]
	}
	c.ready.Done, c.ready.Err = a.kind, err
	switch a.kind {
	case CallPull:
		if a.async {
			a.over, a.err = true, err
			clear(a.waiting)
			return
		}
		c.adopt()
	case CallLeave:
		if err == nil {
			c.member = false
		}
	}
	c.clearCall()
}

// adopt makes the stamps of the shards the pull in progress received
// current.
func (c *ClientCore) adopt() {
	a := &c.call
	for k, got := range a.got {
		if got {
			c.stamps[k], c.lives[k], c.gens[k] = a.stamps[k], a.lives[k], a.gens[k]
		}
	}
}
