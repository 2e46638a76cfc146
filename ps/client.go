package ps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/rdma"
)

// ClientConfig configures the learner side of the parameter server.
type ClientConfig struct {
	Learner uint32 // this learner's id, < the server's Learners
	// Incarnation counts the learner's lives (restarts), from 0, up to
	// MaxIncarnation; it is the high part of every sequence number (see
	// Seq).
	Incarnation uint32
	Protocol    Protocol   // decides the minimum clock of pulls
	Total       int        // length of the flat vector
	Shards      int        // number of shards
	Codec       rdma.Codec // encoding of the gradients it pushes (zero value: none)
	// NewMsg allocates the messages the client sends: the network's
	// allocator (rdma.Network.NewMsg; Dial sets it), so that a push is
	// written straight into memory the transport can send from. nil:
	// rdma.NewMsg.
	NewMsg func(n int) *rdma.Msg
	// Redial, if set, connects again to the server of shard after its
	// connection failed (a lost or restarted shard server): it returns a
	// new connection, retrying as long as it sees fit, or an error that
	// ends the client's use of that server. nil: a failed connection is
	// an error of the call that saw it.
	Redial func(ctx context.Context, shard int) (rdma.Conn, error)
	// OnDelivered, if set, is called with the mini-batch id of each push
	// (Push's batch, when not 0) once every shard has acknowledged it
	// (see Leave): the shards have accepted, dropped, redone or given up
	// its gradient, and a resend can no longer change that. Calls come
	// in push order, from Pull, WaitPull, Join and Leave before they
	// return, on their caller's goroutine; OnDelivered must not call the
	// client.
	OnDelivered func(batch uint64)
}

// Client is a learner's connection to every shard: Pull fills the whole
// flat vector from all shards, Push sends each shard its slice of the
// gradient stamped with that shard's last pulled stamp. Shards run by one
// server share one connection. A Client is used by one goroutine
// (PullAsync receives on a goroutine of its own).
//
// Pull minimum clocks: under softsync the learner's last stamp (weights
// never go backwards); under hardsync, after a push, the last stamp + 1 (the
// round must complete). Replies are matched to requests by sequence;
// replies to older requests are discarded. The client keeps each push
// until its shard has acknowledged it and resends it on a connection
// that replaces a failed one (see Push and the package doc, "Runtime").
//
// Connection loss: the client repairs a failed connection with
// ClientConfig.Redial from whichever call sees the failure, the
// PullAsync goroutine included.
type Client struct {
	cfg     ClientConfig
	links   []*link // the distinct connections
	byShard []*link // per shard, its connection
	ranges  []Range
	stamps  []uint64      // per shard, the stamp of the weights last pulled
	lives   []uint64      // per shard, the shard's life those weights come from
	gens    []int         // per shard, the generation of its link those stamps come from
	reqs    []uint64      // per shard, sequence of the request whose answer is awaited (pull, join, leave, snapshot)
	pushed  bool          // a push was sent since the last pull
	n       atomic.Uint64 // messages sent in this incarnation
	member  atomic.Bool   // the learner is a member: a new connection joins it again first
	// departed is, per shard, whether it acknowledged the learner's
	// Leave: a connection replaced during the Leave joins the learner
	// again only to the shards that have not. Written by Leave and Join
	// (no asynchronous pull is in flight then), read by restore.
	departed []bool
	started  bool // a learner's call was made: member is known (owner only)
	// feedback is, per shard, the error-feedback residual of the pushes
	// (TopK): optimizer state of the learner, kept across reconnections.
	feedback []rdma.Feedback
	enc      *rdma.Encoder   // selects TopK pushes (Push only)
	pushes   []atomic.Uint64 // per shard, gradients the learner pushed
	pf       *prefetcher     // started by the first PullAsync
	// into is the flat vector the pull or snapshot in progress fills:
	// the Placement of every connection receives a shard's awaited
	// weights straight into its range (see place).
	into    []float32
	partial partialPush // the push PushReady is sending (owner only)
	await   awaited     // what the collect in progress waits for
	recv    *receivers  // started by the first collect over several connections

	ackMu   sync.Mutex
	unacked [][]unacked // per shard, its pushes not acknowledged yet, in sequence order
	sels    [][]byte    // selection buffers of acknowledged TopK pushes, for reuse
	// undelivered holds, from push number first on, each push's
	// mini-batch and the shards that have not acknowledged it.
	undelivered []delivery
	first       uint64
	delivered   []uint64 // scratch of report

	statsMu sync.Mutex
	retired rdma.Stats // traffic of connections replaced by Redial
}

// link is one connection and the shards it carries. Messages are sent
// under send, which also takes their sequence numbers: on a connection
// they leave in the order of their sequences, so that a reply to request
// s acknowledges the messages sent before it (see Leave). A failed
// connection is replaced (Redial) under send too; mu guards the fields
// for readers, and gen counts the replacements, so that of two
// goroutines that saw the same failure only one redials.
type link struct {
	send   sync.Mutex
	mu     sync.Mutex
	conn   rdma.Conn
	gen    int
	dead   error // Redial gave up: every later use fails with it
	shards []int
	left   []int // collectLink's scratch: the shards not answered yet
	// rx hands the link's part of a collect to its receiver goroutine
	// (links beyond the first), which leaves its result in rej and err.
	rx  chan *awaited
	rej []error
	err error
}

func (l *link) get() (rdma.Conn, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn, l.gen, l.dead
}

// prefetcher receives the replies of an asynchronous pull on its own
// goroutine: one request at a time, no allocation per pull.
type prefetcher struct {
	req    chan context.Context // a pull to receive into w, under that context
	w      []float32
	done   chan error
	stamps []uint64      // stamps of the weights being received
	lives  []uint64      // their shards' lives
	gens   []int         // and the generations of their links
	busy   bool          // a pull is in flight (owner goroutine only)
	exited chan struct{} // closed when the goroutine ends
}

// NewClient returns a client over conns, where conns[k] is connected to
// shard k's server (the same Conn for shards of one server). The client
// owns the connections (Close closes them).
func NewClient(cfg ClientConfig, conns []rdma.Conn) (*Client, error) {
	if len(conns) != cfg.Shards {
		return nil, param.Fieldf("Shards", "%d shards but %d connections", cfg.Shards, len(conns))
	}
	if err := cfg.Codec.Validate(); err != nil {
		return nil, err
	}
	if cfg.Incarnation > MaxIncarnation {
		return nil, param.Fieldf("Incarnation", "%d is above the highest a learner can have, %d", cfg.Incarnation, MaxIncarnation)
	}
	if cfg.NewMsg == nil {
		cfg.NewMsg = rdma.NewMsg
	}
	rs, err := Ranges(cfg.Total, cfg.Shards)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, ranges: rs, stamps: make([]uint64, cfg.Shards), lives: make([]uint64, cfg.Shards), gens: make([]int, cfg.Shards),
		reqs: make([]uint64, cfg.Shards), departed: make([]bool, cfg.Shards), feedback: make([]rdma.Feedback, cfg.Shards), pushes: make([]atomic.Uint64, cfg.Shards),
		unacked: make([][]unacked, cfg.Shards)}
	for k, conn := range conns {
		i := slices.IndexFunc(c.links, func(l *link) bool { return l.conn == conn })
		if i < 0 {
			c.links = append(c.links, &link{conn: conn})
			i = len(c.links) - 1
		}
		c.links[i].shards = append(c.links[i].shards, k)
		c.byShard = append(c.byShard, c.links[i])
	}
	for _, l := range c.links {
		c.placeInto(l.conn)
	}
	return c, nil
}

// placeInto makes conn receive awaited weights straight into the vector
// being pulled, where its transport can (rdma.Placer).
func (c *Client) placeInto(conn rdma.Conn) {
	if p, ok := conn.(rdma.Placer); ok {
		p.Place(c.place)
	}
}

// place is the connections' rdma.Placement: the weights answering the
// request awaited from shard (c.reqs) land in shard's range of c.into;
// anything else in a buffer of the transport's. It runs on the goroutine
// receiving the answers (the caller's, or the prefetcher's during an
// asynchronous pull), which owns c.into and c.reqs meanwhile.
func (c *Client) place(t rdma.Type, shard uint32, seq uint64, elems int) []float32 {
	k := int(shard)
	if t != TypeWeights || c.into == nil || k >= len(c.reqs) || seq == 0 || seq != c.reqs[k] || elems != c.ranges[k].Len() {
		return nil
	}
	return c.into[c.ranges[k].Lo:c.ranges[k].Hi]
}

// fill writes the weights of m, shard k's answer, into w, unless the
// transport received them there already.
func (c *Client) fill(w []float32, k int, m *rdma.Msg) {
	r := c.ranges[k]
	if r.Len() > 0 && &m.Payload[0] != &w[r.Lo] {
		copy(w[r.Lo:r.Hi], m.Payload)
	}
}

// Stamps returns, per shard, the stamp of the weights last pulled.
func (c *Client) Stamps() []uint64 { return slices.Clone(c.stamps) }

// msg returns a pooled message of type t for shard with n payload floats;
// send gives it its sequence number.
func (c *Client) msg(t MsgType, shard, n int) *rdma.Msg {
	return wireMsg(c.cfg.NewMsg, t, c.cfg.Learner, shard, 0, 0, n)
}

// nextSeq returns the sequence number of the client's next message, or
// ErrSeqExhausted.
func (c *Client) nextSeq() (uint64, error) {
	k := c.n.Add(1)
	if k > MaxMessages {
		return 0, fmt.Errorf("ps client %d: incarnation %d has sent %d messages: %w", c.cfg.Learner, c.cfg.Incarnation, uint64(MaxMessages), ErrSeqExhausted)
	}
	return Seq(c.cfg.Incarnation, k), nil
}

// errRedialed reports a message lost with a connection that was then
// replaced: the caller sends it again or drops it.
var errRedialed = errors.New("connection replaced")

// send sends m, a new message, to its shard's server with the client's
// next sequence number, and returns that number. When the connection
// fails and Redial replaces it, m is lost and send returns errRedialed;
// except for a push (u, its record, not nil), which is queued as
// unacknowledged before it is sent, and so sent again on the new
// connection by the repair.
func (c *Client) send(ctx context.Context, m *rdma.Msg, u *unacked) (uint64, error) {
	l := c.byShard[m.Shard]
	l.send.Lock()
	defer l.send.Unlock()
	conn, gen, err := l.get()
	if err == nil {
		m.Seq, err = c.nextSeq()
	}
	if err != nil {
		m.Release()
		return 0, err
	}
	t, shard, seq := m.Type, m.Shard, m.Seq
	if u != nil {
		u.seq = seq
		c.ackMu.Lock()
		c.unacked[shard] = append(c.unacked[shard], *u)
		c.ackMu.Unlock()
	}
	if err := conn.Send(ctx, m); err != nil {
		if rerr := c.repairLocked(ctx, l, gen, err); rerr != nil {
			if u != nil {
				c.unsent(int(shard), seq)
			}
			return seq, fmt.Errorf("ps client %d: %s: %w", c.cfg.Learner, describeMsg(t, c.cfg.Learner, shard, seq), rerr)
		}
		if u == nil {
			return seq, errRedialed
		}
	}
	return seq, nil
}

// repair replaces l's connection of generation gen, which failed with
// cause, by Redial's; nil if the connection is usable again (replaced
// here or by another goroutine).
func (c *Client) repair(ctx context.Context, l *link, gen int, cause error) error {
	l.send.Lock()
	defer l.send.Unlock()
	return c.repairLocked(ctx, l, gen, cause)
}

// repairLocked is repair with l.send held. A new connection is restored
// before anything else is sent on it (see restore).
func (c *Client) repairLocked(ctx context.Context, l *link, gen int, cause error) error {
	if ctx.Err() != nil || rdma.Recoverable(cause) || c.cfg.Redial == nil {
		return cause
	}
	conn, err := c.redial(ctx, l, gen, cause)
	if conn == nil {
		return err
	}
	return c.restore(ctx, l, conn)
}

// redial replaces l's connection of generation gen by Redial's and
// returns the new one; nil and l's error if Redial gave up or another
// goroutine replaced it already.
func (c *Client) redial(ctx context.Context, l *link, gen int, cause error) (rdma.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen != gen || l.dead != nil {
		return nil, l.dead
	}
	st := l.conn.Stats()
	l.conn.Close()
	c.statsMu.Lock()
	c.retired.Add(&st)
	c.statsMu.Unlock()
	conn, err := c.cfg.Redial(ctx, l.shards[0])
	l.gen++
	if err != nil {
		l.dead = fmt.Errorf("connection to shards %v lost (%v), not restored: %w", l.shards, cause, err)
		return nil, l.dead
	}
	l.conn = conn
	c.placeInto(conn)
	return conn, nil
}

// Pull asks every shard for its weights and writes them into w (the flat
// vector, Total floats): where the transport can (rdma.Placer), it
// receives each shard's reply straight into w's range; if Pull fails,
// w's contents are undefined. Rejections of earlier messages that arrive
// meanwhile are returned, joined and wrapping ErrRejected, after w is
// filled; transport errors are returned at once.
func (c *Client) Pull(ctx context.Context, w []float32) error {
	if err := c.startPull(ctx, w, false); err != nil {
		return err
	}
	defer c.report()
	return c.recvWeights(ctx, w, c.stamps, c.lives, c.gens)
}

// PullAsync starts a pull like Pull and returns once the requests are
// sent; the replies are received into w on another goroutine while the
// caller goes on (a learner computes its gradient meanwhile: --overlap).
// WaitPull waits for them. Until WaitPull returns, the caller must not
// touch w nor call Pull or PullAsync; it may Push, and Push stamps the
// gradient with the stamps of the last pull that completed, which are the
// stamps of the weights the gradient was computed on. WaitPull then makes
// the new weights' stamps current.
//
// Under hardsync the asynchronous pull asks for the next round's weights
// (minimum clock: last stamp + 1), which the shards send once the current
// round, including this learner's own push, is applied: the learner must
// push before WaitPull can return.
func (c *Client) PullAsync(ctx context.Context, w []float32) error {
	if c.pf == nil {
		c.pf = &prefetcher{req: make(chan context.Context), done: make(chan error, 1), exited: make(chan struct{}), stamps: make([]uint64, c.cfg.Shards),
			lives: make([]uint64, c.cfg.Shards), gens: make([]int, c.cfg.Shards)}
		go c.prefetch()
	}
	if c.pf.busy {
		return fmt.Errorf("ps client %d: PullAsync while a pull is in flight: %w", c.cfg.Learner, ErrInvalidConfig)
	}
	if err := c.startPull(ctx, w, true); err != nil {
		return err
	}
	c.pf.busy = true
	c.pf.w = w // read by the prefetcher after it receives ctx
	c.pf.req <- ctx
	return nil
}

// WaitPull waits for the pull started by PullAsync and returns its error
// (as Pull would). It returns nil at once if no pull is in flight.
func (c *Client) WaitPull() error {
	if c.pf == nil || !c.pf.busy {
		return nil
	}
	if err := c.pushing("WaitPull"); err != nil {
		return err
	}
	err := <-c.pf.done
	c.pf.busy = false
	c.report()
	copy(c.stamps, c.pf.stamps)
	copy(c.lives, c.pf.lives)
	copy(c.gens, c.pf.gens)
	return err
}

// prefetch is the receiving goroutine of PullAsync; it ends when req is
// closed (Close).
func (c *Client) prefetch() {
	defer close(c.pf.exited)
	for ctx := range c.pf.req {
		c.pf.done <- c.recvWeights(ctx, c.pf.w, c.pf.stamps, c.pf.lives, c.pf.gens)
	}
}

// startPull checks w and sends a pull to every shard. next asks, under
// hardsync, for the next round's weights whether or not a push was sent.
func (c *Client) startPull(ctx context.Context, w []float32, next bool) error {
	if len(w) != c.cfg.Total {
		return fmt.Errorf("ps client %d: Pull into %d floats, vector has %d: %w", c.cfg.Learner, len(w), c.cfg.Total, ErrInvalidConfig)
	}
	if err := c.idle("Pull"); err != nil {
		return err
	}
	c.learner()
	c.into = w
	for _, l := range c.links {
		if err := c.sendPulls(ctx, l, l.shards, c.pushed || next); err != nil {
			return err
		}
	}
	c.pushed = false
	return nil
}

// sendPulls sends a pull to each of shards of link l. afterPush asks,
// under hardsync, for the next round's weights. A shard whose weights
// came from a connection since replaced asks for any weights (minimum
// clock 0): its restarted server's clock may be behind the stamp.
func (c *Client) sendPulls(ctx context.Context, l *link, shards []int, afterPush bool) error {
	return c.request(ctx, l, shards, func(k, gen int) *rdma.Msg {
		m := c.msg(MsgPull, k, 0)
		if c.gens[k] == gen {
			m.Timestamp = c.stamps[k]
			if afterPush && c.cfg.Protocol == Hardsync {
				m.Timestamp++
			}
		}
		return m
	})
}

// maxResends bounds how many connections in a row request may see
// replaced while it sends.
const maxResends = 8

// request sends each of shards of link l the request mk makes (given the
// shard and the generation of the connection it goes on), recording its
// sequence number in c.reqs. If the connection is replaced while it
// sends, the requests of this call went with it, or may have: all of
// them go again on the new connection, so that each shard has one whose
// answer collect waits for (an answer to an earlier one is dropped).
func (c *Client) request(ctx context.Context, l *link, shards []int, mk func(k, gen int) *rdma.Msg) error {
	for try := 0; ; try++ {
		_, gen, err := l.get()
		if err != nil {
			return err
		}
		for _, k := range shards {
			if c.reqs[k], err = c.send(ctx, mk(k, gen), nil); err != nil {
				break
			}
		}
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, errRedialed):
			return err
		case try == maxResends:
			return fmt.Errorf("ps client %d: the connection to shards %v was replaced %d times in a row while sending: %w", c.cfg.Learner, l.shards, try+1, err)
		}
	}
}

// idle returns an error naming call if an asynchronous pull is in
// flight.
func (c *Client) idle(call string) error {
	if c.pf != nil && c.pf.busy {
		return fmt.Errorf("ps client %d: %s while an asynchronous pull is in flight: %w", c.cfg.Learner, call, ErrInvalidConfig)
	}
	return c.pushing(call)
}

// pushing returns an error if a push is partly sent (PushReady).
func (c *Client) pushing(call string) error {
	if c.partial.next > 0 {
		return fmt.Errorf("ps client %d: %s while the push of mini-batch %d is partly sent: %w", c.cfg.Learner, call, c.partial.batch, ErrInvalidConfig)
	}
	return nil
}

// recvWeights receives every shard's reply to its pull in c.reqs into w
// and their stamps, lives and link generations into stamps, lives and
// gens (see collect).
func (c *Client) recvWeights(ctx context.Context, w []float32, stamps, lives []uint64, gens []int) error {
	c.await = awaited{req: MsgPull, w: w, stamps: stamps, lives: lives, gens: gens}
	return c.collect(ctx, &c.await)
}

// awaited is what a collect call waits for: the answers to the requests
// of type req in c.reqs, and where they go. It is data, not callbacks, so
// that the goroutines of collect take nothing from the heap.
type awaited struct {
	req    MsgType   // MsgPull, MsgJoin, MsgLeave or snapshotReq
	epoch  int       // snapshotReq: the epoch asked for
	w      []float32 // MsgPull, snapshotReq: the vector the weights go into
	stamps []uint64  // MsgPull, snapshotReq: the weights' stamps
	lives  []uint64  // MsgPull: their shards' lives
	gens   []int     // MsgPull: the generations of the links they came on
}

// snapshotReq is the request kind of a Snapshot (TypeSnapshot).
const snapshotReq = MsgType(TypeSnapshot)

// what names a's requests in errors.
func (a *awaited) what() string {
	if a.req == snapshotReq {
		return "snapshot"
	}
	return a.req.String()
}

// want is the rdma type of the answers a waits for.
func (a *awaited) want() rdma.Type {
	if a.req == MsgJoin || a.req == MsgLeave {
		return TypeAck
	}
	return TypeWeights
}

// take records m, shard k's answer to a request of a, received on a
// connection of generation gen.
func (c *Client) take(a *awaited, k int, m *rdma.Msg, gen int) error {
	switch a.req {
	case MsgJoin, MsgLeave:
		c.departed[k] = a.req == MsgLeave
		return nil
	}
	if len(m.Payload) != c.ranges[k].Len() {
		return fmt.Errorf("ps client %d: %s: shard %d sent %d weights, its range has %d: %w", c.cfg.Learner, a.what(), k, len(m.Payload), c.ranges[k].Len(), ErrBadLength)
	}
	c.fill(a.w, k, m)
	a.stamps[k] = m.Timestamp
	if a.req == MsgPull {
		a.lives[k], a.gens[k] = lifeOf(m), gen
	}
	return nil
}

// ask sends a request of a to each of shards of link l: the first ones of
// a snapshot, join or leave, and any request sent again on a replaced
// connection (a pull then as sendPulls without afterPush; startPull sends
// a pull's first ones).
func (c *Client) ask(ctx context.Context, a *awaited, l *link, shards []int) error {
	switch a.req {
	case MsgPull:
		return c.sendPulls(ctx, l, shards, false)
	case snapshotReq:
		return c.request(ctx, l, shards, func(k, _ int) *rdma.Msg {
			m := c.msg(0, k, 0)
			m.Type, m.Timestamp = TypeSnapshot, uint64(a.epoch) // −1: SnapshotNow
			return m
		})
	}
	return c.request(ctx, l, shards, func(k, _ int) *rdma.Msg { return c.msg(a.req, k, 0) })
}

// collect receives every shard's answer to its request in c.reqs: a
// reply of a.want() with the request's Seq, recorded by take with the
// generation of the connection it came on (take may fail the call). It
// receives on every connection at once, the first on the caller's
// goroutine and the others on the receivers' (receivers.go), so that a
// server never waits for the learner to read another's answer: a reply
// bigger than the transport's buffers is only sent as fast as it is
// read. A connection that fails is replaced (Redial) and
// the requests still unanswered on it are sent again (ask). An answer
// acknowledges the pushes to its shard sent before the request (acked).
// Other replies are dropped, except rejections: a rejection of a request
// ends the call with it (the other connections stop receiving), those of
// earlier messages are returned, joined and wrapping ErrRejected, once
// every answer is in.
func (c *Client) collect(ctx context.Context, a *awaited) error {
	if len(c.links) == 1 {
		rejections, err := c.collectLink(ctx, a, c.links[0])
		return joinAfter(rejections, err)
	}
	if c.recv == nil {
		c.recv = c.startReceivers()
	}
	r := c.recv
	rctx := r.context(ctx)
	for _, l := range c.links[1:] {
		l.rx <- a
	}
	rejections, failed := c.collectLink(rctx, a, c.links[0])
	if failed != nil {
		r.cancel(failed)
	}
	for range len(c.links) - 1 {
		l := <-r.done
		rejections = append(rejections, l.rej...)
		if failed == nil {
			failed = l.err
		}
		l.rej, l.err = nil, nil
	}
	if cause := context.Cause(rctx); cause != nil && ctx.Err() == nil {
		failed = cause // the part that failed first; the others were stopped
	}
	return joinAfter(rejections, failed)
}

// collectLink is collect on link l: it returns the rejections of earlier
// messages it received, and the error that ended it early.
func (c *Client) collectLink(ctx context.Context, a *awaited, l *link) ([]error, error) {
	var rejections []error
	left := append(l.left[:0], l.shards...)
	defer func() { l.left = left }()
	for len(left) > 0 {
		conn, gen, err := l.get()
		if err != nil {
			return rejections, err
		}
		m, err := conn.Recv(ctx)
		if err != nil {
			if rerr := c.repair(ctx, l, gen, err); rerr != nil {
				return rejections, fmt.Errorf("ps client %d: %s from shards %v: %w", c.cfg.Learner, a.what(), l.shards, rerr)
			}
			if err := c.ask(ctx, a, l, left); err != nil {
				return rejections, err
			}
			continue
		}
		k := int(m.Shard)
		mine := slices.Contains(left, k)
		switch {
		case m.Type == rdma.TypeError:
			err := rejection(m)
			if mine && m.Seq == c.reqs[k] { // the request itself: no answer will come
				m.Release()
				return rejections, err
			}
			rejections = append(rejections, err)
		case m.Type != a.want() || !mine || m.Seq != c.reqs[k]:
			// a reply to an older request
		default:
			if err := c.take(a, k, m, gen); err != nil {
				m.Release()
				return rejections, err
			}
			c.acked(k, m.Seq)
			c.reqs[k] = 0 // answered: a duplicate reply is ignored
			left = slices.DeleteFunc(left, func(x int) bool { return x == k })
		}
		m.Release()
	}
	return rejections, nil
}

// joinAfter returns the rejections and then err, joined; err alone if
// there are none.
func joinAfter(rejections []error, err error) error {
	if len(rejections) == 0 {
		return err
	}
	return errors.Join(append(rejections, err)...)
}

// rejection returns the error of a shard's error reply: its text, matching
// ErrRejected, rdma.ErrRemote and the rejection reason (ErrDiverged,
// ErrNonFinite, …) the text names, so that errors.Is finds the reason on
// the learner's side too.
func rejection(m *rdma.Msg) error {
	err := fmt.Errorf("%w: %w", ErrRejected, m.Err())
	for _, reason := range rejectionReasons {
		if strings.Contains(string(m.Data), reason.Error()) {
			return &reasonError{err, reason}
		}
	}
	return err
}

// reasonError is an error reply that names a rejection reason.
type reasonError struct{ err, reason error }

func (e *reasonError) Error() string   { return e.err.Error() }
func (e *reasonError) Unwrap() []error { return []error{e.err, e.reason} }

// Snapshot fills w (the flat vector) with every shard's weights at the end
// of epoch (≥ 1: the snapshot of the servers' ServerConfig.Snapshots; 0:
// the final weights, once the servers are final; −1: the weights as they
// are now), waiting until they exist, and returns each shard's stamp. It
// is an evaluator's request and binds no learner identity.
func (c *Client) Snapshot(ctx context.Context, epoch int, w []float32) ([]uint64, error) {
	if len(w) != c.cfg.Total {
		return nil, fmt.Errorf("ps client: Snapshot into %d floats, vector has %d: %w", len(w), c.cfg.Total, ErrInvalidConfig)
	}
	c.into = w
	stamps := make([]uint64, c.cfg.Shards)
	c.await = awaited{req: snapshotReq, epoch: epoch, w: w, stamps: stamps}
	for _, l := range c.links {
		if err := c.ask(ctx, &c.await, l, l.shards); err != nil {
			return nil, err
		}
	}
	if err := c.collect(ctx, &c.await); err != nil {
		return nil, err
	}
	return stamps, nil
}

// Push sends every shard its slice of grad (Total floats, averaged over
// the mini-batch) stamped with the shard's last pulled stamp and life.
// batch is the job-wide id of the mini-batch (Msg.Batch; 0: none). It
// does not wait for the shards; rejections arrive with the next Pull. A
// gradient computed on weights of a shard since restarted is sent all the
// same: the shard gives it up (Stats.StaleLife).
//
// Until every shard has acknowledged the push (see Leave), the client
// keeps it, and sends it again, with the same sequence number, stamp,
// life and mini-batch, on the connection that replaces a failed one: the
// shard ignores it if it had it (a duplicate) and steps it if not. The
// client keeps a reference to grad, not a copy: grad must stay unchanged
// until the push is delivered, that is until a Pull or Leave called after
// Push returns, or the WaitPull of a PullAsync called after it. A TopK
// push (Codec) is sent as its selection (the k elements of largest
// magnitude of the gradient plus the shard's residual, taken from the
// residual once), kept until acknowledged: a resend carries exactly the
// same elements, and the residual never takes them twice.
func (c *Client) Push(ctx context.Context, grad []float32, batch uint64) error {
	return c.PushReady(ctx, grad, batch, 0)
}

// PushReady sends the part of Push(grad, batch) that grad[lo:] holds:
// the slice of every shard whose range starts at lo or later and was not
// sent yet, last shards first. A learner calls it while backward goes on
// (nn.Net.SetGradHook), each time the gradients from lo on are final, so
// that those slices travel while the earlier layers are computed; what
// the shards receive is exactly what Push sends them. The push is
// complete at the call with lo = 0, which sends what is left, and only
// then may the client be used for anything else; until then every call
// must pass the same grad and batch. A push whose sending failed is over:
// the next call starts a new one. The shards it did not reach never
// acknowledge it, so OnDelivered reports neither it nor any later push
// (its mini-batch is not done): a learner stops on that error.
func (c *Client) PushReady(ctx context.Context, grad []float32, batch uint64, lo int) error {
	p := &c.partial
	switch {
	case len(grad) != c.cfg.Total:
		return fmt.Errorf("ps client %d: Push of %d floats, vector has %d: %w", c.cfg.Learner, len(grad), c.cfg.Total, ErrInvalidConfig)
	case p.next > 0 && (&grad[0] != p.grad || batch != p.batch):
		return fmt.Errorf("ps client %d: Push of mini-batch %d while the push of mini-batch %d is partly sent: %w", c.cfg.Learner, batch, p.batch, ErrInvalidConfig)
	case p.next == 0:
		c.learner()
		*p = partialPush{grad: &grad[0], batch: batch, next: len(c.ranges), push: c.newDelivery(batch)}
	}
	for p.next > 0 && c.ranges[p.next-1].Lo >= lo {
		k := p.next - 1
		r := c.ranges[k]
		c.pushes[k].Add(1)
		u := unacked{stamp: c.stamps[k], life: c.lives[k], batch: batch, push: p.push, grad: grad[r.Lo:r.Hi]}
		if c.cfg.Codec.ID == rdma.CodecTopK {
			var err error
			if u.sel, err = c.selectTopK(k, u.grad); err != nil {
				p.next = 0
				return fmt.Errorf("ps client %d: push to shard %d: %w", c.cfg.Learner, k, err)
			}
		}
		if _, err := c.send(ctx, c.pushMsg(k, &u), &u); err != nil {
			p.next = 0
			return err
		}
		p.next = k
	}
	if p.next == 0 {
		c.pushed = true
	}
	return nil
}

// partialPush is the push PushReady is sending: shards next and above
// have their slices sent (next = 0: no push in progress).
type partialPush struct {
	grad  *float32 // &grad[0]
	batch uint64
	push  uint64 // its number (newDelivery)
	next  int
}

// Pushes returns, per shard, the gradients the learner pushed (Push
// calls; resends are not counted again), including those lost with a
// connection or a restarted server (the shards' counters tell what
// became of the others). It may be called from any goroutine.
func (c *Client) Pushes() []uint64 {
	n := make([]uint64, len(c.pushes))
	for k := range c.pushes {
		n[k] = c.pushes[k].Load()
	}
	return n
}

// Join announces the learner to every shard again (after a Leave or a
// reconnect) and waits until every shard has acknowledged it (or
// rejected it: the rejections are returned, wrapping ErrRejected). It
// must not be called while an asynchronous pull is in flight.
func (c *Client) Join(ctx context.Context) error {
	c.started = true
	clear(c.departed)
	c.member.Store(true)
	return c.all(ctx, MsgJoin)
}

// learner records that the client is a learner's: at its first pull or
// push the learner is a member (every learner is, at the start of a
// job), so that a connection replaced from then on joins it again. An
// evaluator's client, which only asks for snapshots, never joins.
func (c *Client) learner() {
	if !c.started {
		c.started = true
		c.member.Store(true)
	}
}

// Leave tells every shard that the learner is done, or pauses (a later
// Join resumes it; its next pull asks for the current weights), and waits
// until every shard has acknowledged it. An acknowledgement from shard k
// comes after shard k stepped every message the client sent it before on
// that connection (its pushes included): connections deliver in order,
// the shard server steps one connection's messages to a shard in the
// order they arrive, and the client sends a connection's messages in the
// order of their sequence numbers. It must not be called while an
// asynchronous pull is in flight. Once it has returned nil, the
// learner's pushes are all delivered and it is no member: a connection
// replaced from then on joins it to no shard, until Join.
func (c *Client) Leave(ctx context.Context) error {
	c.started, c.pushed = true, false
	if err := c.all(ctx, MsgLeave); err != nil {
		return err
	}
	c.member.Store(false)
	return nil
}

// all sends a message of type t (join or leave) to every shard and waits
// for the acknowledgements.
func (c *Client) all(ctx context.Context, t MsgType) error {
	if err := c.idle(t.String()); err != nil {
		return err
	}
	c.await = awaited{req: t}
	defer c.report()
	for _, l := range c.links {
		if err := c.ask(ctx, &c.await, l, l.shards); err != nil {
			return err
		}
	}
	return c.collect(ctx, &c.await)
}

// Connections returns, per server connection, the shards it carries, the
// peer's address and the transport it uses.
func (c *Client) Connections() []Connection {
	var cs []Connection
	for _, l := range c.links {
		conn, _, _ := l.get()
		cs = append(cs, Connection{Shards: slices.Clone(l.shards), Peer: conn.RemoteAddr(), Transport: conn.Transport()})
	}
	return cs
}

// Connection describes one of a client's connections.
type Connection struct {
	Shards    []int
	Peer      string
	Transport rdma.TransportInfo
}

// Stats returns the traffic of the client's connections, summed, those
// replaced by Redial included. It may be called from any goroutine; while
// a connection is being replaced it waits for the replacement.
func (c *Client) Stats() rdma.Stats {
	c.statsMu.Lock()
	st := c.retired
	c.statsMu.Unlock()
	for _, l := range c.links {
		conn, _, _ := l.get()
		cs := conn.Stats()
		st.Add(&cs)
	}
	return st
}

// Close closes every connection (which ends a pull in flight with an
// error), so that none is redialed and no push is sent again, and stops
// the PullAsync goroutine and the receivers, waiting for them: once Close
// returns the client reads no gradient it was lent and writes no weights
// vector.
func (c *Client) Close() error {
	var errs []error
	for _, l := range c.links {
		l.mu.Lock()
		if l.dead == nil {
			l.dead = errClientClosed // nothing is redialed or resent from now on
		}
		conn := l.conn
		l.mu.Unlock()
		errs = append(errs, conn.Close())
	}
	if c.pf != nil && c.pf.req != nil {
		close(c.pf.req)
		c.pf.req = nil
		<-c.pf.exited // an asynchronous pull in flight has failed: the goroutine is done with the client
	}
	if c.recv != nil {
		c.recv.stop(c.links[1:])
		c.recv = nil
	}
	if c.enc != nil {
		c.enc.Close()
		c.enc = nil
	}
	return errors.Join(errs...)
}

// errClientClosed is the error of every use of a link after Close.
var errClientClosed = fmt.Errorf("ps client closed: %w", rdma.ErrClosed)
