package cluster

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
)

// TestJobOnServeOnClient: the hooks hand out the job's live shard server
// and each learner's client once, and their counters agree with the
// job's result.
func TestJobOnServeOnClient(t *testing.T) {
	train, _ := mnistSubset(t, 512, 0)
	var mu sync.Mutex
	var servers []*ps.Server
	clients := map[int]*ps.Client{}
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Learners: 2, Batch: 8,
		Protocol: ps.Softsync, N: 2, Shards: 2, Epochs: 1, MaxSteps: 20, Seed: 1,
		Solver: sgd.Config{LR: 0.01, LRMode: sgd.LRStaleness},
		OnServe: func(s *ps.Server) {
			mu.Lock()
			defer mu.Unlock()
			servers = append(servers, s)
		},
		OnClient: func(l int, c *ps.Client) {
			mu.Lock()
			defer mu.Unlock()
			if clients[l] != nil {
				t.Errorf("learner %d's client handed out twice", l)
			}
			clients[l] = c
		}}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, cfg, res)
	if len(servers) != 1 || !slices.Equal(servers[0].Shards(), []int{0, 1}) {
		t.Fatalf("servers handed out: %d", len(servers))
	}
	st := servers[0].Stats() // final once the job is over
	for k, sh := range st.Shards {
		if sh.Gradients != res.Shards[k].Gradients || sh.Updates != res.Shards[k].Updates {
			t.Errorf("shard %d: Stats %d gradients, %d updates; the result %d, %d", k, sh.Gradients, sh.Updates, res.Shards[k].Gradients, res.Shards[k].Updates)
		}
	}
	if len(clients) != 2 {
		t.Fatalf("clients of learners %v, want 0 and 1", clients)
	}
	for l, c := range clients {
		if p := c.Pushes(); int64(p[0]) != res.LearnerSteps[l] || p[1] != p[0] {
			t.Errorf("learner %d: pushes %v, steps %d", l, p, res.LearnerSteps[l])
		}
		// A learner the job ended before its first step may have
		// pulled nothing; one with steps has pushed and pulled.
		if tr := c.Stats(); res.LearnerSteps[l] > 0 && (tr.TotalSent().Msgs == 0 || tr.TotalRecv().WireBytes == 0) {
			t.Errorf("learner %d: %d steps, no traffic counted: %+v", l, res.LearnerSteps[l], tr)
		}
	}
}
