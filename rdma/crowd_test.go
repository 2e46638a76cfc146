package rdma_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// acceptAll runs ln's accept loop until ln is closed, handing the
// connections to the channel it returns.
func acceptAll(t *testing.T, ln rdma.Listener) <-chan rdma.Conn {
	conns := make(chan rdma.Conn, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			conns <- c
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return conns
}

// TestAuthCrowd: hundreds of connections that never authenticate (idle,
// a byte a second, stalled after their hello), held open on a listener
// whose every handshake slot they take and whose handshake timeout never
// comes, do not keep peers that hold the secret out: each of them gets
// in, one at a time and several at once, over TCP and over auto (verbs
// emulation), which sets its connections up over TCP's.
func TestAuthCrowd(t *testing.T) {
	const job, idle, slow, stalled = 7, 200, 100, 100
	for _, kind := range []string{"tcp", "auto"} {
		t.Run(kind, func(t *testing.T) {
			opts := rdma.Options{Job: job, Secret: secret, HandshakeTimeout: time.Hour,
				Verbs: rdma.VerbsOptions{Emulation: rdma.NewEmulation()}}
			var reports atomic.Int64
			sopts := opts
			sopts.OnAuthFailure = func(string, error) { reports.Add(1) }
			server, err := rdma.Open(kind, sopts)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := server.Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			conns := acceptAll(t, ln)
			transporttest.Crowd(t, ln, job, idle, slow, stalled)
			client, err := rdma.Open(kind, opts)
			if err != nil {
				t.Fatal(err)
			}
			dial := func(i int) error {
				c, err := client.Dial(recvCtx(t), ln.Addr())
				if err != nil {
					return err
				}
				defer c.Close()
				m := client.NewMsg(1)
				m.Seq = uint64(i)
				return c.Send(recvCtx(t), m)
			}
			received := func(n int) {
				t.Helper()
				for range n {
					select {
					case c := <-conns:
						m, err := c.Recv(recvCtx(t))
						if err != nil {
							t.Fatalf("recv on an accepted connection: %v", err)
						}
						m.Release()
						c.Close()
					case <-time.After(20 * time.Second):
						t.Fatal("no connection accepted within 20 s")
					}
				}
			}
			for i := range 5 {
				if err := dial(i); err != nil {
					t.Fatalf("dial %d amid the crowd: %v", i, err)
				}
				received(1)
			}
			const together = 8
			errs := make(chan error, together)
			for i := range together {
				go func() { errs <- dial(100 + i) }()
			}
			for range together {
				if err := <-errs; err != nil {
					t.Errorf("dial amid the crowd, %d at once: %v", together, err)
				}
			}
			received(together)
			st := ln.Stats()
			t.Logf("%s: %+v, %d reports", kind, st, reports.Load())
			if st.Accepted != 5+together || st.Handshakes > 64 || st.Rejected < idle+slow+stalled-64 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestAuthShedOrder: with every slot taken, a new connection sheds the
// one that has kept the listener waiting longest for its next handshake
// message: a peer that connected first but sent its hello after others
// connected outlives them, and ends its handshake; with every slot taken
// again, a peer that dials gets in too.
func TestAuthShedOrder(t *testing.T) {
	const job, limit = 3, 16
	s := newAuthServer(t, rdma.Options{Job: job, HandshakeTimeout: time.Hour, MaxHandshakes: limit,
		OnAuthFailure: func(string, error) {}})
	raw := rawDial(t, s.ln.Addr())
	waitStats(t, s.ln, func(st rdma.ListenerStats) bool { return st.Handshakes == 1 })
	transporttest.Crowd(t, s.ln, job, limit-1, 0, 0) // every slot taken
	ch := clientHello(1, 1, job)
	raw.Write(ch)
	sh := make([]byte, 44+32) // the server's hello and MAC: it has read ours
	raw.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(raw, sh); err != nil {
		t.Fatalf("reading the server's hello: %v", err)
	}
	transporttest.Crowd(t, s.ln, job, limit-1, 0, 0) // sheds the first crowd
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("softsync-auth-v1-client"))
	mac.Write(ch)
	mac.Write(sh)
	raw.Write(mac.Sum(nil))
	c := s.accepted(t)
	defer c.Close()
	raw.Write(frame(rdma.Header{Job: job, Elems: 1, Seq: 5}, f32le(2.5)))
	if m, err := c.Recv(recvCtx(t)); err != nil || m.Seq != 5 || m.Payload[0] != 2.5 {
		t.Fatalf("a frame after the handshake: %v %+v", err, m)
	}
	transporttest.Crowd(t, s.ln, job, 1, 0, 0)
	if _, err := dialTCP(t, rdma.Options{Job: job, Secret: secret}, s.ln.Addr()); err != nil {
		t.Fatalf("dial with every slot taken: %v", err)
	}
	s.accepted(t).Close()
	if st := s.ln.Stats(); st.Rejected != limit || st.Accepted != 2 || st.Handshakes != limit-1 {
		t.Errorf("stats %+v, want the first crowd and one more shed, two accepted, the rest in their handshake", st)
	}
}

// TestDialHandshakeClosed: a listener that resets the connection during
// the handshake, as one does to the connections it sheds, fails Dial
// with an error matching ErrHandshakeClosed and ErrAuth, which is worth
// another try; a server with another secret fails it with ErrAuth alone.
func TestDialHandshakeClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Read(make([]byte, 44))
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	_, err = dialTCP(t, rdma.Options{Secret: secret}, ln.Addr().String())
	if !errors.Is(err, rdma.ErrHandshakeClosed) || !errors.Is(err, rdma.ErrAuth) || !strings.Contains(err.Error(), "shed") {
		t.Errorf("dial to a listener that resets the handshake: %v, want ErrHandshakeClosed and ErrAuth", err)
	}
	s := newAuthServer(t, rdma.Options{})
	_, err = dialTCP(t, rdma.Options{Secret: otherSecret}, s.ln.Addr())
	if !errors.Is(err, rdma.ErrAuth) || errors.Is(err, rdma.ErrHandshakeClosed) {
		t.Errorf("dial with another secret: %v, want ErrAuth alone", err)
	}
}
