package ps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

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
	// an error of the call that saw it, and of every later one.
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
// The protocol is the client core's (ClientCore: stamps, sequences,
// pull clocks, resends, which answer ends which call); Client runs it
// over rdma connections: it steps the core with each call and each
// message received, under one lock, sends what the core asks for on each
// connection in order, replaces the connections that fail
// (ClientConfig.Redial) and waits for the calls to end. See the package
// doc, "The client core" and "Runtime".
//
// Connection loss: the client repairs a failed connection with
// ClientConfig.Redial from whichever call sees the failure, the
// PullAsync goroutine included.
type Client struct {
	cfg    ClientConfig
	ranges []Range
	links  []*link
	pf     *prefetcher // started by the first PullAsync
	recv   *receivers  // started by the first collect over several connections

	// mu guards the core, the links' queues (out, head) and what
	// follows; it is never held while sending, receiving or dialling.
	mu   sync.Mutex
	core *ClientCore
	// over and result are the end of the call in progress (the core's
	// Done: a pull, join, leave or snapshot), once it has ended.
	over   bool
	result error
	// delivered are the mini-batches the core reported delivered, for
	// the caller to report (OnDelivered) before its call returns; report
	// is its scratch.
	delivered, report []uint64

	statsMu sync.Mutex
	retired rdma.Stats // traffic of connections replaced by Redial
}

// link is one connection and the shards it carries (the core's link of
// the same index). Messages leave in the order the core made them: each
// event's sends are queued on out, under Client.mu, and whoever sends
// takes them from the head under send. mu guards the connection and is
// held while it is replaced, so that a goroutine that needs it waits for
// the replacement; gen counts the replacements, as the core does. Locks
// are taken in the order send, mu, Client.mu (the transport's receive
// lock, under which the Placement runs, before Client.mu too), and
// Client.mu is never held while taking another.
type link struct {
	index  int
	shards []int
	send   waitLock
	out    []outMsg // under Client.mu
	head   int      // under Client.mu
	mu     waitLock
	conn   rdma.Conn
	gen    int
	dead   error // the core gave the link up: every later use fails with it
	// rx hands the link's part of a collect to its receiver goroutine
	// (links beyond the first), which leaves its result in err.
	rx  chan struct{}
	err error
}

// waitLock is a mutex whose waiters wait on a channel. A link's locks
// are held across a redial, which can take seconds: a goroutine waiting
// for the link then waits as on any channel, which testing/synctest
// counts as durably blocked (a sync.Mutex waiter is not, and virtual
// time would stop), so that the client runs in a bubble's virtual time.
type waitLock chan struct{}

func newWaitLock() waitLock { return make(waitLock, 1) }

func (w waitLock) Lock()   { w <- struct{}{} }
func (w waitLock) Unlock() { <-w }

// outMsg is a message queued for the connection of generation gen.
type outMsg struct {
	m   *rdma.Msg
	gen int
}

func (l *link) get() (rdma.Conn, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn, l.gen, l.dead
}

// prefetcher receives the replies of an asynchronous pull on its own
// goroutine: one request at a time, no allocation per pull.
type prefetcher struct {
	req    chan context.Context // a pull to receive, under that context
	done   chan error
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
	if cfg.NewMsg == nil {
		cfg.NewMsg = rdma.NewMsg
	}
	c := &Client{cfg: cfg}
	linkOf := make([]int, len(conns))
	for k, conn := range conns {
		i := slices.IndexFunc(c.links, func(l *link) bool { return l.conn == conn })
		if i < 0 {
			c.links = append(c.links, &link{index: len(c.links), conn: conn, send: newWaitLock(), mu: newWaitLock()})
			i = len(c.links) - 1
		}
		c.links[i].shards = append(c.links[i].shards, k)
		linkOf[k] = i
	}
	core, err := NewClientCore(ClientCoreConfig{Learner: cfg.Learner, Incarnation: cfg.Incarnation, Protocol: cfg.Protocol,
		Total: cfg.Total, Shards: cfg.Shards, Codec: cfg.Codec, Links: linkOf, Reconnect: cfg.Redial != nil})
	if err != nil {
		return nil, err
	}
	c.core, c.ranges = core, core.ranges
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

// place is the connections' rdma.Placement: the weights answering a
// request the core awaits land where the core says (ClientCore.Place);
// anything else in a buffer of the transport's.
func (c *Client) place(t rdma.Type, shard uint32, seq uint64, elems int) []float32 {
	if t != TypeWeights {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.Place(int(shard), seq, elems)
}

// Stamps returns, per shard, the stamp of the weights last pulled.
func (c *Client) Stamps() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.Stamps()
}

// apply takes the outputs of one event of the core, with c.mu held: it
// queues each message for its link, keeps the mini-batches delivered for
// the caller to report and records the end of the call in progress.
func (c *Client) apply(r *ClientReady) {
	c.queue(r)
	switch r.Done {
	case CallPull, CallJoin, CallLeave, CallSnapshot:
		c.over, c.result = true, r.Err
	}
}

// queue queues the messages of r for their links and keeps its
// mini-batches delivered, with c.mu held.
func (c *Client) queue(r *ClientReady) {
	for i := range r.Sends {
		s := &r.Sends[i]
		l := c.links[s.Link]
		l.out = append(l.out, outMsg{sendMsg(c.cfg.NewMsg, c.cfg.Codec, c.ranges, s), s.Gen})
	}
	c.delivered = append(c.delivered, r.Delivered...)
}

// step runs one event of the core (ev) under c.mu and applies its
// outputs; it returns the event's end of a call.
func (c *Client) step(ev func() ClientReady) (Call, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := ev()
	c.apply(&r)
	return r.Done, r.Err
}

// flush sends the messages queued for every link and returns the first
// error a send met (see drain).
func (c *Client) flush(ctx context.Context) error {
	var first error
	for _, l := range c.links {
		if err := c.drain(ctx, l); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// drain sends l's queued messages, in order, each on the connection it
// was made for; one made for a connection since replaced is dropped (the
// core restored what the new one needs). A connection that fails is
// replaced (broken); a message whose Send failed while the connection
// stays usable (its context ended) is reported to the core (Unsent).
// It returns the first error: that Send's, or the link's once given up.
func (c *Client) drain(ctx context.Context, l *link) error {
	c.mu.Lock()
	empty := l.head == len(l.out)
	c.mu.Unlock()
	if empty {
		return nil
	}
	l.send.Lock()
	defer l.send.Unlock()
	var failed error
	for {
		c.mu.Lock()
		if l.head == len(l.out) {
			l.out, l.head = l.out[:0], 0
			c.mu.Unlock()
			return failed
		}
		o := l.out[l.head]
		l.out[l.head] = outMsg{}
		l.head++
		c.mu.Unlock()
		t, shard, seq := o.m.Type, o.m.Shard, o.m.Seq
		conn, gen, dead := l.get()
		if dead != nil || gen != o.gen {
			o.m.Release()
			if dead != nil && failed == nil {
				failed = fmt.Errorf("ps client %d: %s: %w", c.cfg.Learner, describeMsg(t, c.cfg.Learner, shard, seq), dead)
			}
			continue
		}
		err := conn.Send(ctx, o.m)
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil || rdma.Recoverable(err):
			err = fmt.Errorf("ps client %d: %s: %w", c.cfg.Learner, describeMsg(t, c.cfg.Learner, shard, seq), err)
			c.step(func() ClientReady { return c.core.Unsent(l.index, gen, seq, err) })
		default:
			if err = c.broken(ctx, l, gen, err); err != nil {
				err = fmt.Errorf("ps client %d: %s: %w", c.cfg.Learner, describeMsg(t, c.cfg.Learner, shard, seq), err)
			}
		}
		if err != nil && failed == nil {
			failed = err
		}
	}
}

// broken handles the failure (cause) of l's connection of generation
// gen: unless another goroutine replaced it meanwhile, the core takes
// the link down, and Redial replaces the connection (the core restores
// on the new one what the old one carried: LinkUp) or the link is given
// up. It returns the link's error if it is given up. l.mu is held
// throughout, so that every goroutine needing the link waits for the
// new connection.
func (c *Client) broken(ctx context.Context, l *link, gen int, cause error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen != gen || l.dead != nil {
		return l.dead
	}
	c.mu.Lock()
	r := c.core.LinkDown(l.index, gen, cause)
	c.apply(&r)
	l.dead = c.core.LinkErr(l.index)
	dial := len(r.Dial) > 0
	c.mu.Unlock()
	if !dial {
		return l.dead
	}
	st := l.conn.Stats()
	l.conn.Close()
	c.statsMu.Lock()
	c.retired.Add(&st)
	c.statsMu.Unlock()
	conn, err := c.cfg.Redial(ctx, l.shards[0])
	if err == nil {
		c.placeInto(conn)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		r = c.core.LinkDead(l.index, err)
	} else {
		l.conn, l.gen = conn, l.gen+1
		r = c.core.LinkUp(l.index)
	}
	c.apply(&r)
	l.dead = c.core.LinkErr(l.index)
	return l.dead
}

// Pull asks every shard for its weights and writes them into w (the flat
// vector, Total floats): where the transport can (rdma.Placer), it
// receives each shard's reply straight into w's range; if Pull fails,
// w's contents are undefined. Rejections of earlier messages that arrive
// meanwhile are returned, joined and wrapping ErrRejected, after w is
// filled; transport errors are returned at once.
func (c *Client) Pull(ctx context.Context, w []float32) error {
	if err := c.startCall(ctx, func() ClientReady { return c.core.Pull(w, false) }); err != nil {
		return err
	}
	defer c.reportDelivered()
	return c.collect(ctx)
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
		c.pf = &prefetcher{req: make(chan context.Context), done: make(chan error, 1), exited: make(chan struct{})}
		go c.prefetch()
	}
	if err := c.startCall(ctx, func() ClientReady { return c.core.Pull(w, true) }); err != nil {
		return err
	}
	c.pf.busy = true
	c.pf.req <- ctx
	return nil
}

// WaitPull waits for the pull started by PullAsync and returns its error
// (as Pull would). It returns nil at once if no pull is in flight.
func (c *Client) WaitPull() error {
	if c.pf == nil || !c.pf.busy {
		return nil
	}
	c.mu.Lock()
	err := c.core.pushing(CallWaitPull)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	err = <-c.pf.done
	c.pf.busy = false
	c.step(c.core.WaitPull)
	c.reportDelivered()
	return err
}

// prefetch is the receiving goroutine of PullAsync; it ends when req is
// closed (Close).
func (c *Client) prefetch() {
	defer close(c.pf.exited)
	for ctx := range c.pf.req {
		c.pf.done <- c.collect(ctx)
	}
}

// startCall steps the core with a call that waits for answers (ev) and
// sends its requests; it returns the call's error if it ended at once
// (refused: the end of an asynchronous pull in flight is not touched).
// Otherwise the call is in progress: collect waits for it.
func (c *Client) startCall(ctx context.Context, ev func() ClientReady) error {
	c.mu.Lock()
	r := ev()
	c.queue(&r)
	if r.Done == CallNone {
		c.over, c.result = false, nil
	}
	c.mu.Unlock()
	if r.Done != CallNone {
		return r.Err
	}
	c.flush(ctx) // a failure ends the call or is the next receive's to see
	return nil
}

// collect waits for the end of the call in progress: it receives on
// every connection the call awaits answers on, the first on the
// caller's goroutine and the others on the receivers' (receivers.go), so
// that a server never waits for the learner to read another's answer: a
// reply bigger than the transport's buffers is only sent as fast as it
// is read. A part that fails stops the others. It returns the call's
// error: the core's (the end of the call), or, if the call has not
// ended, the error that stopped the receiving, with which the core
// cancels it.
func (c *Client) collect(ctx context.Context) error {
	if len(c.links) == 1 {
		return c.finish(c.recvLink(ctx, c.links[0]))
	}
	if c.recv == nil {
		c.recv = c.startReceivers()
	}
	r := c.recv
	rctx := r.context(ctx)
	for _, l := range c.links[1:] {
		l.rx <- struct{}{}
	}
	failed := c.recvLink(rctx, c.links[0])
	if failed != nil {
		r.cancel(failed)
	}
	for range len(c.links) - 1 {
		l := <-r.done
		if failed == nil {
			failed = l.err
		}
		l.err = nil
	}
	if cause := context.Cause(rctx); cause != nil && ctx.Err() == nil {
		failed = cause // the part that failed first; the others were stopped
	}
	return c.finish(failed)
}

// finish returns the end of the call in progress, cancelling it with
// err if it has not ended.
func (c *Client) finish(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.over {
		if err == nil {
			err = c.core.errorf("the receiving stopped before the call ended")
		}
		r := c.core.Cancel(err)
		c.apply(&r)
	}
	return c.result
}

// recvLink receives on l and steps the core with each message, as long
// as the call in progress awaits an answer on l. It returns the error
// that ended the call here (a rejection of its request, say), or that
// stopped the receiving (ctx ended, a receive failed with l still
// usable, l given up); nil once nothing is awaited on l.
func (c *Client) recvLink(ctx context.Context, l *link) error {
	for {
		c.mu.Lock()
		awaits := c.core.Awaits(l.index)
		c.mu.Unlock()
		if !awaits {
			return nil
		}
		conn, gen, err := l.get()
		if err != nil {
			return err
		}
		m, err := conn.Recv(ctx)
		if err != nil {
			if ctx.Err() != nil || rdma.Recoverable(err) {
				return fmt.Errorf("ps client %d: receiving from shards %v: %w", c.cfg.Learner, l.shards, err)
			}
			if err := c.broken(ctx, l, gen, err); err != nil {
				return err
			}
			c.drain(ctx, l) // the new connection's restore
			continue
		}
		r, ok := coreReply(m)
		if !ok {
			m.Release()
			continue
		}
		done, err := c.step(func() ClientReady { return c.core.Recv(l.index, gen, int(m.Shard), r) })
		m.Release()
		if done != CallNone && err != nil {
			return err
		}
	}
}

// reportDelivered calls OnDelivered for the mini-batches the core
// reported delivered, in push order, on the caller's goroutine.
func (c *Client) reportDelivered() {
	c.mu.Lock()
	c.report = append(c.report[:0], c.delivered...)
	c.delivered = c.delivered[:0]
	c.mu.Unlock()
	if c.cfg.OnDelivered != nil {
		for _, b := range c.report {
			c.cfg.OnDelivered(b)
		}
	}
}

// Snapshot fills w (the flat vector) with every shard's weights at the end
// of epoch (≥ 1: the snapshot of the servers' ServerConfig.Snapshots; 0:
// the final weights, once the servers are final; −1: the weights as they
// are now), waiting until they exist, and returns each shard's stamp. It
// is an evaluator's request and binds no learner identity.
func (c *Client) Snapshot(ctx context.Context, epoch int, w []float32) ([]uint64, error) {
	stamps := make([]uint64, c.cfg.Shards)
	if err := c.startCall(ctx, func() ClientReady { return c.core.Snapshot(epoch, w, stamps) }); err != nil {
		return nil, err
	}
	if err := c.collect(ctx); err != nil {
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
	if _, err := c.step(func() ClientReady { return c.core.Push(grad, batch, lo) }); err != nil {
		return err
	}
	return c.flush(ctx)
}

// Pushes returns, per shard, the gradients the learner pushed (Push
// calls; resends are not counted again), including those lost with a
// connection or a restarted server (the shards' counters tell what
// became of the others). It may be called from any goroutine.
func (c *Client) Pushes() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.Pushes()
}

// Join announces the learner to every shard again (after a Leave or a
// reconnect) and waits until every shard has acknowledged it (or
// rejected it: the rejections are returned, wrapping ErrRejected). It
// must not be called while an asynchronous pull is in flight.
func (c *Client) Join(ctx context.Context) error {
	if err := c.startCall(ctx, c.core.Join); err != nil {
		return err
	}
	defer c.reportDelivered()
	return c.collect(ctx)
}

// Leave tells every shard that the learner is done, or pauses (a later
// Join resumes it; its next pull asks for the current weights), and waits
// until every shard has acknowledged it. An acknowledgement from shard k
// comes after shard k stepped every message the client sent it before on
// that connection (its pushes included): connections deliver in order,
// the shard server steps one connection's messages to a shard in the
// order they arrive, and the client sends a connection's messages in the
// order the core made them. It must not be called while an asynchronous
// pull is in flight. Once it has returned nil, the learner's pushes are
// all delivered and it is no member: a connection replaced from then on
// joins it to no shard, until Join.
func (c *Client) Leave(ctx context.Context) error {
	if err := c.startCall(ctx, c.core.Leave); err != nil {
		return err
	}
	defer c.reportDelivered()
	return c.collect(ctx)
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
		if conn != nil {
			errs = append(errs, conn.Close())
		}
	}
	c.step(c.core.Close)
	if c.pf != nil && c.pf.req != nil {
		close(c.pf.req)
		c.pf.req = nil
		<-c.pf.exited // an asynchronous pull in flight has failed: the goroutine is done with the client
	}
	if c.recv != nil {
		c.recv.stop(c.links[1:])
		c.recv = nil
	}
	c.mu.Lock()
	for _, l := range c.links { // queued messages no writer will send
		for _, o := range l.out[l.head:] {
			o.m.Release()
		}
		clear(l.out)
		l.out, l.head = l.out[:0], 0
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}
