package cluster

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// tamperNet is a role's network whose connections pass every message
// they send through keep, which may rewrite it, or return false to drop
// it (Send then reports success): a role that lies, or whose messages are
// lost.
type tamperNet struct {
	rdma.Network
	keep func(m *rdma.Msg) bool
}

// tamper returns the wrap of start that gives role's processes a
// tamperNet over keep.
func tamper(role Role, keep func(m *rdma.Msg) bool) func(Role, rdma.Network) rdma.Network {
	return func(r Role, n rdma.Network) rdma.Network {
		if r != role {
			return n
		}
		return tamperNet{n, keep}
	}
}

func (n tamperNet) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	c, err := n.Network.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &tamperConn{c, n.keep}, nil // a pointer: connections are compared
}

type tamperConn struct {
	rdma.Conn
	keep func(m *rdma.Msg) bool
}

func (c *tamperConn) Send(ctx context.Context, m *rdma.Msg) error {
	if !c.keep(m) {
		m.Release()
		return nil
	}
	return c.Conn.Send(ctx, m)
}

// waitJob returns what j.Wait returns, failing the test if the job has
// not ended within the given time.
func waitJob(t *testing.T, j *Job, within time.Duration) (*Result, error) {
	t.Helper()
	type ended struct {
		res *Result
		err error
	}
	ch := make(chan ended, 1)
	go func() {
		res, err := j.Wait()
		ch <- ended{res, err}
	}()
	e := transporttest.Receive(t, ch, within, "the job to end")
	return e.res, e.err
}

// TestJobCountsChunksHandedOut: learners that claim 3 more mini-batches
// than each chunk they complete held do not change the count of the
// report: the coordinator counts the mini-batches of the chunks it handed
// out.
func TestJobCountsChunksHandedOut(t *testing.T) {
	train, _ := mnistSubset(t, 400, 0)
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Learners: 2, Batch: 10,
		Protocol: ps.Softsync, N: 2, Shards: 1, Epochs: 2, Chunk: 3, Seed: 1, Solver: sgd.Config{LR: 0.01}}
	lie := func(m *rdma.Msg) bool {
		if m.Type != tComplete {
			return true
		}
		var c data.Chunk
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Errorf("a completion's data %q: %v", m.Data, err)
			return true
		}
		c.Count += 3
		b, _ := json.Marshal(c)
		m.Data = append(m.Data[:0], b...)
		return true
	}
	j, err := start(context.Background(), cfg, tamper(RoleLearner, lie))
	if err != nil {
		t.Fatal(err)
	}
	res, err := waitJob(t, j, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	total := 2 * res.BatchesPerEpoch
	if res.Chunks.Batches != total || res.Steps != int64(total) || res.Chunks.Completed != 2*((res.BatchesPerEpoch+2)/3) {
		t.Errorf("chunks %+v, %d steps: want %d batches of %d chunks handed out", res.Chunks, res.Steps, total, 2*((res.BatchesPerEpoch+2)/3))
	}
}

// checkResumeRendezvous checks that a coordinator resumed from store's
// checkpoint of a job of cfg (one shard server, an evaluator) does not
// start the job once the shard server and the evaluator are there: it
// waits for the learners too, which would otherwise find a job with no
// data left over, or even gone, when they come.
func checkResumeRendezvous(t *testing.T, cfg Config, store *checkpoint.Store) {
	t.Helper()
	re, _, err := LoadResume(store, nil, nil, cfg.Spec.VectorLen(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	coord, err := NewCoordinator(CoordinatorConfig{Plan: cfg.Plan(cfg.Train.Info().Len), Learners: cfg.Learners, Servers: [][]int{{0}},
		Evaluator: true, Resume: re})
	if err != nil {
		t.Fatal(err)
	}
	net, err := rdma.Open("inmem", rdma.Options{Job: 1})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var roles sync.WaitGroup
	defer roles.Wait()
	defer cancel()
	served := make(chan error, 1)
	go func() {
		_, err := coord.Serve(ctx, ln)
		served <- err
	}()
	for _, h := range []hello{{Process: Process{Role: RoleServer}, Addr: "shards", Shards: []int{0}}, {Process: Process{Role: RoleEvaluator}}} {
		m := Member{Network: net, Coordinator: ln.Addr(), Process: h.Process}
		roles.Go(func() {
			if cc, _, err := m.join(ctx, h); err == nil { // welcomed: the job started
				<-ctx.Done()
				cc.conn.Close()
			}
		})
	}
	transporttest.Eventually(t, 10*time.Second, "the shard server and the evaluator to register", func() bool {
		arrived, _ := coord.rendezvous()
		return arrived == 2
	})
	if _, started := coord.rendezvous(); started {
		t.Error("the resumed job started without its learners")
	}
	cancel()
	transporttest.Receive(t, served, 10*time.Second, "the coordinator to stop when its context ended")
}
