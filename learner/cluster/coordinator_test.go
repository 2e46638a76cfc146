package cluster

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
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
	return tamperConn{c, n.keep}, nil
}

type tamperConn struct {
	rdma.Conn
	keep func(m *rdma.Msg) bool
}

func (c tamperConn) Send(ctx context.Context, m *rdma.Msg) error {
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
