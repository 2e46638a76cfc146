package ps

import (
	"cmp"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// leastSquares is the objective of the runtime tests: mean over samples of
// ½(a·w − b)², with w split into two segments of different multipliers.
type leastSquares struct {
	a [][]float64
	b []float64
}

const lsDim = 12

var lsLayout = []param.Segment{
	{Name: "w", Offset: 0, Len: 8, LRMult: 1, DecayMult: 1},
	{Name: "v", Offset: 8, Len: 4, LRMult: 2, DecayMult: 0},
}

func newLeastSquares(n int) *leastSquares {
	r := rand.New(rand.NewPCG(21, 22))
	p := &leastSquares{}
	for range n {
		a := make([]float64, lsDim)
		for d := range a {
			a[d] = r.NormFloat64()
		}
		p.a, p.b = append(p.a, a), append(p.b, r.NormFloat64())
	}
	return p
}

// gradient writes the mean gradient over samples first … first+count−1
// (modulo the data-set size).
func (p *leastSquares) gradient(w, g []float32, first, count int) {
	var acc [lsDim]float64
	for s := first; s < first+count; s++ {
		i := s % len(p.a)
		res := -p.b[i]
		for d := range lsDim {
			res += float64(w[d]) * p.a[i][d]
		}
		for d := range lsDim {
			acc[d] += res * p.a[i][d] / float64(count)
		}
	}
	for d := range g {
		g[d] = float32(acc[d])
	}
}

// network opens the transport kind ("inmem" or "tcp") for job and returns
// the listen address to use (loopback for TCP).
func network(t testing.TB, kind string, job uint32) (rdma.Network, string) {
	t.Helper()
	opts := rdma.Options{Job: job}
	if kind == "verbs" { // over the in-process emulation of a device
		opts.Verbs.Emulation = rdma.NewEmulation()
	}
	n, err := rdma.Open(kind, opts)
	if errors.Is(err, rdma.ErrUnsupported) { // verbs in a build without it
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if kind == "tcp" || kind == "verbs" {
		return n, "127.0.0.1:0"
	}
	return n, ""
}

// cluster runs a Group over the transport kind and λ learner goroutines,
// each running steps of pull → gradient → push, then leave.
func cluster(t *testing.T, kind string, cfg Config, init []float32, steps int, grad func(l, s int, w, g []float32)) ([]float32, []Stats) {
	return clusterOpts(t, kind, cfg, init, steps, grad, clusterOptions{})
}

// clusterOptions vary cluster: overlap makes each learner prefetch its
// next weights with PullAsync while it computes (two weight buffers);
// servers is the number of shard servers (0: one per shard).
type clusterOptions struct {
	overlap       bool
	servers       int
	updateThreads int
}

func clusterOpts(t *testing.T, kind string, cfg Config, init []float32, steps int, grad func(l, s int, w, g []float32), o clusterOptions) ([]float32, []Stats) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, addr := network(t, kind, cfg.Job)
	g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: init, Network: net, Addr: addr, Servers: cmp.Or(o.servers, cfg.Shards),
		UpdateThreads: o.updateThreads})
	if err != nil {
		t.Fatal(err)
	}
	g.Finish() // final once every learner has left
	var wg sync.WaitGroup
	for l := range cfg.Learners {
		wg.Go(func() {
			c, err := g.Dial(ctx, net, uint32(l), rdma.Codec{})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			w, next, grd := make([]float32, len(init)), make([]float32, len(init)), make([]float32, len(init))
			if o.overlap {
				if err := c.Pull(ctx, w); err != nil {
					t.Errorf("learner %d: %v", l, err)
					return
				}
			}
			for s := range steps {
				var err error
				switch {
				case !o.overlap:
					err = c.Pull(ctx, w)
				case s < steps-1:
					err = c.PullAsync(ctx, next)
				}
				if err != nil {
					t.Errorf("learner %d step %d: %v", l, s, err)
					return
				}
				grad(l, s, w, grd)
				if err := c.Push(ctx, grd, 0); err != nil {
					t.Errorf("learner %d step %d: %v", l, s, err)
					return
				}
				if o.overlap {
					if err := c.WaitPull(); err != nil {
						t.Errorf("learner %d step %d: %v", l, s, err)
						return
					}
					w, next = next, w
				}
			}
			if err := c.Leave(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	stats, _ := g.Stats()
	return g.Weights(), stats
}

// TestServerHardsyncExact runs hardsync through the runtime (2 shard
// servers, 4 learner goroutines, in-memory and loopback TCP connections)
// and compares the weights with the single-learner solver at batch μλ.
func TestServerHardsyncExact(t *testing.T) {
	for _, kind := range []string{"inmem", "tcp"} {
		t.Run(kind, func(t *testing.T) { testHardsyncExact(t, kind) })
	}
}

// TestServerHardsyncOverlap: under hardsync a prefetch asks for the next
// round, so overlapped learners compute exactly what synchronous ones do.
func TestServerHardsyncOverlap(t *testing.T) {
	testHardsyncExactOpts(t, "inmem", clusterOptions{overlap: true})
}

func testHardsyncExact(t *testing.T, kind string) { testHardsyncExactOpts(t, kind, clusterOptions{}) }

func testHardsyncExactOpts(t *testing.T, kind string, o clusterOptions) {
	const learners, mu, n, epochs = 4, 3, 48, 3
	prob := newLeastSquares(n)
	solver := sgd.Config{LR: 0.05, Momentum: 0.9, WeightDecay: 0.01, LRSteps: []int{2}, LRGamma: 0.1, LRMode: sgd.LRStaleness}
	cfg := Config{Job: 3, Learners: learners, Protocol: Hardsync, Shards: 2, Batch: mu, DataSize: n, Layout: lsLayout, Solver: solver}
	init := make([]float32, lsDim)
	steps := epochs * n / (mu * learners)

	single, err := sgd.NewSolver(solver, lsLayout, 0, lsDim)
	if err != nil {
		t.Fatal(err)
	}
	ref, g := slices.Clone(init), make([]float32, lsDim)
	for s := range steps {
		prob.gradient(ref, g, s*mu*learners, mu*learners)
		single.Update(ref, g, sgd.MaxAbs(g), 0, s*mu*learners/n)
	}

	got, stats := clusterOpts(t, kind, cfg, init, steps, func(l, s int, w, g []float32) {
		prob.gradient(w, g, s*mu*learners+l*mu, mu)
	}, o)
	for i := range got {
		if math.Abs(float64(got[i])-float64(ref[i])) > 1e-6 {
			t.Fatalf("w[%d] = %g, single learner %g", i, got[i], ref[i])
		}
	}
	if slices.Equal(ref, init) {
		t.Fatal("training did not move the weights")
	}
	for k, st := range stats {
		if st.Updates != uint64(steps) || st.MaxStaleness != 0 || st.Rejected.Total() != 0 {
			t.Errorf("shard %d: %+v", k, st)
		}
	}
}

// TestServerSoftsync runs asynchronous training through the runtime and
// checks the accounting: every push accepted once, one update per push.
func TestServerSoftsync(t *testing.T) {
	cfg := Config{Job: 1, Learners: 4, Protocol: Softsync, N: 4, Shards: 3, Batch: 1,
		Solver: sgd.Config{LR: 0.01, LRMode: sgd.LRStaleness}}
	prob := newLeastSquares(40)
	_, stats := cluster(t, "inmem", cfg, make([]float32, lsDim), 30, func(l, s int, w, g []float32) {
		prob.gradient(w, g, s*4+l, 1)
	})
	for k, st := range stats {
		if st.Gradients != 120 || st.Updates != 120 || st.Dropped != 0 || st.Rejected.Total() != 0 {
			t.Errorf("shard %d: %+v", k, st)
		}
	}
}

// TestServerRejectsAndLoss sends a NaN gradient and a pull from an unknown
// learner over raw connections (both answered with errors, the server keeps
// serving), then drops a hardsync learner's connection without a leave:
// the server treats it as a leave and the other learner's round completes.
func TestServerRejectsAndLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Job: 9, Learners: 2, Protocol: Hardsync, Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.1}}
	srv, err := NewServer(ServerConfig{PS: cfg, Init: make([]float32, 4)})
	if err != nil {
		t.Fatal(err)
	}
	net, addr := network(t, "inmem", 9)
	ln, err := net.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	srv.Finish()

	client := func(l uint32, conn rdma.Conn) *Client {
		c, err := NewClient(ClientConfig{Learner: l, Protocol: Hardsync, Total: 4, Shards: 1}, []rdma.Conn{conn})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dial := func() rdma.Conn {
		c, err := net.Dial(ctx, ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c0, raw1 := client(0, dial()), dial()
	send := func(t MsgType, seq uint64, payload []float32) {
		m := rdma.NewMsg(len(payload))
		copy(m.Payload, payload)
		m.Type, m.Learner, m.Seq = rdma.Type(t), 1, seq
		if err := raw1.Send(ctx, m); err != nil {
			panic(err)
		}
	}
	w := make([]float32, 4)
	if err := c0.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	// Learner 1 pulls, then pushes a NaN: rejected, reported on its
	// connection.
	send(MsgPull, 1, nil)
	if m, err := raw1.Recv(ctx); err != nil || m.Type != TypeWeights || m.Seq != 1 || len(m.Payload) != 4 {
		t.Fatalf("pull: reply %+v, %v", m, err)
	}
	send(MsgPush, 2, []float32{0, float32(math.NaN()), 0, 0})
	if m, err := raw1.Recv(ctx); err != nil || m.Type != rdma.TypeError || m.Seq != 2 || !errors.Is(m.Err(), rdma.ErrRemote) {
		t.Fatalf("NaN push: reply %+v, %v", m, err)
	}
	// An unknown learner's pull fails at once instead of waiting.
	if err := client(5, dial()).Pull(ctx, w); !errors.Is(err, ErrRejected) || !errors.Is(err, rdma.ErrRemote) {
		t.Fatalf("pull of learner 5: %v", err)
	}
	// Learner 0 pushes; the round waits for learner 1, whose connection
	// then drops: the round completes as a partial update (one gradient of
	// c₀ = 2, half the rate) and learner 0 gets clock 1.
	if err := c0.Push(ctx, []float32{1, 1, 1, 1}, 0); err != nil {
		t.Fatal(err)
	}
	raw1.Close()
	if err := c0.Pull(ctx, w); err != nil || c0.Stamps()[0] != 1 || !slices.Equal(w, []float32{-0.05, -0.05, -0.05, -0.05}) {
		t.Fatalf("after the loss: %v, stamp %v, w %v", err, c0.Stamps(), w)
	}
	c0.Leave(ctx)
	transporttest.Receive(t, srv.Final(), 10*time.Second, "the shard to be final after the last learner left")
	srv.Stop()
	if err := transporttest.Receive(t, done, 10*time.Second, "Serve to return after Stop"); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	st := srv.Stats()
	if sh := st.Shards[0]; sh.Rejected.NonFinite != 1 || sh.Rejected.UnknownLearner != 1 || sh.Updates != 1 || st.Lost != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestGroupErrors(t *testing.T) {
	ctx := context.Background()
	net, _ := network(t, "inmem", 1)
	bad := Config{Job: 1, Learners: 2, Protocol: Softsync, N: 3, Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.1}}
	if _, err := StartGroup(ctx, GroupConfig{PS: bad, Init: make([]float32, 4), Network: net}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad config: %v", err)
	}
	if _, err := Dial(ctx, net, []string{"nowhere"}, ClientConfig{Total: 4, Shards: 1}); !errors.Is(err, rdma.ErrRefused) {
		t.Fatalf("dial to nothing: %v", err)
	}
}

// TestClientPullAsyncStamps runs one softsync learner that prefetches its
// next weights while it computes. Each prefetch is answered before the
// push of the gradient being computed, so step s ≥ 1 computes on the
// weights of clock s−1 and its gradient must arrive with staleness 1: the
// run must equal SGD whose step s uses the gradient at w_{s−1}, and the
// histogram must be {τ=0: 1, τ=1: steps−1}. A client that stamped
// gradients with the prefetched weights' stamps would show τ = 0.
func TestClientPullAsyncStamps(t *testing.T) {
	for _, kind := range []string{"inmem", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			const n, steps = 20, 15
			prob := newLeastSquares(n)
			solver := sgd.Config{LR: 0.05, Momentum: 0.5, LRMode: sgd.LRStaleness}
			cfg := Config{Job: 4, Learners: 1, Protocol: Softsync, N: 1, Shards: 2, Batch: 2, Layout: lsLayout, Solver: solver}
			init := make([]float32, lsDim)
			for i := range init {
				init[i] = 0.1 * float32(i)
			}
			single, err := sgd.NewSolver(solver, lsLayout, 0, lsDim)
			if err != nil {
				t.Fatal(err)
			}
			ref, prev, g := slices.Clone(init), slices.Clone(init), make([]float32, lsDim)
			for s := range steps {
				prob.gradient(prev, g, 2*s, 2) // computed on w_{s−1} (w_0 for s = 0)
				copy(prev, ref)
				single.Update(ref, g, sgd.MaxAbs(g), min(s, 1), 0)
			}
			got, stats := clusterOpts(t, kind, cfg, init, steps, func(l, s int, w, g []float32) {
				prob.gradient(w, g, 2*s, 2)
			}, clusterOptions{overlap: true, servers: 1})
			for i := range got {
				if math.Abs(float64(got[i])-float64(ref[i])) > 1e-6 {
					t.Fatalf("w[%d] = %g, want %g (SGD with gradients one step stale)", i, got[i], ref[i])
				}
			}
			for k, st := range stats {
				if !slices.Equal(st.Histogram, []uint64{1, steps - 1}) || st.Updates != steps {
					t.Errorf("shard %d: histogram %v, %d updates; want [1 %d], %d", k, st.Histogram, st.Updates, steps-1, steps)
				}
			}
		})
	}
}

// TestSnapshots runs three asynchronous learners through two servers of
// two shards each with epoch snapshots (P = 6 gradients per epoch) and an
// evaluator that asks for the snapshots of epochs 1…4 before they exist,
// then for the final weights: each request is answered once its epoch has
// been consumed by every shard, with the weights of that moment (the
// snapshot of the last epoch equals the final weights, c₀ being 1), and
// the final weights once the learners have left.
func TestSnapshots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Job: 1, Learners: 3, Protocol: Softsync, N: 3, Shards: 4, Batch: 2, DataSize: 12,
		Solver: sgd.Config{LR: 0.01, LRMode: sgd.LRStaleness}}
	prob := newLeastSquares(40)
	net, _ := network(t, "inmem", 1)
	var mu sync.Mutex
	clocks := map[uint64]int{} // shard-0 clock after each update → update count
	g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: make([]float32, lsDim), Network: net, Servers: 2, Snapshots: true,
		OnUpdate: func(shard int, u Update) {
			if shard == 0 {
				mu.Lock()
				clocks[u.Clock]++
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	g.Finish()
	eval, err := Dial(ctx, net, g.Addrs(), ClientConfig{Learner: 1 << 30, Total: lsDim, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer eval.Close()
	type snap struct {
		w      []float32
		stamps []uint64
	}
	snaps := make(chan snap, 5)
	go func() {
		for e := range 5 { // epochs 0 (final, asked last)… : 1, 2, 3, 4, then 0
			w := make([]float32, lsDim)
			st, err := eval.Snapshot(ctx, (e+1)%5, w)
			if err != nil {
				t.Error(err)
			}
			snaps <- snap{w, st}
		}
	}()
	var wg sync.WaitGroup
	for l := range 3 {
		wg.Go(func() {
			c, err := g.Dial(ctx, net, uint32(l), rdma.Codec{})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			w, grd := make([]float32, lsDim), make([]float32, lsDim)
			for s := range 8 {
				if err := c.Pull(ctx, w); err != nil {
					t.Error(err)
					return
				}
				prob.gradient(w, grd, s*3+l, 1)
				if err := c.Push(ctx, grd, 0); err != nil {
					t.Error(err)
					return
				}
			}
			c.Leave(ctx)
		})
	}
	wg.Wait()
	var got []snap
	for range 5 {
		got = append(got, transporttest.Receive(t, snaps, 10*time.Second, "the evaluator's next snapshot"))
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	final := g.Weights()
	for e, sn := range got {
		epoch := (e + 1) % 5
		for k, st := range sn.stamps {
			// c₀ = 1: after e·6 consumed gradients the clock is e·6.
			if want := uint64(6 * epoch); epoch > 0 && st != want {
				t.Errorf("epoch %d: shard %d stamp %d, want %d", epoch, k, st, want)
			}
			if epoch == 0 && st != 24 {
				t.Errorf("final: shard %d stamp %d, want 24", k, st)
			}
		}
		if (epoch == 4 || epoch == 0) && !slices.Equal(sn.w, final) {
			t.Errorf("epoch %d: snapshot differs from the final weights", epoch)
		}
		if epoch == 1 && slices.Equal(sn.w, final) {
			t.Error("the snapshot of epoch 1 equals the final weights")
		}
	}
	if len(clocks) != 24 {
		t.Errorf("%d distinct clocks on shard 0, want 24", len(clocks))
	}
}

// TestClientPullAsyncMisuse: a second PullAsync, or a Pull, while one is in
// flight is an error, not a race.
func TestClientPullAsyncMisuse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := Config{Job: 1, Learners: 1, Protocol: Hardsync, Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.01}}
	net, addr := network(t, "inmem", 1)
	g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: make([]float32, 4), Network: net, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	g.Finish()
	c, err := g.Dial(ctx, net, 0, rdma.Codec{})
	if err != nil {
		t.Fatal(err)
	}
	w, w2 := make([]float32, 4), make([]float32, 4)
	if err := c.Pull(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := c.PullAsync(ctx, w2); err != nil { // hardsync: waits for this learner's push
		t.Fatal(err)
	}
	if err := c.PullAsync(ctx, w2); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("second PullAsync: %v", err)
	}
	if err := c.Pull(ctx, w); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Pull during PullAsync: %v", err)
	}
	if err := c.Push(ctx, []float32{1, 1, 1, 1}, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitPull(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stamps(); st[0] != 1 || w2[0] != -0.01 {
		t.Errorf("after the round: stamps %v, weights %v", st, w2)
	}
	c.Leave(ctx)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
}

// TestServerIdentity checks how the server binds a learner's identity to
// its connection: a second connection of the same incarnation is refused
// and never evicts the first; a lost connection is reported, not taken
// for a leave, and the learner may come back on a new one; an evicted
// incarnation, and any older one, is refused; a higher incarnation takes
// the learner over; a shard the server does not run is refused.
func TestServerIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Job: 3, Learners: 2, Protocol: Softsync, N: 2, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.1}}
	type loss struct{ l, inc uint32 }
	lost := make(chan loss, 4)
	srv, err := NewServer(ServerConfig{PS: cfg, Shards: []int{0}, Init: make([]float32, 64),
		OnLost: func(l, inc uint32) { lost <- loss{l, inc} }})
	if err != nil {
		t.Fatal(err)
	}
	net, addr := network(t, "inmem", 3)
	ln, err := net.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	dial := func() rdma.Conn {
		c, err := net.Dial(ctx, ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var n uint64
	// ask sends a pull of learner 0 in incarnation inc for shard on c and
	// returns the reply's type and error.
	ask := func(c rdma.Conn, inc uint32, shard int) (rdma.Type, error) {
		n++
		m := wireMsg(rdma.NewMsg, MsgPull, 0, shard, Seq(inc, n), 0, 0)
		if err := c.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		r, err := c.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release()
		return r.Type, r.Err()
	}
	a, b := dial(), dial()
	if typ, err := ask(a, 0, 0); typ != TypeWeights {
		t.Fatalf("first pull: %v %v", typ, err)
	}
	if typ, err := ask(b, 0, 0); typ != rdma.TypeError || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "another connection") {
		t.Fatalf("pull from a second connection: %v %v", typ, err)
	}
	if typ, _ := ask(a, 0, 0); typ != TypeWeights {
		t.Fatal("the first connection must keep working")
	}
	a.Close()
	if l := transporttest.Receive(t, lost, 10*time.Second, "the server to report the closed connection's learner lost"); l != (loss{0, 0}) {
		t.Fatalf("OnLost(%v), want learner 0 incarnation 0", l)
	}
	if typ, err := ask(b, 0, 0); typ != TypeWeights {
		t.Fatalf("the same incarnation on a new connection after the loss: %v %v", typ, err)
	}
	srv.Evict(0, 0)
	if typ, err := ask(b, 0, 0); typ != rdma.TypeError || !strings.Contains(err.Error(), "removed from the job") {
		t.Fatalf("pull of an evicted incarnation: %v %v", typ, err)
	}
	c := dial()
	n++
	join := wireMsg(rdma.NewMsg, MsgJoin, 0, 0, Seq(1, n), 0, 0)
	if err := c.Send(ctx, join); err != nil {
		t.Fatal(err)
	}
	if ack, err := c.Recv(ctx); err != nil || ack.Type != TypeAck || ack.Seq != Seq(1, n) || ack.Shard != 0 || ack.Learner != 0 {
		t.Fatalf("the join's acknowledgement: %+v, %v", ack, err)
	} else {
		ack.Release()
	}
	if typ, err := ask(c, 1, 0); typ != TypeWeights {
		t.Fatalf("incarnation 1 after its join: %v %v", typ, err)
	}
	if typ, err := ask(b, 0, 0); typ != rdma.TypeError || !strings.Contains(err.Error(), "is over") {
		t.Fatalf("incarnation 0 after incarnation 1: %v %v", typ, err)
	}
	if typ, err := ask(c, 1, 1); typ != rdma.TypeError || !errors.Is(err, rdma.ErrRemote) || !errors.Is(err, ErrNotHosted) {
		t.Fatalf("a shard the server does not run: %v %v", typ, err)
	}
	st := srv.Stats()
	if st.Refused != 3 || st.NotHosted != 1 || st.Lost != 1 || st.Shards[0].Rejected.Total() != 0 {
		t.Errorf("stats %+v", st)
	}
	srv.Stop()
	if err := transporttest.Receive(t, done, 10*time.Second, "Serve to return after Stop"); err != nil {
		t.Fatal(err)
	}
}

// TestClientTopKFeedback pushes the same gradient five times with TopK
// (a quarter of the elements each time) through a plain SGD server (rate
// 1, no momentum): with the error feedback the client keeps per shard,
// what the server applied plus the residual the client still holds is
// exactly the five gradients.
func TestClientTopKFeedback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n, pushes = 64, 5
	cfg := Config{Job: 5, Learners: 1, Protocol: Softsync, N: 1, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 1}}
	net, addr := network(t, "tcp", 5)
	g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: make([]float32, n), Network: net, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	g.Finish()
	c, err := g.Dial(ctx, net, 0, rdma.Codec{ID: rdma.CodecTopK, Fraction: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	grad, w := make([]float32, n), make([]float32, n)
	for i := range grad {
		grad[i] = float32(i%7) - 3
	}
	for range pushes {
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, grad, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.Leave(ctx)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	final := g.Weights()
	rs, _ := Ranges(n, 2)
	for k, r := range rs {
		res := c.core.feedback[k].Residual()
		if len(res) != r.Len() {
			t.Fatalf("shard %d: residual of %d elements, want %d", k, len(res), r.Len())
		}
		for i := r.Lo; i < r.Hi; i++ {
			// w = −Σ sent; Σ sent = 5·g − residual.
			if got, want := -final[i]+res[i-r.Lo], pushes*grad[i]; math.Abs(float64(got-want)) > 1e-4 {
				t.Fatalf("element %d: applied %g + residual %g ≠ %d × %g", i, -final[i], res[i-r.Lo], pushes, grad[i])
			}
		}
	}
	c.Close()
}

// countingNetwork counts the messages its allocator hands out.
type countingNetwork struct {
	rdma.Network
	n atomic.Int64
}

func (c *countingNetwork) NewMsg(n int) *rdma.Msg {
	c.n.Add(1)
	return c.Network.NewMsg(n)
}

// TestNetworkAllocator: the client's messages are allocated by the
// network (which for verbs hands out registered memory), not by the
// process-wide pool; pushes lend the gradient and weights replies the
// shard's weights, so no payload is taken from any allocator.
func TestNetworkAllocator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Job: 1, Learners: 1, Protocol: Softsync, N: 1, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.1}}
	inner, _ := network(t, "inmem", 1)
	net := &countingNetwork{Network: inner}
	g, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: make([]float32, 64), Network: net})
	if err != nil {
		t.Fatal(err)
	}
	g.Finish()
	c, err := g.Dial(ctx, net, 0, rdma.Codec{})
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, 64)
	for range 3 {
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, w, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.Leave(ctx)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Each shard's weights, and 3 pulls, 3 pushes and a leave to 2
	// shards from the client.
	if n := net.n.Load(); n != 2+3*2+3*2+2 {
		t.Errorf("%d messages from the network's allocator, want %d", n, 2+3*2+3*2+2)
	}
}

// TestClientRedialRestoredServer restarts a shard server from a
// checkpoint while a learner trains: the learner's next pull finds the
// connection lost, redials the new server, joins again, resends its push
// that the old server never acknowledged and gets the restored weights.
// Of the two pushes made after the checkpoint, the one acknowledged by
// the old server is lost (the checkpoint is older than its acceptance),
// and the one resent is given up (computed on the old life's weights):
// accepted + dropped + given up + lost = pushed. The restored server
// keeps the learner's sequences and incarnation: nothing is applied twice.
func TestClientRedialRestoredServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Job: 2, Learners: 1, Protocol: Softsync, N: 1, Shards: 2, Batch: 1, Solver: sgd.Config{LR: 0.1}}
	net, _ := network(t, "tcp", 2)
	serve := func(sc ServerConfig) (*Server, string, chan error) {
		srv, err := NewServer(sc)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, ln) }()
		return srv, ln.Addr(), done
	}
	init := make([]float32, 64)
	a, addrA, doneA := serve(ServerConfig{PS: cfg, Init: init})
	var mu sync.Mutex
	addr := addrA
	redials := 0
	c, err := Dial(ctx, net, []string{addrA, addrA}, ClientConfig{Learner: 0, Incarnation: 3, Protocol: Softsync, Total: 64, Shards: 2,
		Redial: func(ctx context.Context, shard int) (rdma.Conn, error) {
			mu.Lock()
			defer mu.Unlock()
			redials++
			return net.Dial(ctx, addr)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, g := make([]float32, 64), make([]float32, 64)
	for i := range g {
		g[i] = 1
	}
	step := func() {
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, g, 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		step()
	}
	c.Pull(ctx, w) // the third push is applied
	cps, ids := a.Checkpoint()
	if ids[0].Incarnation != 3 || cps[0].Clock != 3 {
		t.Fatalf("checkpoint: identities %+v, clock %d", ids, cps[0].Clock)
	}
	c.Push(ctx, g, 0) // lost with the server
	step()            // lost too
	a.Stop()
	transporttest.Receive(t, doneA, 10*time.Second, "the first server's Serve to return after Stop")
	b, addrB, doneB := serve(ServerConfig{PS: cfg, Init: init, Restore: cps, Identities: ids})
	mu.Lock()
	addr = addrB
	mu.Unlock()
	if err := c.Pull(ctx, w); err != nil {
		t.Fatalf("pull after the restart: %v", err)
	}
	if st := c.Stamps(); st[0] != 3 || st[1] != 3 || w[0] != -0.3 {
		t.Fatalf("after the restart: stamps %v, w[0] = %g; want the checkpoint's clock 3 and -0.3", st, w[0])
	}
	step()
	c.Pull(ctx, w)
	st := b.Stats()
	for k, pushed := range c.Pushes() {
		sh := st.Shards[k]
		lost := pushed - sh.Gradients - sh.Dropped - sh.StaleLife
		if pushed != 6 || sh.Gradients != 4 || sh.StaleLife != 1 || lost != 1 || sh.Duplicates != 0 || sh.Rejected.Total() != 0 {
			t.Errorf("shard %d: %d pushed, %+v: want 6 pushed, 4 accepted, 1 given up, 1 lost", k, pushed, sh)
		}
	}
	if redials != 1 {
		t.Errorf("%d redials for one server restart, want 1", redials)
	}
	b.Stop()
	transporttest.Receive(t, doneB, 10*time.Second, "the restarted server's Serve to return after Stop")
}
