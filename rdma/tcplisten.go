package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Listen listens on a TCP address ("127.0.0.1:0" picks a free port).
// Without Options.Secret it refuses addresses that do not bind to a
// loopback interface (ErrInsecure) unless Options.Insecure is set. With a
// Secret, each connection is authenticated on a goroutine of the
// listener's (at most Options.MaxHandshakes at once) before Accept
// returns it; see Options.Secret.
func (t *TCP) Listen(addr string) (Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &OpError{Op: "listen", Peer: addr, Err: err}
	}
	tl := ln.(*net.TCPListener)
	if len(t.opts.Secret) == 0 && !t.opts.Insecure {
		if !tl.Addr().(*net.TCPAddr).IP.IsLoopback() { // what was bound, whatever names resolve to
			tl.Close()
			return nil, &OpError{Op: "listen", Peer: addr, Err: fmt.Errorf(
				"%w: %s is not a loopback address and Options.Secret is empty: give the job a secret "+
					"(or set Options.Insecure to accept unauthenticated peers)", ErrInsecure, addr)}
		}
	}
	if len(t.opts.Secret) == 0 {
		return &tcpListener{ln: tl, opts: t.opts}, nil
	}
	l := &authListener{ln: tl, opts: t.opts, ready: make(chan *tcpConn), done: make(chan struct{}),
		slots: make(chan struct{}, t.opts.MaxHandshakes), pending: map[*net.TCPConn]bool{}}
	l.wg.Add(1)
	go l.loop()
	return l, nil
}

// Dial connects to a TCP listener and, with Options.Secret, runs the
// client side of the handshake (bounded by Options.HandshakeTimeout and
// ctx); an authentication failure matches ErrAuth.
func (t *TCP) Dial(ctx context.Context, addr string) (Conn, error) {
	nc, err := t.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			err = &joined{ErrRefused, err, err.Error()}
		}
		return nil, &OpError{Op: "dial", Peer: addr, Err: err}
	}
	tc := nc.(*net.TCPConn)
	if len(t.opts.Secret) > 0 {
		if err := t.authenticate(ctx, tc); err != nil {
			tc.SetLinger(0)
			tc.Close()
			return nil, &OpError{Op: "dial", Peer: addr, Err: err}
		}
	}
	return newTCPConn(tc, t.opts)
}

// authenticate runs the client handshake on nc under the handshake
// timeout and ctx.
func (t *TCP) authenticate(ctx context.Context, nc *net.TCPConn) error {
	deadline := time.Now().Add(t.opts.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(aLongTimeAgo) })
	err := clientHandshake(nc, t.opts.Secret, t.opts.Job)
	stop()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		err = nc.SetDeadline(time.Time{})
	}
	return err
}

// ListenerStats counts what a listener did with the connections it saw.
type ListenerStats struct {
	// Accepted counts the connections Accept returned.
	Accepted uint64
	// AuthFailures counts connections closed because their handshake
	// failed: another secret or job id, bytes that are not a handshake,
	// a replayed handshake, a peer that closed or did not finish within
	// Options.HandshakeTimeout.
	AuthFailures uint64
	// Rejected counts connections closed unread because
	// Options.MaxHandshakes handshakes were in progress.
	Rejected uint64
	// Handshakes is the number of connections being authenticated now,
	// or authenticated and waiting for Accept.
	Handshakes int
}

// tcpListener is the listener without authentication: Accept takes
// connections straight from the socket.
type tcpListener struct {
	ln       *net.TCPListener
	opts     Options
	mu       sync.Mutex // serializes Accept (the deadline is shared)
	accepted atomic.Uint64
}

func (l *tcpListener) Addr() string { return l.ln.Addr().String() }
func (l *tcpListener) Close() error { return l.ln.Close() }

func (l *tcpListener) Stats() ListenerStats { return ListenerStats{Accepted: l.accepted.Load()} }

func (l *tcpListener) Accept(ctx context.Context) (Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { l.ln.SetDeadline(aLongTimeAgo) })
		defer func() {
			if !stop() {
				l.ln.SetDeadline(time.Time{})
			}
		}()
	}
	nc, err := l.ln.AcceptTCP()
	for err != nil && errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil {
		// A previous call's cancellation landed late: clear it, go on.
		l.ln.SetDeadline(time.Time{})
		nc, err = l.ln.AcceptTCP()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, &OpError{Op: "accept", Peer: l.Addr(), Err: ctx.Err(), Recoverable: true}
		}
		if errors.Is(err, net.ErrClosed) {
			err = ErrClosed
		}
		return nil, &OpError{Op: "accept", Peer: l.Addr(), Err: err}
	}
	c, err := newTCPConn(nc, l.opts)
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// authListener authenticates every connection before Accept sees it. A
// goroutine accepts from the socket and starts a handshake goroutine per
// connection, at most MaxHandshakes at a time (a connection beyond that
// is closed at once); a handshake goroutine hands its connection to
// Accept, or closes it on failure, after HandshakeTimeout at the latest.
// Accept only ever returns authenticated connections, ErrClosed or ctx's
// error: failures are counted and reported to Options.OnAuthFailure.
type authListener struct {
	ln    *net.TCPListener
	opts  Options
	ready chan *tcpConn // authenticated, handed to Accept
	done  chan struct{} // closed by Close
	once  sync.Once
	slots chan struct{} // one per handshake in progress
	wg    sync.WaitGroup

	mu      sync.Mutex
	pending map[*net.TCPConn]bool // in handshake; nil once closed

	accepted, failures, rejected atomic.Uint64
}

func (l *authListener) Addr() string { return l.ln.Addr().String() }

func (l *authListener) Stats() ListenerStats {
	return ListenerStats{Accepted: l.accepted.Load(), AuthFailures: l.failures.Load(),
		Rejected: l.rejected.Load(), Handshakes: len(l.slots)}
}

func (l *authListener) Accept(ctx context.Context) (Conn, error) {
	select {
	case <-l.done:
		return nil, &OpError{Op: "accept", Peer: l.Addr(), Err: ErrClosed}
	default:
	}
	select {
	case c := <-l.ready:
		<-l.slots // the handshake's
		l.accepted.Add(1)
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
		for nc := range l.pending {
			nc.Close()
		}
		l.pending = nil
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
		nc, err := l.ln.AcceptTCP()
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
		select {
		case l.slots <- struct{}{}:
		default:
			l.rejected.Add(1)
			l.drop(nc, fmt.Errorf("%w: %d handshakes in progress, the limit: connection closed unread", ErrAuth, cap(l.slots)))
			continue
		}
		if !l.track(nc) {
			<-l.slots
			nc.Close()
			return
		}
		l.wg.Add(1)
		go l.handshake(nc)
	}
}

// handshake authenticates nc and hands it to Accept, or closes it. It
// holds a slot until then: Accept releases the slot of the connection it
// takes, so that Stats never counts a connection twice or not at all.
func (l *authListener) handshake(nc *net.TCPConn) {
	defer l.wg.Done()
	nc.SetDeadline(time.Now().Add(l.opts.HandshakeTimeout))
	err := serverHandshake(nc, l.opts.Secret, l.opts.Job)
	if err == nil {
		err = nc.SetDeadline(time.Time{})
	}
	if !l.untrack(nc) { // closed by Close meanwhile
		<-l.slots
		nc.Close()
		return
	}
	if err != nil {
		<-l.slots
		l.failures.Add(1)
		l.drop(nc, err)
		return
	}
	c, err := newTCPConn(nc, l.opts)
	if err != nil { // newTCPConn closed nc; a socket option failed, not the peer
		<-l.slots
		return
	}
	select {
	case l.ready <- c:
	case <-l.done:
		<-l.slots
		c.Close()
	}
}

// drop closes nc without a word to the peer (a reset, so that no
// connection lingers) and reports why.
func (l *authListener) drop(nc *net.TCPConn, err error) {
	peer := nc.RemoteAddr().String()
	nc.SetLinger(0)
	nc.Close()
	if l.opts.OnAuthFailure != nil {
		l.opts.OnAuthFailure(peer, err)
	}
}

func (l *authListener) track(nc *net.TCPConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		return false
	}
	l.pending[nc] = true
	return true
}

// untrack reports whether nc was still pending (false once Close closed
// it).
func (l *authListener) untrack(nc *net.TCPConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.pending[nc] {
		return false
	}
	delete(l.pending, nc)
	return true
}
