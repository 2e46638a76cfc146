package ps

import (
	"context"
	"errors"
	"sync"
)

// receivers receive a client's answers on its connections beyond the
// first, one goroutine per connection, for collect: a learner reads all
// its servers' answers at once, with no goroutine started and nothing
// allocated per call. They are started by the first collect over several
// connections and stopped by Close.
//
// A collect starts each receiver's part (link.rx), receives on the first
// connection itself, and then takes every part's result from done. A
// part that fails ends ctx with its error as the cause, which stops the
// others.
type receivers struct {
	ctx    context.Context // the parts' context, derived from the caller's
	cancel context.CancelCauseFunc
	parent <-chan struct{} // the Done channel of the context ctx derives from
	done   chan *link      // a part is over: its link, with its result
	wg     sync.WaitGroup
}

// errCollectOver ends a receivers' context that a later call does not
// reuse.
var errCollectOver = errors.New("ps client: collect over")

// startReceivers starts a receiver goroutine for each link beyond the
// first.
func (c *Client) startReceivers() *receivers {
	r := &receivers{done: make(chan *link, len(c.links))}
	for _, l := range c.links[1:] {
		l.rx = make(chan struct{})
		r.wg.Go(func() {
			for range l.rx {
				l.err = c.recvLink(r.ctx, l)
				if l.err != nil {
					r.cancel(l.err)
				}
				r.done <- l
			}
		})
	}
	return r
}

// context returns the parts' context for a call under ctx: the previous
// call's while it derives from a context with the same Done channel and
// has not ended, so that steady-state calls allocate nothing (the
// transports keep their cancellation hooks per Done channel); a new one
// otherwise. The parts see ctx's deadline and cancellation, not its
// values.
func (r *receivers) context(ctx context.Context) context.Context {
	if r.ctx == nil || ctx.Done() != r.parent || r.ctx.Err() != nil {
		if r.cancel != nil {
			r.cancel(errCollectOver)
		}
		r.ctx, r.cancel = context.WithCancelCause(ctx)
		r.parent = ctx.Done()
	}
	return r.ctx
}

// stop ends the receiver goroutines of links, which are idle (no collect
// in progress), and waits for them.
func (r *receivers) stop(links []*link) {
	for _, l := range links {
		close(l.rx)
		l.rx = nil
	}
	r.wg.Wait()
	if r.cancel != nil {
		r.cancel(errCollectOver)
	}
}
