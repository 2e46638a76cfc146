package ps

import (
	"context"
	"testing"
	"time"

	"github.com/softsync/softsync/rdma/transporttest"
)

// TestServerEvictAfterRejoin: the coordinator evicts a learner's
// incarnation while its shard is busy, and the learner's next
// incarnation joins before the shard carries out the eviction. The new
// incarnation stays a member: its pull is answered (the eviction once
// removed the learner from the shard whatever its incarnation, and the
// new one's pull was refused as a learner that left).
func TestServerEvictAfterRejoin(t *testing.T) {
	leaks := noLeaks(t)
	defer leaks()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, _ := network(t, "tcp", 16)
	s := serveTCP(t, ctx, net, ServerConfig{PS: softConfig(16, 2), Init: make([]float32, 16)})
	old, err := Dial(ctx, net, []string{s.addr}, ClientConfig{Learner: 1, Incarnation: 2, Protocol: Softsync, Total: 16, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, 16)
	if err := old.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	// The shard's goroutine is busy until hold closes.
	busy, hold := make(chan struct{}), make(chan struct{})
	go s.each1(s.loops[0], func() { close(busy); <-hold })
	<-busy
	released := false
	defer func() {
		if !released {
			close(hold)
		}
	}()
	evicted := make(chan struct{})
	go func() { s.Evict(1, 2); close(evicted) }()
	bound := func(dead bool, inc uint32) func() bool {
		return func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			b := s.core.binds[1]
			return b != nil && b.dead == dead && b.inc == inc
		}
	}
	transporttest.Eventually(t, 10*time.Second, "incarnation 2 evicted", bound(true, 2))
	old.Close()
	type dialed struct {
		c   *Client
		err error
	}
	joined := make(chan dialed, 1)
	go func() {
		c, err := Dial(ctx, net, []string{s.addr}, ClientConfig{Learner: 1, Incarnation: 3, Protocol: Softsync, Total: 16, Shards: 1})
		if err == nil {
			err = c.Join(ctx)
		}
		joined <- dialed{c, err}
	}()
	transporttest.Eventually(t, 10*time.Second, "incarnation 3 bound", bound(false, 3))
	time.Sleep(50 * time.Millisecond) // its join queued behind the eviction
	close(hold)
	released = true
	<-evicted
	d := transporttest.Receive(t, joined, 10*time.Second, "incarnation 3 to join")
	if d.err != nil {
		t.Fatal(d.err)
	}
	defer d.c.Close()
	if err := d.c.Pull(ctx, w); err != nil {
		t.Fatalf("pull of incarnation 3, joined after incarnation 2 was evicted: %v", err)
	}
	d.c.Close()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}
