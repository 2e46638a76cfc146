package ps

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// TestServerStatsWhileStopping reads the counters from other goroutines
// while Serve stops: Stats is safe from any goroutine at any time (the
// race detector checks it) and returns the final counters once stopped.
func TestServerStatsWhileStopping(t *testing.T) {
	for range 50 {
		cfg := Config{Job: 1, Learners: 1, Protocol: Softsync, N: 1, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.1}}
		srv, err := NewServer(ServerConfig{PS: cfg, Init: make([]float32, 4)})
		if err != nil {
			t.Fatal(err)
		}
		net, addr := network(t, "inmem", 1)
		ln, err := net.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(context.Background(), ln) }()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 20 {
					if st := srv.Stats(); len(st.Shards) != 2 {
						t.Errorf("%d shards in Stats, want 2", len(st.Shards))
					}
				}
			})
		}
		srv.Stop()
		wg.Wait()
		if err := transporttest.Receive(t, done, 10*time.Second, "Serve to return after Stop"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServerRefusedUpdates: through a server, a learner's push that would
// make a weight infinite is refused: the OnUpdate hook sees the refused
// update with the learner's id, the server's counters count it against
// the learner, the learner's next pull succeeds with the weights as they
// were, and the other learner's good push is applied. Once updates are
// refused RefusedLimit times in a row, the learner's pull fails with a
// rejection that errors.Is matches to ErrDiverged.
func TestServerRefusedUpdates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := Config{Job: 1, Learners: 2, Protocol: Softsync, N: 2, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.5}}
	init := []float32{-3e38, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 5}
	refused := make(chan Update, 64)
	net, addr := network(t, "inmem", 1)
	g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: init, Network: net, Addr: addr,
		OnUpdate: func(shard int, u Update) {
			if u.Refused {
				u.Learners = slices.Clone(u.Learners) // a view valid during the call
				refused <- u
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]*Client
	for l := range cs {
		if cs[l], err = g.Dial(ctx, net, uint32(l), rdma.Codec{}); err != nil {
			t.Fatal(err)
		}
		defer cs[l].Close()
	}
	w := make([]float32, len(init))
	huge := make([]float32, len(init))
	huge[0] = 3e38 // shard 0 only: −3e38 − 1.5e38
	step := func(l int, grad []float32) error {
		if err := cs[l].Pull(ctx, w); err != nil {
			return err
		}
		return cs[l].Push(ctx, grad, 0)
	}
	if err := step(1, huge); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-refused:
		if !slices.Equal(u.Learners, []uint32{1}) || u.Clock != 1 {
			t.Fatalf("refused update %+v, want learner 1's at clock 1", u)
		}
	case <-ctx.Done():
		t.Fatal("no refused update reported to OnUpdate within 20 s")
	}
	good := slices.Clone(huge)
	good[0], good[16] = -2e38, 2
	if err := step(0, good); err != nil {
		t.Fatal(err)
	}
	if err := cs[0].Pull(ctx, w); err != nil { // after its push: with it applied
		t.Fatal(err)
	}
	if want := init[0] - 0.5*good[0]; w[0] != want || w[1] != 1 || w[16] != 4 || w[17] != 5 {
		t.Fatalf("weights after a refused and a good push: %v, want w[0] = %g", w, want)
	}
	if err := cs[1].Pull(ctx, w); err != nil { // the refused learner goes on
		t.Fatal(err)
	}
	st, _ := g.Stats()
	if st[0].Refused != 1 || !slices.Equal(st[0].RefusedGradients, []uint64{0, 1}) || st[0].Updates != 1 || st[1].Refused != 0 || st[1].Updates != 2 {
		t.Fatalf("shard stats %+v", st)
	}
	// Updates refused in a row: the job has diverged.
	var perr error
	for range RefusedLimit + 1 {
		if perr = step(0, huge); perr != nil {
			break
		}
	}
	if perr == nil {
		perr = cs[0].Pull(ctx, w)
	}
	if !errors.Is(perr, ErrDiverged) || !errors.Is(perr, ErrRejected) {
		t.Fatalf("pull after %d refused updates in a row: %v, want ErrDiverged", RefusedLimit, perr)
	}
}
