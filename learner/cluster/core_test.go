package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/rdma"
)

// coreHarness drives a coordinator core with events at a fake time and
// collects what it sends, per connection.
type coreHarness struct {
	t    *testing.T
	c    *core
	now  time.Time
	next connID
	sent map[connID][]outMsg // not yet taken by expect
	shut map[connID]bool     // closed by the core
	rd   ready               // the last step's output
	logs []logLine
}

// corePlan is a job of 8 mini-batches in 4 chunks of 2, one epoch.
var corePlan = data.Plan{Images: 64, Batch: 8, Chunk: 2, Epochs: 1, Seed: 1}

func newHarness(t *testing.T, cfg CoordinatorConfig) *coreHarness {
	t.Helper()
	if cfg.Plan.Batch == 0 {
		cfg.Plan = corePlan
	}
	if cfg.Learners == 0 {
		cfg.Learners = 2
	}
	if cfg.Servers == nil {
		cfg.Servers = [][]int{{0}, {1}}
	}
	c, err := newCore(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &coreHarness{t: t, c: c, now: time.Unix(1000, 0), sent: map[connID][]outMsg{}, shut: map[connID]bool{}}
}

func (h *coreHarness) step(ev event) ready {
	h.rd = h.c.step(ev, h.now)
	for _, m := range h.rd.sends {
		if h.shut[m.conn] {
			h.t.Fatalf("sent %#x on connection %d after closing it", m.t, m.conn)
		}
		h.sent[m.conn] = append(h.sent[m.conn], m)
	}
	for _, id := range h.rd.closes {
		h.shut[id] = true
	}
	h.logs = append(h.logs, h.rd.logs...)
	return h.rd
}

// connect returns a new connection's id.
func (h *coreHarness) connect() connID {
	h.next++
	return h.next
}

// hello registers a process on a new connection.
func (h *coreHarness) hello(p Process, hl hello) connID {
	id := h.connect()
	hl.Process = p
	h.step(event{kind: evMsg, conn: id, peer: "peer", t: tHello, msg: &hl})
	return id
}

func (h *coreHarness) server(id int) connID {
	return h.hello(Process{Rank: -1, Role: RoleServer, ID: id}, hello{Addr: fmt.Sprintf("server%d", id), Shards: h.c.cfg.Servers[id]})
}

func (h *coreHarness) learner(id int) connID {
	return h.hello(Process{Rank: -1, Role: RoleLearner, ID: id}, hello{})
}

func (h *coreHarness) evaluator() connID {
	return h.hello(Process{Rank: -1, Role: RoleEvaluator}, hello{})
}

func (h *coreHarness) msg(conn connID, t rdma.Type, v any) ready {
	return h.step(event{kind: evMsg, conn: conn, peer: "peer", t: t, msg: v})
}

func (h *coreHarness) lost(conn connID) ready {
	return h.step(event{kind: evLost, conn: conn, err: rdma.ErrClosed})
}

func (h *coreHarness) tick(d time.Duration) ready {
	h.now = h.now.Add(d)
	return h.step(event{kind: evTick})
}

// take returns and forgets the messages sent on conn.
func (h *coreHarness) take(conn connID) []outMsg {
	m := h.sent[conn]
	delete(h.sent, conn)
	return m
}

// expect takes the messages sent on conn and checks their types.
func (h *coreHarness) expect(conn connID, types ...rdma.Type) []outMsg {
	h.t.Helper()
	got := h.take(conn)
	var gt []rdma.Type
	for _, m := range got {
		gt = append(gt, m.t)
	}
	if fmt.Sprint(gt) != fmt.Sprint(types) {
		h.t.Fatalf("connection %d was sent types %#x, want %#x", conn, gt, types)
	}
	return got
}

// job is a started job: two shard servers, two learners, the evaluator.
type job struct {
	srv  []connID
	lrn  []connID
	eval connID
}

func (h *coreHarness) startJob() job {
	h.t.Helper()
	j := job{srv: []connID{h.server(0), h.server(1)}}
	j.lrn = []connID{h.learner(0), h.learner(1)}
	if h.c.started {
		h.t.Fatal("the job started before the evaluator arrived")
	}
	j.eval = h.evaluator()
	if !h.c.started {
		h.t.Fatalf("the job did not start; missing %s", h.c.missing())
	}
	for _, s := range j.srv {
		h.expect(s, tWelcome)
	}
	for i, l := range j.lrn {
		w := h.expect(l, tWelcome)[0].v.(welcome)
		if w.Incarnation != 0 || strings.Join(w.Addrs, ",") != "server0,server1" {
			h.t.Fatalf("learner %d welcome %+v", i, w)
		}
	}
	h.expect(j.eval, tWelcome)
	return j
}

// verify answers the servers' question what their shards consumed, once
// the data is done: every mini-batch of the job, but those of lacks.
func (h *coreHarness) verify(servers []connID, lacks ...uint64) {
	h.t.Helper()
	total := uint64(h.c.total)
	for _, s := range servers {
		h.expect(s, tConsumedReq)
		var iv []ps.Interval
		first := uint64(1)
		for _, id := range append(lacks, total+1) {
			if id > first {
				iv = append(iv, ids(first, id-1))
			}
			first = id + 1
		}
		h.msg(s, tConsumed, &consumed{Shards: [][]ps.Interval{iv}})
	}
}

// chunk asks for a chunk on behalf of learner conn and returns the reply.
func (h *coreHarness) chunk(conn connID, wait bool) chunkReply {
	h.t.Helper()
	h.msg(conn, tChunkReq, &chunkReq{Wait: wait})
	m := h.take(conn)
	if len(m) != 1 || m[0].t != tChunk {
		h.t.Fatalf("chunk request: sent %+v, want one chunk reply", m)
	}
	return m[0].v.(chunkReply)
}

func TestCoreRendezvous(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Settings: Settings{"lr": "0.1"}, Evaluator: true, Rendezvous: time.Minute})
	s0 := h.hello(Process{Role: RoleServer, ID: 0}, hello{Addr: "server0", Shards: []int{0}, Settings: Settings{"lr": "0.1"}})
	h.expect(s0) // a shard server's first hello is welcomed when the job starts
	l0 := h.hello(Process{Role: RoleLearner, ID: 0}, hello{Settings: Settings{"lr": "0.1"}})
	h.expect(l0)
	// Another learner with other settings is refused, and fails the job.
	bad := h.hello(Process{Role: RoleLearner, ID: 1}, hello{Settings: Settings{"lr": "0.2"}})
	m := h.expect(bad, tStop)
	if st := m[0].v.(stop); !strings.Contains(st.Text, "--lr") || !errors.Is(st.Err(), ErrRendezvous) || !h.shut[bad] {
		t.Errorf("stop %+v, closed %v: want the flag named and the connection closed", m[0].v, h.shut[bad])
	}
	if !h.rd.done || !errors.Is(h.rd.err, ErrRendezvous) {
		t.Fatalf("done %v, err %v: want the job failed at rendezvous", h.rd.done, h.rd.err)
	}
	h.expect(s0, tStop)
	h.expect(l0, tStop)

	// Missing processes: the deadline fails the job, naming them.
	h = newHarness(t, CoordinatorConfig{Evaluator: true, Rendezvous: time.Minute})
	h.server(0)
	h.learner(1)
	h.tick(59 * time.Second)
	if h.rd.done {
		t.Fatal("failed before the rendezvous deadline")
	}
	h.tick(2 * time.Second)
	if !h.rd.done || !errors.Is(h.rd.err, ErrRendezvous) || !strings.Contains(h.rd.err.Error(), "server 1, learner 0, evaluator") {
		t.Fatalf("after the deadline: done %v, err %v", h.rd.done, h.rd.err)
	}
}

// TestCoreJob runs a job through its end: chunks, completions, the
// finish, the servers' final counters, the learners' last reports and
// the evaluator's final measure, then the result.
func TestCoreJob(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true})
	j := h.startJob()
	var held [2][]data.Chunk
	for round := 0; ; round++ {
		progressed := false
		for i, l := range j.lrn {
			r := h.chunk(l, false)
			if r.End || r.Idle {
				continue
			}
			progressed = true
			held[i] = append(held[i], r.Chunk)
			h.msg(l, tProgress, &progress{Epochs: []epochLoss{{Epoch: 0, Steps: int64(r.Chunk.Count), Loss: float64(r.Chunk.Count)}}})
			h.msg(l, tComplete, &r.Chunk)
		}
		if !progressed {
			break
		}
	}
	if len(held[0])+len(held[1]) != 4 {
		t.Fatalf("chunks handed out %v, want 4", held)
	}
	h.verify(j.srv)
	for _, s := range j.srv {
		h.expect(s, tFinish)
	}
	if h.rd.done {
		t.Fatal("done before the servers were final")
	}
	for _, s := range j.srv {
		h.msg(s, tFinal, &ps.ServerStats{Shards: []ps.Stats{{Gradients: 8}}})
	}
	for _, l := range j.lrn {
		h.msg(l, tProgress, &progress{Done: true, Pushes: []uint64{4, 4}})
	}
	if h.rd.done {
		t.Fatal("done before the evaluator measured the final weights")
	}
	te := 0.25
	h.msg(j.eval, tEpoch, &epochResult{Epoch: 0, TestError: &te})
	if !h.rd.done || h.rd.err != nil {
		t.Fatalf("done %v, err %v", h.rd.done, h.rd.err)
	}
	res := h.rd.result
	if res.Steps != 8 || res.TestError != 0.25 || len(res.History) != 1 || res.History[0].TrainLoss != 1 || res.Chunks.Batches != 8 {
		t.Errorf("result %+v", res)
	}
	if len(h.rd.epochs) != 1 {
		t.Errorf("epochs reported with the end: %v", h.rd.epochs)
	}
	for _, c := range append(append(j.srv, j.lrn...), j.eval) {
		h.expect(c, tStop)
	}
	// Nothing happens after the end.
	if rd := h.lost(j.srv[0]); rd.done || len(rd.sends) > 0 {
		t.Errorf("a step after the end: %+v", rd)
	}
}

// TestCoreWaitingChunks: a learner that waits for a chunk is answered
// when another learner's chunks come back (it was lost), and told the
// end once every chunk, its own included, is complete.
func TestCoreWaitingChunks(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, Plan: data.Plan{Images: 32, Batch: 8, Chunk: 2, Epochs: 1}})
	j := h.startJob()
	a := h.chunk(j.lrn[0], false)
	b := h.chunk(j.lrn[0], false)
	if a.End || a.Idle || b.End || b.Idle {
		t.Fatalf("replies %+v %+v", a, b)
	}
	if r := h.chunk(j.lrn[1], false); !r.Idle {
		t.Fatalf("learner 1: %+v, want idle (learner 0 holds every chunk)", r)
	}
	h.msg(j.lrn[1], tChunkReq, &chunkReq{Wait: true})
	h.expect(j.lrn[1])
	h.msg(j.lrn[0], tComplete, &a.Chunk)
	h.expect(j.lrn[1]) // still one held by learner 0
	h.lost(j.lrn[0])
	m := h.expect(j.lrn[1], tChunk)
	if got := m[0].v.(chunkReply); got.Chunk != b.Chunk {
		t.Fatalf("after learner 0 was lost, learner 1 got %+v, want its chunk %+v", got, b.Chunk)
	}
	for _, s := range j.srv {
		h.expect(s, tEvict)
	}
	// Nothing left but its own chunk: the end once it is complete.
	h.msg(j.lrn[1], tChunkReq, &chunkReq{Wait: true})
	h.expect(j.lrn[1])
	h.msg(j.lrn[1], tComplete, &b.Chunk)
	h.expect(j.lrn[1]) // the servers have not said what they have
	h.verify(j.srv)
	if m := h.expect(j.lrn[1], tChunk); !m[0].v.(chunkReply).End {
		t.Fatalf("reply %+v, want the end", m[0].v)
	}
}

// TestCoreHeartbeat: a learner silent for longer than the heartbeat is
// removed: its connection closed, its incarnation evicted by every shard
// server; one that reports stays.
func TestCoreHeartbeat(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, Heartbeat: 3 * time.Second})
	h.tick(time.Hour) // the rendezvous does not count
	j := h.startJob()
	for range 5 {
		h.tick(time.Second)
		h.msg(j.lrn[1], tProgress, &progress{})
	}
	if !h.shut[j.lrn[0]] || h.shut[j.lrn[1]] {
		t.Fatalf("closed: learner 0 %v, learner 1 %v; want learner 0 only", h.shut[j.lrn[0]], h.shut[j.lrn[1]])
	}
	for _, s := range j.srv {
		m := h.expect(s, tEvict)
		if ev := m[0].v.(member); ev.Learner != 0 || ev.Incarnation != 0 {
			t.Errorf("evict %+v", ev)
		}
	}
	if h.c.lost != 1 {
		t.Errorf("lost %d, want 1", h.c.lost)
	}
}

// TestCoreLearnerReturns: a learner that comes back while its previous
// life is still registered replaces it (the restart was faster than the
// loss's detection): the old life is evicted, the new one welcomed with
// the next incarnation, and the old connection's late loss changes
// nothing.
func TestCoreLearnerReturns(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true})
	j := h.startJob()
	r := h.chunk(j.lrn[0], false)
	again := h.learner(0)
	if !h.shut[j.lrn[0]] {
		t.Error("the old life's connection stays open")
	}
	w := h.expect(again, tWelcome)[0].v.(welcome)
	if w.Incarnation != 1 {
		t.Errorf("incarnation %d, want 1", w.Incarnation)
	}
	for _, s := range j.srv {
		if ev := h.expect(s, tEvict)[0].v.(member); ev.Incarnation != 0 {
			t.Errorf("evicted incarnation %d, want 0", ev.Incarnation)
		}
	}
	if got := h.chunk(again, false); got.Chunk != r.Chunk {
		t.Errorf("the new life got %+v, want the old life's chunk %+v first", got.Chunk, r.Chunk)
	}
	h.lost(j.lrn[0])
	if h.c.lost != 1 || h.c.restarts != 1 || !h.c.learners[0].live {
		t.Errorf("lost %d, restarts %d, live %v; want 1, 1, true", h.c.lost, h.c.restarts, h.c.learners[0].live)
	}
}

// TestCoreServerReturnsBeforeItsLoss: a shard server restarted from its
// checkpoint may say hello before the coordinator notices that its
// previous life's connection is lost. It replaces the old life: it is
// welcomed and told what it missed (the learners removed, the end of
// the data), and the old connection is closed; the job goes on.
func TestCoreServerReturnsBeforeItsLoss(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, ServerTimeout: time.Minute})
	j := h.startJob()
	h.lost(j.lrn[1]) // removed: the new life must evict it too
	h.expect(j.srv[0], tEvict)
	again := h.server(0)
	if h.rd.done {
		t.Fatalf("the job ended: %v", h.rd.err)
	}
	m := h.expect(again, tWelcome, tEvict)
	if ev := m[1].v.(member); ev.Learner != 1 {
		t.Errorf("evicted %+v, want learner 1", ev)
	}
	if !h.shut[j.srv[0]] {
		t.Error("the old life's connection stays open")
	}
	h.lost(j.srv[0]) // noticed late: nothing changes
	if h.rd.done || !h.c.servers[0].lost.IsZero() || h.c.servers[0].lives != 2 {
		t.Errorf("after the old life's loss: done %v, lost at %v, lives %d", h.rd.done, h.c.servers[0].lost, h.c.servers[0].lives)
	}
}

// TestCoreServerLost: a lost shard server's shards are not offered to
// learners until it comes back; the job fails if it does not within
// ServerTimeout.
func TestCoreServerLost(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, ServerTimeout: 10 * time.Second})
	j := h.startJob()
	h.lost(j.srv[1])
	h.msg(j.lrn[0], tWhere, &where{Shard: 1})
	h.expect(j.lrn[0])
	h.tick(5 * time.Second)
	back := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "elsewhere", Shards: []int{1}})
	h.expect(back, tWelcome)
	if m := h.expect(j.lrn[0], tAddr); m[0].v.(addr).Addr != "elsewhere" {
		t.Errorf("answer %+v", m[0].v)
	}
	h.lost(back)
	h.tick(9 * time.Second)
	if h.rd.done {
		t.Fatal("failed before ServerTimeout")
	}
	h.tick(2 * time.Second)
	if !h.rd.done || !errors.Is(h.rd.err, ErrJobFailed) || !strings.Contains(h.rd.err.Error(), "server 1") {
		t.Errorf("done %v, err %v", h.rd.done, h.rd.err)
	}

	// Without ServerTimeout, the loss fails the job at once.
	h = newHarness(t, CoordinatorConfig{Evaluator: true})
	j = h.startJob()
	h.lost(j.srv[0])
	if !h.rd.done || !errors.Is(h.rd.err, ErrJobFailed) {
		t.Errorf("done %v, err %v", h.rd.done, h.rd.err)
	}
}

// TestCoreInterrupt: before the job starts, an interruption ends it at
// once, stopping the processes that arrived as interrupted; after, the
// learners are stopped, the servers asked for their counters, a
// checkpoint taken, and the result comes with ErrInterrupted once all
// have answered.
func TestCoreInterrupt(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true})
	s := h.server(0)
	h.expect(s) // welcomed at the start
	h.step(event{kind: evInterrupt})
	if !h.rd.done || !errors.Is(h.rd.err, ErrInterrupted) || h.rd.result != nil {
		t.Fatalf("done %v, result %v, err %v", h.rd.done, h.rd.result, h.rd.err)
	}
	if m := h.expect(s, tStop); !m[0].v.(stop).Interrupted {
		t.Errorf("stop %+v", m[0].v)
	}

	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h = newHarness(t, CoordinatorConfig{Evaluator: true, Checkpoints: store})
	j := h.startJob()
	h.step(event{kind: evInterrupt})
	for _, l := range j.lrn {
		h.expect(l, tStop)
	}
	for _, s := range j.srv {
		h.expect(s, tStats)
	}
	h.expect(j.eval, tInterrupt)
	h.msg(j.lrn[0], tProgress, &progress{Done: true, Epochs: []epochLoss{{Steps: 2, Loss: 1}}})
	if h.rd.write != nil {
		t.Fatal("checkpoint before every learner reported")
	}
	h.lost(j.lrn[1]) // stopped without its report
	if h.rd.write == nil || h.rd.write.state.Steps != 2 {
		t.Fatalf("checkpoint order %+v, want one holding the 2 steps reported", h.rd.write)
	}
	v := h.rd.write.version
	for i, s := range j.srv {
		if o := h.expect(s, tCheckpoint)[0].v.(ckptOrder); o.Version != v {
			t.Errorf("server %d ordered version %d, want %d", i, o.Version, v)
		}
		h.msg(s, tServerStats, &ps.ServerStats{})
		h.msg(s, tCheckpointed, &ckptReport{Version: v})
	}
	h.step(event{kind: evWritten, version: v})
	if h.rd.commit == nil || h.rd.commit.version != v {
		t.Fatalf("commit %+v", h.rd.commit)
	}
	h.step(event{kind: evCommitted, version: v})
	if h.rd.done {
		t.Fatal("done before the evaluator measured the weights reached")
	}
	h.msg(j.eval, tEpoch, &epochResult{Epoch: 0})
	if !h.rd.done || !errors.Is(h.rd.err, ErrInterrupted) || h.rd.result == nil || h.rd.result.Steps != 2 {
		t.Fatalf("done %v, err %v, result %+v", h.rd.done, h.rd.err, h.rd.result)
	}
}

// TestCoreCheckpointRequest: a shard server that stops asks for a
// checkpoint and is told when it is over, failed or not; a server lost
// during a round fails the round, not the job; no round starts while a
// shard server is away.
func TestCoreCheckpointRequest(t *testing.T) {
	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, CoordinatorConfig{Evaluator: true, Checkpoints: store, ServerTimeout: time.Minute, CheckpointEvery: 4})
	j := h.startJob()
	h.msg(j.srv[0], tCheckpointReq, nil)
	v := h.rd.write.version
	h.expect(j.srv[0], tCheckpoint)
	h.expect(j.srv[1], tCheckpoint)
	h.msg(j.srv[0], tCheckpointed, &ckptReport{Version: v})
	h.lost(j.srv[1])
	h.step(event{kind: evWritten, version: v})
	if h.rd.commit != nil {
		t.Fatal("a round missing a server's files was committed")
	}
	h.expect(j.srv[0], tCheckpointDone)
	if h.rd.done || h.c.ckpt.round != nil || h.c.ckpt.last != 0 {
		t.Fatalf("done %v, round %+v, last %d", h.rd.done, h.c.ckpt.round, h.c.ckpt.last)
	}
	// CheckpointEvery: due once 4 more steps are reported; the next
	// round gets the next version.
	h.msg(j.lrn[0], tProgress, &progress{Epochs: []epochLoss{{Steps: 3}}})
	if h.rd.write != nil {
		t.Fatal("a round after 3 steps")
	}
	h.msg(j.lrn[0], tProgress, &progress{Epochs: []epochLoss{{Steps: 1}}})
	if h.rd.write != nil {
		t.Fatal("a round while shard server 1 is away: its version would lack server 1's files")
	}
	// Server 1 comes back: the round due starts at the next tick.
	again := h.server(1)
	h.expect(again, tWelcome)
	h.tick(time.Second)
	if h.rd.write == nil || h.rd.write.version != v+1 {
		t.Fatalf("round %+v, want version %d", h.rd.write, v+1)
	}
	h.expect(j.srv[0], tCheckpoint)
	h.expect(again, tCheckpoint)
}

// TestCoreRestarted: a coordinator started again while the job's
// processes live on: the shard servers rejoin with what their shards
// have, the learners with the chunks they hold. The job starts without
// waiting for learners that do not come back; the data goes out once
// every learner rejoined or rejoinGrace passed, rebuilt so that nothing
// every shard has, or a learner holds, is handed out again; a learner
// that rejoins later keeps its chunk if nobody took it meanwhile.
func TestCoreRestarted(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, Learners: 3})
	s0 := h.hello(Process{Role: RoleServer, ID: 0}, hello{Addr: "server0", Shards: []int{0}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 4), ids(6, 6)}}})
	s1 := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 3), ids(6, 6)}}})
	held := data.Chunk{Epoch: 0, First: 2, Count: 2, Stride: 1} // ids 3, 4
	l0 := h.hello(Process{Role: RoleLearner, ID: 0}, hello{Rejoin: true, Incarnation: 4, Held: []data.Holding{{Chunk: held, Delivered: 1}}})
	ev := h.evaluator()
	if !h.c.started {
		t.Fatalf("not started; missing %s", h.c.missing())
	}
	h.expect(s0, tWelcome)
	h.expect(s1, tWelcome)
	h.expect(ev, tWelcome)
	if w := h.expect(l0, tWelcome)[0].v.(welcome); w.Incarnation != 4 {
		t.Errorf("incarnation %d, want the learner's own, 4", w.Incarnation)
	}
	h.msg(l0, tChunkReq, &chunkReq{})
	h.expect(l0) // learners 1 and 2 may still rejoin
	h.tick(rejoinGrace)
	// Every shard has 1, 2, 3, 6; learner 0 holds 4 (3 delivered);
	// waiting: 5, then 7, 8.
	r := h.expect(l0, tChunk)[0].v.(chunkReply)
	if want := (data.Chunk{Epoch: 0, First: 4, Count: 1, Stride: 1}); r.Chunk != want {
		t.Fatalf("first chunk %+v, want %+v", r.Chunk, want)
	}
	// Learner 2 rejoins late holding 7, 8: still waiting, so it keeps
	// them; learner 1 rejoins holding 5, which learner 0 has now.
	l2 := h.hello(Process{Role: RoleLearner, ID: 2}, hello{Rejoin: true, Incarnation: 0, Held: []data.Holding{{Chunk: data.Chunk{Epoch: 0, First: 6, Count: 2, Stride: 1}}}})
	h.expect(l2, tWelcome)
	l1 := h.hello(Process{Role: RoleLearner, ID: 1}, hello{Rejoin: true, Held: []data.Holding{{Chunk: r.Chunk}}})
	h.expect(l1, tWelcome)
	if got := h.chunk(l1, false); !got.Idle {
		t.Errorf("learner 1 got %+v, want none now (the rest is held)", got)
	}
	for _, d := range []struct {
		conn connID
		c    data.Chunk
	}{{l0, held}, {l0, r.Chunk}, {l2, data.Chunk{Epoch: 0, First: 6, Count: 2, Stride: 1}}} {
		h.msg(d.conn, tComplete, &d.c)
	}
	h.verify([]connID{s0, s1})
	h.expect(s0, tFinish)
	h.expect(s1, tFinish)
	if st := h.c.disp.Stats(); st.Batches != 8 {
		t.Errorf("batches %d, want 8", st.Batches)
	}
	if got := h.chunk(l1, false); !got.End {
		t.Errorf("learner 1 got %+v, want the end", got)
	}
}

// TestCoreRejoinSameCoordinator: a learner whose control connection
// dropped rejoins the same coordinator: the same life on a new
// connection goes on; a life the coordinator removed meanwhile is told
// to stop, and the job goes on.
func TestCoreRejoinSameCoordinator(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true})
	j := h.startJob()
	c := h.chunk(j.lrn[0], false)
	again := h.hello(Process{Role: RoleLearner, ID: 0}, hello{Rejoin: true, Held: []data.Holding{{Chunk: c.Chunk}}})
	h.expect(again, tWelcome)
	if !h.shut[j.lrn[0]] || h.c.lost != 0 {
		t.Errorf("old connection closed %v, lost %d; want closed, 0", h.shut[j.lrn[0]], h.c.lost)
	}
	h.msg(again, tComplete, &c.Chunk)
	if st := h.c.disp.Stats(); st.Completed != 1 {
		t.Errorf("completed %d, want 1", st.Completed)
	}
	h.lost(j.lrn[1]) // removed
	late := h.hello(Process{Role: RoleLearner, ID: 1}, hello{Rejoin: true})
	if m := h.expect(late, tStop); !strings.Contains(m[0].v.(stop).Text, "removed") || h.rd.done {
		t.Errorf("stop %+v, job done %v", m[0].v, h.rd.done)
	}
}

// TestCoreRejoinLostChunkReply: a chunk reply lost with the learner's
// control connection (the learner rejoins without it) goes to the next
// learner that asks, first; the chunk the learner says it holds stays
// its own. (The coordinator kept the lost chunk as the learner's, and
// the job waited for it for ever.)
func TestCoreRejoinLostChunkReply(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true})
	j := h.startJob()
	kept := h.chunk(j.lrn[0], false)
	lost := h.chunk(j.lrn[0], false) // never reached the learner
	again := h.hello(Process{Role: RoleLearner, ID: 0}, hello{Rejoin: true, Held: []data.Holding{{Chunk: kept.Chunk}}})
	h.expect(again, tWelcome)
	if got := h.chunk(j.lrn[1], false); got.Chunk != lost.Chunk {
		t.Errorf("learner 1 was handed %+v, want the lost chunk %+v", got.Chunk, lost.Chunk)
	}
	if got := h.chunk(again, false); got.Chunk == kept.Chunk || got.Chunk == lost.Chunk {
		t.Errorf("learner 0 was handed %+v again", got.Chunk)
	}
	h.msg(again, tComplete, &kept.Chunk)
	if st := h.c.disp.Stats(); st.Completed != 1 {
		t.Errorf("completed %d, want 1 (the chunk learner 0 kept)", st.Completed)
	}
}

// TestCoreServerRedo: a shard server that comes back from a checkpoint
// older than some delivered mini-batches gets them again: they are
// handed out first.
func TestCoreServerRedo(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, ServerTimeout: time.Minute})
	j := h.startJob()
	a := h.chunk(j.lrn[0], false) // ids 1, 2
	b := h.chunk(j.lrn[1], false) // ids 3, 4
	h.msg(j.lrn[0], tComplete, &a.Chunk)
	h.msg(j.lrn[1], tProgress, &progress{Delivered: []delivered{{b.Chunk, 1}}})
	h.lost(j.srv[1])
	back := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1}, Consumed: [][]ps.Interval{{ids(1, 1)}}})
	h.expect(back, tWelcome)
	if st := h.c.disp.Stats(); st.Redone != 2 {
		t.Fatalf("redone %d, want 2 (ids 2 and 3)", st.Redone)
	}
	for _, want := range []data.Chunk{{Epoch: 0, First: 1, Count: 1, Stride: 1}, {Epoch: 0, First: 2, Count: 1, Stride: 1}} {
		if got := h.chunk(j.lrn[0], false); got.Chunk != want {
			t.Errorf("got %+v, want %+v", got.Chunk, want)
		}
	}
}

// ids is the interval of mini-batch ids first … last.
func ids(first, last uint64) ps.Interval { return ps.Interval{First: first, Last: last} }

// TestCoreVerifiesBeforeTheEnd: once the data is done, the coordinator
// asks every shard server what its shards consumed before it ends the
// job; what a shard lacks (a push given up, computed on its earlier
// life's weights) is handed out again to the learners still there, and
// the end comes once it is delivered.
func TestCoreVerifiesBeforeTheEnd(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, Plan: data.Plan{Images: 32, Batch: 8, Chunk: 2, Epochs: 1}})
	j := h.startJob()
	a := h.chunk(j.lrn[0], false)
	b := h.chunk(j.lrn[1], false)
	h.msg(j.lrn[0], tComplete, &a.Chunk)
	h.msg(j.lrn[1], tComplete, &b.Chunk)
	h.msg(j.lrn[0], tChunkReq, &chunkReq{Wait: true})
	h.expect(j.lrn[0])
	h.verify(j.srv[:1])
	h.verify(j.srv[1:], 3) // shard 1 lacks mini-batch 3
	r := h.expect(j.lrn[0], tChunk)[0].v.(chunkReply)
	if want := (data.Chunk{Epoch: 0, First: 2, Count: 1, Stride: 1}); r.Chunk != want {
		t.Fatalf("learner 0 got %+v, want %+v", r, want)
	}
	for _, s := range j.srv {
		h.expect(s)
	}
	h.msg(j.lrn[0], tComplete, &r.Chunk)
	for _, s := range j.srv {
		h.expect(s, tFinish) // asked once
	}
	if st := h.c.disp.Stats(); st.Redone != 1 || st.Batches != 4 {
		t.Errorf("stats %+v, want 1 redone, 4 delivered", st)
	}
}

// TestCoreGivenUpOnce: a shard server that comes back after the data was
// done without a mini-batch gives it up once, however often it comes
// back (here twice, as after a lost connection): the report counts what
// it lacks, not a sum over its returns.
func TestCoreGivenUpOnce(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, ServerTimeout: time.Minute, Plan: data.Plan{Images: 32, Batch: 8, Chunk: 2, Epochs: 1}})
	j := h.startJob()
	a := h.chunk(j.lrn[0], false)
	b := h.chunk(j.lrn[1], false)
	h.msg(j.lrn[0], tComplete, &a.Chunk)
	h.msg(j.lrn[1], tComplete, &b.Chunk)
	h.verify(j.srv)
	for _, s := range j.srv {
		h.expect(s, tFinish)
	}
	for range 2 {
		h.hello(Process{Rank: -1, Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1},
			Consumed: [][]ps.Interval{{ids(1, 2), ids(4, 4)}}})
	}
	if got := h.c.givenUp; !slices.Equal(got, []uint64{0, 1}) {
		t.Fatalf("given up per shard %v, want [0 1] (shard 1 lacks mini-batch 3)", got)
	}
}

// TestCoreRestartedRemovedLearner: a coordinator started again hears a
// learner rejoin with a chunk, loses it before the job starts, and
// welcomes the learner's new life. The new life holds nothing: the
// rebuilt dispatch hands the chunk out again instead of waiting for the
// new life to deliver it.
func TestCoreRestartedRemovedLearner(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, Learners: 2})
	s0 := h.hello(Process{Role: RoleServer, ID: 0}, hello{Addr: "server0", Shards: []int{0}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 2)}}})
	s1 := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 2)}}})
	held := data.Chunk{Epoch: 0, First: 2, Count: 2, Stride: 1} // ids 3, 4
	old := h.hello(Process{Role: RoleLearner, ID: 1}, hello{Rejoin: true, Held: []data.Holding{{Chunk: held}}})
	h.lost(old)
	l1 := h.learner(1)
	l0 := h.hello(Process{Role: RoleLearner, ID: 0}, hello{Rejoin: true})
	ev := h.evaluator()
	if !h.c.started {
		t.Fatalf("not started; missing %s", h.c.missing())
	}
	for _, c := range []connID{s0, s1} {
		h.expect(c, tWelcome, tEvict) // the old life's
	}
	for _, c := range []connID{l1, l0, ev} {
		h.expect(c, tWelcome)
	}
	if r := h.chunk(l1, false); r.Chunk != held {
		t.Fatalf("learner 1's new life got %+v, want %+v (its old life's chunk, held by nobody now)", r, held)
	}
}

// TestCoreServerBackBeforeLearnerRejoins: a coordinator restarted from a
// checkpoint knows learner 1's incarnation from it but has not heard
// from the learner yet when shard server 1 comes back from a lost
// connection: the server is not told to evict the learner, which is
// alive and rejoins next.
func TestCoreServerBackBeforeLearnerRejoins(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, ServerTimeout: time.Minute})
	for _, l := range h.c.learners {
		l.lives = 1 // as restore sets them from a checkpoint
	}
	rejoin := func(id int) connID {
		return h.hello(Process{Role: RoleServer, ID: id}, hello{Addr: fmt.Sprintf("server%d", id), Shards: []int{id}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 2)}}})
	}
	s0, s1 := rejoin(0), rejoin(1)
	l0 := h.hello(Process{Role: RoleLearner, ID: 0}, hello{Rejoin: true})
	h.lost(s1)
	again := rejoin(1)
	for _, c := range []connID{s0, s1} {
		h.expect(c, tWelcome)
	}
	h.expect(again, tWelcome) // no eviction of learner 1
	l1 := h.hello(Process{Role: RoleLearner, ID: 1}, hello{Rejoin: true})
	h.evaluator()
	if !h.c.started || !h.c.learners[1].live {
		t.Fatalf("started %v, learner 1 live %v", h.c.started, h.c.learners[1].live)
	}
	h.expect(l0, tWelcome)
	h.expect(l1, tWelcome)
}

// TestCoreRestartedIncarnations: a coordinator restarted without a
// checkpoint learns from a returning shard server which incarnations of
// each learner its shards have heard from, and gives a learner's new
// life a later one (the shards would take the new life's sequence
// numbers for the old one's otherwise).
func TestCoreRestartedIncarnations(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, ServerTimeout: time.Minute})
	l1 := h.learner(1) // a new life, registered before the server says
	s0 := h.hello(Process{Role: RoleServer, ID: 0}, hello{Addr: "server0", Shards: []int{0}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 2)}}, Incarnations: []uint32{2, 0}})
	s1 := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 2)}}, Incarnations: []uint32{1, 0}})
	l0 := h.learner(0)
	h.evaluator()
	if !h.c.started {
		t.Fatalf("not started; missing %s", h.c.missing())
	}
	h.expect(s0, tWelcome)
	h.expect(s1, tWelcome)
	for _, c := range []struct {
		conn connID
		want uint32
	}{{l0, 3}, {l1, 1}} {
		if w := h.expect(c.conn, tWelcome)[0].v.(welcome); w.Incarnation != c.want {
			t.Errorf("learner on connection %d: incarnation %d, want %d", c.conn, w.Incarnation, c.want)
		}
	}
}

// TestCoreLateLearnerAfterInterrupt: a learner that arrives once the job
// was interrupted (a learner started again, or back from a lost
// connection) is told to stop as interrupted, and the job still ends.
func TestCoreLateLearnerAfterInterrupt(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true})
	j := h.startJob()
	h.step(event{kind: evInterrupt})
	for _, l := range j.lrn {
		h.expect(l, tStop)
	}
	for _, rejoin := range []bool{false, true} {
		late := h.hello(Process{Role: RoleLearner, ID: 1}, hello{Rejoin: rejoin})
		if m := h.expect(late, tStop); !m[0].v.(stop).Interrupted || !h.shut[late] || h.rd.done {
			t.Fatalf("rejoin %v: stop %+v, closed %v, job done %v; want told to stop as interrupted, the job going on", rejoin, m[0].v, h.shut[late], h.rd.done)
		}
	}
}

// TestCoreServerBackDuringInterrupt: a shard server that comes back
// while the interrupted job waits for its counters is asked for them
// again.
func TestCoreServerBackDuringInterrupt(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, ServerTimeout: time.Minute})
	j := h.startJob()
	h.lost(j.srv[1])
	h.step(event{kind: evInterrupt})
	h.expect(j.srv[0], tStats)
	back := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1}, Rejoin: true, Consumed: [][]ps.Interval{nil}})
	h.expect(back, tWelcome, tStats)
}

// TestCoreRestartedWithoutLearners: a coordinator restarted with
// mini-batches left to do and no learner to do them (they all left, or
// died, while it was away) fails the job after ServerTimeout, not never.
func TestCoreRestartedWithoutLearners(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, Learners: 1, Servers: [][]int{{0}}, ServerTimeout: time.Minute})
	s0 := h.hello(Process{Role: RoleServer, ID: 0}, hello{Addr: "server0", Shards: []int{0}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 2)}}})
	l0 := h.hello(Process{Role: RoleLearner, ID: 0}, hello{Rejoin: true})
	h.evaluator()
	h.expect(s0, tWelcome)
	h.expect(l0, tWelcome)
	h.tick(rejoinGrace)
	h.lost(l0)
	h.tick(30 * time.Second)
	if h.rd.done {
		t.Fatalf("failed before ServerTimeout: %v", h.rd.err)
	}
	h.tick(31 * time.Second)
	if !h.rd.done || !errors.Is(h.rd.err, ErrJobFailed) || !strings.Contains(h.rd.err.Error(), "no learner") {
		t.Fatalf("done %v, err %v; want ErrJobFailed for want of a learner", h.rd.done, h.rd.err)
	}
	// The shard has 1, 2 of the job's 8; none of the rest was cut into
	// chunks yet, and they count.
	if !strings.Contains(h.rd.err.Error(), "the 6 mini-batches") {
		t.Errorf("err %v, want the 6 mini-batches the shard lacks", h.rd.err)
	}
}

// TestCoreRestartedAfterTheLastReport: the head (the coordinator and
// shard server 0) dies once the data was done, as the only learner,
// told the end, sends its last report; it comes back without a
// checkpoint, its shard server afresh, before shard server 1 was told
// to finish. The learner rejoins told the end, holding its chunks
// delivered, and reports done: nobody is left to push what shard 0 lost,
// so it is given up (as for a shard server restarted after the data was
// done under the same coordinator), and the job ends rather than wait
// for a learner and fail.
func TestCoreRestartedAfterTheLastReport(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, Learners: 1, ServerTimeout: time.Minute})
	s0 := h.hello(Process{Role: RoleServer, ID: 0}, hello{Addr: "server0", Shards: []int{0}, Consumed: [][]ps.Interval{nil}})
	s1 := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 8)}}})
	var held []data.Holding
	for first := 0; first < 8; first += 2 {
		held = append(held, data.Holding{Chunk: data.Chunk{Epoch: 0, First: first, Count: 2, Stride: 1}, Delivered: 2})
	}
	l0 := h.hello(Process{Role: RoleLearner, ID: 0}, hello{Rejoin: true, Held: held, Ended: true})
	ev := h.evaluator()
	h.expect(s0, tWelcome)
	h.expect(s1, tWelcome)
	h.expect(l0, tWelcome)
	h.expect(ev, tWelcome)
	for _, hd := range held {
		h.msg(l0, tComplete, &hd.Chunk)
	}
	h.msg(l0, tProgress, &progress{Epochs: []epochLoss{{Epoch: 0, Steps: 8, Loss: 8}}, Done: true})
	h.expect(l0)
	h.givesUpShard0(s0, s1, ev, false)
}

// givesUpShard0 ends a job of corePlan whose restarted coordinator gives
// up what the shards lack: it asks both shard servers what their shards
// consumed (shard 0 nothing, shard 1 every mini-batch), tells both to
// finish, and ends with shard 0's 8 mini-batches given up once they are
// final (s1Final: shard server 1 already is) and the evaluator measured
// the final weights.
func (h *coreHarness) givesUpShard0(s0, s1, ev connID, s1Final bool) {
	h.t.Helper()
	h.verify([]connID{s0}, 1, 2, 3, 4, 5, 6, 7, 8)
	h.verify([]connID{s1})
	h.expect(s0, tFinish)
	h.expect(s1, tFinish)
	h.msg(s0, tFinal, &ps.ServerStats{Shards: []ps.Stats{{}}})
	if !s1Final {
		h.msg(s1, tFinal, &ps.ServerStats{Shards: []ps.Stats{{Gradients: 8}}})
	}
	h.msg(ev, tEpoch, &epochResult{Epoch: 0})
	if !h.rd.done || h.rd.err != nil {
		h.t.Fatalf("done %v, err %v; want the job over", h.rd.done, h.rd.err)
	}
	if res := h.rd.result; !slices.Equal(res.GivenUp, []uint64{8, 0}) || res.Chunks.Batches != 8 {
		h.t.Errorf("given up %v, batches %d; want [8 0], 8", res.GivenUp, res.Chunks.Batches)
	}
}

// TestCoreRestartedAfterTheDataLearnerGone: as above, shard server 1
// told to finish (final) before the head died, and the learner ended for
// good before it: with no learner for ServerTimeout, what shard 0 lost
// is given up rather than the job failed.
func TestCoreRestartedAfterTheDataLearnerGone(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, Learners: 1, ServerTimeout: time.Minute})
	s0 := h.hello(Process{Role: RoleServer, ID: 0}, hello{Addr: "server0", Shards: []int{0}, Consumed: [][]ps.Interval{nil}})
	final := &ps.ServerStats{Shards: []ps.Stats{{Gradients: 8}}}
	s1 := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 8)}}, Final: final})
	ev := h.evaluator()
	h.expect(s0, tWelcome)
	h.expect(s1, tWelcome)
	h.expect(ev, tWelcome)
	h.tick(rejoinGrace)
	h.tick(30 * time.Second)
	h.expect(s0)
	h.tick(31 * time.Second)
	if h.rd.done {
		t.Fatalf("the job ended: %v", h.rd.err)
	}
	h.givesUpShard0(s0, s1, ev, true)
}

// TestCoreFreshServerOfRestartedJob: a restarted coordinator's job goes
// on from processes that rejoined it; a shard server started afresh
// meanwhile (its first hello) is welcomed at the start as returning,
// counting no learner active, and is told of the learners removed.
func TestCoreFreshServerOfRestartedJob(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, ServerTimeout: time.Minute})
	s0 := h.hello(Process{Role: RoleServer, ID: 0}, hello{Addr: "server0", Shards: []int{0}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 2)}}})
	s1 := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1}, Consumed: [][]ps.Interval{nil}})
	h.expect(s1) // waits for the start
	l0 := h.hello(Process{Role: RoleLearner, ID: 0}, hello{Rejoin: true})
	l1 := h.hello(Process{Role: RoleLearner, ID: 1}, hello{Rejoin: true})
	h.evaluator()
	h.expect(s0, tWelcome)
	if w := h.expect(s1, tWelcome)[0].v.(welcome); !w.Returning {
		t.Errorf("fresh server's welcome %+v, want returning (the job goes on)", w)
	}
	h.expect(l0, tWelcome)
	h.expect(l1, tWelcome)
	h.lost(l1)
	h.expect(s0, tEvict)
	h.expect(s1, tEvict)
}

// TestCoreRestartedOverlappingHoldings: learner 1 was removed while it
// could not be heard and its chunk went to learner 0; the coordinator
// was restarted before learner 1 knew, and both rejoin holding it. The
// job goes on: learner 0 keeps it, learner 1 pushes it anyway.
func TestCoreRestartedOverlappingHoldings(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, ServerTimeout: time.Minute})
	s0 := h.hello(Process{Role: RoleServer, ID: 0}, hello{Addr: "server0", Shards: []int{0}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 2)}}})
	s1 := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 2)}}})
	held := data.Chunk{Epoch: 0, First: 2, Count: 2, Stride: 1} // ids 3, 4
	l1 := h.hello(Process{Role: RoleLearner, ID: 1}, hello{Rejoin: true, Held: []data.Holding{{Chunk: held}}})
	l0 := h.hello(Process{Role: RoleLearner, ID: 0}, hello{Rejoin: true, Held: []data.Holding{{Chunk: held}}})
	h.evaluator()
	if h.rd.done {
		t.Fatalf("the job ended: %v", h.rd.err)
	}
	for _, c := range []connID{s0, s1, l0, l1} {
		h.expect(c, tWelcome)
	}
	h.msg(l1, tComplete, &held) // not its own: counts for nothing
	if st := h.c.disp.Stats(); st.Completed != 1 {
		t.Errorf("completed %d, want 1 (the chunk of ids 1, 2)", st.Completed)
	}
	h.msg(l0, tComplete, &held)
	if st := h.c.disp.Stats(); st.Completed != 2 || st.Batches != 4 {
		t.Errorf("completed %d, batches %d; want 2, 4", st.Completed, st.Batches)
	}
}

// TestCoreRestartedAfterTheData: a coordinator restarted after the data
// was done (its shard servers rejoin final, the learners are gone) ends
// the job at once, counting what each shard lacks as given up (shard 1's
// server was restarted after the end, without a checkpoint of it) rather
// than handing it out again.
func TestCoreRestartedAfterTheData(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, ServerTimeout: time.Minute})
	final := &ps.ServerStats{Shards: []ps.Stats{{}}}
	s0 := h.hello(Process{Role: RoleServer, ID: 0}, hello{Addr: "server0", Shards: []int{0}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 8)}}, Final: final})
	s1 := h.hello(Process{Role: RoleServer, ID: 1}, hello{Addr: "server1", Shards: []int{1}, Rejoin: true, Consumed: [][]ps.Interval{{ids(1, 5)}}, Final: final})
	ev := h.evaluator()
	h.expect(s0, tWelcome)
	h.expect(s1, tWelcome)
	h.expect(ev, tWelcome)
	h.tick(rejoinGrace)
	h.expect(s0, tFinish) // no question what it consumed
	h.expect(s1, tFinish)
	h.msg(ev, tEpoch, &epochResult{Epoch: 0})
	if !h.rd.done || h.rd.err != nil {
		t.Fatalf("done %v, err %v", h.rd.done, h.rd.err)
	}
	if res := h.rd.result; !slices.Equal(res.GivenUp, []uint64{0, 3}) || res.Chunks.Batches != 8 {
		t.Errorf("given up %v, batches %d; want [0 3], 8", res.GivenUp, res.Chunks.Batches)
	}
}
