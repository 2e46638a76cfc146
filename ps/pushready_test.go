package ps

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// TestPushReady sends a push in three PushReady calls, as a learner does
// while backward goes on, beside a client that sends the same gradients
// with Push: the shards whose slices are ready apply them before the push
// is complete, the others only after the last call, and both jobs end
// with the same weights, stamps and shard counters. While the push is
// partly sent, the client refuses every other call.
func TestPushReady(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const total = 256
	cfg := softConfig(27, 1)
	cfg.Shards = 4
	rs, err := Ranges(total, cfg.Shards)
	if err != nil {
		t.Fatal(err)
	}
	updates := make(chan int, 64)
	g1, whole := groupAndClient(t, ctx, GroupConfig{PS: cfg, Init: make([]float32, total)})
	g2, parts := groupAndClient(t, ctx, GroupConfig{PS: cfg, Init: make([]float32, total),
		OnUpdate: func(shard int, _ Update) { updates <- shard }})
	w1, w2 := make([]float32, total), make([]float32, total)
	for b := uint64(1); b <= 3; b++ {
		grad := make([]float32, total)
		for i := range grad {
			grad[i] = float32((i*int(b+2))%7) - 3
		}
		if err := whole.Pull(ctx, w1); err != nil {
			t.Fatal(err)
		}
		if err := parts.Pull(ctx, w2); err != nil {
			t.Fatal(err)
		}
		if err := whole.Push(ctx, grad, b); err != nil {
			t.Fatal(err)
		}
		// Nothing starts at or after rs[3].Lo+1: nothing is sent.
		if err := parts.PushReady(ctx, grad, b, rs[3].Lo+1); err != nil {
			t.Fatal(err)
		}
		if n := parts.Pushes(); !slices.Equal(n, []uint64{b - 1, b - 1, b - 1, b - 1}) {
			t.Fatalf("push %d, nothing ready: pushes %v", b, n)
		}
		if err := parts.PushReady(ctx, grad, b, rs[2].Lo); err != nil {
			t.Fatal(err)
		}
		if n := parts.Pushes(); !slices.Equal(n, []uint64{b - 1, b - 1, b, b}) {
			t.Fatalf("push %d, shards 2 and 3 ready: pushes %v", b, n)
		}
		got := []int{transporttest.Receive(t, updates, 10*time.Second, "a shard's update"),
			transporttest.Receive(t, updates, 10*time.Second, "a shard's update")}
		slices.Sort(got)
		if !slices.Equal(got, []int{2, 3}) {
			t.Fatalf("push %d: shards %v updated before the push was complete, want 2 and 3", b, got)
		}
		for _, call := range []func() error{
			func() error { return parts.Pull(ctx, w2) },
			func() error { return parts.Leave(ctx) },
			func() error { return parts.Push(ctx, grad, b+1) },
			func() error { return parts.PushReady(ctx, slices.Clone(grad), b, 0) },
		} {
			if err := call(); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("push %d: a call while the push is partly sent returned %v, want ErrInvalidConfig", b, err)
			}
		}
		select {
		case k := <-updates:
			t.Fatalf("push %d: shard %d updated before its slice was sent", b, k)
		case <-time.After(20 * time.Millisecond):
		}
		if err := parts.PushReady(ctx, grad, b, 0); err != nil {
			t.Fatal(err)
		}
		got = []int{transporttest.Receive(t, updates, 10*time.Second, "a shard's update"),
			transporttest.Receive(t, updates, 10*time.Second, "a shard's update")}
		slices.Sort(got)
		if !slices.Equal(got, []int{0, 1}) {
			t.Fatalf("push %d: shards %v updated after the last call, want 0 and 1", b, got)
		}
	}
	if err := whole.Pull(ctx, w1); err != nil {
		t.Fatal(err)
	}
	if err := parts.Pull(ctx, w2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w1, w2) || !slices.Equal(whole.Stamps(), parts.Stamps()) {
		t.Fatalf("weights or stamps differ: stamps %v and %v", whole.Stamps(), parts.Stamps())
	}
	for _, c := range []*Client{whole, parts} {
		if err := c.Leave(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s1, _ := g1.Stats()
	s2, _ := g2.Stats()
	for k := range s1 {
		if s1[k].Gradients != 3 || s1[k].Gradients != s2[k].Gradients || s1[k].Clock != s2[k].Clock {
			t.Errorf("shard %d: %+v with Push, %+v with PushReady", k, s1[k], s2[k])
		}
	}
	for _, g := range []*Group{g1, g2} {
		g.Finish()
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClientCloseEndsPrefetch: Close with an asynchronous pull in flight
// (hardsync: the round waits for a second learner that never pushes)
// returns only once the PullAsync goroutine has ended, and nothing is
// redialed or sent again afterwards, so that the caller may free the
// gradient and weights it lent the client.
func TestClientCloseEndsPrefetch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := softConfig(28, 2)
	cfg.Protocol = Hardsync
	net, addr := network(t, "inmem", cfg.Job)
	g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: make([]float32, 16), Network: net, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial(ctx, g.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	var redials atomic.Int32
	c, err := NewClient(ClientConfig{Learner: 0, Protocol: Hardsync, Total: 16, Shards: 1,
		Redial: func(ctx context.Context, _ int) (rdma.Conn, error) {
			redials.Add(1)
			return net.Dial(ctx, g.Addrs()[0])
		}}, []rdma.Conn{conn})
	if err != nil {
		t.Fatal(err)
	}
	w, next, grad := make([]float32, 16), make([]float32, 16), make([]float32, 16)
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := c.PullAsync(ctx, next); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, grad, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(300 * time.Millisecond) // a redial after Close would come within it
	for time.Now().Before(deadline) && redials.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if n := redials.Load(); n != 0 {
		t.Fatalf("%d redials after Close", n)
	}
	g.Finish()
	g.Evict(0, 0)
	g.Evict(1, 0)
}
