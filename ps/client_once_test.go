package ps

import (
	"context"
	"slices"
	"testing"
	"time"

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
	net, addr := network(t, "inmem", 24)
	hold, held := make(chan struct{}), make(chan struct{}, 4)
	cfg := softConfig(24, 1)
	cfg.Shards = 2
	g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: make([]float32, 64), Network: net, Addr: addr,
		OnUpdate: func(shard int, u Update) {
			if shard == 1 && u.Clock == 2 {
				held <- struct{}{}
				<-hold
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.Dial(ctx, net, 0, rdma.Codec{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
