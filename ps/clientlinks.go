package ps

import "fmt"

// The client core's inputs from its links: the answers received, and
// connections that break, are replaced or are given up.

// Recv steps a message received on link's connection of generation gen
// from shard: weights (r.Weights, r.Clock: their stamp, r.Life: the
// shard's life), an acknowledgement (r.Ack) or a rejection (r.Err: the
// shard's reason, which the core wraps in ErrRejected). r.Seq is the
// request it answers; r.To is not read. Messages from a connection since
// replaced are ignored, and so are answers to requests no longer
// awaited (an older request's, a duplicate).
//
// The answer to an awaited request is taken: weights are copied into
// the vector of the pull or snapshot in progress (unless they lie there
// already: Place) and their stamp recorded; an acknowledgement of a
// leave marks the shard departed. It acknowledges every push to that
// shard sent before the request (clientpush.go), and the call ends once
// every shard has answered. A rejection of an awaited request ends the
// call with it, and so does, under hardsync, the rejection of a push (a
// pull after it would wait forever: the round cannot close without that
// gradient); any other rejection is reported by the end of the call in
// progress, or of the next one. r.Weights is read during Recv only.
func (c *ClientCore) Recv(link, gen, shard int, r Reply) ClientReady {
	c.reset()
	if link < 0 || link >= len(c.links) || gen != c.links[link].gen {
		return c.ready
	}
	c.links[link].replaced = 0
	a := &c.call
	mine := a.kind != CallNone && !a.over && shard >= 0 && shard < len(a.waiting) && c.cfg.Links[shard] == link &&
		a.waiting[shard] && a.asked[shard] != 0 && r.Seq == a.asked[shard]
	switch {
	case r.Err != nil:
		err := fmt.Errorf("%w: %w", ErrRejected, r.Err)
		if mine || c.cfg.Protocol == Hardsync && a.kind != CallNone && !a.over {
			// The request itself: no answer will come. Under hardsync a
			// push's rejection too: the round cannot close without the
			// refused gradient, so the pull after it would never be
			// answered.
			c.end(err)
			return c.ready
		}
		c.rejections = append(c.rejections, err)
		return c.ready
	case !mine, r.Ack != (a.kind == CallJoin || a.kind == CallLeave):
		return c.ready // a reply to an older request
	case c.early(shard, gen, r):
		return c.ready
	}
	if err := c.take(shard, gen, r); err != nil {
		c.end(err)
		return c.ready
	}
	c.acked(shard, r.Seq)
	a.waiting[shard], a.asked[shard] = false, 0 // answered: a duplicate is ignored
	if a.left--; a.left == 0 {
		c.end(nil)
	}
	return c.ready
}

// early reports whether r, shard k's weights answering an asynchronous
// pull under hardsync (asked before the push of the round it awaits),
// are of the round the learner computes on, from the life its stamps
// come from: the pull was asked on a connection that replaced the one
// the stamps came on, with no minimum clock (the server might have been
// restarted), and the same life answered before the learner pushed. The
// stamps hold on the new connection, and the pull asks again, for the
// next round: weights of the round computed on would make the learner
// push a second gradient for it, which the shard refuses. (A pull after
// the push needs no such care: the shard holds it until the round the
// push completes is applied.)
func (c *ClientCore) early(k, gen int, r Reply) bool {
	a := &c.call
	if a.kind != CallPull || !a.async || c.cfg.Protocol != Hardsync || c.gens[k] == gen || r.Life != c.lives[k] || r.Clock > c.stamps[k] {
		return false
	}
	c.acked(k, r.Seq)
	c.gens[k] = gen
	c.ask(k) // a failure ends the call
	return true
}

// take records r, shard k's answer to the call in progress, received on
// a connection of generation gen.
func (c *ClientCore) take(k, gen int, r Reply) error {
	a := &c.call
	switch a.kind {
	case CallJoin, CallLeave:
		c.departed[k] = a.kind == CallLeave
		return nil
	}
	rg := c.ranges[k]
	if len(r.Weights) != rg.Len() {
		return c.errorf("%v: shard %d sent %d weights, its range has %d: %w", a.kind, k, len(r.Weights), rg.Len(), ErrBadLength)
	}
	if rg.Len() > 0 && &r.Weights[0] != &a.w[rg.Lo] {
		copy(a.w[rg.Lo:rg.Hi], r.Weights)
	}
	a.stamps[k] = r.Clock
	if a.kind == CallPull {
		a.lives[k], a.gens[k], a.got[k] = r.Life, gen, true
	}
	return nil
}

// LinkDown tells the core that link's connection of generation gen
// broke (a Send or Recv failed and left it unusable), with cause. What
// was sent on it may be lost. With Reconnect the core asks for a new
// connection (ClientReady.Dial), unless the link was replaced
// maxReplaced times in a row with nothing received on it; otherwise the
// link is given up, and the call in progress ends if it waits on it. A
// report of an older generation, or of a link already down, changes
// nothing.
func (c *ClientCore) LinkDown(link, gen int, cause error) ClientReady {
	c.reset()
	l := &c.links[link]
	if gen != l.gen || !l.up || l.dead != nil {
		return c.ready
	}
	l.up, l.cause = false, cause
	switch {
	case !c.cfg.Reconnect:
		c.giveUp(link, cause)
	case l.replaced >= maxReplaced:
		c.giveUp(link, fmt.Errorf("connection to shards %v replaced %d times in a row with nothing received (%w)", l.shards, l.replaced, cause))
	default:
		c.ready.Dial = append(c.ready.Dial, link)
	}
	return c.ready
}

// LinkUp tells the core that link, down, has a new connection: the next
// generation. Before anything else is sent on it, the core restores on
// it what the old one was to the link's shards: joins, the
// unacknowledged pushes, the requests still awaited (see restore). The
// runtime sends nothing made for the old connection on the new one.
func (c *ClientCore) LinkUp(link int) ClientReady {
	c.reset()
	l := &c.links[link]
	if l.up || l.dead != nil {
		return c.ready
	}
	l.gen++
	l.up = true
	l.replaced++
	c.restore(link)
	return c.ready
}

// LinkDead tells the core that link, down, cannot be replaced (err: why
// not): the link is given up, and every call that needs it fails.
func (c *ClientCore) LinkDead(link int, err error) ClientReady {
	c.reset()
	l := &c.links[link]
	if l.dead == nil {
		l.up = false
		c.giveUp(link, fmt.Errorf("connection to shards %v lost (%v), not restored: %w", l.shards, l.cause, err))
	}
	return c.ready
}

// giveUp marks link dead with err and ends the call in progress if it
// waits on it.
func (c *ClientCore) giveUp(link int, err error) {
	l := &c.links[link]
	l.dead = err
	c.endIfWaiting(link, c.errorf("%v from shards %v: %w", c.call.kind, l.shards, err))
}

// endIfWaiting ends the call in progress with err if it waits for an
// answer on link.
func (c *ClientCore) endIfWaiting(link int, err error) {
	if c.Awaits(link) {
		c.end(err)
	}
}
