package cluster

import (
	"container/heap"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// The chaos simulator runs whole jobs in virtual time: the coordinator's
// deterministic core and the shards' (ps.Shard) driven by models of the
// shard servers, learners and evaluator that follow the runtime's
// protocol (chaos_roles_test.go), over simulated connections that keep
// each direction in order, with a seeded schedule that kills a role (a
// learner, a shard server or the head: coordinator and evaluator) at a
// chosen message and starts it again (a shard server from the newest
// checkpoint, the head from the newest checkpoint or afresh), drops
// connections and delays messages. Every run depends on its seed alone.
//
// Each run is checked: it ends before a virtual deadline (else it hung);
// the job succeeds; every shard's final weights hold exactly one
// gradient of each mini-batch of the job, or none for a mini-batch whose
// gradient was given up and counted (a push computed on an earlier
// life's weights); its counters say the same; no weight is NaN or
// infinite.

var chaosSeeds = flag.Int("chaos.seeds", 200, "seeded jobs TestChaosSim runs")
var chaosSeed = flag.Uint64("chaos.seed", 0, "run this seed only (with -v: its event log)")

// TestChaosSim runs the seeded jobs and prints "chaos: N seeds, F failed,
// H hung"; each failure prints the seed that reproduces it (-chaos.seed).
func TestChaosSim(t *testing.T) {
	seeds := make([]uint64, 0, *chaosSeeds)
	if *chaosSeed != 0 {
		seeds = append(seeds, *chaosSeed)
	} else {
		for i := range *chaosSeeds {
			seeds = append(seeds, uint64(i+1))
		}
	}
	// The coordinator's core only names the store's versions; the
	// simulator keeps the checkpoints themselves (simStore).
	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	failed, hung := 0, 0
	for _, seed := range seeds {
		j := newChaosJob(seed, store)
		j.verbose = *chaosSeed != 0 && testing.Verbose()
		err := j.run()
		switch {
		case err == errHung:
			hung++
			t.Errorf("seed %d hung: %s (reproduce: go test ./learner/cluster -run TestChaosSim -chaos.seed %d -v)", seed, j.describe(), seed)
		case err != nil:
			failed++
			t.Errorf("seed %d failed: %v; %s (reproduce: go test ./learner/cluster -run TestChaosSim -chaos.seed %d -v)", seed, err, j.describe(), seed)
		}
		if j.verbose {
			t.Log(strings.Join(j.logs, "\n"))
		}
	}
	fmt.Printf("chaos: %d seeds, %d failed, %d hung\n", len(seeds), failed, hung)
}

var errHung = fmt.Errorf("the job did not end before the virtual deadline")

// chaosJob is one simulated job.
type chaosJob struct {
	seed    uint64
	rng     *rand.Rand
	now     time.Duration
	q       simQueue
	seq     uint64
	msgs    int // messages delivered
	verbose bool
	logs    []string

	// the job
	cfg       CoordinatorConfig
	pc        ps.Config
	init      []float32
	ranges    []ps.Range
	total     int           // mini-batches
	compute   time.Duration // a learner's step
	latency   time.Duration
	psTimeout time.Duration

	// faults
	kill     string // "learner 2", "server 0", "head", or "" (none)
	killAt   int    // at that delivered message
	killed   bool
	restart  time.Duration
	dropProb float64
	drops    int // connections dropped so far

	// processes
	head     *simHead
	conns    []*simConn
	servers  []*simServer
	learners []*simLearner
	nextLife uint64
	store    simStore

	// what happened, for the checks
	lives     [][]*simLife // per shard, its lives in order
	staleLife []map[uint64]bool
	// restartLost: per shard, the mini-batches an earlier life consumed
	// that its restart's checkpoint lacks (handed out again, unless the
	// data was done).
	restartLost []map[uint64]bool
	ended       bool
	result      *Result
	err         error
}

func newChaosJob(seed uint64, store *checkpoint.Store) *chaosJob {
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	j := &chaosJob{seed: seed, rng: rng, latency: 200 * time.Microsecond, psTimeout: 30 * time.Second}
	learners := 1 + rng.IntN(3)
	servers := 1 + rng.IntN(2)
	proto := ps.Softsync
	if rng.IntN(3) == 0 {
		proto = ps.Hardsync
	}
	plan := data.Plan{Images: 8 * learners * (6 + rng.IntN(6)), Batch: 4, Chunk: 1 + rng.IntN(3), Epochs: 1 + rng.IntN(2), Seed: seed}
	if proto == ps.Hardsync {
		plan.Group = learners
	}
	j.total = plan.Total()
	var srv [][]int
	for k := range servers {
		srv = append(srv, []int{k})
	}
	j.cfg = CoordinatorConfig{Settings: Settings{"seed": fmt.Sprint(seed)}, Plan: plan, Learners: learners, Servers: srv,
		Evaluator: true, Heartbeat: 5 * time.Second, ServerTimeout: j.psTimeout, CheckpointEvery: 2 + rng.IntN(6), Checkpoints: store}
	j.store.versions = map[uint64]*simVersion{}
	n := 20 + rng.IntN(20)
	j.pc = ps.Config{Job: 1, Learners: learners, Protocol: proto, N: 1 + rng.IntN(learners), Shards: servers, Batch: plan.Batch,
		DataSize: plan.BatchesPerEpoch() * plan.Batch, Layout: []param.Segment{{Name: "w", Len: n}},
		Solver: sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness}}
	if proto == ps.Hardsync {
		j.pc.N = learners
	}
	j.init = make([]float32, n)
	for i := range j.init {
		j.init[i] = float32(rng.NormFloat64())
	}
	j.ranges, _ = ps.Ranges(n, servers)
	j.compute = time.Duration(1+rng.IntN(20)) * time.Millisecond
	// The faults: a role killed at a message, started again after a
	// pause; connections dropped now and then.
	switch r := rng.IntN(4); {
	case r == 0:
		j.kill = "head"
	case r == 1:
		j.kill = fmt.Sprintf("server %d", rng.IntN(servers))
	default:
		j.kill = fmt.Sprintf("learner %d", rng.IntN(learners))
	}
	j.killAt = 1 + rng.IntN(j.total*(learners+2)*servers)
	j.restart = time.Duration(rng.IntN(3000)) * time.Millisecond
	if rng.IntN(2) == 0 {
		j.dropProb = 0.003
	}
	for range servers {
		j.lives = append(j.lives, nil)
		j.staleLife = append(j.staleLife, map[uint64]bool{})
		j.restartLost = append(j.restartLost, map[uint64]bool{})
	}
	return j
}

// stepTime is the time of one learner's step: the job's compute time
// with up to as much again of jitter, so that learners drift apart.
func (j *chaosJob) stepTime() time.Duration {
	return j.compute + time.Duration(j.rng.Int64N(int64(j.compute)+1))
}

// describe names the run's settings and faults.
func (j *chaosJob) describe() string {
	kill := "no kill"
	if j.kill != "" {
		kill = fmt.Sprintf("kill %s at message %d (killed %v), restart after %v", j.kill, j.killAt, j.killed, j.restart)
	}
	return fmt.Sprintf("%v n=%d, %d learners, %d servers, %d mini-batches in chunks of %d, checkpoint every %d; %s; drops %v; virtual time %v",
		j.pc.Protocol, j.pc.N, j.pc.Learners, j.pc.Shards, j.total, j.cfg.Plan.Chunk, j.cfg.CheckpointEvery, kill, j.dropProb, j.now)
}

func (j *chaosJob) logf(format string, args ...any) {
	if j.verbose {
		j.logs = append(j.logs, fmt.Sprintf("%10v %s", j.now, fmt.Sprintf(format, args...)))
	}
}

// run simulates the job to its end and checks it.
func (j *chaosJob) run() error {
	j.head = j.startHead()
	for k := range j.pc.Shards {
		j.servers = append(j.servers, j.startServer(k))
	}
	for i := range j.pc.Learners {
		j.learners = append(j.learners, j.startLearner(i))
	}
	deadline := 10 * time.Minute
	for j.q.Len() > 0 && !j.ended {
		ev := heap.Pop(&j.q).(simEvent)
		j.now = ev.at
		if j.now > deadline {
			return errHung
		}
		ev.f()
	}
	if !j.ended {
		return errHung
	}
	if j.err != nil {
		return fmt.Errorf("the job: %w", j.err)
	}
	return j.check()
}

// check checks the ended job (see the comment at the top of the file).
func (j *chaosJob) check() error {
	for k, srv := range j.servers {
		got := j.lineage(k)
		seen := map[uint64]bool{}
		for _, id := range got {
			if id == 0 || id > uint64(j.total) {
				return fmt.Errorf("shard %d consumed mini-batch %d, outside the job's 1…%d", k, id, j.total)
			}
			if seen[id] {
				return fmt.Errorf("shard %d holds two gradients of mini-batch %d", k, id)
			}
			seen[id] = true
		}
		// A mini-batch a shard lacks is redone while learners are there;
		// only a shard server's restart after the data was done loses
		// some, which the report counts.
		var missing []uint64
		for id := uint64(1); id <= uint64(j.total); id++ {
			if !seen[id] {
				missing = append(missing, id)
			}
		}
		if g := j.result.GivenUp[k]; uint64(len(missing)) != g {
			return fmt.Errorf("shard %d lacks mini-batches %v; the report gives up %d", k, missing, g)
		}
		st := srv.shard.Stats()
		if st.Gradients+st.Dropped != uint64(len(got)) {
			return fmt.Errorf("shard %d counts %d accepted and %d dropped gradients, its weights hold %d", k, st.Gradients, st.Dropped, len(got))
		}
		for i, w := range srv.shard.Weights() {
			if math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) {
				return fmt.Errorf("shard %d weight %d is %v", k, i, w)
			}
		}
		if rs := j.result.Shards[k]; rs.Gradients+rs.Dropped != uint64(len(got)) {
			return fmt.Errorf("report of shard %d: %d accepted + %d dropped, its weights hold %d", k, rs.Gradients, rs.Dropped, len(got))
		}
	}
	if j.result.Chunks.Batches < j.total {
		return fmt.Errorf("the report counts %d mini-batches delivered of %d", j.result.Chunks.Batches, j.total)
	}
	return nil
}

// Lives of a shard: what each life consumed, in order, and where it
// came from (the life and the count of its consumption a checkpoint
// held), so that the mini-batches in the final weights are known.
type simLife struct {
	parent   *simLife
	prefix   int // the parent's first prefix consumptions are in this life's start
	consumed []uint64
}

// lineage returns the mini-batches whose gradients are in shard k's final
// weights (accepted or dropped), in order.
func (j *chaosJob) lineage(k int) []uint64 {
	lives := j.lives[k]
	return lives[len(lives)-1].lineage(-1)
}

// lineage returns the mini-batches in the weights of l after its first n
// consumptions (all: n < 0).
func (l *simLife) lineage(n int) []uint64 {
	if n < 0 {
		n = len(l.consumed)
	}
	var out []uint64
	if l.parent != nil {
		out = l.parent.lineage(l.prefix)
	}
	return append(out, l.consumed[:n]...)
}

// Events.

type simEvent struct {
	at  time.Duration
	seq uint64
	f   func()
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(a, b int) bool {
	return q[a].at < q[b].at || q[a].at == q[b].at && q[a].seq < q[b].seq
}
func (q simQueue) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// after runs f after d of virtual time.
func (j *chaosJob) after(d time.Duration, f func()) {
	j.seq++
	heap.Push(&j.q, simEvent{at: j.now + d, seq: j.seq, f: f})
}

// Connections.

// simNode is a process's side of its connections.
type simNode interface {
	alive() bool
	deliver(c *simConn, m any)
	lost(c *simConn)
}

// simConn is a connection between a dialer (end 0) and a listener (end
// 1): each direction in order, a message arrives after the latency plus
// a jitter. A closed end sends nothing more, its peer learns of the loss
// after the messages sent before; a dropped connection loses what is in
// flight and both ends learn at once.
type simConn struct {
	id      int
	ends    [2]simNode
	closed  [2]bool
	dropped bool
	local   bool             // between two roles of one process: never dropped
	last    [2]time.Duration // arrival of the last message towards end i
}

func (c *simConn) String() string { return fmt.Sprintf("conn %d", c.id) }

func (j *chaosJob) dial(from, to simNode) *simConn {
	j.seq++
	c := &simConn{id: int(j.seq), ends: [2]simNode{from, to}}
	j.conns = append(j.conns, c)
	return c
}

// closeAll closes every connection of node (its process died).
func (j *chaosJob) closeAll(node simNode) {
	for _, c := range j.conns {
		if c.ends[0] == node || c.ends[1] == node {
			j.close(c, node)
		}
	}
}

func (c *simConn) end(n simNode) int {
	if c.ends[0] == n {
		return 0
	}
	return 1
}

// send sends m from node on c (nil: a connection being replaced; m is
// lost).
func (j *chaosJob) send(c *simConn, from simNode, m any) {
	if c == nil {
		return
	}
	i := c.end(from)
	if c.closed[i] || c.dropped {
		return
	}
	to := 1 - i
	at := max(j.now+j.latency+time.Duration(j.rng.IntN(int(j.latency))), c.last[to]+time.Nanosecond)
	c.last[to] = at
	j.after(at-j.now, func() {
		if c.dropped || c.closed[to] || !c.ends[to].alive() {
			return
		}
		j.msgs++
		c.ends[to].deliver(c, m)
		j.faults(c)
	})
}

// close closes node's end of c: its peer learns of it after what was
// sent before.
func (j *chaosJob) close(c *simConn, node simNode) {
	i := c.end(node)
	if c.closed[i] {
		return
	}
	c.closed[i] = true
	to := 1 - i
	at := max(j.now+j.latency, c.last[to]+time.Nanosecond)
	j.after(at-j.now, func() {
		if !c.closed[to] && c.ends[to].alive() {
			c.closed[to] = true
			c.ends[to].lost(c)
		}
	})
}

// drop loses c and what is in flight on it.
func (j *chaosJob) drop(c *simConn) {
	if c.dropped {
		return
	}
	c.dropped = true
	j.logf("network drops %v", c)
	for i, n := range c.ends {
		if !c.closed[i] {
			c.closed[i] = true
			j.after(j.latency, func() {
				if n.alive() {
					n.lost(c)
				}
			})
		}
	}
}

// faults carries out the schedule after a delivery on c.
func (j *chaosJob) faults(c *simConn) {
	if j.dropProb > 0 && j.drops < maxDrops && j.rng.Float64() < j.dropProb && !c.local {
		j.drops++
		j.drop(c)
	}
	if j.killed || j.kill == "" || j.msgs < j.killAt {
		return
	}
	j.killed = true
	j.logf("kill %s", j.kill)
	switch {
	case j.kill == "head":
		j.head.die()
		j.after(j.restart, func() { j.head = j.startHead() })
	case strings.HasPrefix(j.kill, "server "):
		var k int
		fmt.Sscanf(j.kill, "server %d", &k)
		j.servers[k].die()
		j.after(j.restart, func() { j.servers[k] = j.startServer(k) })
	default:
		var i int
		fmt.Sscanf(j.kill, "learner %d", &i)
		j.learners[i].die()
		j.after(j.restart, func() { j.learners[i] = j.startLearner(i) })
	}
}

// maxDrops bounds the connections a run drops: fewer than a learner's
// restarts (a learner whose connection to the coordinator drops is
// removed and starts again), so that every run is one the job must
// survive.
const maxDrops = 3

// Checkpoints.

// simStore holds the job's checkpoints: per version, the coordinator's
// state and each shard's.
type simStore struct {
	versions map[uint64]*simVersion
}

type simVersion struct {
	coord     *coordState
	shards    map[int]*simShardFile
	committed bool
}

type simShardFile struct {
	cp     *ps.Checkpoint
	binds  map[uint32]simBind
	life   *simLife
	prefix int
}

func (s *simStore) version(v uint64) *simVersion {
	if s.versions[v] == nil {
		s.versions[v] = &simVersion{shards: map[int]*simShardFile{}}
	}
	return s.versions[v]
}

// latest returns the newest committed version (0, nil without one).
func (s *simStore) latest() (uint64, *simVersion) {
	var keys []uint64
	for v, ver := range s.versions {
		if ver.committed {
			keys = append(keys, v)
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	v := slices.Max(keys)
	return v, s.versions[v]
}

// ctl is a control message in the simulator: its type and its struct.
type ctl struct {
	t rdma.Type
	v any
}
