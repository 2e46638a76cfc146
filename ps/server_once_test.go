package ps

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma/transporttest"
)

// TestServerConsumed: Server.Consumed reports, per shard in the order of
// ServerConfig.Shards, the mini-batches consumed, and a server restored
// from a checkpoint has the checkpoint's (a mini-batch consumed before it
// is redone after), with new lives.
func TestServerConsumed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := softConfig(28, 1)
	cfg.Shards = 2
	net, addr := network(t, "inmem", 28)
	start := func(sc ServerConfig) (*Server, string, chan error) {
		srv, err := NewServer(sc)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, ln) }()
		return srv, ln.Addr(), done
	}
	a, addrA, doneA := start(ServerConfig{PS: cfg, Shards: []int{1, 0}, Init: make([]float32, 64)})
	c, err := Dial(ctx, net, []string{addrA, addrA}, ClientConfig{Learner: 0, Protocol: Softsync, Total: 64, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, 64)
	for _, b := range []uint64{1, 2, 3, 5} {
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, w, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	want := [][]Interval{{{1, 3}, {5, 5}}, {{1, 3}, {5, 5}}}
	if got := a.Consumed(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("consumed %v, want %v", got, want)
	}
	cps, ids := a.Checkpoint()
	a.Stop()
	transporttest.Receive(t, doneA, 10*time.Second, "Serve to return after Stop")
	if a.Consumed() != nil {
		t.Fatal("Consumed after Serve returned")
	}
	b, addrB, doneB := start(ServerConfig{PS: cfg, Shards: []int{1, 0}, Init: make([]float32, 64), Restore: cps, Identities: ids})
	if got := b.Consumed(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("restored: consumed %v, want %v", got, want)
	}
	if la, lb := a.Lives(), b.Lives(); slices.Contains(lb, la[0]) || slices.Contains(lb, la[1]) {
		t.Fatalf("restored with the lives %v of before (%v)", lb, la)
	}
	c, err = Dial(ctx, net, []string{addrB, addrB}, ClientConfig{Learner: 0, Protocol: Softsync, Total: 64, Shards: 2, Incarnation: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Join(ctx); err != nil {
		t.Fatal(err)
	}
	for _, batch := range []uint64{2, 4} {
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, w, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	for i, sh := range b.Stats().Shards {
		if sh.Redone != 1 || sh.Gradients != 5 || !slices.Equal(b.Consumed()[i], []Interval{{1, 5}}) {
			t.Errorf("restored shard %d: %+v, consumed %v; want batch 2 redone, 4 accepted", sh.Shard, sh, b.Consumed()[i])
		}
	}
	b.Stop()
	transporttest.Receive(t, doneB, 10*time.Second, "the restored Serve to return after Stop")
}

// TestSnapshotsRefetch: an epoch's snapshot is kept after it was sent,
// so that an evaluator that restarts asks for it again and gets the same
// weights, until a later epoch is asked for; the final weights then
// answer a request for it.
func TestSnapshotsRefetch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Job: 29, Learners: 1, Protocol: Softsync, N: 1, Shards: 1, Batch: 1, DataSize: 2, Solver: sgd.Config{LR: 0.5}}
	g, c := groupAndClient(t, ctx, GroupConfig{PS: cfg, Init: make([]float32, 16), Snapshots: true})
	net := g.cfg.Network
	w, grad := make([]float32, 16), slices.Repeat([]float32{1}, 16)
	for range 4 { // epochs 1 and 2
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, grad, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	snapshot := func(epoch int) chan []float32 {
		e, err := Dial(ctx, net, g.Addrs(), ClientConfig{Learner: 1 << 30, Total: 16, Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan []float32, 1)
		go func() {
			defer e.Close()
			v := make([]float32, 16)
			if _, err := e.Snapshot(ctx, epoch, v); err != nil {
				t.Error(err)
			}
			got <- v
		}()
		return got
	}
	for try := range 2 { // the second: an evaluator restarted before it reported epoch 1
		if v := transporttest.Receive(t, snapshot(1), 10*time.Second, "the snapshot of epoch 1"); v[0] != -1 {
			t.Fatalf("epoch 1, request %d: w[0] = %g, want −1", try+1, v[0])
		}
	}
	if v := transporttest.Receive(t, snapshot(2), 10*time.Second, "the snapshot of epoch 2"); v[0] != -2 {
		t.Fatalf("epoch 2: w[0] = %g, want −2", v[0])
	}
	if err := c.Push(ctx, grad, 0); err != nil {
		t.Fatal(err)
	}
	late := snapshot(1) // epoch 2 was asked for: epoch 1's snapshot is gone
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	g.Finish()
	if v := transporttest.Receive(t, late, 10*time.Second, "epoch 1 asked after epoch 2, answered once final"); v[0] != -2.5 {
		t.Fatalf("epoch 1 after epoch 2: w[0] = %g, want the final −2.5", v[0])
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
