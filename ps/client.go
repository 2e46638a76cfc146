package ps

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// ClientConfig configures the learner side of the parameter server.
type ClientConfig struct {
	Learner uint32 // this learner's id, < the server's Learners
	// Incarnation counts the learner's lives (restarts), from 0; it is
	// the high half of every sequence number (see Seq).
	Incarnation uint32
	Protocol    Protocol   // decides the minimum clock of pulls
	Total       int        // length of the flat vector
	Shards      int        // number of shards
	Codec       rdma.Codec // encoding of the gradients it pushes (zero value: none)
}

// Client is a learner's connection to every shard: Pull fills the whole
// flat vector from all shards, Push sends each shard its slice of the
// gradient stamped with that shard's last pulled stamp. Shards run by one
// server share one connection. A Client is used by one goroutine
// (PullAsync receives on a goroutine of its own).
//
// Pull minimum clocks: under softsync the learner's last stamp (weights
// never go backwards); under hardsync, after a push, the last stamp + 1 (the
// round must complete). Replies are matched to pulls by sequence; replies
// to older pulls are discarded.
type Client struct {
	cfg    ClientConfig
	conns  []rdma.Conn // per shard
	links  []link      // the distinct connections
	ranges []Range
	stamps []uint64
	pulls  []uint64 // per shard, sequence of the request in flight
	pushed bool     // a push was sent since the last pull
	n      uint32   // messages sent in this incarnation
	// feedback is, per shard, the error-feedback residual of the pushes
	// (lossy codecs that keep one, TopK): optimizer state of the learner,
	// kept across reconnections.
	feedback []rdma.Feedback
	pf       *prefetcher // started by the first PullAsync
}

// link is one connection and the shards it carries.
type link struct {
	conn   rdma.Conn
	shards []int
}

// prefetcher receives the replies of an asynchronous pull on its own
// goroutine: one request at a time, no allocation per pull.
type prefetcher struct {
	req    chan pfReq
	done   chan error
	stamps []uint64 // stamps of the weights being received
	busy   bool     // a pull is in flight (owner goroutine only)
}

type pfReq struct {
	ctx context.Context
	w   []float32
}

// NewClient returns a client over conns, where conns[k] is connected to
// shard k's server (the same Conn for shards of one server). The client
// owns the connections (Close closes them).
func NewClient(cfg ClientConfig, conns []rdma.Conn) (*Client, error) {
	if len(conns) != cfg.Shards {
		return nil, sgd.Fieldf("Shards", "%d shards but %d connections", cfg.Shards, len(conns))
	}
	if err := cfg.Codec.Validate(); err != nil {
		return nil, err
	}
	rs, err := Ranges(cfg.Total, cfg.Shards)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, conns: conns, ranges: rs, stamps: make([]uint64, cfg.Shards), pulls: make([]uint64, cfg.Shards),
		feedback: make([]rdma.Feedback, cfg.Shards)}
	for k, conn := range conns {
		i := slices.IndexFunc(c.links, func(l link) bool { return l.conn == conn })
		if i < 0 {
			c.links = append(c.links, link{conn: conn})
			i = len(c.links) - 1
		}
		c.links[i].shards = append(c.links[i].shards, k)
	}
	return c, nil
}

// Stamps returns, per shard, the stamp of the weights last pulled.
func (c *Client) Stamps() []uint64 { return slices.Clone(c.stamps) }

// msg returns a pooled message of type t for shard with n payload floats
// and the next sequence number.
func (c *Client) msg(t MsgType, shard, n int) *rdma.Msg {
	c.n++
	return wireMsg(t, c.cfg.Learner, shard, Seq(c.cfg.Incarnation, c.n), 0, n)
}

func (c *Client) send(ctx context.Context, m *rdma.Msg) error {
	what, shard := describe(m), m.Shard
	if err := c.conns[shard].Send(ctx, m); err != nil {
		return fmt.Errorf("ps client %d: %s: %w", c.cfg.Learner, what, err)
	}
	return nil
}

// Pull asks every shard for its weights and writes them into w (the flat
// vector, Total floats). Rejections of earlier messages that arrive
// meanwhile are returned, joined and wrapping ErrRejected, after w is
// filled; transport errors are returned at once.
func (c *Client) Pull(ctx context.Context, w []float32) error {
	if err := c.startPull(ctx, w, false); err != nil {
		return err
	}
	return c.recvWeights(ctx, w, c.stamps)
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
		c.pf = &prefetcher{req: make(chan pfReq), done: make(chan error, 1), stamps: make([]uint64, c.cfg.Shards)}
		go c.prefetch()
	}
	if c.pf.busy {
		return fmt.Errorf("ps client %d: PullAsync while a pull is in flight: %w", c.cfg.Learner, ErrInvalidConfig)
	}
	if err := c.startPull(ctx, w, true); err != nil {
		return err
	}
	c.pf.busy = true
	c.pf.req <- pfReq{ctx, w}
	return nil
}

// WaitPull waits for the pull started by PullAsync and returns its error
// (as Pull would). It returns nil at once if no pull is in flight.
func (c *Client) WaitPull() error {
	if c.pf == nil || !c.pf.busy {
		return nil
	}
	err := <-c.pf.done
	c.pf.busy = false
	copy(c.stamps, c.pf.stamps)
	return err
}

// prefetch is the receiving goroutine of PullAsync; it ends when req is
// closed (Close).
func (c *Client) prefetch() {
	for r := range c.pf.req {
		c.pf.done <- c.recvWeights(r.ctx, r.w, c.pf.stamps)
	}
}

// startPull checks w and sends a pull to every shard. next asks, under
// hardsync, for the next round's weights whether or not a push was sent.
func (c *Client) startPull(ctx context.Context, w []float32, next bool) error {
	if len(w) != c.cfg.Total {
		return fmt.Errorf("ps client %d: Pull into %d floats, vector has %d: %w", c.cfg.Learner, len(w), c.cfg.Total, ErrInvalidConfig)
	}
	if c.pf != nil && c.pf.busy {
		return fmt.Errorf("ps client %d: Pull while an asynchronous pull is in flight: %w", c.cfg.Learner, ErrInvalidConfig)
	}
	for k := range c.conns {
		m := c.msg(MsgPull, k, 0)
		m.Timestamp = c.stamps[k]
		if (c.pushed || next) && c.cfg.Protocol == Hardsync {
			m.Timestamp++
		}
		c.pulls[k] = m.Seq
		if err := c.send(ctx, m); err != nil {
			return err
		}
	}
	c.pushed = false
	return nil
}

// recvWeights receives every shard's reply to the requests in c.pulls
// into w and their stamps into stamps, connection by connection.
func (c *Client) recvWeights(ctx context.Context, w []float32, stamps []uint64) error {
	var rejections []error
	for _, ln := range c.links {
		left := len(ln.shards)
		for left > 0 {
			m, err := ln.conn.Recv(ctx)
			if err != nil {
				return fmt.Errorf("ps client %d: pull from shards %v: %w", c.cfg.Learner, ln.shards, err)
			}
			k := int(m.Shard)
			mine := slices.Contains(ln.shards, k)
			switch {
			case m.Type == rdma.TypeError:
				err := fmt.Errorf("%w: %w", ErrRejected, m.Err())
				if mine && m.Seq == c.pulls[k] { // the request itself: no weights will come
					m.Release()
					return errors.Join(append(rejections, err)...)
				}
				rejections = append(rejections, err)
			case m.Type != TypeWeights || !mine || m.Seq != c.pulls[k]:
				// a reply to an older request
			case len(m.Payload) != c.ranges[k].Len():
				n := len(m.Payload)
				m.Release()
				return fmt.Errorf("ps client %d: shard %d sent %d weights, its range has %d: %w", c.cfg.Learner, k, n, c.ranges[k].Len(), ErrBadLength)
			default:
				copy(w[c.ranges[k].Lo:c.ranges[k].Hi], m.Payload)
				stamps[k] = m.Timestamp
				c.pulls[k] = 0 // answered: a duplicate reply is ignored
				left--
			}
			m.Release()
		}
	}
	return errors.Join(rejections...)
}

// Snapshot fills w (the flat vector) with every shard's weights at the end
// of epoch (≥ 1: the snapshot of the servers' ServerConfig.Snapshots; 0:
// the final weights, once the servers are final), waiting until they
// exist, and returns each shard's stamp. It is an evaluator's request and
// binds no learner identity.
func (c *Client) Snapshot(ctx context.Context, epoch int, w []float32) ([]uint64, error) {
	if len(w) != c.cfg.Total {
		return nil, fmt.Errorf("ps client: Snapshot into %d floats, vector has %d: %w", len(w), c.cfg.Total, ErrInvalidConfig)
	}
	for k := range c.conns {
		m := c.msg(0, k, 0)
		m.Type, m.Timestamp = TypeSnapshot, uint64(epoch)
		c.pulls[k] = m.Seq
		if err := c.send(ctx, m); err != nil {
			return nil, err
		}
	}
	stamps := make([]uint64, c.cfg.Shards)
	if err := c.recvWeights(ctx, w, stamps); err != nil {
		return nil, err
	}
	return stamps, nil
}

// Push sends every shard its slice of grad (Total floats, averaged over
// the mini-batch) stamped with the shard's last pulled stamp. It does not
// wait for the shards; rejections arrive with the next Pull.
func (c *Client) Push(ctx context.Context, grad []float32) error {
	if len(grad) != c.cfg.Total {
		return fmt.Errorf("ps client %d: Push of %d floats, vector has %d: %w", c.cfg.Learner, len(grad), c.cfg.Total, ErrInvalidConfig)
	}
	for k, r := range c.ranges {
		m := c.msg(MsgPush, k, r.Len())
		copy(m.Payload, grad[r.Lo:r.Hi])
		m.Timestamp, m.Codec, m.Feedback = c.stamps[k], c.cfg.Codec, &c.feedback[k]
		if err := c.send(ctx, m); err != nil {
			return err
		}
	}
	c.pushed = true
	return nil
}

// Join announces the learner to every shard again (after a Leave or a
// reconnect).
func (c *Client) Join(ctx context.Context) error { return c.all(ctx, MsgJoin) }

// Leave tells every shard that the learner is done, or pauses (a later
// Join resumes it; its next pull asks for the current weights).
func (c *Client) Leave(ctx context.Context) error {
	c.pushed = false
	return c.all(ctx, MsgLeave)
}

func (c *Client) all(ctx context.Context, t MsgType) error {
	for k := range c.conns {
		if err := c.send(ctx, c.msg(t, k, 0)); err != nil {
			return err
		}
	}
	return nil
}

// Connections returns, per server connection, the shards it carries, the
// peer's address and the transport it uses.
func (c *Client) Connections() []Connection {
	var cs []Connection
	for _, ln := range c.links {
		cs = append(cs, Connection{Shards: slices.Clone(ln.shards), Peer: ln.conn.RemoteAddr(), Transport: ln.conn.Transport()})
	}
	return cs
}

// Connection describes one of a client's connections.
type Connection struct {
	Shards    []int
	Peer      string
	Transport rdma.TransportInfo
}

// Stats returns the traffic of the client's connections, summed.
func (c *Client) Stats() rdma.Stats {
	var st rdma.Stats
	for _, ln := range c.links {
		cs := ln.conn.Stats()
		st.Add(&cs)
	}
	return st
}

// Close closes every connection (which ends a pull in flight with an
// error) and stops the PullAsync goroutine.
func (c *Client) Close() error {
	if c.pf != nil && c.pf.req != nil {
		defer close(c.pf.req)
		c.pf.req = nil
	}
	var errs []error
	for _, ln := range c.links {
		errs = append(errs, ln.conn.Close())
	}
	return errors.Join(errs...)
}
