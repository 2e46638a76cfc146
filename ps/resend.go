package ps

import (
	"context"
	"encoding/binary"
	"math"
	"slices"

	"github.com/softsync/softsync/rdma"
)

// unacked is a push its shard has not acknowledged: everything a resend
// carries, and the number of the push it is part of.
type unacked struct {
	seq, stamp, life, batch, push uint64
	// grad is the shard's slice of the pushed gradient: the caller's
	// memory (see Push), not a copy.
	grad []float32
	// sel is, for TopK, the selection the push carries: k uint32
	// indices, then k float32 values, little-endian (the codec's wire
	// form, docs/wire.md); the payload is those elements, zero elsewhere.
	sel []byte
}

// pushMsg returns the message of push u to shard k: its payload, stamp,
// mini-batch, life and sequence. The payload is the gradient itself, lent
// to the transport (rdma.Msg.BorrowHeld: the gradient stays unchanged
// until a Pull or Leave after the push has its answers, see Push), which
// encodes or sends it from where it lies. A TopK push travels as its
// selection, without error feedback: the codec sends exactly its
// elements.
func (c *Client) pushMsg(k int, u *unacked) *rdma.Msg {
	var m *rdma.Msg
	if u.sel != nil {
		m = c.msg(MsgPush, k, len(u.grad))
		scatter(m.Payload, u.sel)
	} else {
		m = c.msg(MsgPush, k, 0)
		m.BorrowHeld(u.grad)
	}
	m.Seq, m.Timestamp, m.Codec = u.seq, u.stamp, c.cfg.Codec
	setPushData(m, u.batch, u.life)
	return m
}

// selectTopK takes, for a TopK push of g to shard k, the k elements of
// largest magnitude of g plus the shard's residual out of the residual
// and returns them in the codec's wire form.
func (c *Client) selectTopK(k int, g []float32) ([]byte, error) {
	if c.enc == nil {
		c.enc = rdma.NewEncoder()
	}
	c.ackMu.Lock()
	var buf []byte
	if n := len(c.sels); n > 0 {
		buf, c.sels = c.sels[n-1], c.sels[:n-1]
	}
	c.ackMu.Unlock()
	return c.enc.Encode(buf, c.cfg.Codec, &c.feedback[k], g)
}

// scatter writes the elements of a TopK selection sel into dst, zero
// elsewhere.
func scatter(dst []float32, sel []byte) {
	clear(dst)
	n := len(sel) / 8
	le := binary.LittleEndian
	for j := range n {
		dst[le.Uint32(sel[4*j:])] = math.Float32frombits(le.Uint32(sel[4*(n+j):]))
	}
}

// acked records that shard k answered the client's request seq: every
// push to k sent before it is delivered.
func (c *Client) acked(k int, seq uint64) {
	c.ackMu.Lock()
	defer c.ackMu.Unlock()
	q := c.unacked[k]
	n := 0
	for n < len(q) && q[n].seq < seq {
		if q[n].sel != nil {
			c.sels = append(c.sels, q[n].sel[:0])
		}
		c.undelivered[q[n].push-c.first].left--
		n++
	}
	if n > 0 {
		clear(q[:n]) // drop the references to the caller's gradients
		c.unacked[k] = q[:copy(q, q[n:])]
	}
}

// delivery is a push not yet reported delivered: its mini-batch and the
// shards that have not acknowledged it.
type delivery struct {
	batch uint64
	left  int
}

// newDelivery records a new push of mini-batch batch, which every shard
// has to acknowledge, and returns its number.
func (c *Client) newDelivery(batch uint64) uint64 {
	c.ackMu.Lock()
	defer c.ackMu.Unlock()
	c.undelivered = append(c.undelivered, delivery{batch, c.cfg.Shards})
	return c.first + uint64(len(c.undelivered)) - 1
}

// report calls OnDelivered for the pushes every shard has acknowledged,
// in push order (a push stays until those before it are delivered too).
func (c *Client) report() {
	c.ackMu.Lock()
	c.delivered = c.delivered[:0]
	n := 0
	for n < len(c.undelivered) && c.undelivered[n].left == 0 {
		if b := c.undelivered[n].batch; b != 0 {
			c.delivered = append(c.delivered, b)
		}
		n++
	}
	c.undelivered = c.undelivered[:copy(c.undelivered, c.undelivered[n:])]
	c.first += uint64(n)
	c.ackMu.Unlock()
	if c.cfg.OnDelivered != nil {
		for _, b := range c.delivered {
			c.cfg.OnDelivered(b)
		}
	}
}

// unsent forgets push seq to shard k, which was never sent (its Send
// failed and the connection was not replaced): no later answer of the
// shard may count it as delivered.
func (c *Client) unsent(k int, seq uint64) {
	c.ackMu.Lock()
	defer c.ackMu.Unlock()
	c.unacked[k] = slices.DeleteFunc(c.unacked[k], func(u unacked) bool { return u.seq == seq })
}

// restore makes conn, which has just replaced a failed connection of l,
// what the old one was to l's shards before anything else is sent on it:
// if the learner is a member, a join for each shard (a shard restarted
// from a checkpoint may hold it as gone) but those that acknowledged the
// Leave in progress, then each unacknowledged push
// again, in order, as it was sent. The answers to these joins answer no
// request and acknowledge nothing. If conn fails meanwhile, the next use
// of it sees that and replaces it again; restore returns an error only
// once ctx has ended or the sequence numbers are used up. It runs with
// l.send held; each push is built under ackMu, so that an acknowledgement
// received meanwhile never recycles a selection being read.
func (c *Client) restore(ctx context.Context, l *link, conn rdma.Conn) error {
	if c.member.Load() {
		for _, k := range l.shards {
			if c.departed[k] {
				continue
			}
			m := c.msg(MsgJoin, k, 0)
			var err error
			if m.Seq, err = c.nextSeq(); err != nil {
				m.Release()
				return err
			}
			if conn.Send(ctx, m) != nil {
				return ctx.Err()
			}
		}
	}
	for _, k := range l.shards {
		for last := uint64(0); ; {
			c.ackMu.Lock()
			q := c.unacked[k]
			i := 0
			for i < len(q) && q[i].seq <= last {
				i++
			}
			if i == len(q) {
				c.ackMu.Unlock()
				break
			}
			m := c.pushMsg(k, &q[i])
			last = q[i].seq
			c.ackMu.Unlock()
			if conn.Send(ctx, m) != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}
