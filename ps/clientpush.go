package ps

import "github.com/softsync/softsync/rdma"

// The client core's pushes: sending them, keeping them until their shard
// acknowledges them, and reporting them delivered.

// unacked is a push its shard has not acknowledged: everything a resend
// carries, and the number of the push it is part of.
type unacked struct {
	seq, stamp, life, batch, push uint64
	// grad is the shard's slice of the pushed gradient: the caller's
	// memory (see Push), not a copy.
	grad []float32
	// sel is, for TopK, the selection the push carries (Send.Sel).
	sel []byte
}

// delivery is a push not yet reported delivered: its mini-batch and the
// shards that have not acknowledged it.
type delivery struct {
	batch uint64
	left  int
}

// partialPush is the push Push is sending: shards next and above have
// their slices sent (next = 0: no push in progress).
type partialPush struct {
	grad  *float32 // &grad[0]
	batch uint64
	push  uint64 // its number (newDelivery)
	next  int
}

// Push sends the part of a push of grad (Total floats, averaged over the
// mini-batch) that grad[lo:] holds: the slice of every shard whose range
// starts at lo or later and was not sent yet, last shards first, each
// stamped with the shard's current stamp and life (see Pull) and
// carrying the mini-batch's job-wide id batch (Msg.Batch; 0: none). lo =
// 0 sends what is left and completes the push; until then every Push
// must pass the same grad and batch, and no other call may start. It
// ends at once (Done: CallPush); a push does not wait for the shards.
//
// The core keeps each slice, a reference to grad (not a copy), until its
// shard has acknowledged it (an answer to a request sent after it on
// the same connection), and sends it again, with the same sequence
// number, stamp, life and mini-batch, on a connection that replaces a
// broken one (LinkUp). Once every shard has acknowledged the push, its
// mini-batch is reported (ClientReady.Delivered), in push order. A TopK
// push (Codec) carries its selection (the k elements of largest
// magnitude of the slice plus the shard's residual, taken from the
// residual once): a resend carries exactly the same elements.
//
// A push fails at once, sending nothing, if a link it needs was given
// up; a push that fails partway (sequence numbers used up) is over: its
// shards not reached never acknowledge it, so neither it nor any later
// push is reported delivered.
func (c *ClientCore) Push(grad []float32, batch uint64, lo int) ClientReady {
	c.reset()
	p := &c.partial
	switch {
	case len(grad) != c.cfg.Total:
		return c.done(CallPush, c.errorf("Push of %d floats, vector has %d: %w", len(grad), c.cfg.Total, ErrInvalidConfig))
	case p.next > 0 && (&grad[0] != p.grad || batch != p.batch):
		return c.done(CallPush, c.errorf("Push of mini-batch %d while the push of mini-batch %d is partly sent: %w", batch, p.batch, ErrInvalidConfig))
	case p.next == 0 && c.call.kind != CallNone && !(c.call.kind == CallPull && c.call.async):
		return c.done(CallPush, c.errorf("Push while a %v is in progress: %w", c.call.kind, ErrInvalidConfig))
	}
	last := p.next
	if last == 0 {
		last = len(c.ranges)
	}
	if err := c.deadLink(CallPush, func(k int) bool { return k < last && c.ranges[k].Lo >= lo }); err != nil {
		p.next = 0
		return c.done(CallPush, err)
	}
	if p.next == 0 {
		c.learner()
		*p = partialPush{grad: &grad[0], batch: batch, next: len(c.ranges), push: c.newDelivery(batch)}
	}
	for p.next > 0 && c.ranges[p.next-1].Lo >= lo {
		k := p.next - 1
		r := c.ranges[k]
		c.pushes[k]++
		u := unacked{stamp: c.stamps[k], life: c.lives[k], batch: batch, push: p.push, grad: grad[r.Lo:r.Hi]}
		var err error
		if c.cfg.Codec.ID == rdma.CodecTopK {
			u.sel, err = c.selectTopK(k, u.grad)
		}
		if err == nil {
			u.seq, err = c.nextSeq()
		}
		if err != nil {
			p.next = 0
			return c.done(CallPush, c.errorf("push to shard %d: %w", k, err))
		}
		c.unacked[k] = append(c.unacked[k], u)
		c.pushedOn[k] = stampLife{u.stamp, u.life}
		if l := &c.links[c.cfg.Links[k]]; l.up {
			c.sendPush(k, &u)
			if a := &c.call; a.kind == CallPull && a.async && !a.over && a.waiting[k] && a.asked[k] == 0 && !c.ask(k) {
				// The prefetch's request deferred after this push
				// (deferred) cannot be asked: the sequence numbers are
				// used up, and the pull has ended with it.
				p.next = 0
				return c.done(CallPush, c.call.err)
			}
		}
		p.next = k
	}
	if p.next == 0 {
		c.pushed = true
	}
	return c.done(CallPush, nil)
}

// sendPush sends push u to shard k on its link.
func (c *ClientCore) sendPush(k int, u *unacked) {
	li := c.cfg.Links[k]
	m := Msg{Type: MsgPush, Shard: k, Learner: c.cfg.Learner, Seq: u.seq, Clock: u.stamp, Batch: u.batch, Life: u.life}
	if u.sel == nil {
		m.Grad = u.grad
	}
	c.ready.Sends = append(c.ready.Sends, Send{Link: li, Gen: c.links[li].gen, Msg: m, Sel: u.sel})
}

// selectTopK takes, for a TopK push of g to shard k, the k elements of
// largest magnitude of g plus the shard's residual out of the residual
// and returns them in the codec's wire form.
func (c *ClientCore) selectTopK(k int, g []float32) ([]byte, error) {
	if c.enc == nil {
		c.enc = rdma.NewEncoder()
	}
	var buf []byte
	if n := len(c.sels); n > 0 {
		buf, c.sels = c.sels[n-1], c.sels[:n-1]
	}
	return c.enc.Encode(buf, c.cfg.Codec, &c.feedback[k], g)
}

// newDelivery records a new push of mini-batch batch, which every shard
// has to acknowledge, and returns its number.
func (c *ClientCore) newDelivery(batch uint64) uint64 {
	c.undelivered = append(c.undelivered, delivery{batch, c.cfg.Shards})
	return c.first + uint64(len(c.undelivered)) - 1
}

// acked records that shard k answered the client's request seq: every
// push to k sent before it is delivered. The pushes every shard has
// acknowledged go to the ready batch's Delivered, in push order (a push
// stays until those before it are delivered too).
func (c *ClientCore) acked(k int, seq uint64) {
	q := c.unacked[k]
	n := 0
	for n < len(q) && q[n].seq < seq {
		if q[n].sel != nil {
			c.sels = append(c.sels, q[n].sel[:0])
		}
		c.undelivered[q[n].push-c.first].left--
		n++
	}
	if n == 0 {
		return
	}
	m := copy(q, q[n:])
	clear(q[m:]) // drop the references to the caller's gradients
	c.unacked[k] = q[:m]
	n = 0
	for n < len(c.undelivered) && c.undelivered[n].left == 0 {
		if b := c.undelivered[n].batch; b != 0 {
			c.ready.Delivered = append(c.ready.Delivered, b)
		}
		n++
	}
	c.undelivered = c.undelivered[:copy(c.undelivered, c.undelivered[n:])]
	c.first += uint64(n)
}

// restore sends on link li's new connection, before anything else, what
// the old one was to its shards: if the learner is a member, a join for
// each shard (a shard restarted from a checkpoint may hold it as gone)
// but those that acknowledged the Leave in progress, then each
// unacknowledged push again, in order, as it was sent, then the requests
// of the call in progress still unanswered, with new sequence numbers.
// The answers to these joins answer no request and acknowledge nothing.
func (c *ClientCore) restore(li int) {
	l := &c.links[li]
	if c.member && !c.join(li) {
		return
	}
	for _, k := range l.shards {
		for i := range c.unacked[k] {
			c.sendPush(k, &c.unacked[k][i])
		}
	}
	if c.call.kind == CallNone || c.call.over {
		return
	}
	for _, k := range l.shards {
		switch {
		case !c.call.waiting[k]:
		case c.deferred(k):
			c.call.asked[k] = 0 // Push asks it
		case !c.ask(k):
			return
		}
	}
}

// deferred reports whether the request to shard k of the call in
// progress waits, on a new connection, for the push that goes before it:
// under hardsync, an asynchronous pull (a prefetch, asked before the
// push of the step it prefetches for) whose shard has not had that push
// yet, the push of the weights last pulled. Asked at once, the pull
// could reach a server restarted since those weights, in another life,
// before the push: it would be answered with the round in progress
// there, on which the learner would push its next step, while the push
// of this step, computed on weights of the earlier life, is given up
// but counts there as the learner's push of its round (Shard,
// "claimRounds"): two steps of one learner in one round. Asked after
// the push (Push asks it), it is answered with the round after it.
func (c *ClientCore) deferred(k int) bool {
	a := &c.call
	return a.kind == CallPull && a.async && c.cfg.Protocol == Hardsync &&
		c.pushedOn[k] != (stampLife{c.stamps[k], c.lives[k]})
}

// Unsent tells the core that message seq, made for link's connection of
// generation gen, was not sent and that the connection is still usable
// (its Send failed before anything was written: a context ended, a
// message the transport refused). A push is forgotten, so that no later
// answer counts it as delivered (neither it nor any later push is
// reported delivered), and a push partly sent is over; a request of the
// call in progress ends the call with err.
func (c *ClientCore) Unsent(link, gen int, seq uint64, err error) ClientReady {
	c.reset()
	l := &c.links[link]
	if gen != l.gen {
		return c.ready
	}
	for _, k := range l.shards {
		q := c.unacked[k]
		for i := range q {
			if q[i].seq == seq {
				c.unacked[k] = append(q[:i], q[i+1:]...)
				q[len(q)-1] = unacked{}
				c.partial.next = 0
				return c.ready
			}
		}
		if a := &c.call; a.kind != CallNone && !a.over && a.waiting[k] && a.asked[k] == seq {
			c.end(err)
			return c.ready
		}
	}
	return c.ready
}
