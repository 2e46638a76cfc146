package ps

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// watchNet wraps a network so that a test sees every message its
// connections send (before Send takes it over) and receive.
type watchNet struct {
	rdma.Network
	sent, recv func(m *rdma.Msg)
}

func (n *watchNet) Listen(addr string) (rdma.Listener, error) {
	ln, err := n.Network.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &watchListener{ln, n}, nil
}

func (n *watchNet) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	c, err := n.Network.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &watchConn{c, n}, nil
}

type watchListener struct {
	rdma.Listener
	n *watchNet
}

func (l *watchListener) Accept(ctx context.Context) (rdma.Conn, error) {
	c, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &watchConn{c, l.n}, nil
}

type watchConn struct {
	rdma.Conn
	n *watchNet
}

func (c *watchConn) Send(ctx context.Context, m *rdma.Msg) error {
	c.n.sent(m)
	return c.Conn.Send(ctx, m)
}

func (c *watchConn) Recv(ctx context.Context) (*rdma.Msg, error) {
	m, err := c.Conn.Recv(ctx)
	if err == nil {
		c.n.recv(m)
	}
	return m, err
}

func (c *watchConn) Place(p rdma.Placement) { c.Conn.(rdma.Placer).Place(p) }

// TestZeroCopy checks, over in-memory, TCP, shm and (emulated) verbs
// connections, where
// payloads are copied: a push is sent from the learner's gradient itself
// (lent, not copied into a message); a shard answers a pull from its own
// weights (lent until its next update); the client receives the
// weights straight into the vector it pulls into: &w[lo] is the payload
// the transport wrote, no buffer of the pool was taken for it. The values
// arrive intact.
func TestZeroCopy(t *testing.T) {
	for _, kind := range []string{"inmem", "tcp", "shm", "verbs"} {
		t.Run(kind, func(t *testing.T) { testZeroCopy(t, kind) })
	}
}

func testZeroCopy(t *testing.T, kind string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 100_003
	cfg := Config{Job: 1, Learners: 1, Protocol: Softsync, N: 1, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.5}}
	inner, addr := network(t, kind, 1)
	w, g := make([]float32, n), make([]float32, n)
	r := rand.New(rand.NewPCG(3, 4))
	init := make([]float32, n)
	for i := range init {
		init[i] = float32(r.NormFloat64())
	}
	var mu sync.Mutex
	var shardW [][]float32 // the shards' weights, once the group runs
	var pushes, weightsSent, weightsRecv int
	var bad []string
	ranges, _ := Ranges(n, 2)
	net := &watchNet{Network: inner}
	net.sent = func(m *rdma.Msg) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case m.Type == rdma.Type(MsgPush):
			pushes++
			if !m.Borrowed() || &m.Payload[0] != &g[ranges[m.Shard].Lo] {
				bad = append(bad, "a push was not sent from the gradient")
			}
		case m.Type == TypeWeights:
			weightsSent++
			if !m.Borrowed() || &m.Payload[0] != &shardW[m.Shard][0] {
				bad = append(bad, "weights were not sent from the shard's own")
			}
		}
	}
	net.recv = func(m *rdma.Msg) {
		if m.Type != TypeWeights {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		weightsRecv++
		// verbs receives into registered memory and ignores placements
		// (docs/wire.md, "Copies of a push and a pull").
		if kind != "verbs" && (!m.Borrowed() || &m.Payload[0] != &w[ranges[m.Shard].Lo]) {
			bad = append(bad, "weights were not received into the pulled vector")
		}
	}
	grp, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: init, Network: net, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range grp.servers {
		for _, l := range s.loops {
			// The shard keeps its weights in the network's memory (shm:
			// the lend segment, which a learner copies straight out of;
			// verbs: registered memory).
			var inMsg bool
			s.each1(l, func() {
				inMsg = l.wmsg != nil && &l.wmsg.Payload[0] == &l.core.w[0]
				mu.Lock()
				shardW = append(shardW, l.core.w)
				mu.Unlock()
			})
			if !inMsg {
				t.Fatalf("shard %d does not keep its weights in a message of the network's NewMsg", l.core.Index())
			}
		}
	}
	grp.Finish()
	c, err := grp.Dial(ctx, net, 0, rdma.Codec{})
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), init...)
	for step := range 3 {
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
		for i := range w {
			if w[i] != want[i] {
				t.Fatalf("step %d: w[%d] = %v, want %v", step, i, w[i], want[i])
			}
		}
		for i := range g {
			g[i] = float32(i%7) / 8
			want[i] -= 0.5 * g[i]
		}
		if err := c.Push(ctx, g, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Pull(ctx, w); err != nil { // delivers the last push
		t.Fatal(err)
	}
	c.Leave(ctx)
	if err := grp.Wait(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d copies too many, first: %s", len(bad), bad[0])
	}
	if pushes != 6 || weightsSent != 8 || weightsRecv != 8 {
		t.Fatalf("%d pushes, %d weights sent, %d received; want 6, 8, 8", pushes, weightsSent, weightsRecv)
	}
}

// TestReplyNotAwaited: a shard answers one learner's pull while another
// learner's weights reply lies unread, over every transport: the shard's
// goroutine never waits for a learner to read for more than lendWait.
//
// A reply bigger than the transport's buffers (16 MiB: more than shm's
// ring and than the TCP sockets hold while nobody reads), or any reply
// over shm, which lends the shard's weights to the learner to copy,
// keeps the writer on the shard's weights: the shard goes on with a copy
// of them after lendWait (ServerStats.Detached).
func TestReplyNotAwaited(t *testing.T) {
	for _, c := range []struct {
		kind     string
		n        int
		detached bool
	}{{"inmem", 1 << 16, false}, {"tcp", 1 << 16, false}, {"shm", 1 << 16, true}, {"tcp", 1 << 22, true}, {"shm", 1 << 22, true}} {
		kind, n := c.kind, c.n
		t.Run(fmt.Sprintf("%s/%d", kind, n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := Config{Job: 1, Learners: 2, Protocol: Softsync, N: 2, Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.5}}
			net, addr := network(t, kind, 1)
			g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: make([]float32, n), Network: net, Addr: addr})
			if err != nil {
				t.Fatal(err)
			}
			a, err := net.Dial(ctx, g.Addrs()[0]) // learner 0, which never reads
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if err := a.Send(ctx, wireMsg(rdma.NewMsg, MsgPull, 0, 0, Seq(0, 1), 0, 0)); err != nil {
				t.Fatal(err)
			}
			// The shard has answered learner 0 before learner 1 starts.
			srv, l := g.servers[0], g.servers[0].loops[0]
			for routed := false; !routed; {
				if !srv.each1(l, func() { routed = l.sh.route[0] != nil }) || ctx.Err() != nil {
					t.Fatal("learner 0's pull never reached the shard")
				}
				time.Sleep(time.Millisecond)
			}
			b, err := g.Dial(ctx, net, 1, rdma.Codec{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			defer pcancel()
			w, grad := make([]float32, n), make([]float32, n)
			for i := range 3 {
				if err := b.Pull(pctx, w); err != nil {
					t.Fatalf("pull %d of learner 1 while learner 0's reply is unread: %v", i, err)
				}
				if i > 0 && w[n-1] != -0.5*float32(i) {
					t.Fatalf("pull %d: w[last] = %g, want %g", i, w[n-1], -0.5*float32(i))
				}
				grad[n-1] = 1
				if err := b.Push(pctx, grad, 0); err != nil {
					t.Fatal(err)
				}
			}
			if d := g.servers[0].Stats().Detached; (d > 0) != c.detached {
				t.Errorf("%d replies detached, want detached %v", d, c.detached)
			}
			// Learner 0's reply carries the weights of its pull, not
			// those the shard has since stepped to.
			m, err := a.Recv(pctx)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			if m.Type != TypeWeights || m.Timestamp != 0 || len(m.Payload) != n || m.Payload[n-1] != 0 {
				t.Fatalf("learner 0's reply: type %d, clock %d, %d weights, w[last] = %g; want the weights of clock 0, w[last] = 0", m.Type, m.Timestamp, len(m.Payload), m.Payload[n-1])
			}
		})
	}
}

// TestRepliesReadAtOnce: a learner receives every server's answer to its
// pull at once, so that a server whose reply is bigger than the
// transport's buffers is not held up, and with it every learner it
// serves, until another server has answered. Under hardsync, learner 0
// waits for the next round on both servers; learner 1 (raw connections)
// completes server 1's round only, so that server 1 writes learner 0 a
// reply of 4 MiB (more than shm's ring and the TCP sockets hold) while
// server 0 has nothing to answer yet. Server 1 must still answer learner
// 1's pull; then learner 1 completes server 0's round and learner 0's
// pull returns.
func TestRepliesReadAtOnce(t *testing.T) {
	for _, kind := range []string{"inmem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const half = 1 << 20 // floats per shard
			cfg := Config{Job: 1, Learners: 2, Protocol: Hardsync, N: 2, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.5}}
			net, err := rdma.Open(kind, rdma.Options{Job: 1, SocketBuffer: 64 << 10, QueueLen: 1})
			if err != nil {
				t.Fatal(err)
			}
			_, addr := network(t, kind, 1)
			g, a := groupAndClient(t, ctx, GroupConfig{PS: cfg, Init: make([]float32, 2*half), Network: net, Addr: addr, Servers: 2})
			w, grad := make([]float32, 2*half), make([]float32, 2*half)
			for i := range grad {
				grad[i] = 1
			}
			pulled := nextRound(t, ctx, a, w, grad, 1)

			var b [2]rdma.Conn // learner 1's connections to servers 0 and 1
			for k := range b {
				if b[k], err = net.Dial(ctx, g.Addrs()[k]); err != nil {
					t.Fatal(err)
				}
				defer b[k].Close()
			}
			push := func(k int, seq uint64) {
				m := wireMsg(rdma.NewMsg, MsgPush, 1, k, seq, 0, half)
				copy(m.Payload, grad)
				if err := b[k].Send(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			push(1, Seq(0, 1))
			if err := b[1].Send(ctx, wireMsg(rdma.NewMsg, MsgPull, 1, 1, Seq(0, 2), 1, 0)); err != nil {
				t.Fatal(err)
			}
			bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
			defer bcancel()
			for {
				m, err := b[1].Recv(bctx)
				if err != nil {
					t.Fatalf("learner 1's pull from server 1 while server 0 keeps learner 0 waiting: %v", err)
				}
				done := m.Type == TypeWeights && m.Seq == Seq(0, 2)
				if done && (m.Timestamp != 1 || len(m.Payload) != half || m.Payload[0] != -0.5) {
					t.Fatalf("server 1 answered clock %d, %d weights, w[0] = %g; want clock 1, %d weights, −0.5", m.Timestamp, len(m.Payload), m.Payload[0], half)
				}
				m.Release()
				if done {
					break
				}
			}
			select {
			case err := <-pulled:
				t.Fatalf("learner 0's pull returned before server 0's round was complete: %v", err)
			default:
			}
			push(0, Seq(0, 3))
			select {
			case err := <-pulled:
				if err != nil {
					t.Fatal(err)
				}
			case <-ctx.Done():
				t.Fatal("learner 0's pull did not return once both rounds were complete")
			}
			if st := a.Stamps(); st[0] != 1 || st[1] != 1 || w[0] != -0.5 || w[2*half-1] != -0.5 {
				t.Fatalf("learner 0 pulled stamps %v, w[0] = %g, w[last] = %g; want [1 1], −0.5, −0.5", st, w[0], w[2*half-1])
			}
		})
	}
}

// TestCollectStopsAtRefusal: when one server refuses a pull while another
// has nothing to answer yet, the pull returns the refusal at once (the
// receiving on the other connection stops), and once the client and the
// servers are closed no goroutine is left (the client's receivers
// included). Under hardsync learner 0 waits
// for the next round on two servers, which learner 1 never completes;
// server 1 evicts learner 0.
func TestCollectStopsAtRefusal(t *testing.T) {
	for _, kind := range []string{"inmem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg := Config{Job: 1, Learners: 2, Protocol: Hardsync, N: 2, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.5}}
			net, addr := network(t, kind, 1)
			leaks := noLeaks(t)
			gctx, stop := context.WithCancel(ctx)
			g, a := groupAndClient(t, gctx, GroupConfig{PS: cfg, Init: make([]float32, 64), Network: net, Addr: addr, Servers: 2})
			w, grad := make([]float32, 64), make([]float32, 64)
			pulled := nextRound(t, ctx, a, w, grad, 3) // pulls over both connections start the receiver
			for a.Pushes()[1] == 0 || g.servers[1].Stats().Shards[0].Gradients == 0 {
				if ctx.Err() != nil {
					t.Fatal("server 1 never stepped learner 0's push")
				}
				time.Sleep(time.Millisecond)
			}
			g.servers[1].Evict(0, 0)
			select {
			case err := <-pulled:
				if !errors.Is(err, ErrRejected) || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "removed from the job") {
					t.Fatalf("pull of an evicted learner: %v, want server 1's refusal (ErrRejected, ErrRefused)", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the pull did not return at server 1's refusal while server 0 had nothing to answer")
			}
			a.Close()
			stop()
			g.Wait()
			leaks()
		})
	}
}

// nextRound makes c pull pulls times into w, push grad, and then pull
// into w on a goroutine of its own, whose result the channel returns:
// under hardsync, a pull that waits for the next round.
func nextRound(t *testing.T, ctx context.Context, c *Client, w, grad []float32, pulls int) <-chan error {
	t.Helper()
	for range pulls {
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Push(ctx, grad, 0); err != nil {
		t.Fatal(err)
	}
	pulled := make(chan error, 1)
	go func() { pulled <- c.Pull(ctx, w) }()
	return pulled
}
