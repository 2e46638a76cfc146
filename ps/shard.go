package ps

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
)

// Shard is the deterministic protocol core of one shard: it owns the
// weights of its range, the solver (momentum and pending accumulation), the
// clock, the membership view and the counters. Feed it messages with Step;
// it is not safe for concurrent use (the Server runs each shard on one
// goroutine).
type Shard struct {
	cfg       Config
	index     int
	life      uint64
	total     int
	rng       Range
	w         []float32
	solver    *sgd.Solver
	clock     uint64
	samples   uint64
	members   []member // indexed by learner id
	active    int      // active members, λa
	pushed    int      // hardsync: active members whose gradient of this round is pending
	pendingBy []uint32 // the learner of each pending gradient, in arrival order
	consumed  BatchSet // mini-batch ids of the gradients accepted or dropped
	refusals  int      // updates refused in a row since the last one applied
	// anchored (hardsync): the shard answered, in this life, a pull of a
	// learner that had made no claim: its rounds pair that learner's
	// pushes with the others' from then on, and claims are ignored
	// (claimRounds).
	anchored bool
	quorum   int // c₀ of the current epoch (Config.QuorumAt)
	// keepPulled: the rule compares gradients with the weights they were
	// computed on (sgd.Config.NeedsPulled) and the protocol is softsync,
	// so the shard keeps the weights it serves each learner (pulled).
	keepPulled bool
	pulled     []pulled     // per learner id, with keepPulled
	par        sgd.Parallel // spreads the long passes (SetParallel); nil: serial
	stats      Stats
	ready      Ready
}

// member is the shard's view of one learner.
type member struct {
	active      bool
	roundPushed bool   // hardsync: its push of the current round is in (a gradient pending, redone or claimed)
	pulling     bool   // a pull is waiting
	computing   bool   // holds weights from an answered pull and has not pushed or pulled since
	lastSeq     uint64 // pushes with this sequence or a lower one are duplicates
	pullMin     uint64 // minimum clock of the waiting pull
	pullSeq     uint64 // sequence of the waiting pull
	holds       uint64 // stamp of the weights last handed to it
	// claim (hardsync): the learner counts as pushed, without a
	// gradient, in every round below claim: it pushed in them in an
	// earlier life of the shard (see claimRounds).
	claim  uint64
	served bool // a pull of its was answered in this life
}

// NewShard returns the core of shard index (0 ≤ index < cfg.Shards) of a
// parameter server whose initial flat vector is init, in its life life
// (nonzero; see Life). It copies its range of init. Errors are
// *param.FieldError values wrapping ErrInvalidConfig.
func NewShard(cfg Config, index int, init []float32, life uint64) (*Shard, error) {
	s, err := newShard(cfg, index, len(init), life)
	if err != nil {
		return nil, err
	}
	if err := finite("init", init[s.rng.Lo:s.rng.Hi], s.rng.Lo); err != nil {
		return nil, err
	}
	copy(s.w, init[s.rng.Lo:s.rng.Hi])
	return s, nil
}

// finite returns a *param.FieldError naming field and the first NaN or
// ±Inf of v (at flat index lo+k), or nil.
func finite(field string, v []float32, lo int) error {
	if k := sgd.FirstNonFinite(v); k >= 0 {
		return param.Fieldf(field, "element %d (flat index %d) is %g: weights and momentum must be finite", k, lo+k, v[k])
	}
	return nil
}

func newShard(cfg Config, index, total int, life uint64) (*Shard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if life == 0 {
		return nil, param.Fieldf("life", "must be nonzero (0 is a push's unknown life)")
	}
	if err := param.ValidateLayout(cfg.Layout, total); err != nil {
		return nil, err
	}
	rs, err := Ranges(total, cfg.Shards)
	if err != nil {
		return nil, err
	}
	if index < 0 || index >= cfg.Shards {
		return nil, param.Fieldf("index", "shard %d outside [0, %d)", index, cfg.Shards)
	}
	r := rs[index]
	scfg := cfg.Solver
	scfg.Quorum = cfg.QuorumAt(0)
	solver, err := sgd.NewSolver(scfg, cfg.Layout, r.Lo, r.Hi)
	if err != nil {
		return nil, err
	}
	s := &Shard{cfg: cfg, index: index, life: life, total: total, rng: r, w: make([]float32, r.Len()),
		solver: solver, members: make([]member, cfg.Learners), active: cfg.Learners, quorum: scfg.Quorum}
	if s.keepPulled = cfg.Solver.NeedsPulled() && cfg.Protocol == Softsync; s.keepPulled {
		s.pulled = make([]pulled, cfg.Learners)
	}
	s.stats.RefusedGradients = make([]uint64, cfg.Learners)
	for i := range s.members {
		s.members[i].active = true
	}
	s.stats.Shard = index
	return s, nil
}

// SetParallel has the shard spread its long passes over memory through p,
// a runner its runtime supplies (nil: serial, as after NewShard and
// Restore): the check of each pushed gradient (sgd.Parallel.MaxAbs) and
// the solver's passes (sgd.Solver.SetParallel). The shard calls p only
// within Step, and starts no goroutine itself; its results are the same
// bits with any p.
func (s *Shard) SetParallel(p sgd.Parallel) {
	s.par = p
	s.solver.SetParallel(p)
}

// Index returns the shard's index.
func (s *Shard) Index() int { return s.index }

// Range returns the part of the flat vector the shard owns.
func (s *Shard) Range() Range { return s.rng }

// Life returns the shard's life: a nonzero number its owner gives each
// start of the shard (NewShard, Restore), different from the lives before
// it, so that a gradient computed on the weights of an earlier life (a
// shard restarted from a checkpoint since) can be told apart.
func (s *Shard) Life() uint64 { return s.life }

// Active returns the number of active learners, λa.
func (s *Shard) Active() int { return s.active }

// Member reports whether learner is an active member.
func (s *Shard) Member(learner uint32) bool {
	return int64(learner) < int64(len(s.members)) && s.members[learner].active
}

// PullWaiting returns the sequence of learner's waiting pull, and
// whether one is waiting.
func (s *Shard) PullWaiting(learner uint32) (uint64, bool) {
	if int64(learner) >= int64(len(s.members)) || !s.members[learner].pulling {
		return 0, false
	}
	return s.members[learner].pullSeq, true
}

// Clock returns the shard clock i.
func (s *Shard) Clock() uint64 { return s.clock }

// Weights returns a read-only view of the shard's weights, valid until the
// next Step of a message other than a pull (a pull never changes them) or
// Move.
func (s *Shard) Weights() []float32 { return s.w }

// Move copies the shard's weights into w, which must be as long, and goes
// on with w, so that the array Weights returned before stays as it is for
// whoever still reads it.
func (s *Shard) Move(w []float32) {
	if len(w) != len(s.w) {
		panic(fmt.Sprintf("ps: Shard.Move to %d weights, the shard has %d", len(w), len(s.w)))
	}
	copy(w, s.w)
	s.w = w
}

// Consumed returns the mini-batch ids of the gradients the shard has
// accepted or dropped (Msg.Batch), as a copy of its intervals, sorted.
func (s *Shard) Consumed() []Interval { return s.consumed.Intervals() }

// Stats returns a copy of the shard's counters.
func (s *Shard) Stats() Stats {
	st := s.stats.clone()
	st.Clock, st.Samples, st.Epoch = s.clock, s.samples, s.epoch()
	return st
}

// Step consumes one message and returns the resulting replies and updates
// (see the package doc for the protocol). The Ready and the weights its
// replies point to are valid until the next Step.
func (s *Shard) Step(m Msg) Ready {
	s.ready.Replies = s.ready.Replies[:0]
	s.ready.Updates = s.ready.Updates[:0]
	if err := s.step(m); err != nil {
		s.stats.Rejected.count(err)
		s.ready.Replies = append(s.ready.Replies, Reply{To: m.Learner, Seq: m.Seq, Clock: s.clock, Life: s.life,
			Err: fmt.Errorf("ps shard %d: %v from learner %d (seq %d): %w", s.index, m.Type, m.Learner, m.Seq, err)})
	}
	s.servePulls()
	return s.ready
}

func (s *Shard) step(m Msg) error {
	switch {
	case m.Job != s.cfg.Job:
		return fmt.Errorf("%w: job %d, this is job %d", ErrWrongJob, m.Job, s.cfg.Job)
	case m.Shard != s.index:
		return fmt.Errorf("%w: shard %d", ErrWrongShard, m.Shard)
	case m.Type < MsgPush || m.Type > MsgLeave:
		return fmt.Errorf("%w %d", ErrBadType, m.Type)
	case int64(m.Learner) >= int64(len(s.members)):
		return fmt.Errorf("%w: ids are 0…%d", ErrUnknownLearner, len(s.members)-1)
	}
	l := &s.members[m.Learner]
	switch {
	case m.Type == MsgJoin || m.Type == MsgLeave:
		if m.Type == MsgJoin {
			s.join(l)
		} else if l.active {
			s.leave(l)
		}
		s.ready.Replies = append(s.ready.Replies, Reply{To: m.Learner, Seq: m.Seq, Clock: s.clock, Life: s.life, Ack: true})
		return nil
	case !l.active:
		return fmt.Errorf("%w: it left", ErrUnknownLearner)
	case m.Type == MsgPull:
		l.pulling, l.computing, l.pullMin, l.pullSeq = true, false, m.Clock, m.Seq
		return nil
	}
	return s.push(l, m)
}

func (s *Shard) push(l *member, m Msg) error {
	if s.refusals >= RefusedLimit {
		return fmt.Errorf("%w: the last %d updates were refused (each would have made a weight or its momentum NaN or infinite)", ErrDiverged, s.refusals)
	}
	if len(m.Grad) != s.rng.Len() {
		return fmt.Errorf("%w: %d elements, shard range [%d, %d) has %d", ErrBadLength, len(m.Grad), s.rng.Lo, s.rng.Hi, s.rng.Len())
	}
	earlier := m.Life != 0 && m.Life != s.life // computed on weights of an earlier life
	if earlier && s.cfg.Protocol == Hardsync {
		s.claimRounds(l, m.Clock)
	}
	if m.Seq <= l.lastSeq {
		s.stats.Duplicates++
		return nil
	}
	if earlier {
		l.lastSeq, l.computing = m.Seq, false
		s.stats.StaleLife++
		return nil
	}
	if m.Clock > s.clock {
		return fmt.Errorf("%w: stamp %d, clock %d", ErrFutureClock, m.Clock, s.clock)
	}
	hard := s.cfg.Protocol == Hardsync
	if m.Batch != 0 && s.consumed.Contains(m.Batch) {
		s.redone(l, m)
		return nil
	}
	gmax := s.par.MaxAbs(m.Grad) // bounds the update the gradient goes into
	if !(gmax <= math.MaxFloat32) {
		k := sgd.FirstNonFinite(m.Grad)
		return fmt.Errorf("%w: element %d (flat index %d) is %g", ErrNonFinite, k, s.rng.Lo+k, m.Grad[k])
	}
	if hard && l.roundPushed && m.Clock == s.clock {
		return fmt.Errorf("%w %d", ErrAlreadyPushed, s.clock)
	}
	l.lastSeq, l.computing = m.Seq, false
	s.consumed.Add(m.Batch)
	tau := int(s.clock - m.Clock)
	if (hard && tau > 0) || (s.cfg.MaxStaleness > 0 && tau > s.cfg.MaxStaleness) {
		s.stats.Dropped++
		s.samples += uint64(s.cfg.Batch)
		if s.followSchedule() {
			s.settle()
		}
		return nil
	}
	s.stats.record(tau)
	if hard {
		l.roundPushed = true
		s.pushed++
	}
	s.pendingBy = append(s.pendingBy, m.Learner)
	g := sgd.Grad{G: m.Grad, Max: gmax, Tau: tau, Pulled: s.pulledFor(m.Learner, m.Clock)}
	if s.due(s.solver.Pending() + 1) {
		s.update(g)
	} else {
		s.solver.AddGrad(s.w, g)
	}
	return nil
}

// pulledFor returns the weights a gradient of learner stamped with clock
// was computed on, for the rules that need them (nil for the others):
// the copy the shard served it at that clock, or, when the shard holds
// none (hardsync, where an accepted gradient has τ = 0, or a copy lost
// with a checkpoint that did not keep it), the current weights, which
// leaves the gradient uncorrected.
func (s *Shard) pulledFor(learner uint32, clock uint64) []float32 {
	if !s.cfg.Solver.NeedsPulled() {
		return nil
	}
	if s.keepPulled {
		if p := s.pulled[learner].take(clock); p != nil {
			return p
		}
	}
	return s.w
}

// followSchedule sets c₀ to the n schedule's value for the current epoch
// (Config.QuorumAt) and reports whether it changed.
func (s *Shard) followSchedule() bool {
	q := s.cfg.QuorumAt(s.epoch())
	if q == s.quorum {
		return false
	}
	s.quorum = q
	s.solver.SetQuorum(q)
	return true
}

// redone ignores a push of a mini-batch already consumed. Under hardsync,
// stamped with the current clock, it is the learner's push of the round
// without a gradient, so that the round completes.
func (s *Shard) redone(l *member, m Msg) {
	l.lastSeq, l.computing = m.Seq, false
	s.stats.Redone++
	if s.cfg.Protocol == Hardsync && m.Clock == s.clock && !l.roundPushed {
		l.roundPushed = true
		s.pushed++
		s.settle()
	}
}

// claimRounds counts l, under hardsync, as pushed in every round up to
// j (without a gradient) for a push of an earlier life of the shard
// stamped j, its claim. The learner pushed that gradient in round j of
// the life whose weights it was computed on, and its earlier pushes in
// the rounds before; the shard was restored since, and lost those it
// had acknowledged. The learner's next push is of round j + 1 (its pull
// waits for it), so it counts in the rounds up to j here, as on the
// shards that kept their rounds. Otherwise this shard's rounds would
// pair each learner's pushes with other pushes of the other learners
// than the other shards' rounds do (the learners whose pull the earlier
// life answered lose a step here, the others do not), and two such
// shifts make learners wait for each other's rounds for ever. Rounds
// that every active learner counts in this way end at once, empty
// (skipClaimed).
//
// The claims place the learners on the round numbers of the life their
// weights came from, which the restored shard continues (or, restarted
// from scratch, takes up). A learner whose pull this life answered
// before it made any claim (one that joined afresh, after a pause) took
// the round then in progress instead: once one has (anchored), claims
// are ignored, as are claims of rounds already ended. A learner that
// holds this life's weights stamped h (a pull answered before this push
// arrived) pushes next in round h: it counts only in the rounds before.
func (s *Shard) claimRounds(l *member, j uint64) {
	if s.anchored || j >= math.MaxUint64/2 { // no life's clock gets there
		return
	}
	if l.computing && l.holds <= j {
		if l.holds == 0 {
			return
		}
		j = l.holds - 1
	}
	l.claim = max(l.claim, j+1)
	if j >= s.clock && !l.roundPushed {
		l.roundPushed = true
		s.pushed++
		s.settle()
	}
}

// settle ends the round or applies the update that is due after a
// learner's round ended without a new gradient (a redone push, a leave):
// a hardsync round that every active learner has pushed in ends, with an
// update of its pending gradients, or empty if it has none; otherwise the
// pending gradients are applied if due, or, under hardsync, the rounds
// the learners' claims cover end (skipClaimed).
func (s *Shard) settle() {
	if s.cfg.Protocol == Hardsync && s.pushed > 0 && s.pushed >= s.active && s.solver.Pending() == 0 {
		s.emptyRound()
		return
	}
	if s.due(s.solver.Pending()) {
		s.update(sgd.Grad{})
		return
	}
	if s.cfg.Protocol == Hardsync {
		s.skipClaimed() // the learners that neither pushed nor claimed may be the new ones only
	}
}

// emptyRound ends a hardsync round that holds no gradient: the clock
// advances, Stats.EmptyRounds counts it, its pushes are cleared.
func (s *Shard) emptyRound() {
	s.clock++
	s.stats.EmptyRounds++
	s.endRound()
}

// endRound clears the hardsync round's pushes: a learner counts in the
// next round only by its claim (claimRounds). If every active learner
// does, the rounds they all claimed end at once, empty.
func (s *Shard) endRound() {
	s.pushed = 0
	for i := range s.members {
		l := &s.members[i]
		if l.roundPushed = l.claim > s.clock; l.roundPushed && l.active {
			s.pushed++
		}
	}
	s.skipClaimed()
}

// skipClaimed ends, as empty rounds, the rounds from the current one on
// that the active learners' claims cover, up to the first some claim
// does not: when no gradient is pending and every active learner has a
// claim beyond the current round or has neither claimed nor been
// answered a pull in this life (one that joined afresh, a restarted
// learner: it takes the round the others push in next, as it did on the
// shards that kept their rounds).
func (s *Shard) skipClaimed() {
	if s.solver.Pending() > 0 {
		return
	}
	next := uint64(math.MaxUint64)
	for i := range s.members {
		switch l := &s.members[i]; {
		case !l.active:
		case l.claim > s.clock:
			next = min(next, l.claim)
		case l.claim == 0 && !l.served:
		default:
			return
		}
	}
	if next == math.MaxUint64 {
		return // no claim
	}
	s.stats.EmptyRounds += next - s.clock
	s.clock = next
	s.endRound()
}

// due reports whether an update with pending gradients is due now.
func (s *Shard) due(pending int) bool {
	switch {
	case pending == 0:
		return false
	case s.cfg.Protocol == Hardsync:
		return s.pushed >= s.active // also with no active learner left
	default:
		return pending >= s.quorum || s.active == 0
	}
}

// update applies the pending gradients plus last (last.G nil for none).
// A refused update ends its round as an applied one does (the clock
// advances, its samples count), with the weights and the momentum left as
// they were; its gradients are counted against the learners that pushed
// them. The update that ends an epoch sets c₀ for the next updates (the
// n schedule).
func (s *Shard) update(last sgd.Grad) {
	epoch := s.epoch()
	info := s.solver.UpdateGrad(s.w, last, epoch)
	s.clock++
	s.samples += uint64(info.Gradients * s.cfg.Batch)
	switch {
	case info.Refused:
		s.stats.Refused++
		s.refusals++
		for _, l := range s.pendingBy {
			s.stats.RefusedGradients[l]++
		}
	default:
		s.refusals = 0
		s.stats.Updates++
		if info.Gradients < s.quorum {
			s.stats.Partial++
		}
	}
	s.ready.Updates = append(s.ready.Updates, Update{Clock: s.clock, Epoch: epoch, UpdateInfo: info, Learners: s.pendingBy})
	s.pendingBy = s.pendingBy[:0] // Learners stays valid until the next Step appends
	s.followSchedule()            // nothing is pending: the next update is due by the new c₀
	if s.cfg.Protocol == Hardsync {
		s.endRound()
	}
}

func (s *Shard) epoch() int {
	if s.cfg.DataSize == 0 {
		return 0
	}
	return int(s.samples / uint64(s.cfg.DataSize))
}

// join makes l active again. A learner that pushed in the hardsync round
// before it paused counts for the round again, and may be the one it
// waited for: the round ends now if it is complete, as after a leave.
func (s *Shard) join(l *member) {
	if l.active {
		return
	}
	l.active = true
	s.active++
	if l.roundPushed {
		s.pushed++
		if !revertRestoredRound {
			s.settle()
		}
	}
}

func (s *Shard) leave(l *member) {
	l.active, l.pulling, l.computing = false, false, false
	s.active--
	if l.roundPushed {
		s.pushed-- // its gradient stays pending; the flag counts it again on a rejoin this round
	}
	s.settle()
}

// servePulls answers every waiting pull that the rules allow, in learner-id
// order. Answering one pull never blocks another: the new holder's stamp is
// the current clock. Only shard 0 applies the bounded-staleness pull rule
// (see the package doc for why).
func (s *Shard) servePulls() {
	if S := s.cfg.MaxStaleness; S > 0 && s.index == 0 {
		for i := range s.members {
			if l := &s.members[i]; l.computing && s.clock-l.holds > uint64(S) {
				return
			}
		}
	}
	hard := s.cfg.Protocol == Hardsync
	for i := range s.members {
		l := &s.members[i]
		if !l.pulling || s.clock < l.pullMin || (hard && l.roundPushed) {
			continue
		}
		l.pulling, l.computing, l.holds, l.served = false, true, s.clock, true
		if hard && l.claim == 0 {
			s.anchored = true
		}
		if s.keepPulled {
			s.stats.PulledBytes += 4 * uint64(s.pulled[i].keep(s.w, s.clock))
		}
		s.ready.Replies = append(s.ready.Replies, Reply{To: uint32(i), Seq: l.pullSeq, Clock: s.clock, Life: s.life, Weights: s.w})
	}
}

// count adds one rejection of the reason err wraps.
func (r *Rejections) count(err error) {
	for i, reason := range rejectionReasons {
		if errors.Is(err, reason) {
			*r.counters()[i]++
			return
		}
	}
}

// Checkpoint is the durable state of a shard (see the package doc). Its
// slices are copies; it holds exported fields only, for any encoder.
type Checkpoint struct {
	Shard       int
	Total       int // length of the flat vector
	Clock       uint64
	Samples     uint64
	Weights     []float32 // the shard's range
	Solver      sgd.State
	Active      []bool   // per learner id
	LastSeq     []uint64 // per learner id: the sequence of its last accepted push (0: none)
	RoundPushed []bool   // per learner id, hardsync
	// Pending counts, per learner id, its gradients in the pending
	// accumulation (Solver.Pending in all); nil when unknown (a refused
	// update then counts only the gradients accepted after Restore).
	Pending []uint32
	// Consumed lists the mini-batch ids of the gradients the shard
	// accepted or dropped, as BatchSet.Intervals returns them.
	Consumed []Interval
	// Pulled holds the weights the shard last served each learner, for
	// the rules that compare a gradient with the weights it was computed
	// on (sgd.Config.NeedsPulled): per learner id in increasing order, its
	// one or two copies; nil for the other rules.
	Pulled []PulledWeights
	Stats  Stats
}

// PulledWeights is one copy of the weights a shard served a learner.
type PulledWeights struct {
	Learner uint32
	Stamp   uint64    // the clock the weights were served at
	Used    bool      // a gradient stamped Stamp was accepted since
	Weights []float32 // the shard's range
}

// Checkpoint returns a copy of the shard's durable state.
func (s *Shard) Checkpoint() *Checkpoint {
	cp := &Checkpoint{Shard: s.index, Total: s.total, Clock: s.clock, Samples: s.samples,
		Weights: slices.Clone(s.w), Solver: s.solver.State(), Stats: s.Stats(), Pending: make([]uint32, len(s.members)),
		Consumed: s.Consumed()}
	for _, l := range s.members {
		cp.Active = append(cp.Active, l.active)
		cp.LastSeq = append(cp.LastSeq, l.lastSeq)
		cp.RoundPushed = append(cp.RoundPushed, l.roundPushed)
	}
	for _, l := range s.pendingBy {
		cp.Pending[l]++
	}
	for i := range s.pulled {
		for _, c := range s.pulled[i] {
			if c.w != nil {
				cp.Pulled = append(cp.Pulled, PulledWeights{Learner: uint32(i), Stamp: c.stamp, Used: c.used, Weights: slices.Clone(c.w)})
			}
		}
	}
	return cp
}

// Restore rebuilds a shard from a checkpoint taken under the same cfg, in
// a new life (nonzero, different from the checkpointed shard's and from
// every earlier one; see Life). No pull is waiting and no learner is
// computing afterwards. A hardsync round in progress in the checkpoint is
// closed: its pending gradients are applied as one (partial) update, or
// the round is counted empty (Stats.EmptyRounds) if it holds none, so
// that no learner's pull waits for it. A checkpoint whose weights, momentum or
// accumulation hold a NaN or ±Inf is refused.
func Restore(cfg Config, cp *Checkpoint, life uint64) (*Shard, error) {
	s, err := newShard(cfg, cp.Shard, cp.Total, life)
	if err != nil {
		return nil, err
	}
	n := len(s.members)
	switch {
	case len(cp.Weights) != s.rng.Len():
		return nil, param.Fieldf("Checkpoint.Weights", "has %d elements, shard %d owns %d", len(cp.Weights), cp.Shard, s.rng.Len())
	case len(cp.Active) != n || len(cp.LastSeq) != n || len(cp.RoundPushed) != n:
		return nil, param.Fieldf("Checkpoint.Active", "per-learner state for %d/%d/%d learners, config has %d", len(cp.Active), len(cp.LastSeq), len(cp.RoundPushed), n)
	case cp.Pending != nil && (len(cp.Pending) != n || sum(cp.Pending) != uint64(cp.Solver.Pending)):
		return nil, param.Fieldf("Checkpoint.Pending", "%d gradients of %d learners pending, the solver holds %d", sum(cp.Pending), len(cp.Pending), cp.Solver.Pending)
	case len(cp.Stats.RefusedGradients) > n:
		return nil, param.Fieldf("Checkpoint.Stats.RefusedGradients", "counts for %d learners, config has %d", len(cp.Stats.RefusedGradients), n)
	}
	for _, f := range []struct {
		name string
		v    []float32
	}{{"Checkpoint.Weights", cp.Weights}, {"Checkpoint.Solver.Momentum", cp.Solver.Momentum}} { // an overflowed sum of pending gradients is kept (see "Finite weights")
		if err := finite(f.name, f.v, s.rng.Lo); err != nil {
			return nil, err
		}
	}
	consumed, err := makeBatchSet("Checkpoint.Consumed", cp.Consumed)
	if err != nil {
		return nil, err
	}
	if err := s.solver.SetState(cp.Solver); err != nil {
		return nil, err
	}
	s.consumed = consumed
	copy(s.w, cp.Weights)
	s.clock, s.samples, s.active, s.stats = cp.Clock, cp.Samples, 0, cp.Stats.clone()
	s.stats.RefusedGradients = append(s.stats.RefusedGradients, make([]uint64, n-len(s.stats.RefusedGradients))...)
	for i := range s.members {
		l := &s.members[i]
		l.active, l.lastSeq, l.roundPushed = cp.Active[i], cp.LastSeq[i], cp.RoundPushed[i]
		if l.active {
			s.active++
			if l.roundPushed {
				s.pushed++
			}
		}
	}
	for l, k := range cp.Pending {
		for range k {
			s.pendingBy = append(s.pendingBy, uint32(l))
		}
	}
	if err := s.restorePulled(cp.Pulled); err != nil {
		return nil, err
	}
	s.followSchedule()
	if cfg.Protocol == Hardsync && !revertRestoredRound && (s.solver.Pending() > 0 || slices.Contains(cp.RoundPushed, true)) {
		s.closeRound()
	}
	return s, nil
}

// closeRound ends the hardsync round in progress of a restored shard with
// the gradients it holds: an update of them (partial), or an empty round
// if it holds none. Kept open, the round would wait for the learners that
// had not pushed in it when the checkpoint was taken, while the round in
// progress on another shard, which has run on since, waits for others: a
// learner that pushed here and not there waits for its pull here, and the
// learners that pushed there and not here wait for their pull there, for
// ever. Closed, it answers every learner's first pull.
func (s *Shard) closeRound() {
	if s.solver.Pending() > 0 {
		s.update(sgd.Grad{})
		return
	}
	s.emptyRound()
}

// restorePulled restores the copies of the weights served to the
// learners. Copies under a rule that keeps none are ignored (a job can
// resume under another rule); a learner id out of range, more than two
// copies of one learner, a wrong length or a NaN or ±Inf is an error.
func (s *Shard) restorePulled(copies []PulledWeights) error {
	s.stats.PulledBytes = 0
	if !s.keepPulled {
		return nil
	}
	for k, p := range copies {
		field := fmt.Sprintf("Checkpoint.Pulled[%d]", k)
		if int64(p.Learner) >= int64(len(s.pulled)) || len(p.Weights) != s.rng.Len() {
			return param.Fieldf(field, "learner %d with %d weights, the config has %d learners and the shard %d weights", p.Learner, len(p.Weights), len(s.pulled), s.rng.Len())
		}
		held := &s.pulled[p.Learner]
		slot := slices.IndexFunc(held[:], func(c pulledCopy) bool { return c.w == nil })
		if slot < 0 {
			return param.Fieldf(field, "a third copy of learner %d, at most two", p.Learner)
		}
		if err := finite(field, p.Weights, s.rng.Lo); err != nil {
			return err
		}
		held[slot] = pulledCopy{stamp: p.Stamp, used: p.Used, w: slices.Clone(p.Weights)}
		s.stats.PulledBytes += 4 * uint64(len(p.Weights))
	}
	return nil
}

func sum(v []uint32) uint64 {
	var t uint64
	for _, x := range v {
		t += uint64(x)
	}
	return t
}
