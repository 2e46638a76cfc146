package ps

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// The error paths of the server and the client, over loopback TCP: each
// test checks the counters and that every goroutine it started is gone
// afterwards.

// noLeaks records the goroutines running now; the returned check waits
// (up to 10 s, polling) until no more are running, and fails with their
// stacks otherwise.
func noLeaks(t *testing.T) func() {
	base := runtime.NumGoroutine()
	return func() {
		t.Helper()
		transporttest.WaitGoroutines(t, base, 10*time.Second)
	}
}

// tcpServer is a Server running on its own TCP listener.
type tcpServer struct {
	*Server
	t    testing.TB
	addr string
	done chan error
}

// serveTCP starts a server for sc on a loopback listener of net.
func serveTCP(t *testing.T, ctx context.Context, net rdma.Network, sc ServerConfig) *tcpServer {
	t.Helper()
	srv, err := NewServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpServer{Server: srv, t: t, addr: ln.Addr(), done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(ctx, ln) }()
	return s
}

// stop stops the server and returns Serve's error.
func (s *tcpServer) stop() error {
	s.t.Helper()
	s.Stop()
	return s.wait("Serve to return after Stop")
}

// wait returns Serve's error, failing the test if Serve has not returned
// within 10 s.
func (s *tcpServer) wait(what string) error {
	s.t.Helper()
	return transporttest.Receive(s.t, s.done, 10*time.Second, what)
}

func softConfig(job uint32, learners int) Config {
	return Config{Job: job, Learners: learners, Protocol: Softsync, N: learners, Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.5}}
}

// rawConn is a plain TCP connection to a server listening without a
// secret: it writes frames as bytes and reads the replies' frames.
type rawConn struct {
	t   *testing.T
	nc  net.Conn
	buf []byte
}

func dialRaw(t *testing.T, addr string) *rawConn {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return &rawConn{t: t, nc: nc}
}

func (r *rawConn) write(b []byte) {
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

// frame reads the next frame (within 10 s); io errors end the test.
func (r *rawConn) frame() (rdma.Header, []byte, []float32) {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		h, data, payload, n, err := rdma.ParseFrame(r.buf, &rdma.Limits{MaxElems: 1 << 20, MaxData: 1 << 16, Job: h0job(r.buf)})
		if err == nil {
			w := make([]float32, h.Elems)
			for i := range w {
				w[i] = math.Float32frombits(uint32(payload[4*i]) | uint32(payload[4*i+1])<<8 | uint32(payload[4*i+2])<<16 | uint32(payload[4*i+3])<<24)
			}
			data = slices.Clone(data)
			r.buf = r.buf[n:]
			return h, data, w
		}
		if !errors.Is(err, rdma.ErrTruncated) {
			r.t.Fatalf("reply frame: %v", err)
		}
		chunk := make([]byte, 4096)
		k, err := r.nc.Read(chunk)
		if err != nil {
			r.t.Fatalf("reading a reply: %v", err)
		}
		r.buf = append(r.buf, chunk[:k]...)
	}
}

// h0job returns the job id of the frame at the start of b (0 if short),
// so that frame accepts any job.
func h0job(b []byte) uint32 {
	if len(b) < 12 {
		return 0
	}
	return uint32(b[8]) | uint32(b[9])<<8 | uint32(b[10])<<16 | uint32(b[11])<<24
}

// frameBytes returns a frame of type typ from learner 0 for shard 0 with
// sequence seq and no payload.
func frameBytes(job uint32, typ MsgType, seq uint64) []byte {
	return rdma.AppendFrame(nil, rdma.Header{Type: rdma.Type(typ), Job: job, Seq: seq}, nil, nil)
}

// TestServerBadFrames sends frames the transport rejects but can skip (a
// payload checksum that does not match, another job's frame): each is
// counted in BadFrames and answered with an error reply, and the
// connection goes on serving. A frame that costs the stream its sync (bad
// magic) ends the connection; the learner bound to it is lost.
func TestServerBadFrames(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, _ := network(t, "tcp", 11)
	lost := make(chan uint32, 1)
	s := serveTCP(t, ctx, net, ServerConfig{PS: softConfig(11, 1), Init: make([]float32, 16),
		OnLost: func(l, inc uint32) { lost <- l }})
	c := dialRaw(t, s.addr)
	defer c.nc.Close()

	bad := frameBytes(11, MsgPull, 7)
	bad[len(bad)-1] ^= 0xff // the trailer checksum
	c.write(bad)
	c.write(frameBytes(12, MsgPull, 8)) // another job
	c.write(frameBytes(11, MsgPull, 9))
	for _, want := range []string{"checksum", "another job"} {
		h, data, _ := c.frame()
		if h.Type != rdma.TypeError || h.Seq != 0 || !strings.Contains(string(data), want) {
			t.Fatalf("reply to a bad frame: %+v %q, want an error about %q", h, data, want)
		}
	}
	if h, _, w := c.frame(); h.Type != TypeWeights || h.Seq != 9 || len(w) != 16 {
		t.Fatalf("reply to the pull after the bad frames: %+v, %d weights", h, len(w))
	}
	if st := s.Stats(); st.BadFrames != 2 || st.Lost != 0 || st.Shards[0].Rejected.Total() != 0 {
		t.Fatalf("stats after two bad frames: %+v", st)
	}
	c.write(bytes.Repeat([]byte{'x'}, rdma.HeaderSize)) // not a frame: fatal
	if l := transporttest.Receive(t, lost, 10*time.Second, "the server to report the learner of the broken stream lost"); l != 0 {
		t.Fatalf("OnLost(%d), want learner 0", l)
	}
	if st := s.Stats(); st.BadFrames != 2 || st.Lost != 1 {
		t.Fatalf("stats after the fatal frame: %+v", st)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestServerSendFails: a reply the transport cannot send (weights larger
// than the server network's frame limit) ends the connection: the
// learner's pull fails instead of waiting, and the server reports the
// learner lost.
func TestServerSendFails(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	small, err := rdma.Open("tcp", rdma.Options{Job: 12, MaxElems: 8})
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan uint32, 1)
	s := serveTCP(t, ctx, small, ServerConfig{PS: softConfig(12, 1), Init: make([]float32, 64),
		OnLost: func(l, inc uint32) { lost <- l }})
	net, _ := network(t, "tcp", 12)
	c, err := Dial(ctx, net, []string{s.addr}, ClientConfig{Learner: 0, Protocol: Softsync, Total: 64, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Pull(ctx, make([]float32, 64)); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("pull whose reply cannot be sent: %v, want the connection closed", err)
	}
	if l := transporttest.Receive(t, lost, 10*time.Second, "the server to report the learner of the failed send lost"); l != 0 {
		t.Fatalf("OnLost(%d), want learner 0", l)
	}
	if st := s.Stats(); st.Lost != 1 || st.Shards[0].Rejected.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestServerErrorsDropped floods a server with messages for a shard it
// does not run, over a connection that reads nothing meanwhile: once the
// server's small socket buffer and the peer's receive buffer are full and
// its reply queue (1) too, error replies are dropped and counted, the
// reader never blocks on them, and the weights that answer the pull sent
// after the flood still arrive. Every message is either answered or
// counted as dropped. (The buffers hold a few hundred replies.)
func TestServerErrorsDropped(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const flood = 1500
	snet, err := rdma.Open("tcp", rdma.Options{Job: 13, SocketBuffer: 4096})
	if err != nil {
		t.Fatal(err)
	}
	net, _ := network(t, "tcp", 13)
	cfg := softConfig(13, 1)
	cfg.Shards = 2
	s := serveTCP(t, ctx, snet, ServerConfig{PS: cfg, Shards: []int{0}, Init: make([]float32, 64), QueueLen: 1})
	c, err := net.Dial(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range flood {
		if err := c.Send(ctx, wireMsg(rdma.NewMsg, MsgPull, 0, 1, uint64(i+1), 0, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Send(ctx, wireMsg(rdma.NewMsg, MsgPull, 0, 0, flood+1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	errs := uint64(0)
	for {
		m, err := c.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		typ, seq := m.Type, m.Seq
		m.Release()
		if typ == TypeWeights {
			if seq != flood+1 {
				t.Fatalf("weights answer seq %d", seq)
			}
			break
		}
		if typ != rdma.TypeError || seq < 1 || seq > flood {
			t.Fatalf("reply %v seq %d", typ, seq)
		}
		errs++
	}
	st := s.Stats()
	t.Logf("%d error replies received, %d dropped", errs, st.ErrorsDropped)
	if st.NotHosted != flood || st.ErrorsDropped == 0 || errs+st.ErrorsDropped != flood {
		t.Errorf("%d messages for a shard not run here: %d counted, %d error replies received, %d dropped", flood, st.NotHosted, errs, st.ErrorsDropped)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestServerStopsOnCancel: cancelling Serve's context ends it with the
// context's error; a learner waiting in a pull gets an error, and the
// server's counters stay readable (final) once Serve has returned, while
// Checkpoint and Weights return nil.
func TestServerStopsOnCancel(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, _ := network(t, "tcp", 14)
	cfg := Config{Job: 14, Learners: 2, Protocol: Hardsync, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.5}}
	s := serveTCP(t, ctx, net, ServerConfig{PS: cfg, Init: make([]float32, 64)})
	c, err := Dial(context.Background(), net, []string{s.addr, s.addr}, ClientConfig{Learner: 0, Protocol: Hardsync, Total: 64, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := make([]float32, 64)
	if err := c.Pull(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(context.Background(), w, 0); err != nil {
		t.Fatal(err)
	}
	pulled := make(chan error, 1)
	go func() { pulled <- c.Pull(context.Background(), w) }() // waits for learner 1's push
	transporttest.Eventually(t, 10*time.Second, "shard 1 to count learner 0's push", func() bool { return s.Stats().Shards[1].Gradients == 1 })
	cancel()
	if err := s.wait("Serve to return after its context was cancelled"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve after cancel: %v", err)
	}
	if err := transporttest.Receive(t, pulled, 10*time.Second, "the waiting pull to return after the server stopped"); err == nil {
		t.Fatal("the waiting pull returned no error when the server stopped")
	}
	st := s.Stats()
	if len(st.Shards) != 2 || st.Shards[0].Gradients != 1 || st.Shards[0].Updates != 0 {
		t.Errorf("final stats %+v", st)
	}
	if cps, ids := s.Checkpoint(); cps != nil || ids != nil {
		t.Error("Checkpoint after Serve returned")
	}
	if s.Weights() != nil {
		t.Error("Weights of a server that never became final")
	}
}

// TestServerEvictIgnored: an Evict for a learner outside the roster, or
// for an incarnation older than the learner's latest, changes nothing;
// evicting the latest refuses it.
func TestServerEvictIgnored(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, _ := network(t, "tcp", 15)
	s := serveTCP(t, ctx, net, ServerConfig{PS: softConfig(15, 2), Init: make([]float32, 16)})
	c, err := Dial(ctx, net, []string{s.addr}, ClientConfig{Learner: 1, Incarnation: 2, Protocol: Softsync, Total: 16, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, g := make([]float32, 16), make([]float32, 16)
	g[0] = 1
	step := func() error {
		if err := c.Pull(ctx, w); err != nil {
			return err
		}
		return c.Push(ctx, g, 0)
	}
	if err := step(); err != nil {
		t.Fatal(err)
	}
	s.Evict(7, 2)     // no such learner
	s.Evict(1<<31, 2) // nor this one
	s.Evict(1, 1)     // an incarnation already over
	if err := step(); err != nil {
		t.Fatalf("after evictions of others: %v", err)
	}
	if err := c.Pull(ctx, w); err != nil || w[0] != -1 {
		t.Fatalf("pull: %v, w[0] = %g; want both pushes applied (−1)", err, w[0])
	}
	s.Evict(1, 2)
	if err := c.Pull(ctx, w); !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "removed from the job") {
		t.Fatalf("pull of the evicted incarnation: %v", err)
	}
	st := s.Stats()
	if st.Refused != 1 || st.Shards[0].Gradients != 2 || st.Shards[0].Rejected.Total() != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestClientRejectionReported: a push the shard rejects (a NaN) is
// reported by the next pull, which still fills the weights; the pull after
// that is clean.
func TestClientRejectionReported(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, _ := network(t, "tcp", 16)
	s := serveTCP(t, ctx, net, ServerConfig{PS: softConfig(16, 1), Init: slices.Repeat([]float32{2}, 16)})
	c, err := Dial(ctx, net, []string{s.addr}, ClientConfig{Learner: 0, Protocol: Softsync, Total: 16, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := make([]float32, 16)
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	g := make([]float32, 16)
	g[3] = float32(math.NaN())
	if err := c.Push(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	clear(w)
	err = c.Pull(ctx, w)
	if !errors.Is(err, ErrRejected) || !errors.Is(err, rdma.ErrRemote) || !strings.Contains(err.Error(), ErrNonFinite.Error()) {
		t.Fatalf("pull after a NaN push: %v, want the rejection", err)
	}
	if w[0] != 2 || c.Stamps()[0] != 0 {
		t.Fatalf("the pull that reports a rejection must still fill the weights: w[0] = %g, stamps %v", w[0], c.Stamps())
	}
	if err := c.Pull(ctx, w); err != nil {
		t.Fatalf("the next pull: %v", err)
	}
	if st := s.Stats().Shards[0]; st.Rejected.NonFinite != 1 || st.Gradients != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestClientStaleReply: a hardsync pull given up (its context ended while
// the round waited) is answered later; the learner's next pull must skip
// that reply and take its own, so that the pull after it is not served
// with old weights either.
func TestClientStaleReply(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, _ := network(t, "tcp", 17)
	updates := make(chan uint64, 4)
	cfg := Config{Job: 17, Learners: 2, Protocol: Hardsync, Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.5}}
	s := serveTCP(t, ctx, net, ServerConfig{PS: cfg, Init: make([]float32, 16),
		OnUpdate: func(_ int, u Update) { updates <- u.Clock }})
	var cs [2]*Client
	for l := range cs {
		var err error
		if cs[l], err = Dial(ctx, net, []string{s.addr}, ClientConfig{Learner: uint32(l), Protocol: Hardsync, Total: 16, Shards: 1}); err != nil {
			t.Fatal(err)
		}
		defer cs[l].Close()
	}
	w, g := make([]float32, 16), slices.Repeat([]float32{1}, 16)
	round := func(clock uint64) {
		t.Helper()
		for _, c := range cs {
			if err := c.Pull(ctx, w); err != nil || c.Stamps()[0] != clock-1 {
				t.Fatalf("pull: %v, stamps %v, want %d", err, c.Stamps(), clock-1)
			}
			if err := c.Push(ctx, g, 0); err != nil {
				t.Fatal(err)
			}
		}
		if got := transporttest.Receive(t, updates, 10*time.Second, "the round's update"); got != clock {
			t.Fatalf("update to clock %d, want %d", got, clock)
		}
	}
	if err := cs[0].Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := cs[0].Push(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 20*time.Millisecond)
	if err := cs[0].Pull(short, w); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("pull waiting for the round: %v", err)
	}
	stop()
	if err := cs[1].Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := cs[1].Push(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	// Clock 1: learner 0's given-up pull is answered now; its next pull
	// skips that answer.
	transporttest.Receive(t, updates, 10*time.Second, "the update to clock 1")
	round(2)
	round(3)
	if st := s.Stats().Shards[0]; st.Updates != 3 || st.Rejected.Total() != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// fakeShard serves one connection as shard 0 would, answering each pull
// with answer(request): the replies a real server never sends.
func fakeShard(t *testing.T, ctx context.Context, net rdma.Network, answer func(req *rdma.Msg) []*rdma.Msg) (string, chan struct{}) {
	ln, err := net.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer ln.Close()
		c, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			m, err := c.Recv(ctx)
			if err != nil {
				return
			}
			for _, r := range answer(m) {
				if c.Send(ctx, r) != nil {
					return
				}
			}
			m.Release()
		}
	}()
	return ln.Addr(), done
}

// TestClientOddReplies answers a client's pulls with what a healthy
// server never sends, from a fake shard over TCP: replies to other
// requests (ignored), a rejection of an earlier message (reported after
// the weights are filled), a duplicate (ignored), weights of the wrong
// length (ErrBadLength) and a rejection of the pull itself (returned at
// once).
func TestClientOddReplies(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, _ := network(t, "tcp", 18)
	weights := func(req *rdma.Msg, seq uint64, n int, v float32) *rdma.Msg {
		m := weightsMsg(req.Learner, 0, 5, 1, seq, slices.Repeat([]float32{v}, n), rdma.Codec{})
		return m
	}
	rejection := func(seq uint64) *rdma.Msg { return errorMsg(0, seq, errors.New("an earlier push was bad")) }
	pulls := 0
	addr, done := fakeShard(t, ctx, net, func(req *rdma.Msg) []*rdma.Msg {
		pulls++
		switch pulls {
		case 1:
			return []*rdma.Msg{weights(req, req.Seq-1, 16, 9), rejection(req.Seq - 1), weights(req, req.Seq, 16, 1), weights(req, req.Seq, 16, 9)}
		case 2:
			return []*rdma.Msg{weights(req, req.Seq, 3, 1)}
		default:
			return []*rdma.Msg{rejection(req.Seq)}
		}
	})
	c, err := Dial(ctx, net, []string{addr}, ClientConfig{Learner: 0, Protocol: Softsync, Total: 16, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, 16)
	err = c.Pull(ctx, w)
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "an earlier push was bad") {
		t.Fatalf("pull with an earlier rejection: %v", err)
	}
	if !slices.Equal(w, slices.Repeat([]float32{1}, 16)) || c.Stamps()[0] != 5 {
		t.Fatalf("weights %v, stamps %v: want the reply to this pull", w, c.Stamps())
	}
	if err := c.Pull(ctx, w); !errors.Is(err, ErrBadLength) {
		t.Fatalf("3 weights for a range of 16: %v", err)
	}
	if err := c.Pull(ctx, w); !errors.Is(err, ErrRejected) {
		t.Fatalf("pull rejected: %v", err)
	}
	c.Close()
	transporttest.Receive(t, done, 10*time.Second, "the fake shard to end after the client closed")
}

// TestClientJoinAfterLeave: a learner that left is refused until it joins
// again (its push is rejected by both shards, reported by its join, which
// waits for both shards' acknowledgements); Join makes it a member, its
// pushes count again. Also the
// client's connections and traffic, and the Group's accessors: its
// servers, Evict and Final.
func TestClientJoinAfterLeave(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, addr := network(t, "tcp", 19)
	cfg := softConfig(19, 2)
	cfg.Shards = 2
	g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: make([]float32, 64), Network: net, Addr: addr, Servers: 1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.Dial(ctx, net, 0, rdma.Codec{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, grad := make([]float32, 64), slices.Repeat([]float32{1}, 64)
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, grad, 0); err != nil {
		t.Fatal(err)
	}
	err = c.Join(ctx)
	if !errors.Is(err, ErrRejected) || strings.Count(err.Error(), ErrUnknownLearner.Error()) != 2 {
		t.Fatalf("join after the push of a learner that left: %v; want both shards' rejections", err)
	}
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, grad, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Pull(ctx, w); err != nil || w[0] != -0.5 || w[63] != -0.5 {
		t.Fatalf("pull: %v, w[0] = %g, w[63] = %g; want the push applied", err, w[0], w[63])
	}
	conns := c.Connections()
	if len(conns) != 1 || !slices.Equal(conns[0].Shards, []int{0, 1}) || conns[0].Peer != g.Addrs()[0] || conns[0].Transport.Name != "tcp" {
		t.Errorf("connections %+v", conns)
	}
	if st := c.Stats(); st.TotalSent().Msgs != 14 || st.TotalRecv().Msgs != 12 { // to each shard: 3 pulls, 2 pushes, a leave, a join
		t.Errorf("%d messages sent, %d received; want 14 and 12 (3 weights, 2 acknowledgements, a rejection from each shard)", st.TotalSent().Msgs, st.TotalRecv().Msgs)
	}
	if len(g.Servers()) != 1 {
		t.Fatalf("%d servers", len(g.Servers()))
	}
	g.Finish()
	g.Evict(1, 0) // learner 1 never came: the job ends without it
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	transporttest.Receive(t, g.Final(), 10*time.Second, "the group's shards to be final")
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	shards, st := g.Stats()
	for k, sh := range shards {
		if sh.Gradients != 1 || sh.Rejected.UnknownLearner != 1 || st.Refused != 0 {
			t.Errorf("shard %d: %+v; server %+v", k, sh, st)
		}
	}
}

// TestClientSnapshot reads weights as an evaluator does: as they are now,
// an epoch end from a server that keeps no snapshots (rejected), an epoch
// the job never reached (the final weights, once final), into a vector of
// the wrong length (an error, nothing sent).
func TestClientSnapshot(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, _ := network(t, "tcp", 20)
	cfg := softConfig(20, 1)
	cfg.DataSize = 100 // one epoch is 100 gradients: never reached
	plain := serveTCP(t, ctx, net, ServerConfig{PS: cfg, Init: make([]float32, 16)})
	snaps := serveTCP(t, ctx, net, ServerConfig{PS: cfg, Init: make([]float32, 16), Snapshots: true})
	eval := func(addr string) *Client {
		c, err := Dial(ctx, net, []string{addr}, ClientConfig{Learner: 1 << 30, Total: 16, Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	e := eval(plain.addr)
	defer e.Close()
	l, err := Dial(ctx, net, []string{plain.addr}, ClientConfig{Learner: 0, Protocol: Softsync, Total: 16, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w := make([]float32, 16)
	if err := l.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := l.Push(ctx, slices.Repeat([]float32{1}, 16), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	now := make([]float32, 16)
	if st, err := e.Snapshot(ctx, -1, now); err != nil || st[0] != 1 || now[0] != -0.5 {
		t.Fatalf("the weights as they are: %v, stamps %v, w[0] = %g", err, st, now[0])
	}
	if _, err := e.Snapshot(ctx, 1, now); !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), errSnapshotsOff.Error()) {
		t.Fatalf("an epoch snapshot from a server without them: %v", err)
	}
	if _, err := e.Snapshot(ctx, 1, make([]float32, 15)); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a snapshot into 15 floats: %v", err)
	}
	e2 := eval(snaps.addr)
	defer e2.Close()
	got := make(chan error, 1)
	final := make([]float32, 16)
	go func() { _, err := e2.Snapshot(ctx, 3, final); got <- err }()
	snaps.Finish()
	l2, err := Dial(ctx, net, []string{snaps.addr}, ClientConfig{Learner: 0, Protocol: Softsync, Total: 16, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if err := l2.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := l2.Push(ctx, slices.Repeat([]float32{2}, 16), 0); err != nil {
		t.Fatal(err)
	}
	if err := l2.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := transporttest.Receive(t, got, 10*time.Second, "the snapshot of an epoch never reached to return"); err != nil || final[0] != -1 {
		t.Fatalf("epoch 3, never reached: %v, w[0] = %g; want the final weights (−1)", err, final[0])
	}
	for _, s := range []*tcpServer{plain, snaps} {
		if err := s.stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClientRedialFails: when the server is gone and Redial gives up, the
// call that saw the loss fails with Redial's error, and so does every later
// use of that connection, without redialling again.
func TestClientRedialFails(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, _ := network(t, "tcp", 21)
	s := serveTCP(t, ctx, net, ServerConfig{PS: softConfig(21, 1), Init: make([]float32, 16)})
	errGone := errors.New("no server to redial")
	var redials atomic.Int32
	c, err := Dial(ctx, net, []string{s.addr}, ClientConfig{Learner: 0, Protocol: Softsync, Total: 16, Shards: 1,
		Redial: func(context.Context, int) (rdma.Conn, error) { redials.Add(1); return nil, errGone }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := make([]float32, 16)
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Pull(ctx, w); !errors.Is(err, errGone) {
		t.Fatalf("pull from a server gone: %v", err)
	}
	if err := c.Push(ctx, w, 0); !errors.Is(err, errGone) {
		t.Fatalf("push after the redial failed: %v", err)
	}
	if err := c.Leave(ctx); !errors.Is(err, errGone) {
		t.Fatalf("leave after the redial failed: %v", err)
	}
	if n := redials.Load(); n != 1 {
		t.Errorf("%d redials, want 1", n)
	}
}

// TestClientRedialDuringPrefetch restarts the server (from a checkpoint)
// while a learner prefetches its next weights: the prefetch redials and
// asks the new server again, and the gradient the learner pushes
// meanwhile, computed on the old server's weights, is sent and given up
// by the new server (another life, Stats.StaleLife); the next one, on the
// new weights, is applied. Every start of a server draws new lives.
func TestClientRedialDuringPrefetch(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, _ := network(t, "tcp", 22)
	cfg := softConfig(22, 1)
	cfg.Shards = 2
	a := serveTCP(t, ctx, net, ServerConfig{PS: cfg, Init: make([]float32, 64)})
	var b *tcpServer
	redialed := make(chan struct{})
	c, err := Dial(ctx, net, []string{a.addr, a.addr}, ClientConfig{Learner: 0, Protocol: Softsync, Total: 64, Shards: 2,
		Redial: func(ctx context.Context, _ int) (rdma.Conn, error) {
			close(redialed)
			return net.Dial(ctx, b.addr)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, next, g := make([]float32, 64), make([]float32, 64), slices.Repeat([]float32{1}, 64)
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	cps, ids := a.Checkpoint()
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	b = serveTCP(t, ctx, net, ServerConfig{PS: cfg, Init: make([]float32, 64), Restore: cps, Identities: ids})
	if err := c.PullAsync(ctx, next); err != nil {
		t.Fatal(err)
	}
	transporttest.Receive(t, redialed, 10*time.Second, "the prefetch to redial")
	if err := c.Push(ctx, g, 0); err != nil { // computed on the old server's weights
		t.Fatal(err)
	}
	if err := c.WaitPull(); err != nil {
		t.Fatalf("prefetch across the restart: %v", err)
	}
	if st := c.Stamps(); st[0] != 1 || st[1] != 1 || next[0] != -0.5 {
		t.Fatalf("after the restart: stamps %v, w[0] = %g; want the checkpoint's clock 1 and −0.5", st, next[0])
	}
	if err := c.Push(ctx, g, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Pull(ctx, w); err != nil || w[0] != -1 {
		t.Fatalf("pull: %v, w[0] = %g; want −1", err, w[0])
	}
	for k, sh := range b.Stats().Shards {
		if pushed := c.Pushes()[k]; pushed != 3 || sh.Gradients != 2 || sh.StaleLife != 1 || sh.Rejected.Total() != 0 {
			t.Errorf("shard %d: %d pushed, %+v: want 3 pushed, 2 accepted (1 before the checkpoint), 1 given up", k, pushed, sh)
		}
	}
	la, lb := a.Lives(), b.Lives()
	if len(lb) != 2 || slices.Contains(lb, 0) || slices.Contains(la, lb[0]) || slices.Contains(la, lb[1]) || lb[0] == lb[1] {
		t.Errorf("lives %v before the restart, %v after: want nonzero and new", la, lb)
	}
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
}
