package cluster

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// simJob is one seeded job of the chaos simulator: its configuration
// (a cluster.Config, its topology and settings, as a launcher starts
// them), its processes and the launcher that restarts them (launch
// --restarts), the faults of its seed, and what the checks need.
type simJob struct {
	w        *simWorld
	cfg      Config
	topo     Topology
	settings Settings
	layout   []param.Segment
	init     []float32
	total    int // floats
	plan     data.Plan
	batches  int // mini-batches

	report, compute time.Duration
	fixedHead       bool // a restarted head listens where it did (else: elsewhere, published for Locate)
	ranks           bool // a launcher's ranks (else launch's process per role)
	ckpts           bool
	disk            *simDisk
	store           *checkpoint.Store
	rendezvous      string // where the coordinator listens now (the rendezvous file)

	procs    []*simProc
	head     *simHead
	eval     *simEval
	servers  map[int]*simServer
	restarts int  // launch's --restarts left
	pending  int  // restarts scheduled
	ending   bool // the head has ended for good: launch stops the rest
	// lateHead, lateServer: the head, a shard server was started again
	// after every learner left (both: the job may fail)
	lateHead, lateServer bool

	// the outcome
	over          bool // the coordinator ended the job (or its head wrote its outputs)
	endedHead     bool // the head wrote the job's outputs (launch's --ended-file)
	res           *Result
	err           error
	interrupted   bool // the user interrupted this run
	interruptLife int  // the head's life the interruption reached
	// interruptedEarly: it reached the head at its rendezvous
	interruptedEarly bool
	resumeShards     int // the run resumes, on this many shards (0: it does not)
	phase            int // 1; 2 for the run that resumes an interrupted one

	faults simFaults
	first  simFaults // the first run's, once the job resumes
	// restore, if set, filters what a client core sends on a replaced
	// connection (a defect test).
	restore func(ps.ClientReady) ps.ClientReady

	// lineage: what each shard's weights hold (see check)
	lives    map[int][]*simLife
	lifeOf   map[*ps.Shard]*simLife
	versions map[[2]uint64]simLineRef
	exact    bool                             // the lineage is known (no re-split)
	finals   map[int]*ps.ServerShard[*simEnd] // each shard's last life
	allLives []*ps.ServerShard[*simEnd]       // every life of every shard
	log      []string
}

// simLife is what one life of a shard consumed, in order, and what it
// started from (a checkpoint of another life, after its first prefix
// consumptions).
type simLife struct {
	parent   *simLife
	prefix   int
	consumed []uint64
}

type simLineRef struct {
	life   *simLife
	prefix int
}

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

// newSimJob draws a job and its faults from the world's seed.
func newSimJob(w *simWorld) *simJob {
	rng := w.rng
	j := &simJob{w: w, servers: map[int]*simServer{}, lives: map[int][]*simLife{}, lifeOf: map[*ps.Shard]*simLife{},
		versions: map[[2]uint64]simLineRef{}, exact: true, finals: map[int]*ps.ServerShard[*simEnd]{}, phase: 1, restarts: 200}
	learners := 1 + rng.IntN(3)
	shards := 1 + rng.IntN(3)
	hidden, classes, side := 2+rng.IntN(5), 2+rng.IntN(3), 2+rng.IntN(3)
	spec, err := nn.Parse("sim.net", fmt.Appendf(nil, "input channels=1 height=%d width=%d\nfc fc1 out=%d weight=xavier\nrelu relu1\nfc fc2 out=%d weight=xavier\nsoftmax loss\n",
		side, side, hidden, classes))
	if err != nil {
		panic(err)
	}
	shards = min(shards, spec.VectorLen())
	c := Config{Spec: spec, Model: "sim", Data: "sim", Learners: learners, Batch: 4, Epochs: 1 + rng.IntN(2), Chunk: 1 + rng.IntN(4),
		Protocol: ps.Softsync, Shards: shards, Transport: "tcp", Job: 1, Seed: w.seed, Solver: sgd.Config{LR: 0.05, Momentum: 0.9}}
	if rng.IntN(3) == 0 {
		c.Protocol = ps.Hardsync
	}
	c.N = 1 + rng.IntN(learners)
	if c.Protocol == ps.Hardsync {
		c.N = learners
	} else if rng.IntN(4) == 0 && learners > 1 {
		c.NSchedule = sgd.NSchedule{{N: learners, From: 0}, {N: 1, From: 1}}
		c.N = learners
	}
	if c.Protocol == ps.Softsync && rng.IntN(4) == 0 {
		c.MaxStaleness = 1 + rng.IntN(4)
	}
	rules := []string{"staleness", "constant", "average", "poly:0.5", "hinge:2,0.5", "dc:0.04+staleness", "dc-adaptive", "gap"}
	if err := c.Solver.ParseRule(rules[rng.IntN(len(rules))]); err != nil {
		panic(err)
	}
	if rng.IntN(3) == 0 {
		c.Solver.MomentumComp = true
	}
	if c.Epochs > 1 && rng.IntN(3) == 0 {
		c.Solver.LRSteps, c.Solver.LRGamma = []int{1}, 0.5
	}
	images := c.Batch * learners * (6 + rng.IntN(8))
	if rng.IntN(6) == 0 {
		c.MaxSteps = images / c.Batch / 2
	}
	c.PSTimeout = time.Duration(10+rng.IntN(20)) * time.Second
	c.Rendezvous = 3 * c.PSTimeout
	c.Heartbeat = time.Duration(2+rng.IntN(4)) * time.Second
	c.Report = time.Duration(100+rng.IntN(400)) * time.Millisecond
	j.ckpts = rng.IntN(5) != 0
	if j.ckpts {
		if rng.IntN(3) == 0 {
			c.CheckpointInterval = time.Duration(200+rng.IntN(800)) * time.Millisecond
		} else {
			c.CheckpointEvery = 2 + rng.IntN(8)
		}
	}
	// The learner's options, from a stream of their own (the draws above
	// stay what they were before these existed).
	opt := rand.New(rand.NewPCG(w.seed, 0x6f7074))
	c.Overlap, c.EarlyPush = opt.IntN(4) == 0, opt.IntN(4) == 0
	if opt.IntN(6) == 0 {
		c.Codec = rdma.Codec{ID: rdma.CodecTopK, Fraction: 0.5}
	}
	if err := c.ValidateSettings(); err != nil {
		panic(fmt.Sprintf("seed %d: %v", w.seed, err))
	}
	j.cfg = c
	j.plan = c.Plan(images)
	if err := j.plan.Validate(); err != nil {
		panic(fmt.Sprintf("seed %d: %v", w.seed, err))
	}
	j.batches = j.plan.Total()
	j.settings = c.Settings()
	if j.layout, j.init, err = c.InitialWeights(); err != nil {
		panic(err)
	}
	j.total = len(j.init)
	j.report, j.compute = c.Report, time.Duration(1+rng.IntN(20))*time.Millisecond
	j.fixedHead, j.ranks = rng.IntN(2) == 0, rng.IntN(3) == 0
	j.disk = newSimDisk(j.diskFull)
	if j.store, err = checkpoint.OpenFS(j.disk, "/job/checkpoints"); err != nil {
		panic(err)
	}
	j.layoutProcesses()
	j.faults = drawFaults(j)
	if opt.IntN(8) == 0 {
		j.faults.divergeFrom = 1 + opt.Uint64N(uint64(j.batches))
	}
	return j
}

// layoutProcesses makes the processes of the job's topology.
func (j *simJob) layoutProcesses() {
	var err error
	if j.ranks {
		j.topo, err = Ranks(j.cfg.Shards+j.cfg.Learners, j.cfg.Shards)
		if err != nil {
			panic(err)
		}
	} else {
		j.topo = Apart(j.cfg.Learners, j.cfg.Shards)
	}
	if err := j.topo.check(j.cfg.Learners, j.cfg.Shards); err != nil {
		panic(err)
	}
	for i, r := range j.topo.Processes {
		if i < len(j.procs) {
			continue
		}
		name := fmt.Sprintf("process %d", i)
		switch {
		case r.Coordinator:
			name = "head"
		case len(r.Servers) > 0:
			name = fmt.Sprintf("server %d", r.Servers[0])
		case len(r.Learners) > 0:
			name = fmt.Sprintf("learner %d", r.Learners[0])
		}
		j.procs = append(j.procs, &simProc{w: j.w, index: i, name: name, host: fmt.Sprintf("10.0.0.%d", i+1)})
	}
}

// member returns the Member of role id in process p, as StartProcess
// makes it (the rendezvous bound is the coordinator's in its own
// process).
func (j *simJob) member(p *simProc, role Role, id int) *Member {
	r := j.topo.Processes[p.index]
	var locate func() string
	if !j.fixedHead {
		locate = func() string { return j.rendezvous }
	}
	m := j.cfg.member(j.cfg.Settings(), nil, j.rendezvous, r.Coordinator, locate,
		Process{Rank: r.Rank, Role: role, ID: id, Host: p.host, PID: 1000*p.index + p.life})
	return &m
}

// procConfig is the configuration a process starts with: the job's,
// writing checkpoints into the job's store, and resuming from its newest
// complete one where there is one (launch's --resume).
func (j *simJob) procConfig() Config {
	c := j.cfg
	if j.ckpts {
		c.Checkpoints = j.store
		if j.resumable() {
			if skipped, err := c.ResumeFrom(j.store, nil); err != nil {
				panic(fmt.Sprintf("seed %d: resume: %v (%v)", j.w.seed, err, skipped))
			}
		}
	}
	return c
}

// resumable reports whether the store holds a complete checkpoint, with
// which a restarted shard server or head resumes (launch's --resume),
// and every process of a run that resumes an interrupted one.
func (j *simJob) resumable() bool {
	_, _, err := j.store.Latest(nil)
	return err == nil
}

// resumed records the resume of the head.
func (j *simJob) resumed(re *Resume) {
	j.w.logf(j.procs[0], "resuming from checkpoint %d", re.Snapshot.Version())
}

// newLife draws a shard's life (ps.Server draws it at random).
func (j *simJob) newLife() uint64 {
	for {
		if v := j.w.rng.Uint64(); v != 0 {
			return v
		}
	}
}

// stepTime is one learner step: the job's compute time with up to as
// much again of jitter, so that learners drift apart.
func (j *simJob) stepTime() time.Duration {
	return j.compute + time.Duration(j.w.rng.Int64N(int64(j.compute)+1))
}

// The lineage of each shard's weights.

// served records the shards of a shard server that starts serving: a new
// life each, from the checkpoint it restored, if any.
func (j *simJob) served(s *simServer, pcfg ps.ServerConfig) {
	for _, sh := range s.host.core.Shards() {
		k := sh.Core().Index()
		l := &simLife{}
		if pcfg.Restore != nil {
			ref, ok := j.versions[[2]uint64{s.cfg.Resume.Snapshot.Version(), uint64(k)}]
			if !ok || s.cfg.Resume.Info.Relaid {
				j.exact = false // re-split: the lineage is not known
			}
			l.parent, l.prefix = ref.life, ref.prefix
		}
		j.lives[k] = append(j.lives[k], l)
		j.lifeOf[sh.Core()] = l
		j.finals[k] = sh
		j.allLives = append(j.allLives, sh)
	}
}

// stepped records what a shard consumed in a Step of m.
func (j *simJob) stepped(core *ps.Shard, before ps.Stats, m ps.Msg) {
	after := core.Stats()
	if after.Gradients+after.Dropped > before.Gradients+before.Dropped {
		l := j.lifeOf[core]
		l.consumed = append(l.consumed, m.Batch)
	}
}

// checkpointed records where the shards of s stood when they were
// written into version v.
func (j *simJob) checkpointed(s *simServer, v uint64) {
	for _, sh := range s.host.core.Shards() {
		l := j.lifeOf[sh.Core()]
		j.versions[[2]uint64{v, uint64(sh.Core().Index())}] = simLineRef{l, len(l.consumed)}
	}
}

// Processes and the launcher.

// start starts every process of the run.
func (j *simJob) start() {
	for _, p := range j.procs {
		j.startProc(p)
	}
}

// startProc starts a life of p: its roles.
func (j *simJob) startProc(p *simProc) {
	if r := j.topo.Processes[p.index]; p.life > 0 && (j.over || j.learnerDone()) {
		// Out of reach (cluster.md, "Failures"): a head and a shard
		// server both started again once a learner had ended for good,
		// or the job was over but for the head's outputs (rank 0 is
		// both): a restarted job that lost the shard's state waits for a
		// learner that will not come, or no learner redoes what the shard
		// lost, and the job may fail.
		j.lateHead = j.lateHead || r.Coordinator
		j.lateServer = j.lateServer || len(r.Servers) > 0
	}
	p.start()
	p.roles, p.cause, p.errs = 0, nil, nil
	p.onEnd = j.exited
	j.w.note(p, "start", nil, nil, func() string { return fmt.Sprintf("life %d", p.life) })
	r := j.topo.Processes[p.index]
	if r.Coordinator {
		j.startHead(p)
	}
	for _, k := range r.Servers {
		j.startServer(p, k)
	}
	for _, id := range r.Learners {
		j.startLearner(p, id)
	}
}

// learnerDone reports whether a learner's process has ended for good,
// its data done.
func (j *simJob) learnerDone() bool {
	for i, r := range j.topo.Processes {
		if len(r.Learners) > 0 && !j.procs[i].alive && j.procs[i].doneWell {
			return true
		}
	}
	return false
}

// kill kills p (SIGKILL).
func (j *simJob) kill(p *simProc) {
	if !p.alive {
		return
	}
	j.w.note(p, "kill", nil, nil, nil)
	p.die(true)
	j.exited(p, errors.New("signal: killed"), true)
}

// exited is launch's watch of a process that ended: a learner is started
// again whatever its error (a new incarnation), a shard server or the
// head only when it was killed, not when it ended with the job's error,
// and the head not once it wrote the job's outputs; all within
// --restarts, and not once the job is over.
func (j *simJob) exited(p *simProc, err error, killed bool) {
	r := j.topo.Processes[p.index]
	again := false
	switch {
	case p.termed:
		again = true // stopped by its operator, who starts it again
	case r.Coordinator && j.endedHead:
	case killed:
		again = true
	case err != nil && len(r.Learners) > 0 && len(r.Servers) == 0 && !r.Coordinator:
		again = true
	}
	if j.faults.noRestart[p.index] && killed || j.ending {
		again = false
	}
	p.doneWell = err == nil && !killed
	j.w.note(p, "exit", nil, nil, func() string { return fmt.Sprintf("killed %v, restart %v: %v", killed, again, err) })
	if r.Coordinator && !again {
		if !j.over { // the head ended for good without an outcome: launch's is its exit
			j.over, j.err = true, fmt.Errorf("%w: the head ended: %v", ErrJobFailed, err)
		}
		j.stopAll(err != nil)
	}
	if !again || j.restarts == 0 {
		return
	}
	j.restarts--
	j.pending++
	j.w.after(j.faults.restartDelay(j), func() {
		j.pending--
		if !j.ending {
			j.startProc(p)
		}
	})
}

// stopAll is launch's end once the head has ended for good: no process
// starts again; those still running after a grace (10 s, 2 s when the job
// failed) are terminated, and killed 3 s later.
func (j *simJob) stopAll(failed bool) {
	if j.ending {
		return
	}
	j.ending = true
	grace := 10 * time.Second
	if failed {
		grace = 2 * time.Second
	}
	phase := j.phase
	j.w.after(grace+3*time.Second, func() {
		if j.phase != phase {
			return
		}
		for _, p := range j.procs {
			if p.alive {
				j.w.note(p, "terminated", nil, nil, nil)
				p.die(true)
			}
		}
	})
}

// coordinatorDone records the coordinator's end: the job's outcome.
func (j *simJob) coordinatorDone(h *simHead, res *Result, err error) {
	j.w.note(h.p, "done", nil, nil, func() string { return fmt.Sprintf("result %v, err %v", res != nil, err) })
	if j.endedHead {
		return
	}
	j.over, j.res, j.err = true, res, err
}

// ended records that the head wrote the job's outputs.
func (j *simJob) ended(h *simHead, res *Result) {
	j.w.note(h.p, "ended", nil, nil, nil)
	j.endedHead, j.over, j.res = true, true, res
	if res.Interrupted {
		j.err = ErrInterrupted
	} else {
		j.err = nil
	}
}

// done reports whether the run is over: the job's outcome is known, and
// no process runs or is about to start again.
func (j *simJob) done() bool {
	if !j.over || j.pending > 0 {
		return false
	}
	for _, p := range j.procs {
		if p.alive {
			return false
		}
	}
	return true
}

// The checks.

// check checks the run that ended: see chaos_sim_test.go.
func (j *simJob) check() error {
	f := &j.faults
	switch {
	case j.lateHead && j.lateServer && (errors.Is(j.err, ErrRendezvous) || errors.Is(j.err, ErrJobFailed)):
		return nil
	case f.divergeFrom > 0 && (errors.Is(j.err, learner.ErrDiverged) || errors.Is(j.err, ps.ErrDiverged) ||
		j.cfg.Codec.ID == rdma.CodecTopK && errors.Is(j.err, ps.ErrNonFinite)):
		// Diverged: the shards refused RefusedLimit updates in a row
		// (ps.ErrDiverged where a learner's leave met it, which
		// learner.Learner does not map to learner.ErrDiverged), or,
		// with TopK, a learner's residual overflowed first, and a shard
		// rejected the push it made.
		j.interrupted = false
		return nil
	case f.expectFail && j.err != nil && !(j.interrupted && errors.Is(j.err, ErrInterrupted)):
		j.interrupted = false
		if !errors.Is(j.err, ErrJobFailed) && !errors.Is(j.err, ErrRendezvous) {
			return fmt.Errorf("the job ended with %v, want a success or a failure (ErrJobFailed, ErrRendezvous): %s", j.err, f.why)
		}
		return nil
	case j.interrupted && j.phase == 1 && j.interruptedEarly:
		// The interruption reached a head at its rendezvous (one
		// started again): no result, and nothing to resume from it.
		if !errors.Is(j.err, ErrInterrupted) || j.res != nil {
			return fmt.Errorf("a job interrupted at its rendezvous ended with %v (result %v), want ErrInterrupted without a result", j.err, j.res != nil)
		}
		j.interrupted = false
		return nil
	case j.interrupted && j.phase == 1 && j.res != nil && !j.res.Interrupted && j.procs[0].life != j.interruptLife:
		// The head died after the interruption and was started again: it
		// knows nothing of it, and the job went on to its end.
		j.interrupted = false
		return j.check()
	case j.interrupted && j.phase == 1:
		if !errors.Is(j.err, ErrInterrupted) || j.res == nil || !j.res.Interrupted {
			return fmt.Errorf("the interrupted job ended with %v (result %v), want ErrInterrupted with a result", j.err, j.res != nil)
		}
	case j.err != nil:
		return fmt.Errorf("the job failed: %w", j.err)
	case j.res == nil:
		return errors.New("the job ended without a result")
	}
	res := j.res
	if res.Interrupted {
		return nil
	}
	if len(res.Weights) != j.total {
		return fmt.Errorf("the result has %d weights, the model %d", len(res.Weights), j.total)
	}
	for k := range j.cfg.Shards {
		sh := j.finals[k]
		if sh == nil {
			return fmt.Errorf("shard %d never served", k)
		}
		isFinal, w := sh.Final()
		if !isFinal {
			return fmt.Errorf("shard %d is not final at the end of the job", k)
		}
		for i, x := range w {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("shard %d weight %d is %v", k, i, x)
			}
		}
		st := sh.Core().Stats()
		if rs := res.Shards[k]; rs.Gradients != st.Gradients || rs.Dropped != st.Dropped {
			return fmt.Errorf("the report counts %d accepted and %d dropped gradients of shard %d, the shard %d and %d", rs.Gradients, rs.Dropped, k, st.Gradients, st.Dropped)
		}
		if err := j.checkLineage(k, st); err != nil {
			return err
		}
	}
	// The evaluator took each shard's final weights from the life that
	// was final then (a shard server that died after it had them may have
	// come back with less, which the report gives up).
	for k := range j.cfg.Shards {
		r, _ := ps.Ranges(j.total, j.cfg.Shards)
		got := res.Weights[r[k].Lo:r[k].Hi]
		if !slices.ContainsFunc(j.allLives, func(sh *ps.ServerShard[*simEnd]) bool {
			final, w := sh.Final()
			return final && sh.Core().Index() == k && slices.Equal(w, got)
		}) {
			return fmt.Errorf("the result's weights of shard %d are no final weights of the shard", k)
		}
	}
	if res.Chunks.Batches < j.batches {
		return fmt.Errorf("the report counts %d mini-batches delivered of %d", res.Chunks.Batches, j.batches)
	}
	return nil
}

// checkLineage checks that shard k's final weights hold exactly one
// gradient of each mini-batch of the job, except those the report gives
// up (a shard server restarted after the data was done), and that its
// counters say so.
func (j *simJob) checkLineage(k int, st ps.Stats) error {
	lives := j.lives[k]
	last := lives[len(lives)-1]
	seen := map[uint64]bool{}
	for _, id := range last.lineage(-1) {
		if id == 0 || id > uint64(j.batches) {
			return fmt.Errorf("shard %d consumed mini-batch %d, outside the job's 1…%d", k, id, j.batches)
		}
		if seen[id] && j.exact {
			return fmt.Errorf("shard %d holds two gradients of mini-batch %d", k, id)
		}
		seen[id] = true
	}
	consumed, err := ps.MakeBatchSet(j.finals[k].Core().Consumed())
	if err != nil {
		return err
	}
	var missing []uint64
	for id := uint64(1); id <= uint64(j.batches); id++ {
		if !consumed.Contains(id) || j.exact && !seen[id] {
			missing = append(missing, id)
		}
	}
	if g := j.res.GivenUp[k]; uint64(len(missing)) != g {
		return fmt.Errorf("shard %d lacks mini-batches %v; the report gives up %d", k, missing, g)
	}
	if j.exact && st.Gradients+st.Dropped != uint64(len(last.lineage(-1))) && j.phase == 1 {
		return fmt.Errorf("shard %d counts %d accepted and %d dropped gradients, its weights hold %d", k, st.Gradients, st.Dropped, len(last.lineage(-1)))
	}
	return nil
}

// describe names the run's settings and faults.
func (j *simJob) describe() string {
	c := &j.cfg
	topo := "a process per role"
	if j.ranks {
		topo = "ranks"
	}
	faults := j.faults.describe()
	if j.phase == 2 {
		faults = j.first.describe() + fmt.Sprintf("; resumed on %d shards", c.Shards)
	}
	var opts []string
	if c.Overlap {
		opts = append(opts, "overlap")
	}
	if c.EarlyPush {
		opts = append(opts, "early push")
	}
	if c.Codec.ID != rdma.CodecNone {
		opts = append(opts, c.Codec.String())
	}
	if len(opts) > 0 {
		topo += ", " + strings.Join(opts, ", ")
	}
	return fmt.Sprintf("%v n=%s rule %s, %d learners, %d shards (%s), %d mini-batches in chunks of %d, checkpoints %v; faults: %s; virtual time %v",
		c.Protocol, c.NString(), c.Solver.RuleString(), c.Learners, c.Shards, topo, j.batches, j.plan.Chunk, j.ckpts, faults, j.w.now)
}
