package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

var (
	secret      = []byte("0123456789abcdef0123456789abcdef")
	otherSecret = []byte("fedcba9876543210fedcba9876543210")
)

// report is one call of Options.OnAuthFailure.
type report struct {
	peer string
	err  error
}

// authServer is an authenticating TCP listener with an accept loop that
// hands connections to conns and ends, sending Accept's error to
// acceptErr, only when Accept fails. Failures go to reports unless the
// options report them elsewhere.
type authServer struct {
	ln        rdma.Listener
	reports   chan report
	conns     chan rdma.Conn
	acceptErr chan error
}

func newAuthServer(t *testing.T, opts rdma.Options) *authServer {
	t.Helper()
	s := &authServer{reports: make(chan report, 1000), conns: make(chan rdma.Conn, 100), acceptErr: make(chan error, 1)}
	if opts.Secret == nil {
		opts.Secret = secret
	}
	if opts.OnAuthFailure == nil {
		opts.OnAuthFailure = func(peer string, err error) { s.reports <- report{peer, err} }
	}
	n, err := rdma.NewTCP(opts)
	if err != nil {
		t.Fatal(err)
	}
	if s.ln, err = n.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := s.ln.Accept(context.Background())
			if err != nil {
				s.acceptErr <- err
				return
			}
			s.conns <- c
		}
	})
	t.Cleanup(func() {
		s.ln.Close()
		wg.Wait()
		close(s.conns)
		for c := range s.conns {
			c.Close()
		}
	})
	return s
}

// nextReport waits for the next failure report, which must match ErrAuth
// and mention want.
func (s *authServer) nextReport(t *testing.T, want string) report {
	t.Helper()
	select {
	case r := <-s.reports:
		if !errors.Is(r.err, rdma.ErrAuth) || !strings.Contains(r.err.Error(), want) || !strings.HasPrefix(r.peer, "127.0.0.1:") {
			t.Fatalf("failure report from %s: %v; want ErrAuth mentioning %q", r.peer, r.err, want)
		}
		return r
	case err := <-s.acceptErr:
		t.Fatalf("Accept failed: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatalf("no failure report (want one mentioning %q)", want)
	}
	return report{}
}

// accepted waits for the accept loop to hand over a connection.
func (s *authServer) accepted(t *testing.T) rdma.Conn {
	t.Helper()
	select {
	case c := <-s.conns:
		return c
	case err := <-s.acceptErr:
		t.Fatalf("Accept failed: %v", err)
	case r := <-s.reports:
		t.Fatalf("authentication failed for %s: %v", r.peer, r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("no connection accepted")
	}
	return nil
}

func dialTCP(t *testing.T, opts rdma.Options, addr string) (rdma.Conn, error) {
	t.Helper()
	n, err := rdma.NewTCP(opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.Dial(recvCtx(t), addr)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// rawDial connects a plain socket.
func rawDial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// closedSilently checks that the server closed raw without sending
// anything.
func closedSilently(t *testing.T, raw net.Conn) {
	t.Helper()
	raw.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [256]byte
	n, err := raw.Read(b[:])
	if n != 0 || !(errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("read %d bytes %q, error %v; want a close and nothing else", n, b[:n], err)
	}
}

// clientHello builds a handshake hello as docs/wire.md describes it.
func clientHello(version, role byte, job uint32) []byte {
	b := append([]byte("SSYA"), version, role, 0, 0, byte(job), byte(job>>8), byte(job>>16), byte(job>>24))
	return append(b, bytes.Repeat([]byte{7}, 32)...)
}

// TestAuth: an authenticated connection carries frames; every kind of
// failed handshake fails Dial with ErrAuth (or closes a raw peer without a
// word), is counted and reported with the peer's address, and never
// reaches the accept loop, which goes on accepting.
func TestAuth(t *testing.T) {
	s := newAuthServer(t, rdma.Options{Job: 4})
	addr := s.ln.Addr()
	good := rdma.Options{Job: 4, Secret: secret}

	c, err := dialTCP(t, good, addr)
	if err != nil {
		t.Fatal(err)
	}
	sc := s.accepted(t)
	send := rdma.NewMsg(3)
	copy(send.Payload, []float32{1, 2, 3})
	send.Seq = 9
	if err := c.Send(recvCtx(t), send); err != nil {
		t.Fatal(err)
	}
	m, err := sc.Recv(recvCtx(t))
	if err != nil || m.Seq != 9 || m.Payload[2] != 3 || m.Job != 4 {
		t.Fatalf("message over an authenticated connection: %v %+v", err, m)
	}
	m.Release()
	sc.Close()

	failures := 0
	t.Run("WrongSecret", func(t *testing.T) {
		_, err := dialTCP(t, rdma.Options{Job: 4, Secret: otherSecret}, addr)
		if !errors.Is(err, rdma.ErrAuth) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "server's proof") {
			t.Fatalf("dial with another secret: %v", err)
		}
		s.nextReport(t, "closed the connection while reading the client's proof")
		failures++
	})
	t.Run("WrongJob", func(t *testing.T) {
		_, err := dialTCP(t, rdma.Options{Job: 5, Secret: secret}, addr)
		if !errors.Is(err, rdma.ErrAuth) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("dial for another job: %v", err)
		}
		s.nextReport(t, "job 5, this end in job 4")
		failures++
	})
	t.Run("NoSecret", func(t *testing.T) {
		c, err := dialTCP(t, rdma.Options{Job: 4}, addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Send(recvCtx(t), rdma.NewMsg(100))
		s.nextReport(t, "without authenticating")
		if _, err := c.Recv(recvCtx(t)); !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("recv on a connection the server refused: %v", err)
		}
		failures++
	})
	t.Run("Garbage", func(t *testing.T) {
		raw := rawDial(t, addr)
		raw.Write([]byte("GET / HTTP/1.1\r\nHost: softsync\r\nUser-Agent: probe\r\n\r\n"))
		closedSilently(t, raw)
		if r := s.nextReport(t, "not a softsync handshake"); r.peer != raw.LocalAddr().String() {
			t.Fatalf("report names %s, the peer is %s", r.peer, raw.LocalAddr())
		}
		failures++
	})
	t.Run("Version", func(t *testing.T) {
		raw := rawDial(t, addr)
		raw.Write(clientHello(2, 1, 4))
		closedSilently(t, raw)
		s.nextReport(t, "version 2")
		failures++
	})
	t.Run("Role", func(t *testing.T) {
		raw := rawDial(t, addr)
		raw.Write(clientHello(1, 2, 4)) // a server's hello
		closedSilently(t, raw)
		s.nextReport(t, "role 2")
		failures++
	})
	t.Run("ServerWithoutSecret", func(t *testing.T) {
		raw, c := rawPeer(t, rdma.Options{})
		raw.Write(clientHello(1, 1, 0)) // shorter than a frame header
		raw.(*net.TCPConn).CloseWrite() // as the client does when its handshake times out
		if _, err := c.Recv(recvCtx(t)); !errors.Is(err, rdma.ErrBadMagic) || !strings.Contains(err.Error(), "no Options.Secret") {
			t.Fatalf("a server without a secret receiving a handshake: %v", err)
		}
	})
	t.Run("Replay", func(t *testing.T) {
		recorded := recordHandshake(t, s, good)
		if len(recorded) != 44+32 {
			t.Fatalf("recorded %d client bytes, want 76", len(recorded))
		}
		raw := rawDial(t, addr)
		raw.Write(recorded)
		// The server answers the replayed hello with a fresh hello of its
		// own, then closes without a word on the stale proof.
		raw.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(raw, make([]byte, 76)); err != nil {
			t.Fatal(err)
		}
		closedSilently(t, raw)
		s.nextReport(t, "client's proof does not match")
		failures++
	})

	// The accept loop never saw an error and still accepts.
	if _, err := dialTCP(t, good, addr); err != nil {
		t.Fatal(err)
	}
	s.accepted(t).Close()
	st := s.ln.Stats()
	if st.AuthFailures != uint64(failures) || st.Accepted != 3 || st.Rejected != 0 {
		t.Fatalf("listener stats %+v, want %d failures, 3 accepted (one through the replay recorder)", st, failures)
	}
	select {
	case r := <-s.reports:
		t.Fatalf("unexpected report %s: %v", r.peer, r.err)
	default:
	}
}

// recordHandshake authenticates a client with opts through a relay that
// records what the client sends, and returns those bytes.
func recordHandshake(t *testing.T, s *authServer, opts rdma.Options) []byte {
	t.Helper()
	relay, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	var mu sync.Mutex
	var rec bytes.Buffer
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		in, err := relay.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		out, err := net.Dial("tcp", s.ln.Addr())
		if err != nil {
			return
		}
		defer out.Close()
		go io.Copy(in, out)
		io.Copy(out, io.TeeReader(in, writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return rec.Write(p)
		})))
	})
	c, err := dialTCP(t, opts, relay.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s.accepted(t).Close() // the server has read the whole handshake
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	return bytes.Clone(rec.Bytes())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestAuthStalledClient: a client that stops in the middle of its
// handshake does not hold up others, and is closed at the handshake
// deadline.
func TestAuthStalledClient(t *testing.T) {
	t.Run("OthersProceed", func(t *testing.T) {
		s := newAuthServer(t, rdma.Options{HandshakeTimeout: time.Hour})
		stalled := rawDial(t, s.ln.Addr())
		stalled.Write(clientHello(1, 1, 0)[:20])
		waitStats(t, s.ln, func(st rdma.ListenerStats) bool { return st.Handshakes == 1 })
		for range 3 {
			if _, err := dialTCP(t, rdma.Options{Secret: secret}, s.ln.Addr()); err != nil {
				t.Fatal(err)
			}
			s.accepted(t).Close()
		}
		if st := s.ln.Stats(); st.Handshakes != 1 || st.AuthFailures != 0 || st.Accepted != 3 {
			t.Fatalf("stats %+v with one stalled client and three accepted", st)
		}
		stalled.Close()
		s.nextReport(t, "closed the connection while reading the client's hello")
	})
	t.Run("ClosedAtDeadline", func(t *testing.T) {
		s := newAuthServer(t, rdma.Options{HandshakeTimeout: 50 * time.Millisecond})
		stalled := rawDial(t, s.ln.Addr())
		stalled.Write(clientHello(1, 1, 0)[:20])
		closedSilently(t, stalled)
		if r := s.nextReport(t, "timed out reading the client's hello"); !errors.Is(r.err, os.ErrDeadlineExceeded) {
			t.Fatalf("report %v does not match os.ErrDeadlineExceeded", r.err)
		}
		// A server that stalls fails Dial the same way.
		quiet, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer quiet.Close()
		_, err = dialTCP(t, rdma.Options{Secret: secret, HandshakeTimeout: 50 * time.Millisecond}, quiet.Addr().String())
		if !errors.Is(err, rdma.ErrAuth) || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("dial to a server that does not answer: %v", err)
		}
		// Cancelling the dial's context ends the handshake with ctx's error.
		ctx, cancel := context.WithCancel(context.Background())
		n, _ := rdma.NewTCP(rdma.Options{Secret: secret, HandshakeTimeout: time.Hour})
		go func() {
			c, err := quiet.Accept() // the dial is connected, its handshake waiting
			if err == nil {
				defer c.Close()
				c.Read(make([]byte, 44))
			}
			cancel()
		}()
		if _, err := n.Dial(ctx, quiet.Addr().String()); !errors.Is(err, context.Canceled) || errors.Is(err, rdma.ErrAuth) {
			t.Fatalf("dial cancelled during the handshake: %v", err)
		}
	})
}

// waitStats polls the listener's stats until ok, for 20 s at most.
func waitStats(t *testing.T, ln rdma.Listener, ok func(rdma.ListenerStats) bool) rdma.ListenerStats {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := ln.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("listener stats %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAuthFlood: many connections that never authenticate cost at most
// MaxHandshakes goroutines (once those of the connections shed have
// ended) and little memory, are all closed, and leave nothing behind.
func TestAuthFlood(t *testing.T) {
	const clients, limit = 200, 64
	baseGoroutines := runtime.NumGoroutine()
	baseHeap := heapInUse()
	s := newAuthServer(t, rdma.Options{HandshakeTimeout: time.Hour, MaxHandshakes: limit})
	var raws []net.Conn
	for range clients {
		// A connection over the limit may be reset before its dial has
		// returned.
		raw, err := net.Dial("tcp", s.ln.Addr())
		if err != nil {
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatal(err)
			}
			continue
		}
		raws = append(raws, raw)
		defer raw.Close()
	}
	st := waitStats(t, s.ln, func(st rdma.ListenerStats) bool { return st.Rejected+uint64(st.Handshakes) == clients })
	if st.Handshakes != limit || st.Rejected != clients-limit || st.AuthFailures != 0 {
		t.Fatalf("stats %+v with %d stalled clients, want %d handshakes in progress", st, clients, limit)
	}
	// The listener runs its accept loop, one goroutine per handshake and
	// newAuthServer's accept loop.
	transporttest.WaitGoroutines(t, baseGoroutines+limit+2, 20*time.Second)
	// Both ends' sockets, in this one process, and the handshakes' state.
	grown := heapInUse() - baseHeap
	t.Logf("%d stalled clients: %d goroutines (%d before), heap %+d KiB", clients, runtime.NumGoroutine(), baseGoroutines, grown>>10)
	if grown > clients*8<<10 {
		t.Fatalf("heap grew by %d KiB with %d stalled clients", grown>>10, clients)
	}
	for _, raw := range raws {
		raw.Write(bytes.Repeat([]byte{0xee}, 44))
	}
	for _, raw := range raws {
		closedSilently(t, raw)
		raw.Close()
	}
	st = waitStats(t, s.ln, func(st rdma.ListenerStats) bool { return st.AuthFailures == limit })
	if st.Handshakes != 0 || st.Accepted != 0 {
		t.Fatalf("stats %+v after the flood", st)
	}
	for range clients {
		<-s.reports
	}
	transporttest.WaitGoroutines(t, baseGoroutines+2, 20*time.Second)
	grown = heapInUse() - baseHeap
	t.Logf("after the flood: %d goroutines, heap %+d KiB", runtime.NumGoroutine(), grown>>10)
	if grown > 1<<20 {
		t.Fatalf("heap grew by %d KiB after the flood", grown>>10)
	}
}

// heapInUse returns the bytes of heap in use after a collection.
func heapInUse() int {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int(ms.HeapInuse)
}

// TestListenInsecure: without a secret, only loopback addresses may be
// listened on, unless Options.Insecure says otherwise.
func TestListenInsecure(t *testing.T) {
	listen := func(opts rdma.Options, addr string) error {
		n, err := rdma.NewTCP(opts)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := n.Listen(addr)
		if err == nil {
			ln.Close()
		}
		return err
	}
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		err := listen(rdma.Options{}, addr)
		if !errors.Is(err, rdma.ErrInsecure) || !strings.Contains(err.Error(), addr) ||
			!strings.Contains(err.Error(), "Secret") || !strings.Contains(err.Error(), "Insecure") {
			t.Errorf("listen on %s without a secret: %v", addr, err)
		}
		if err := listen(rdma.Options{Insecure: true}, addr); err != nil {
			t.Errorf("listen on %s with Insecure: %v", addr, err)
		}
		if err := listen(rdma.Options{Secret: secret}, addr); err != nil {
			t.Errorf("listen on %s with a secret: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "127.0.0.2:0", "localhost:0", "[::1]:0"} {
		if err := listen(rdma.Options{}, addr); err != nil && (addr != "[::1]:0" || errors.Is(err, rdma.ErrInsecure)) {
			t.Errorf("listen on loopback %s: %v", addr, err)
		}
	}
	if _, err := rdma.NewTCP(rdma.Options{Secret: []byte("short")}); err == nil || !strings.Contains(err.Error(), "Secret") {
		t.Errorf("a 5-byte secret: %v", err)
	}
}
