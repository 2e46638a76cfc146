// Package sim is a deterministic discrete-event simulator of λ learners
// training through the shards of a parameter server. It drives the real
// protocol core (ps.Shard) with simulated time: learners draw compute times
// from a seeded distribution, messages take a latency (optionally
// jittered), shards answer instantly. Given a Config (including its Seed) a
// run is exactly reproducible, so protocol properties (staleness
// distributions, bounded staleness, no deadlock) are tested over many
// seeds in milliseconds.
//
// # Model
//
// Each learner runs the client core of a job's learners (ps.ClientCore,
// one link per shard), which decides what it sends, and repeats: pull
// every shard; when every shard has answered, compute for a drawn time
// (the gradient itself, if Config.Gradient is set, is computed from the
// pulled weights at that moment); then push every shard its slice, last
// shards first, and pull again at once. The core stamps each slice with
// its shard's reply stamp and life, numbers the messages and sets the
// pulls' minimum clocks (the learner's last stamp under softsync, + 1
// under hardsync after its push), exactly as a job's learner does (see
// ps.Client). How many steps a learner takes is set either per
// learner (Config.Steps) or for the whole job (Config.TotalSteps: before
// each pull a learner takes one mini-batch from the job's budget, in the
// order learners ask, as a job's data dispatcher hands them out, so that
// faster learners take more steps). Each push carries the id of its
// mini-batch (its place in the job's budget, or step·λ + learner + 1 with
// Steps) and the life of the shard whose weights the gradient was computed
// on, as a job's learners push. A learner with no step left leaves
// (MsgLeave to every shard; it does not wait for the acknowledgements).
// A message takes Config.Latency plus a draw from [0, Jitter); each
// link (learner → shard, shard → learner) stays in order. Events at equal
// times run in the order they were scheduled.
//
// Every staleness rule runs as in a job: the shards are ps.Shard cores
// under PS.Solver's rule (or Config.Rule, its --lr-mode spelling), which
// keep the weights each learner pulled for the corrections.
// Config.Reload restores shards from their checkpoints midway, for tests
// that a resume continues bit for bit.
//
// Randomness comes from PCG streams seeded with (Seed, learner id) for
// compute times, (Seed, 2⁶⁴−1) for the network and (Seed, 2⁶⁴−2) for the
// shards' lives, so a run depends on nothing but its Config. The package is meant to grow: heterogeneous
// learners (Speed), latency models, shard service times and failures fit
// the same loop.
//
// # Throughput
//
// With Config.Net the same loop predicts a job's speed: messages have
// sizes and cross links of finite bandwidth, shards serve one message at a
// time for a service time, learners spend time in the codec (see
// Network). A run's images/s is then TotalSteps·Batch / Result.Time.
package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/param"
)

// ErrDeadlock reports a run whose event queue emptied before every learner
// finished its steps.
var ErrDeadlock = errors.New("sim: no event left but learners are not done")

// ErrStopped reports a run ended early by Config.Stop.
var ErrStopped = errors.New("sim: stopped")

// Dist is a distribution of positive durations.
type Dist struct {
	Kind   DistKind
	Mean   float64 // > 0
	Spread float64 // Uniform: half-width relative to Mean, in [0, 1); LogNormal: σ of the log, ≥ 0
}

// DistKind names a duration distribution.
type DistKind uint8

const (
	// Uniform draws from [Mean·(1−Spread), Mean·(1+Spread)].
	Uniform DistKind = iota
	// LogNormal draws exp(N(ln Mean − σ²/2, σ²)), whose mean is Mean.
	LogNormal
)

func (d Dist) draw(r *rand.Rand) float64 {
	if d.Kind == LogNormal {
		return math.Exp(math.Log(d.Mean) - d.Spread*d.Spread/2 + d.Spread*r.NormFloat64())
	}
	return d.Mean * (1 + d.Spread*(2*r.Float64()-1))
}

// Config describes one simulated run.
type Config struct {
	PS ps.Config // protocol, learners, shards and solver
	// Rule, if set, is the staleness rule in its command-line spelling
	// (--lr-mode, sgd.Config.ParseRule: "staleness", "dc:0.04+staleness",
	// "gap", …); it replaces the rule fields of PS.Solver.
	Rule  string
	Init  []float32 // initial flat weights; its length is the vector length
	Steps int       // gradients each learner pushes, ≥ 1; 0 with TotalSteps
	// TotalSteps, if > 0, is the job's budget of gradients, shared by all
	// learners in the order they ask (see the package doc); Steps must be 0.
	TotalSteps int
	Compute    Dist      // compute time of one gradient
	Speed      []float64 // optional per-learner multiplier of compute times (len = learners)
	Latency    float64   // one-way message latency, ≥ 0
	// Jitter adds to each message's latency a uniform draw from
	// [0, Jitter), keeping every link (learner → shard, shard → learner)
	// in order, so that shards see messages in different orders and their
	// clocks diverge. ≥ 0.
	Jitter float64
	Seed   uint64
	// Gradient, if set, fills grad (the flat vector's length) from the
	// weights w the learner pulled, for its step-th gradient. It must not
	// keep w or grad. Without it gradients are zero.
	Gradient func(learner, step int, w, grad []float32)
	// Observe, if set, is called after every Step of every shard with the
	// message and the outputs (valid only during the call).
	Observe func(shard int, in ps.Msg, out ps.Ready)
	// ObserveWeights, if set, is called after every Step (after Observe)
	// with the simulated time, the message and the shard's weights, a
	// read-only view of its range valid only during the call: a job's
	// evaluator takes its epoch-end snapshots here.
	ObserveWeights func(at float64, shard int, in ps.Msg, w []float32)
	// Net, if set, models message sizes, link bandwidth, shard service
	// times and codec time (see Network).
	Net *Network
	// Stop, if set, is called before every event; once it returns true
	// the run ends there and Run returns its Result so far with
	// ErrStopped.
	Stop func() bool
	// Reload, if set, is called after every Step of every shard (after
	// ObserveWeights) with the shard and the number of Steps it has
	// taken; a checkpoint it returns replaces the shard by one restored
	// from it (ps.Restore) in the same life, so that the messages in
	// flight stay valid: a restart that loses nothing, for tests that a
	// checkpoint holds all of a shard's state. Softsync without
	// MaxStaleness only, where no pull ever waits.
	Reload func(shard int, steps uint64, sh *ps.Shard) (*ps.Checkpoint, error)
}

// Result is the outcome of a run.
type Result struct {
	Shards  []ps.Stats // per shard
	Weights []float32  // final flat weights
	Time    float64    // simulated time of the last event
	Steps   []int      // gradients each learner pushed
}

// Run simulates cfg to completion. A run whose updates keep being refused
// (a shard rejects a push with ps.ErrDiverged) ends at that push: Run
// returns its Result so far and an error wrapping ps.ErrDiverged; so does
// a run whose Config.Reload fails, with its error.
func Run(cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &sim{cfg: cfg, net: rand.New(rand.NewPCG(cfg.Seed, math.MaxUint64)), links: map[link]float64{}}
	rs, err := ps.Ranges(len(cfg.Init), cfg.PS.Shards)
	if err != nil {
		return nil, err
	}
	s.ranges = rs
	if cfg.Net != nil {
		s.ns = newNetState(cfg.Net, rs, len(cfg.Init), cfg.PS.Learners)
	}
	lives := rand.New(rand.NewPCG(cfg.Seed, math.MaxUint64-1))
	for k := range rs {
		life := lives.Uint64() | 1 // seeded, nonzero
		sh, err := ps.NewShard(cfg.PS, k, cfg.Init, life)
		if err != nil {
			return nil, err
		}
		s.shards = append(s.shards, sh)
	}
	s.steps = make([]uint64, len(rs))
	for i := range cfg.PS.Learners {
		core, err := ps.NewClientCore(ps.ClientCoreConfig{Learner: uint32(i), Protocol: cfg.PS.Protocol, Total: len(cfg.Init), Shards: len(rs)})
		if err != nil {
			return nil, err
		}
		l := &learner{id: i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i))), speed: 1, core: core,
			w: make([]float32, len(cfg.Init)), grad: make([]float32, len(cfg.Init))}
		if cfg.Speed != nil {
			l.speed = cfg.Speed[i]
		}
		s.learners = append(s.learners, l)
		s.next(l)
	}
	stopped := false
	for s.queue.Len() > 0 && s.failed == nil {
		if stopped = cfg.Stop != nil && cfg.Stop(); stopped {
			break
		}
		e := heap.Pop(&s.queue).(*event)
		s.now = e.at
		e.run()
	}
	res := &Result{Time: s.now, Weights: make([]float32, len(cfg.Init))}
	for k, sh := range s.shards {
		res.Shards = append(res.Shards, sh.Stats())
		copy(res.Weights[rs[k].Lo:], sh.Weights())
	}
	if stopped || s.failed != nil {
		for _, l := range s.learners {
			res.Steps = append(res.Steps, l.step)
		}
		if s.failed != nil {
			return res, fmt.Errorf("sim: at time %g: %w", s.now, s.failed)
		}
		return res, ErrStopped
	}
	pushed := 0
	for _, l := range s.learners {
		res.Steps = append(res.Steps, l.step)
		pushed += l.step
		if cfg.TotalSteps == 0 && l.step < cfg.Steps {
			return res, fmt.Errorf("%w: learner %d pushed %d of %d gradients at time %g", ErrDeadlock, l.id, l.step, cfg.Steps, s.now)
		}
	}
	if pushed < cfg.TotalSteps {
		return res, fmt.Errorf("%w: %d of %d gradients pushed at time %g", ErrDeadlock, pushed, cfg.TotalSteps, s.now)
	}
	return res, nil
}

func (c *Config) validate() error {
	if c.Rule != "" {
		if err := c.PS.Solver.ParseRule(c.Rule); err != nil {
			return fmt.Errorf("sim: Rule: %w", err)
		}
	}
	if err := c.PS.Validate(); err != nil {
		return err
	}
	switch {
	case c.Reload != nil && (c.PS.Protocol != ps.Softsync || c.PS.MaxStaleness > 0):
		return param.Fieldf("Reload", "needs softsync without MaxStaleness (no pull waits), got %v with MaxStaleness %d", c.PS.Protocol, c.PS.MaxStaleness)
	case len(c.Init) == 0:
		return param.Fieldf("Init", "the initial vector is empty")
	case c.TotalSteps < 0 || (c.TotalSteps > 0 && c.Steps != 0):
		return param.Fieldf("TotalSteps", "must be ≥ 0, and Steps 0 when it is set; got %d (Steps %d)", c.TotalSteps, c.Steps)
	case c.TotalSteps == 0 && c.Steps < 1:
		return param.Fieldf("Steps", "must be ≥ 1, got %d", c.Steps)
	case !(c.Compute.Mean > 0) || c.Compute.Spread < 0 || (c.Compute.Kind == Uniform && c.Compute.Spread >= 1):
		return param.Fieldf("Compute", "needs Mean > 0 and Spread ≥ 0 (< 1 for Uniform), got %+v", c.Compute)
	case c.Speed != nil && len(c.Speed) != c.PS.Learners:
		return param.Fieldf("Speed", "has %d entries for %d learners", len(c.Speed), c.PS.Learners)
	case !(c.Latency >= 0):
		return param.Fieldf("Latency", "must be ≥ 0, got %g", c.Latency)
	case !(c.Jitter >= 0):
		return param.Fieldf("Jitter", "must be ≥ 0, got %g", c.Jitter)
	}
	if c.Net != nil {
		if err := c.Net.validate(); err != nil {
			return err
		}
	}
	for i, v := range c.Speed {
		if !(v > 0) {
			return param.Fieldf(fmt.Sprintf("Speed[%d]", i), "must be > 0, got %g", v)
		}
	}
	return nil
}

// learner is a simulated learner: the client core of a job's learner
// (ps.ClientCore, one link per shard), which keeps its stamps, sequence
// numbers and pull clocks, and the vectors it pulls into and pushes from.
type learner struct {
	id      int
	rng     *rand.Rand
	speed   float64
	step    int    // gradients pushed so far
	batch   uint64 // id of the mini-batch of the current step
	core    *ps.ClientCore
	w, grad []float32 // pulled weights, computed gradient (zero without Config.Gradient)
}

type sim struct {
	cfg      Config
	handed   int // TotalSteps: steps handed out so far
	ranges   []ps.Range
	shards   []*ps.Shard
	steps    []uint64 // per shard, Steps taken
	learners []*learner
	queue    eventQueue
	now      float64
	nextID   uint64
	net      *rand.Rand       // latency jitter, its own stream
	links    map[link]float64 // last arrival time per link
	ns       *netState        // with Config.Net
	failed   error            // a shard's ErrDiverged rejection or a failed Reload: the run ends
}

type link struct {
	learner, shard int
	toShard        bool
}

// at schedules f after delay.
func (s *sim) at(delay float64, f func()) {
	s.nextID++
	heap.Push(&s.queue, &event{at: s.now + delay, id: s.nextID, run: f})
}

// deliver schedules f at the arrival time of a message sent now on the
// link (learner, shard, direction): latency plus jitter, never before the
// link's previous message.
func (s *sim) deliver(learner, shard int, toShard bool, f func()) {
	at := s.now + s.cfg.Latency
	if s.cfg.Jitter > 0 {
		at += s.cfg.Jitter * s.net.Float64()
	}
	k := link{learner, shard, toShard}
	at = max(at, s.links[k])
	s.links[k] = at
	s.at(at-s.now, f)
}

// send delivers m to its shard, whose core steps it once served;
// replies come back to the learners the same way.
func (s *sim) send(m ps.Msg) {
	m.Job = s.cfg.PS.Job // as a transport stamps it
	s.transfer(int(m.Learner), m.Shard, true, s.msgBytes(m), func() { s.serve(m, func() { s.step(m) }) })
}

// sendAll sends the messages of a learner's client core and returns
// whether the call it stepped ended, failing the run if it ended with an
// error (a simulated learner makes no call its core refuses).
func (s *sim) sendAll(l *learner, r ps.ClientReady) bool {
	for _, m := range r.Sends {
		s.send(m.Msg)
	}
	if r.Err != nil {
		s.failed = fmt.Errorf("sim: learner %d: %w", l.id, r.Err)
	}
	return r.Done != ps.CallNone && r.Err == nil
}

// step steps m on its shard and sends the replies.
func (s *sim) step(m ps.Msg) {
	out := s.shards[m.Shard].Step(m)
	if s.cfg.Observe != nil {
		s.cfg.Observe(m.Shard, m, out)
	}
	if s.cfg.ObserveWeights != nil {
		s.cfg.ObserveWeights(s.now, m.Shard, m, s.shards[m.Shard].Weights())
	}
	if err := s.reload(m.Shard); err != nil {
		s.failed = err
		return
	}
	for _, r := range out.Replies {
		if errors.Is(r.Err, ps.ErrDiverged) {
			s.failed = r.Err
			return
		}
		if r.Err != nil {
			panic(fmt.Sprintf("sim: shard %d rejected a simulated message: %v", m.Shard, r.Err))
		}
		if r.Ack {
			continue // the simulated learners do not wait for their leaves
		}
		l := s.learners[r.To]
		// The view is only valid during this Step. The learner is
		// waiting for this reply and reads its weights only once every
		// shard's has arrived, so they go where its core places them
		// now (as a transport receives them straight into the pulled
		// vector), in place of a copy in flight.
		if dst := l.core.Place(m.Shard, r.Seq, len(r.Weights)); dst != nil {
			copy(dst, r.Weights)
			r.Weights = dst
		} else {
			r.Weights = nil
		}
		shard := m.Shard
		s.transfer(l.id, shard, false, s.replyBytes(shard), func() { s.receive(l, shard, r) })
	}
}

// reload replaces shard k by a restored copy if Config.Reload asks for it.
func (s *sim) reload(k int) error {
	s.steps[k]++
	if s.cfg.Reload == nil {
		return nil
	}
	old := s.shards[k]
	cp, err := s.cfg.Reload(k, s.steps[k], old)
	if err != nil || cp == nil {
		return err
	}
	sh, err := ps.Restore(s.cfg.PS, cp, old.Life())
	if err != nil {
		return fmt.Errorf("sim: reloading shard %d: %w", k, err)
	}
	s.shards[k] = sh
	return nil
}

// pullAll makes l pull every shard.
func (s *sim) pullAll(l *learner) {
	s.sendAll(l, l.core.Pull(l.w, false))
}

// receive steps l's core with shard's reply; once every shard's is in,
// l computes its gradient on the weights pulled, and pushes it after its
// compute time.
func (s *sim) receive(l *learner, shard int, r ps.Reply) {
	if !s.sendAll(l, l.core.Recv(shard, 0, shard, r)) {
		return
	}
	if s.cfg.Gradient != nil {
		s.cfg.Gradient(l.id, l.step, l.w, l.grad)
	}
	s.at(s.cfg.Compute.draw(l.rng)*l.speed+s.codecTime(), func() { s.pushAll(l) })
}

// pushAll pushes l's gradient to every shard, stamped by its core, and
// starts its next step. The pushes lend the gradient: it is next written
// once every shard has answered the next pull, sent after them.
func (s *sim) pushAll(l *learner) {
	l.step++
	s.sendAll(l, l.core.Push(l.grad, l.batch, 0))
	s.next(l)
}

// next starts the learner's next step if it has one, else makes it leave.
// The step's mini-batch id is its place in the job's budget (TotalSteps),
// or else step·λ + learner + 1: each mini-batch once.
func (s *sim) next(l *learner) {
	more := l.step < s.cfg.Steps
	l.batch = uint64(l.step*s.cfg.PS.Learners+l.id) + 1
	if s.cfg.TotalSteps > 0 {
		if more = s.handed < s.cfg.TotalSteps; more {
			s.handed++
			l.batch = uint64(s.handed)
		}
	}
	if more {
		s.pullAll(l)
		return
	}
	s.sendAll(l, l.core.Leave())
}

type event struct {
	at  float64
	id  uint64 // scheduling order, breaks ties
	run func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].id < q[j].id)
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
