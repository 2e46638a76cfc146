package ps

import (
	"context"
	"slices"
	"time"
)

// lends tracks the weights replies that are still reading one array of a
// shard's weights: each was queued to a peer's writer with tokens as its
// done channel, and the writer sends its peer there once Send has
// returned. A writer that has ended (its peer's exited closed) sends
// every token it owes before it ends and none for a reply it never took.
//
// Between two changes of the array, a shard's goroutine lends it to as
// many writers as it has replies for; it settles the lends only before
// the next change, so that the writers send at once, side by side, and a
// transport that lends the array on (shm's lend segment) leaves every
// learner to copy its weights straight out of it.
type lends struct {
	tokens chan *peer
	out    []*peer // one entry per outstanding reply
}

// newLends returns an empty tracker with room for the tokens of a pull per
// learner and a few snapshot requests: a shard that has lent its weights
// to that many replies settles them before it lends more.
func newLends(learners int) *lends {
	return &lends{tokens: make(chan *peer, learners+4)}
}

// full reports whether another lend would not find room for its token.
func (l *lends) full() bool { return len(l.out) == cap(l.tokens) }

// add records a reply queued to p with l.tokens.
func (l *lends) add(p *peer) { l.out = append(l.out, p) }

// done records p's token.
func (l *lends) done(p *peer) {
	if i := slices.Index(l.out, p); i >= 0 {
		l.out[i] = l.out[len(l.out)-1]
		l.out = l.out[:len(l.out)-1]
	}
}

// drain takes the tokens sent so far.
func (l *lends) drain() {
	for {
		select {
		case p := <-l.tokens:
			l.done(p)
		default:
			return
		}
	}
}

// dropExited forgets the replies of peers whose writer has ended, after
// taking the tokens it sent before.
func (l *lends) dropExited() {
	for i := 0; i < len(l.out); i++ {
		p := l.out[i]
		select {
		case <-p.exited:
		default:
			continue
		}
		l.drain()
		l.out = slices.DeleteFunc(l.out, func(q *peer) bool { return q == p })
		i = -1
	}
}

// settle waits until no reply reads the array, and reports whether that
// came before timeout fired or ctx ended (a nil timeout never fires).
func (l *lends) settle(ctx context.Context, timeout <-chan time.Time) bool {
	for {
		l.dropExited()
		if len(l.out) == 0 {
			return true
		}
		select {
		case p := <-l.tokens:
			l.done(p)
		case <-l.out[0].exited: // its last replies will send no token
		case <-timeout:
			l.drain()
			l.dropExited()
			return len(l.out) == 0
		case <-ctx.Done():
			return false
		}
	}
}

// retire calls release once no reply reads the array any more, however
// long that takes: the writers end when their connections do.
func (l *lends) retire(release func()) {
	l.settle(context.Background(), nil)
	release()
}
