package ps

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// TestClientLeaveWaits: Leave returns only once every shard has stepped
// the leave, and with it every message sent before it: here the shard's
// goroutine is held in the update of the learner's last push, and Leave
// must not return before it is released.
func TestClientLeaveWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hold, held := make(chan struct{}), make(chan struct{}, 4)
	cfg := softConfig(24, 1)
	cfg.Shards = 2
	g, c := groupAndClient(t, ctx, GroupConfig{PS: cfg, Init: make([]float32, 64),
		OnUpdate: func(shard int, u Update) {
			if shard == 1 && u.Clock == 2 {
				held <- struct{}{}
				<-hold
			}
		}})
	w, grad := make([]float32, 64), slices.Repeat([]float32{1}, 64)
	for range 2 {
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, grad, 0); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.Receive(t, held, 10*time.Second, "shard 1 to apply the second push")
	left := make(chan error, 1)
	go func() { left <- c.Leave(ctx) }()
	select {
	case err := <-left:
		t.Fatalf("Leave returned (%v) while shard 1 had not stepped it", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	if err := transporttest.Receive(t, left, 10*time.Second, "Leave to return once shard 1 is released"); err != nil {
		t.Fatal(err)
	}
	for _, s := range g.Servers() {
		for _, sh := range s.Stats().Shards {
			if sh.Gradients != 2 || sh.Clock != 2 {
				t.Errorf("shard %d after Leave: %+v", sh.Shard, sh)
			}
		}
	}
	g.Finish()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// groupAndClient starts a group for gc, over the in-memory transport
// unless gc names a Network, and dials learner 0 to it; the client is
// closed when the test ends.
func groupAndClient(t *testing.T, ctx context.Context, gc GroupConfig) (*Group, *Client) {
	t.Helper()
	if gc.Network == nil {
		gc.Network, gc.Addr = network(t, "inmem", gc.PS.Job)
	}
	g, err := StartGroup(ctx, gc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.Dial(ctx, gc.Network, 0, rdma.Codec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return g, c
}

// lossyConn is a client connection that loses the first message drop
// picks: Send takes it and reports success, then the connection fails
// (closed), as when a link goes down with the message in flight.
type lossyConn struct {
	rdma.Conn
	drop func(m *rdma.Msg) bool
	lost atomic.Bool
}

func (c *lossyConn) Send(ctx context.Context, m *rdma.Msg) error {
	if !c.lost.Load() && c.drop(m) {
		c.lost.Store(true)
		m.Release()
		c.Conn.Close()
		return nil
	}
	return c.Conn.Send(ctx, m)
}

// TestClientResend loses a push on a failing connection, over the
// in-memory transport, under both protocols: the connection carries both
// shards of one server, and fails right after the push to shard 0 was
// sent (a push goes to the last shard first), so that shard 1 steps its
// push before the failure and shard 0 never gets it. The client's next
// pull redials (once the server saw the loss), joins again, resends the
// push with its sequence, stamp and mini-batch, and pulls: each shard
// applies each gradient exactly once (shard 1 ignores the resend as a
// duplicate), and the weights are those of both pushes.
func TestClientResend(t *testing.T) {
	for _, proto := range []Protocol{Softsync, Hardsync} {
		t.Run(proto.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := Config{Job: 25, Learners: 1, Protocol: proto, N: 1, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.5}}
			c, g := lossyClient(t, ctx, cfg, rdma.Codec{}, func(m *rdma.Msg) bool { return m.Type == rdma.Type(MsgPush) && m.Shard == 0 && m.Seq > Seq(0, 4) })
			w := make([]float32, 64)
			for b := uint64(1); b <= 2; b++ {
				if err := c.Pull(ctx, w); err != nil {
					t.Fatal(err)
				}
				if err := c.Push(ctx, slices.Repeat([]float32{float32(b)}, 64), b); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Pull(ctx, w); err != nil {
				t.Fatalf("pull across the failure: %v", err)
			}
			if w[0] != -1.5 || w[63] != -1.5 || !slices.Equal(c.Stamps(), []uint64{2, 2}) {
				t.Fatalf("w[0] = %g, w[63] = %g, stamps %v: want both gradients applied once (−1.5) at clock 2", w[0], w[63], c.Stamps())
			}
			if err := c.Leave(ctx); err != nil {
				t.Fatal(err)
			}
			shards, _ := g.Stats()
			for k, dup := range []uint64{0, 1} {
				if sh := shards[k]; sh.Gradients != 2 || sh.Duplicates != dup || sh.Redone != 0 || sh.Rejected.Total() != 0 {
					t.Errorf("shard %d: %+v; want 2 gradients, %d duplicate", k, sh, dup)
				}
			}
			g.Finish()
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// lossyClient starts a group for cfg (one server, 64 floats) and a
// client of learner 0 whose first connection loses the message drop
// picks (lossyConn).
func lossyClient(t *testing.T, ctx context.Context, cfg Config, codec rdma.Codec, drop func(*rdma.Msg) bool) (*Client, *Group) {
	t.Helper()
	return wrappedClient(t, ctx, cfg, codec, func(c rdma.Conn) rdma.Conn { return &lossyConn{Conn: c, drop: drop} })
}

// wrappedClient starts a group for cfg (one server, 64 floats) and a
// client of learner 0 whose first connection is wrap's of the one it
// dials; its Redial waits until the server has seen the lost connection
// (OnLost, with no eviction) and dials again.
func wrappedClient(t *testing.T, ctx context.Context, cfg Config, codec rdma.Codec, wrap func(rdma.Conn) rdma.Conn) (*Client, *Group) {
	t.Helper()
	net, addr := network(t, "inmem", cfg.Job)
	lost := make(chan uint32, 4)
	g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: make([]float32, 64), Network: net, Addr: addr,
		OnLost: func(l, _ uint32) { lost <- l }})
	if err != nil {
		t.Fatal(err)
	}
	first, err := net.Dial(ctx, g.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	conn := wrap(first)
	c, err := NewClient(ClientConfig{Learner: 0, Protocol: cfg.Protocol, Total: 64, Shards: cfg.Shards, Codec: codec,
		Redial: func(ctx context.Context, _ int) (rdma.Conn, error) {
			transporttest.Receive(t, lost, 10*time.Second, "the server to see the lost connection")
			return net.Dial(ctx, g.Addrs()[0])
		}}, []rdma.Conn{conn, conn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, g
}

// TestClientResendTopK: a TopK push lost on a failing connection is sent
// again as exactly the selection the lost send carried, taken from the
// residual once: what the shards applied plus the residual the client
// holds is exactly the gradients pushed (rate 1, no momentum), on the
// shard that got the push only with the resend as on the one that got
// it twice.
func TestClientResendTopK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Job: 26, Learners: 1, Protocol: Softsync, N: 1, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 1}}
	c, g := lossyClient(t, ctx, cfg, rdma.Codec{ID: rdma.CodecTopK, Fraction: 0.25},
		func(m *rdma.Msg) bool { return m.Type == rdma.Type(MsgPush) && m.Shard == 0 && m.Seq > Seq(0, 6) })
	w := make([]float32, 64)
	grads := make([][]float32, 3)
	for i := range grads {
		grads[i] = make([]float32, 64)
		for j := range grads[i] {
			grads[i][j] = float32((j*(i+3))%11) - 5
		}
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, grads[i], uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	g.Finish()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	final := g.Weights()
	shards, _ := g.Stats()
	rs, _ := Ranges(64, 2)
	for k, r := range rs {
		if sh := shards[k]; sh.Gradients != 3 || sh.Duplicates != uint64(k) {
			t.Fatalf("shard %d: %+v, want 3 gradients and %d duplicate", k, sh, k)
		}
		res := c.core.feedback[k].Residual()
		for i := r.Lo; i < r.Hi; i++ {
			var sum float32
			for _, gr := range grads {
				sum += gr[i]
			}
			if got := -final[i] + res[i-r.Lo]; math.Abs(float64(got-sum)) > 1e-4 {
				t.Fatalf("shard %d element %d: applied %g + residual %g ≠ %g pushed", k, i, -final[i], res[i-r.Lo], sum)
			}
		}
	}
}

// TestClientOnDelivered: a push's mini-batch is reported once every
// shard has answered a request sent after it, in push order: not by the
// WaitPull of a prefetch sent before the push, but by the next one, or by
// Pull and Leave; across a lost connection only once the resend is
// acknowledged; never for mini-batch 0.
func TestClientOnDelivered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Job: 27, Learners: 1, Protocol: Softsync, N: 1, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.5}}
	var got []uint64
	c, g := lossyClient(t, ctx, cfg, rdma.Codec{}, func(m *rdma.Msg) bool { return m.Type == rdma.Type(MsgPush) && m.Shard == 1 && m.Seq > Seq(0, 12) })
	c.cfg.OnDelivered = func(b uint64) { got = append(got, b) }
	expect := func(what string, want ...uint64) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("%s: delivered %v, want %v", what, got, want)
		}
	}
	w, next, grad := make([]float32, 64), make([]float32, 64), slices.Repeat([]float32{1}, 64)
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	// Overlap: prefetch, push, wait: seqs 3–4 pulls, 5–6 the push.
	if err := c.PullAsync(ctx, next); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, grad, 7); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitPull(); err != nil {
		t.Fatal(err)
	}
	expect("after the prefetch sent before the push")
	if err := c.PullAsync(ctx, w); err != nil { // 7–8
		t.Fatal(err)
	}
	if err := c.Push(ctx, grad, 0); err != nil { // 9–10, not reported
		t.Fatal(err)
	}
	if err := c.WaitPull(); err != nil {
		t.Fatal(err)
	}
	expect("after the next prefetch", 7)
	if err := c.Push(ctx, grad, 8); err != nil { // 11–12
		t.Fatal(err)
	}
	if err := c.Push(ctx, grad, 9); err != nil { // 13–14: lost on shard 1
		t.Fatal(err)
	}
	expect("before the connection is known to be lost", 7)
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	expect("after the pull that resent the lost push", 7, 8, 9)
	if err := c.Push(ctx, grad, 10); err != nil {
		t.Fatal(err)
	}
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	expect("after the leave", 7, 8, 9, 10)
	shards, _ := g.Stats()
	for k, sh := range shards {
		if sh.Gradients != 5 {
			t.Errorf("shard %d: %+v, want 5 gradients", k, sh)
		}
	}
}

// TestClientSnapshotRedial: an evaluator's client, whose connection fails
// with its snapshot request, redials and asks again, and joins nothing:
// it is no learner.
func TestClientSnapshotRedial(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := softConfig(30, 1)
	g, c := groupAndClient(t, ctx, GroupConfig{PS: cfg, Init: make([]float32, 16)})
	w := make([]float32, 16)
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, slices.Repeat([]float32{1}, 16), 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	net := g.cfg.Network
	first, err := net.Dial(ctx, g.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	lossy := &lossyConn{Conn: first, drop: func(m *rdma.Msg) bool { return m.Type == TypeSnapshot }}
	e, err := NewClient(ClientConfig{Learner: 1 << 30, Total: 16, Shards: 1,
		Redial: func(ctx context.Context, _ int) (rdma.Conn, error) { return net.Dial(ctx, g.Addrs()[0]) }}, []rdma.Conn{lossy})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	now := make([]float32, 16)
	if st, err := e.Snapshot(ctx, -1, now); err != nil || st[0] != 1 || now[0] != -0.5 {
		t.Fatalf("snapshot across a redial: %v, stamps %v, w[0] = %g", err, st, now[0])
	}
	if !lossy.lost.Load() {
		t.Fatal("the snapshot request was not lost")
	}
	if shards, _ := g.Stats(); shards[0].Rejected.Total() != 0 {
		t.Fatalf("rejections %+v: the evaluator sent something it should not have", shards[0].Rejected)
	}
}

// deadConn is a client connection found dead when sending: the first
// message fail picks closes it and its Send fails, as when the server
// died before the client sent (the message never leaves).
type deadConn struct {
	rdma.Conn
	fail func(m *rdma.Msg) bool
	dead atomic.Bool
}

func (c *deadConn) Send(ctx context.Context, m *rdma.Msg) error {
	if !c.dead.Load() && c.fail(m) {
		c.dead.Store(true)
		c.Conn.Close()
	}
	return c.Conn.Send(ctx, m)
}

// TestClientRequestRedial: a join, a leave or a snapshot request lost
// with its connection (one carrying two shards), either because the
// connection died before the request to shard 0 or to shard 1 left (its
// Send fails) or because it died with the request in flight (its Send
// succeeded), is sent again, to both shards, on the connection that
// replaces it, and the call completes: no shard is left unasked, and no
// answer is waited for on the new connection to a request that went
// with the old one (a learner once hung in Join that way).
func TestClientRequestRedial(t *testing.T) {
	for _, c := range []struct {
		name string
		t    rdma.Type
	}{{"join", rdma.Type(MsgJoin)}, {"leave", rdma.Type(MsgLeave)}, {"snapshot", TypeSnapshot}} {
		typ := c.t
		for _, inFlight := range []bool{false, true} {
			for shard := range 2 {
				t.Run(fmt.Sprintf("%s/in flight %v/shard %d", c.name, inFlight, shard), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					cfg := Config{Job: 26, Learners: 1, Protocol: Softsync, N: 1, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.5}}
					pick := func(m *rdma.Msg) bool { return m.Type == typ && int(m.Shard) == shard }
					var lost func() bool
					cl, g := wrappedClient(t, ctx, cfg, rdma.Codec{}, func(c rdma.Conn) rdma.Conn {
						if inFlight {
							conn := &lossyConn{Conn: c, drop: pick}
							lost = conn.lost.Load
							return conn
						}
						conn := &deadConn{Conn: c, fail: pick}
						lost = conn.dead.Load
						return conn
					})
					w := make([]float32, 64)
					if err := cl.Pull(ctx, w); err != nil {
						t.Fatal(err)
					}
					var err error
					switch c.name {
					case "join":
						err = cl.Join(ctx)
					case "leave":
						err = cl.Leave(ctx)
					default:
						_, err = cl.Snapshot(ctx, -1, w)
					}
					if err != nil {
						t.Fatalf("%s across a lost connection: %v", c.name, err)
					}
					if !lost() {
						t.Fatal("the request was not lost")
					}
					if c.name == "leave" {
						if err := cl.Join(ctx); err != nil { // the shards saw the leave: a join is answered
							t.Fatal(err)
						}
					}
					if err := cl.Leave(ctx); err != nil {
						t.Fatal(err)
					}
					g.Finish()
					if err := g.Wait(); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

// cutAfterAck is a client connection that fails right after Recv has
// returned the first acknowledgement once armed.
type cutAfterAck struct {
	rdma.Conn
	armed atomic.Bool
}

func (c *cutAfterAck) Recv(ctx context.Context) (*rdma.Msg, error) {
	m, err := c.Conn.Recv(ctx)
	if err == nil && m.Type == TypeAck && c.armed.CompareAndSwap(true, false) {
		c.Conn.Close()
	}
	return m, err
}

// TestClientLeaveRedial: the connection to a server of two shards fails
// during Leave after one shard acknowledged it and before the other's
// answer came. The connection that replaces it joins the learner again
// to the other shard only, whose leave goes again: the shard the learner
// left does not count it again, and both shards become final once the
// job's data is done.
func TestClientLeaveRedial(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Job: 27, Learners: 1, Protocol: Softsync, N: 1, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.5}}
	var conn *cutAfterAck
	cl, g := wrappedClient(t, ctx, cfg, rdma.Codec{}, func(c rdma.Conn) rdma.Conn {
		conn = &cutAfterAck{Conn: c}
		return conn
	})
	w := make([]float32, 64)
	if err := cl.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	conn.armed.Store(true)
	if err := cl.Leave(ctx); err != nil {
		t.Fatalf("leave across the failure: %v", err)
	}
	if conn.armed.Load() {
		t.Fatal("the connection did not fail during Leave")
	}
	g.Finish()
	select {
	case <-g.Servers()[0].Final():
	case <-time.After(10 * time.Second):
		t.Fatal("the shards did not become final: a shard counts the learner that left it")
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestEvictAnswersWaitingPull: a learner removed from the job while its
// pull waits (hardsync: the round waits for the other learner) gets an
// error for that pull, so that it stops, instead of waiting for ever.
func TestEvictAnswersWaitingPull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Job: 28, Learners: 2, Protocol: Hardsync, N: 2, Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.5}}
	g, c := groupAndClient(t, ctx, GroupConfig{PS: cfg, Init: make([]float32, 16)})
	w := make([]float32, 16)
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, w, 1); err != nil {
		t.Fatal(err)
	}
	pulled := make(chan error, 1)
	go func() { pulled <- c.Pull(ctx, w) }() // waits for learner 1's push
	select {
	case err := <-pulled:
		t.Fatalf("the pull of round 1 returned (%v) before learner 1 pushed round 0", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.Evict(0, 0)
	err := transporttest.Receive(t, pulled, 10*time.Second, "the waiting pull to end once the learner is evicted")
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "removed from the job") {
		t.Fatalf("pull of an evicted learner: %v, want a rejection saying it was removed from the job", err)
	}
}
