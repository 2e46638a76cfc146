package cluster

import (
	"context"
	"slices"
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

// severable holds the connections and listeners of a process's network,
// so that sever can close them all at once, as a process killed by
// SIGKILL closes them: its peers see them close and nothing more.
type severable struct {
	severed atomic.Bool // no send goes out any more
	mu      sync.Mutex
	conns   []rdma.Conn
	lns     []rdma.Listener
}

// keep records c, for sever to close, and reports whether the network
// was severed already (read under the lock sever takes, so that c is
// either among those sever closes or seen severed).
func (s *severable) keep(c rdma.Conn) (severed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns = append(s.conns, c)
	return s.severed.Load()
}

// listener records ln, for sever to close, and returns it with every
// connection it accepts passed through track.
func (s *severable) listener(ln rdma.Listener, track func(rdma.Conn) rdma.Conn) rdma.Listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lns = append(s.lns, ln)
	return severListener{ln, track}
}

// listens reports whether one of the recorded listeners listens at addr.
func (s *severable) listens(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.lns, func(ln rdma.Listener) bool { return ln.Addr() == addr })
}

// sever makes every send fail (the roles go on until their context
// ends, but send nothing more), then closes the listeners and the
// connections.
func (s *severable) sever() {
	s.severed.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ln := range s.lns {
		ln.Close()
	}
	for _, c := range s.conns {
		c.Close()
	}
}

type severListener struct {
	rdma.Listener
	track func(rdma.Conn) rdma.Conn
}

func (l severListener) Accept(ctx context.Context) (rdma.Conn, error) {
	c, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return l.track(c), nil
}

// severNet is a process's network whose connections, those it dials and
// those its listeners accept, can all be closed at once (sever).
type severNet struct {
	rdma.Network
	severable
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
	n.keep(c)
	return &severConn{c, n}
}

func (n *severNet) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	c, err := n.Network.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return n.track(c), nil
}

func (n *severNet) listener(ln rdma.Listener) rdma.Listener { return n.severable.listener(ln, n.track) }

// partsJob runs a job as the processes of a topology, each its own
// StartProcess over one in-memory network, any of which can be killed
// (its connections severed, as by SIGKILL) and started again.
type partsJob struct {
	t         *testing.T
	ctx       context.Context
	network   rdma.Network
	tp        Topology
	coordAddr atomic.Value
	slow      map[int]time.Duration // per learner id, a pause before each push
	hold      func()                // if set, called before each push of every learner
	jobs      []*Job
	severs    []*severNet
	cancels   []context.CancelFunc
}

func newPartsJob(t *testing.T, ctx context.Context, cfg Config, tp Topology) *partsJob {
	network, err := rdma.Open("inmem", rdma.Options{Job: cfg.Job})
	if err != nil {
		t.Fatal(err)
	}
	n := len(tp.Processes)
	return &partsJob{t: t, ctx: ctx, network: network, tp: tp, slow: map[int]time.Duration{},
		jobs: make([]*Job, n), severs: make([]*severNet, n), cancels: make([]context.CancelFunc, n)}
}

func (p *partsJob) locate() string { return p.coordAddr.Load().(string) }

// start starts process i with cfg (again, if it ran): on a network and
// listeners it can sever, finding the coordinator where locate says.
func (p *partsJob) start(i int, cfg Config) *Job {
	t := p.t
	sn := &severNet{Network: p.network}
	r := p.tp.Processes[i]
	pc := ProcessConfig{Topology: p.tp, Index: i, Network: sn, Locate: p.locate}
	if r.Coordinator {
		ln, err := p.network.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		p.coordAddr.Store(ln.Addr())
		pc.Listeners.Coordinator = sn.listener(ln)
	}
	for range r.Servers {
		ln, err := p.network.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		pc.Listeners.Servers = append(pc.Listeners.Servers, sn.listener(ln))
	}
	pc.Coordinator = p.locate()
	pc.wrap = func(role Role, n rdma.Network) rdma.Network {
		if role != RoleLearner || len(r.Learners) == 0 {
			return sn
		}
		pause, hold := p.slow[r.Learners[0]], p.hold
		return tamperNet{sn, func(m *rdma.Msg) bool {
			if m.Type == rdma.Type(ps.MsgPush) {
				if hold != nil {
					hold()
				}
				time.Sleep(pause)
			}
			return true
		}}
	}
	ctx, cancel := context.WithCancel(p.ctx)
	j, err := StartProcess(ctx, cfg, pc)
	if err != nil {
		t.Fatal(err)
	}
	p.jobs[i], p.severs[i], p.cancels[i] = j, sn, cancel
	return j
}

// kill kills process i: its connections close at once and it sends
// nothing more, then it stops.
func (p *partsJob) kill(i int) {
	p.severs[i].sever()
	p.cancels[i]()
	waitJob(p.t, p.jobs[i], time.Minute)
}

// restartConfig returns the job's configuration resumed from store's
// newest checkpoint.
func restartConfig(t *testing.T, cfg Config, store *checkpoint.Store) Config {
	if _, err := cfg.ResumeFrom(store, nil); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// restartJob is the job of the restart tests: softsync, two learners,
// two shard servers, checkpoints every 20 mini-batches, reports every
// 20 ms.
func restartJob(t *testing.T) (Config, *checkpoint.Store) {
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
	return cfg, store
}

// checkOnce checks a restart test's result: the whole history, and each
// shard holding exactly one gradient of every mini-batch.
func checkOnce(t *testing.T, cfg Config, res *Result) {
	t.Helper()
	plan := cfg.Plan(cfg.Train.Info().Len)
	total := int64(plan.Total())
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

// TestJobHeadRestart: the head of a job of processes (its coordinator
// and evaluator) dies in the middle of the job and is started again at
// another address from the job's newest checkpoint. The shard servers
// and learners go on, find it (Locate) and rejoin it; the job completes
// with its whole history, and each shard holds exactly one gradient of
// every mini-batch.
func TestJobHeadRestart(t *testing.T) {
	cfg, store := restartJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := newPartsJob(t, ctx, cfg, Apart(2, 2))
	p.slow[0], p.slow[1] = time.Millisecond, time.Millisecond // slow enough for the head to die in the middle
	head := p.start(0, cfg)
	var wg sync.WaitGroup
	errs := make([]error, len(p.tp.Processes))
	for i := 1; i < len(p.tp.Processes); i++ {
		j := p.start(i, cfg)
		wg.Go(func() { _, errs[i] = waitJob(t, j, 2*time.Minute) })
	}
	plan := cfg.Plan(cfg.Train.Info().Len)
	total := int64(plan.Total())
	transporttest.Eventually(t, time.Minute, "a checkpoint and a third of the job's mini-batches", func() bool {
		_, _, err := store.Latest(nil)
		return err == nil && head.Progress().Steps > total/3
	})
	p.kill(0)
	head = p.start(0, restartConfig(t, cfg, store))
	res, err := waitJob(t, head, 2*time.Minute)
	if err != nil {
		t.Fatalf("the restarted head: %v", err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d (%+v): %v", i, p.tp.Processes[i], err)
		}
	}
	checkOnce(t, cfg, res)
}

// TestJobServerRestart: a shard server dies near the end of a job (one
// learner faster than the other takes most chunks) and is started again
// from the newest checkpoint. The learners join it again, the
// mini-batches the checkpoint lacks are computed again, and the job
// completes with each shard holding exactly one gradient of every
// mini-batch. (The chaos simulator finds the rarer interleavings, e.g.
// a learner idle since the checkpoint, which a restored shard must not
// wait for.)
func TestJobServerRestart(t *testing.T) {
	cfg, store := restartJob(t)
	// Checkpoints 200 mini-batches apart: none can fall in the hold near
	// the end (every 20, one could, and its version held every gradient
	// pushed, leaving nothing to compute again).
	cfg.CheckpointEvery = 200
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := newPartsJob(t, ctx, cfg, Apart(2, 2))
	p.slow[1] = 20 * time.Millisecond // learner 0 takes most chunks; learner 1 ends the job
	// Near the end, the learners' pushes wait for the restart: the job
	// cannot end before the shard server dies.
	plan := cfg.Plan(cfg.Train.Info().Len)
	total := int64(plan.Total())
	near := total - 2*int64(cfg.Chunk)
	var head *Job
	restarted := make(chan struct{})
	p.hold = func() {
		if head.coord.Progress().Steps >= near {
			select {
			case <-restarted:
			case <-ctx.Done():
			}
		}
	}
	head = p.start(0, cfg)
	var wg sync.WaitGroup
	errs := make([]error, len(p.tp.Processes))
	for i := 2; i < len(p.tp.Processes); i++ { // shard server 1 is started apart
		j := p.start(i, cfg)
		wg.Go(func() { _, errs[i] = waitJob(t, j, 2*time.Minute) })
	}
	p.start(1, cfg)
	transporttest.Eventually(t, time.Minute, "the job near its end and a checkpoint", func() bool {
		_, _, err := store.Latest(nil)
		return err == nil && head.coord.Progress().Steps >= near
	})
	p.kill(1)
	server := p.start(1, restartConfig(t, cfg, store))
	close(restarted)
	res, err := waitJob(t, head, 2*time.Minute)
	if err != nil {
		t.Fatalf("the head: %v", err)
	}
	if _, err := waitJob(t, server, time.Minute); err != nil {
		t.Errorf("the restarted shard server: %v", err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d (%+v): %v", i, p.tp.Processes[i], err)
		}
	}
	checkOnce(t, cfg, res)
	if res.Chunks.Redone == 0 {
		t.Errorf("no mini-batch computed again for the restarted shard server: %+v", res.Chunks)
	}
}

// TestJobOnResult: the head's OnResult gets the job's result with its
// final weights while the shard servers still run (they are told to stop
// after it returns; the learners end with the data), and Wait returns
// the same result.
func TestJobOnResult(t *testing.T) {
	cfg, _ := restartJob(t)
	cfg.Epochs, cfg.Checkpoints = 1, nil
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := newPartsJob(t, ctx, cfg, Apart(2, 2))
	ended := make(chan int, len(p.tp.Processes))
	var got *Result
	head := cfg
	head.OnResult = func(res *Result) {
		got = res
		select { // a process told to stop ends at once: give it the time to
		case i := <-ended:
			t.Errorf("shard server process %d ended before the head's OnResult returned", i)
		case <-time.After(time.Second):
		}
	}
	j := p.start(0, head)
	var wg sync.WaitGroup
	for i := 1; i < len(p.tp.Processes); i++ {
		m := p.start(i, cfg)
		wg.Go(func() {
			if _, err := waitJob(t, m, 2*time.Minute); err != nil {
				t.Errorf("process %d: %v", i, err)
			}
			if len(p.tp.Processes[i].Servers) > 0 {
				ended <- i
			}
		})
	}
	res, err := waitJob(t, j, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got != res || len(res.Weights) != cfg.Spec.VectorLen() || res.Normalizer.Scale == 0 {
		t.Fatalf("OnResult got %p, Wait returned %p with %d weights (normalizer %+v); want the same result with the model's %d weights and its normalizer",
			got, res, len(res.Weights), res.Normalizer, cfg.Spec.VectorLen())
	}
}
