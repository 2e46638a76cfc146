package ps

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/ps/sgd"
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
