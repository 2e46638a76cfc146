package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// authListener authenticates every connection before Accept sees it. A
// goroutine accepts from the socket and starts a handshake goroutine per
// connection; a handshake goroutine hands its connection to Accept, or
// closes it on failure, after HandshakeTimeout at the latest. Accept only
// ever returns authenticated connections, ErrClosed or ctx's error:
// failures are counted and reported to Options.OnAuthFailure. What a
// handshake is, and what connection it makes, is the transport's
// (serverSide): TCP authenticates; shm authenticates (with a secret) and
// then sets up the shared segment.
//
// At most MaxHandshakes connections hold a slot: in their handshake, or
// authenticated and waiting for Accept. A connection that finds every
// slot taken gets one by shedding the connection in its handshake that
// has kept the listener waiting longest for its next message: pending
// is ordered by the last step each connection made (connected, or its
// client hello arrived), and the first is shed, closed as a failed
// handshake. When every slot holds an authenticated connection that
// Accept has not taken, the new connection is closed unread instead.
//
// A peer that holds the secret sends its hello as it connects and ends
// its handshake within a round trip, so that connections that stay idle
// or trickle bytes, however many are held open, are shed before it: it is
// shed only if MaxHandshakes other connections connect or send their
// hello while it is in its handshake.
type authListener struct {
	ln    net.Listener
	opts  Options
	side  serverSide
	ready chan Conn     // authenticated, handed to Accept
	done  chan struct{} // closed by Close
	once  sync.Once
	wg    sync.WaitGroup

	mu      sync.Mutex
	pending []net.Conn // in their handshake, by their last step, oldest first
	waiting int        // authenticated, not yet taken by Accept
	closed  bool
	// A connection moves from pending or waiting into these counters
	// under mu, so that Stats never counts one twice.
	accepted, failures, rejected uint64
}

// serverSide is a transport's part of an authListener.
type serverSide interface {
	// shake runs the server's side of nc's handshake, under the
	// handshake deadline, and returns the connection it makes, or an
	// error matching ErrAuth (counted and reported as a failure) or
	// wrapping a localError (not the peer's fault: only closed). It
	// calls stepped when the client's first message checked out, and
	// clears nc's deadline before it returns a connection.
	shake(nc net.Conn, stepped func()) (Conn, error)
	// peer names nc's peer in reports.
	peer(nc net.Conn) string
}

// localError is a set-up failure of this end's (a socket option), which
// a listener does not count against the peer.
type localError struct{ error }

func (e localError) Unwrap() error { return e.error }

func newAuthListener(ln net.Listener, opts Options, side serverSide) *authListener {
	l := &authListener{ln: ln, opts: opts, side: side, ready: make(chan Conn), done: make(chan struct{})}
	l.wg.Add(1)
	go l.loop()
	return l
}

func (l *authListener) Addr() string { return l.ln.Addr().String() }

func (l *authListener) Stats() ListenerStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ListenerStats{Accepted: l.accepted, AuthFailures: l.failures, Rejected: l.rejected,
		Handshakes: len(l.pending) + l.waiting}
}

func (l *authListener) Accept(ctx context.Context) (Conn, error) {
	select {
	case <-l.done:
		return nil, &OpError{Op: "accept", Peer: l.Addr(), Err: ErrClosed}
	default:
	}
	select {
	case c := <-l.ready:
		l.mu.Lock()
		l.waiting--
		l.accepted++
		l.mu.Unlock()
		return c, nil
	case <-l.done:
		return nil, &OpError{Op: "accept", Peer: l.Addr(), Err: ErrClosed}
	case <-ctx.Done():
		return nil, &OpError{Op: "accept", Peer: l.Addr(), Err: ctx.Err(), Recoverable: true}
	}
}

// Close stops accepting, closes the connections still in their handshake
// and waits for the listener's goroutines.
func (l *authListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
		l.mu.Lock()
		for _, nc := range l.pending {
			nc.Close()
		}
		l.pending, l.closed = nil, true
		l.mu.Unlock()
		l.wg.Wait()
	})
	if err != nil {
		return &OpError{Op: "close", Peer: l.Addr(), Err: err}
	}
	return nil
}

// loop accepts connections from the socket until Close.
func (l *authListener) loop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or memory: wait for some to be freed.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
				continue
			case <-l.done:
				return
			}
		}
		backoff = 0
		shed, why, ok := l.admit(nc)
		if !ok {
			nc.Close()
			return
		}
		if shed != nil {
			l.drop(shed, why)
		}
		if shed != nc {
			l.wg.Add(1)
			go l.handshake(nc)
		}
	}
}

// admit gives nc a slot, shedding another connection when every slot is
// taken (see authListener). It returns the connection shed, with why,
// which is nc itself when no slot could be freed; ok is false once the
// listener is closed.
func (l *authListener) admit(nc net.Conn) (shed net.Conn, why error, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil, false
	}
	if len(l.pending)+l.waiting >= l.opts.MaxHandshakes {
		l.rejected++
		if len(l.pending) == 0 {
			return nc, fmt.Errorf("%w: %d authenticated connections wait for Accept, the limit: connection closed unread",
				ErrAuth, l.waiting), true
		}
		shed = l.pending[0]
		l.pending = slices.Delete(l.pending, 0, 1)
		why = fmt.Errorf("%w: shed for a newer connection, all %d handshake slots being taken: of the connections in their handshake, it had been silent longest",
			ErrAuth, l.opts.MaxHandshakes)
	}
	l.pending = append(l.pending, nc)
	return shed, why, true
}

// handshake authenticates nc and hands it to Accept, or closes it.
func (l *authListener) handshake(nc net.Conn) {
	defer l.wg.Done()
	nc.SetDeadline(time.Now().Add(l.opts.HandshakeTimeout))
	c, err := l.side.shake(nc, func() { l.stepped(nc) })
	var local localError
	isLocal := errors.As(err, &local)
	failed := err
	if isLocal {
		failed = nil
	}
	if !l.finish(nc, failed) { // shed or closed by Close meanwhile, and counted
		if c != nil {
			c.Close()
		}
		nc.Close()
		return
	}
	switch {
	case isLocal: // the peer did nothing wrong: no report
		nc.Close()
		l.unwait()
		return
	case err != nil:
		l.drop(nc, err)
		return
	}
	select {
	case l.ready <- c:
	case <-l.done:
		l.unwait()
		c.Close()
	}
}

// stepped moves nc, whose client hello has arrived, behind the
// connections that made their last step before it.
func (l *authListener) stepped(nc net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(l.pending, nc); i >= 0 {
		l.pending = append(slices.Delete(l.pending, i, i+1), nc)
	}
}

// finish takes nc out of the handshakes in progress, into the
// connections waiting for Accept or, when err is set, the failures. It
// returns false when nc was no longer there (shed, or closed by Close).
func (l *authListener) finish(nc net.Conn, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.Index(l.pending, nc)
	if i < 0 {
		return false
	}
	l.pending = slices.Delete(l.pending, i, i+1)
	if err != nil {
		l.failures++
	} else {
		l.waiting++
	}
	return true
}

// unwait frees the slot of an authenticated connection that will not be
// accepted.
func (l *authListener) unwait() {
	l.mu.Lock()
	l.waiting--
	l.mu.Unlock()
}

// drop closes nc without a word to the peer (a reset, so that no
// connection lingers) and reports why.
func (l *authListener) drop(nc net.Conn, err error) {
	peer := l.side.peer(nc)
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	nc.Close()
	if l.opts.OnAuthFailure != nil {
		l.opts.OnAuthFailure(peer, err)
	}
}
