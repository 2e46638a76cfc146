package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Listen listens on a TCP address ("127.0.0.1:0" picks a free port).
// Without Options.Secret it refuses addresses that do not bind to a
// loopback interface (ErrInsecure) unless Options.Insecure is set. With a
// Secret, each connection is authenticated on a goroutine of the
// listener's (at most Options.MaxHandshakes at once, shedding the most
// silent when more come) before Accept returns it; see Options.Secret.
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
	return newAuthListener(tl, t.opts, tcpServer{t.opts}), nil
}

// tcpServer is the server side of TCP's handshake.
type tcpServer struct{ opts Options }

func (s tcpServer) shake(nc net.Conn, stepped func()) (Conn, error) {
	err := serverHandshake(nc, s.opts.Secret, s.opts.Job, stepped)
	if err == nil {
		err = nc.SetDeadline(time.Time{})
	}
	if err != nil {
		return nil, err
	}
	c, err := newTCPConn(nc.(*net.TCPConn), s.opts)
	if err != nil { // newTCPConn closed nc; a socket option failed, not the peer
		return nil, localError{err}
	}
	return c, nil
}

func (tcpServer) peer(nc net.Conn) string { return nc.RemoteAddr().String() }

// Dial connects to a TCP listener and, with Options.Secret, runs the
// client side of the handshake (bounded by Options.HandshakeTimeout and
// ctx); an authentication failure matches ErrAuth.
func (t *TCP) Dial(ctx context.Context, addr string) (Conn, error) {
	nc, err := t.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &OpError{Op: "dial", Peer: addr, Err: ConnectError(err)}
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
	// Options.HandshakeTimeout, or (shm) a set-up that breaks the
	// protocol.
	AuthFailures uint64
	// Rejected counts connections closed for want of a slot
	// (Options.MaxHandshakes): shed in their handshake to make room for
	// a newer connection, or closed unread when every slot held an
	// authenticated connection not yet accepted.
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
