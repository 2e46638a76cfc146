package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// severNet is a process's network whose connections, those it dials and
// those its listeners accept, can all be closed at once (sever), as a
// process killed by SIGKILL closes them: its peers see them close and
// nothing more.
type severNet struct {
	rdma.Network
	severed atomic.Bool // no send goes out any more
	mu      sync.Mutex
	conns   []rdma.Conn
	lns     []rdma.Listener
}

// severConn is a connection of a severNet.
type severConn struct {
	rdma.Conn
	n *severNet
}

func (c *severConn) Send(ctx context.Context, m *rdma.Msg) error {
	if c.n.severed.Load() {
		m.Release()
		return rdma.ErrClosed
	}
	return c.Conn.Send(ctx, m)
}

func (n *severNet) track(c rdma.Conn) rdma.Conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.conns = append(n.conns, c)
	return &severConn{c, n}
}

func (n *severNet) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	c, err := n.Network.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return n.track(c), nil
}

func (n *severNet) listener(ln rdma.Listener) rdma.Listener {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lns = append(n.lns, ln)
	return severListener{ln, n}
}

// sever makes every send fail (the roles go on until their context
// ends, but send nothing more), then closes the listeners and the
// connections.
func (n *severNet) sever() {
	n.severed.Store(true)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ln := range n.lns {
		ln.Close()
	}
	for _, c := range n.conns {
		c.Close()
	}
}

type severListener struct {
	rdma.Listener
	n *severNet
}

func (l severListener) Accept(ctx context.Context) (rdma.Conn, error) {
	c, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return l.n.track(c), nil
}

// TestJobHeadRestart: the head of a job of processes (its coordinator
// and evaluator) dies in the middle of the job and is started again at
// another address from the job's newest checkpoint. The shard servers
// and learners go on, find it (Locate) and rejoin it; the job completes
// with its whole history, and each shard holds exactly one gradient of
// every mini-batch.
func TestJobHeadRestart(t *testing.T) {
	train, test := mnistSubset(t, 1600, 100)
	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Model: "mlp", Data: "mnist", Engine: engine(t), Train: train, Test: test, Learners: 2, Batch: 8,
		Protocol: ps.Softsync, N: 2, Shards: 2, Epochs: 3, Chunk: 2, Seed: 1, Job: 7, PSTimeout: time.Minute,
		Checkpoints: store, CheckpointEvery: 20, Report: 20 * time.Millisecond, Solver: sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness}}
	if err := cfg.LoadModel(); err != nil {
		t.Fatal(err)
	}
	network, err := rdma.Open("inmem", rdma.Options{Job: cfg.Job})
	if err != nil {
		t.Fatal(err)
	}
	tp := Apart(2, 2)
	var coordAddr atomic.Value
	locate := func() string { return coordAddr.Load().(string) }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// startHead starts the head (process 0) on a severable network and
	// listener of its own.
	startHead := func(cfg Config) (*Job, *severNet, context.CancelFunc) {
		sn := &severNet{Network: network}
		ln, err := network.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		coordAddr.Store(ln.Addr())
		p := ProcessConfig{Topology: tp, Index: 0, Network: sn, Listeners: Listeners{Coordinator: sn.listener(ln)},
			wrap: func(Role, rdma.Network) rdma.Network { return sn }}
		hctx, hcancel := context.WithCancel(ctx)
		j, err := StartProcess(hctx, cfg, p)
		if err != nil {
			t.Fatal(err)
		}
		return j, sn, hcancel
	}
	head, sn, killHead := startHead(cfg)
	var wg sync.WaitGroup
	errs := make([]error, len(tp.Processes))
	for i := 1; i < len(tp.Processes); i++ {
		// The learners push slowly enough for the head to die in the
		// middle of the job.
		slow := tamper(RoleLearner, func(m *rdma.Msg) bool {
			if m.Type == rdma.Type(ps.MsgPush) {
				time.Sleep(time.Millisecond)
			}
			return true
		})
		p := ProcessConfig{Topology: tp, Index: i, Network: network, Coordinator: locate(), Locate: locate, wrap: slow}
		for range tp.Processes[i].Servers {
			ln, err := network.Listen("")
			if err != nil {
				t.Fatal(err)
			}
			p.Listeners.Servers = append(p.Listeners.Servers, ln)
		}
		j, err := StartProcess(ctx, cfg, p)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _, errs[i] = waitJob(t, j, 2*time.Minute) })
	}
	plan := cfg.Plan(train.N)
	total := int64(plan.Total())
	transporttest.Eventually(t, time.Minute, "a checkpoint and a third of the job's mini-batches", func() bool {
		_, _, err := store.Latest(nil)
		return err == nil && head.Progress().Steps > total/3
	})
	// The head dies: its connections close, nothing more is sent.
	sn.sever()
	killHead()
	waitJob(t, head, time.Minute)
	restarted := cfg
	if _, err := restarted.ResumeFrom(store); err != nil {
		t.Fatal(err)
	}
	head, _, _ = startHead(restarted)
	res, err := waitJob(t, head, 2*time.Minute)
	if err != nil {
		t.Fatalf("the restarted head: %v", err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d (%+v): %v", i, tp.Processes[i], err)
		}
	}
	if len(res.History) != cfg.Epochs {
		t.Errorf("history %+v, want %d epochs", res.History, cfg.Epochs)
	}
	for k, st := range res.Shards {
		if n := int64(st.Gradients + st.Dropped + res.GivenUp[k]); n != total {
			t.Errorf("shard %d: %d accepted + %d dropped + %d given up, want the job's %d mini-batches once each", k, st.Gradients, st.Dropped, res.GivenUp[k], total)
		}
	}
	if res.Chunks.Batches != int(total) {
		t.Errorf("%d mini-batches delivered, want %d", res.Chunks.Batches, total)
	}
}
