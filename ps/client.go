package ps

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/softsync/softsync/ps/sgd"
)

// ClientConfig configures the learner side of the parameter server.
type ClientConfig struct {
	Job      uint32
	Learner  uint32   // this learner's id, < the server's Learners
	Protocol Protocol // decides the minimum clock of pulls
	Total    int      // length of the flat vector
	Shards   int      // number of shards (one connection each)
}

// Client is a learner's connection to every shard: Pull fills the whole
// flat vector from all shards, Push sends each shard its slice of the
// gradient stamped with that shard's last pulled stamp. A Client is used
// by one goroutine.
//
// Pull minimum clocks: under softsync the learner's last stamp (weights
// never go backwards); under hardsync, after a push, the last stamp + 1 (the
// round must complete). Replies are matched to pulls by sequence; replies
// to older pulls are discarded.
type Client struct {
	cfg    ClientConfig
	conns  []Conn
	ranges []Range
	stamps []uint64
	pulls  []uint64 // per shard, sequence of the pull in flight
	pushed bool     // a push was sent since the last pull
	seq    uint64
}

// NewClient returns a client over conns, where conns[k] is connected to
// shard k's server. The client owns the connections (Close closes them).
func NewClient(cfg ClientConfig, conns []Conn) (*Client, error) {
	if len(conns) != cfg.Shards {
		return nil, sgd.Fieldf("Shards", "%d shards but %d connections", cfg.Shards, len(conns))
	}
	rs, err := Ranges(cfg.Total, cfg.Shards)
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, conns: conns, ranges: rs, stamps: make([]uint64, cfg.Shards), pulls: make([]uint64, cfg.Shards)}, nil
}

// Stamps returns, per shard, the stamp of the weights last pulled.
func (c *Client) Stamps() []uint64 { return slices.Clone(c.stamps) }

func (c *Client) frame(t MsgType, shard int) *Frame {
	c.seq++
	return &Frame{Type: uint8(t), Job: c.cfg.Job, Learner: c.cfg.Learner, Shard: uint32(shard), Seq: c.seq}
}

func (c *Client) send(ctx context.Context, f *Frame) error {
	if err := c.conns[f.Shard].Send(ctx, f); err != nil {
		return fmt.Errorf("ps client %d: %v to shard %d: %w", c.cfg.Learner, MsgType(f.Type), f.Shard, err)
	}
	return nil
}

// Pull asks every shard for its weights and writes them into w (the flat
// vector, Total floats). Rejections of earlier messages that arrive
// meanwhile are returned, joined and wrapping ErrRejected, after w is
// filled; transport errors are returned at once.
func (c *Client) Pull(ctx context.Context, w []float32) error {
	if len(w) != c.cfg.Total {
		return fmt.Errorf("ps client %d: Pull into %d floats, vector has %d: %w", c.cfg.Learner, len(w), c.cfg.Total, ErrInvalidConfig)
	}
	for k := range c.conns {
		f := c.frame(MsgPull, k)
		f.Timestamp = c.stamps[k]
		if c.pushed && c.cfg.Protocol == Hardsync {
			f.Timestamp++
		}
		c.pulls[k] = f.Seq
		if err := c.send(ctx, f); err != nil {
			return err
		}
	}
	c.pushed = false
	var rejections []error
	for k, r := range c.ranges {
		for {
			f, err := c.conns[k].Recv(ctx)
			if err != nil {
				return fmt.Errorf("ps client %d: pull from shard %d: %w", c.cfg.Learner, k, err)
			}
			if f.Type == FrameError {
				err := fmt.Errorf("%w: %s", ErrRejected, f.Data)
				if f.Seq == c.pulls[k] { // the pull itself: no weights will come
					return errors.Join(append(rejections, err)...)
				}
				rejections = append(rejections, err)
				continue
			}
			if f.Type != FrameWeights || f.Seq != c.pulls[k] {
				continue // a reply to an older pull
			}
			if len(f.Payload) != r.Len() {
				return fmt.Errorf("ps client %d: shard %d sent %d weights, its range has %d: %w", c.cfg.Learner, k, len(f.Payload), r.Len(), ErrBadLength)
			}
			copy(w[r.Lo:r.Hi], f.Payload)
			c.stamps[k] = f.Timestamp
			break
		}
	}
	return errors.Join(rejections...)
}

// Push sends every shard its slice of grad (Total floats, averaged over
// the mini-batch) stamped with the shard's last pulled stamp. It does not
// wait for the shards; rejections arrive with the next Pull.
func (c *Client) Push(ctx context.Context, grad []float32) error {
	if len(grad) != c.cfg.Total {
		return fmt.Errorf("ps client %d: Push of %d floats, vector has %d: %w", c.cfg.Learner, len(grad), c.cfg.Total, ErrInvalidConfig)
	}
	for k, r := range c.ranges {
		f := c.frame(MsgPush, k)
		f.Timestamp, f.Payload = c.stamps[k], slices.Clone(grad[r.Lo:r.Hi])
		if err := c.send(ctx, f); err != nil {
			return err
		}
	}
	c.pushed = true
	return nil
}

// Join announces the learner to every shard again (after a Leave or a
// reconnect).
func (c *Client) Join(ctx context.Context) error { return c.all(ctx, MsgJoin) }

// Leave tells every shard that the learner is done.
func (c *Client) Leave(ctx context.Context) error { return c.all(ctx, MsgLeave) }

func (c *Client) all(ctx context.Context, t MsgType) error {
	for k := range c.conns {
		if err := c.send(ctx, c.frame(t, k)); err != nil {
			return err
		}
	}
	return nil
}

// Close closes every connection.
func (c *Client) Close() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}
