package ps

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/softsync/softsync/ps/sgd"
)

// pushB steps a push of mini-batch batch (seq automatic).
func (h *harness) pushB(l uint32, stamp, batch uint64, g []float32) Ready {
	return h.s.Step(Msg{Type: MsgPush, Job: h.s.cfg.Job, Learner: l, Seq: h.next(l), Clock: stamp, Batch: batch, Grad: g})
}

// counts is what a test expects of a shard after a Step.
type counts struct {
	gradients, dropped, duplicates, redone, rejected uint64
	clock                                            uint64
	w                                                float32
}

func (h *harness) check(what string, want counts) {
	h.t.Helper()
	st := h.s.Stats()
	got := counts{st.Gradients, st.Dropped, st.Duplicates, st.Redone, st.Rejected.Total(), st.Clock, h.s.Weights()[0]}
	if !sgdNear(got.w, float64(want.w)) {
		h.t.Fatalf("%s: w = %g, want %g (%+v)", what, got.w, want.w, got)
	}
	got.w = want.w
	if got != want {
		h.t.Fatalf("%s: %+v, want %+v", what, got, want)
	}
}

// TestBatchDedupe steps softsync pushes with mini-batch ids (c = 1, rate
// 0.5, so each accepted gradient g moves w by −g/2): a second gradient
// of a consumed mini-batch, from any learner, is redone (ignored and
// counted); a resend is a duplicate first; dropped gradients consume
// their mini-batch, rejected ones do not; id 0 is never deduplicated.
func TestBatchDedupe(t *testing.T) {
	cfg := plainConfig(2, Softsync, 2)
	cfg.MaxStaleness = 1
	h := newHarness(t, cfg, []float32{0})
	h.pushB(0, 0, 5, []float32{2})
	h.check("batch 5", counts{gradients: 1, clock: 1, w: -1})
	h.pushB(1, 1, 5, []float32{2}) // learner 1 redoes batch 5
	h.check("batch 5 again, another learner", counts{gradients: 1, redone: 1, clock: 1, w: -1})
	m := Msg{Type: MsgPush, Job: 7, Learner: 1, Seq: h.seq[1], Clock: 1, Batch: 5, Grad: []float32{2}}
	h.s.Step(m) // its resend
	h.check("the redone push resent", counts{gradients: 1, redone: 1, duplicates: 1, clock: 1, w: -1})
	m.Seq, m.Grad = h.next(1), []float32{float32(math.NaN())}
	h.s.Step(m) // redone pushes are not scanned: never applied
	h.check("a redone NaN", counts{gradients: 1, redone: 2, duplicates: 1, clock: 1, w: -1})
	h.pushB(0, 1, 0, []float32{2})
	h.pushB(1, 2, 0, []float32{2})
	h.check("two pushes without ids", counts{gradients: 3, redone: 2, duplicates: 1, clock: 3, w: -3})
	h.pushB(1, 0, 7, []float32{2}) // τ = 3 > 1: dropped, batch 7 consumed
	h.pushB(0, 3, 7, []float32{2})
	h.check("batch 7 dropped, then redone", counts{gradients: 3, dropped: 1, redone: 3, duplicates: 1, clock: 3, w: -3})
	r := h.pushB(0, 3, 8, []float32{float32(math.Inf(1))})
	if len(r.Replies) != 1 || !errors.Is(r.Replies[0].Err, ErrNonFinite) {
		t.Fatalf("an infinite gradient: %+v", r.Replies)
	}
	h.pushB(1, 3, 8, []float32{2}) // the rejected push did not consume batch 8
	h.check("batch 8 rejected, then pushed", counts{gradients: 4, dropped: 1, redone: 3, duplicates: 1, rejected: 1, clock: 4, w: -4})
	if iv := h.s.Checkpoint().Consumed; !slices.Equal(iv, []Interval{{5, 5}, {7, 8}}) {
		t.Fatalf("consumed %v, want [5 5] [7 8]", iv)
	}
}

// TestHardsyncRedone: under hardsync a redone push stamped with the
// current clock is its learner's push of the round without a gradient,
// so rounds complete: with the others' gradients (a partial update, rate
// c/c₀), or with none (an empty round: the clock advances, weights and
// momentum unchanged, the waiting pulls answered). A redone push of an
// older round, or a second one in a round, counts nothing; a leave
// completes a round of redone pushes.
func TestHardsyncRedone(t *testing.T) {
	cfg := plainConfig(3, Hardsync, 0)
	cfg.Solver = sgd.Config{LR: 0.5, Momentum: 0.9}
	h := newHarness(t, cfg, []float32{0})
	for l := range uint32(3) {
		h.pushB(l, 0, uint64(l+1), []float32{3})
	}
	h.check("round 0", counts{gradients: 3, clock: 1, w: -1.5})
	mom := h.momentum()
	// Round 1: learner 0 pushes batch 4, learners 1 and 2 redo 1 and 2.
	h.pushB(0, 1, 4, []float32{3})
	h.pull(0, 2)
	h.pushB(1, 1, 2, []float32{3})
	h.pushB(1, 1, 1, []float32{3}) // a second push of learner 1 this round: redone too, counts nothing
	if h.s.Clock() != 1 {
		t.Fatal("the round ended before learner 2 pushed")
	}
	r := h.pushB(2, 1, 1, []float32{3})
	// c = 1 of c₀ = 3: v = 0.9·v + 0.5·(1/3)·3 = 0.9·1.5 + 0.5, w −= v.
	v := 0.9*float64(mom[0]) + 0.5
	if to, _ := served(r); len(r.Updates) != 1 || r.Updates[0].Gradients != 1 || !slices.Equal(to, []uint32{0}) {
		t.Fatalf("round 1 with two redone pushes: updates %+v, served %v", r.Updates, to)
	}
	h.check("round 1", counts{gradients: 4, redone: 3, clock: 2, w: float32(-1.5 - v)})
	if h.s.Stats().Partial != 1 {
		t.Fatalf("a round of 1 gradient of 3 must be partial: %+v", h.s.Stats())
	}
	// Round 2: every push redone, one of them from round 1 (counts for
	// nothing): the round waits for learner 2, then ends empty.
	w, mom := h.s.Weights()[0], h.momentum()
	h.pushB(0, 2, 1, []float32{3})
	h.pull(0, 3)
	h.pushB(1, 2, 2, []float32{3})
	h.pushB(2, 1, 3, []float32{3}) // stamped 1: an older round's
	if h.s.Clock() != 2 {
		t.Fatal("a redone push of an older round counted for this one")
	}
	r = h.pushB(2, 2, 3, []float32{3})
	if to, stamps := served(r); len(r.Updates) != 0 || !slices.Equal(to, []uint32{0}) || !slices.Equal(stamps, []uint64{3}) {
		t.Fatalf("an empty round: updates %+v, served %v at %v", r.Updates, to, stamps)
	}
	st := h.s.Stats()
	if h.s.Clock() != 3 || st.EmptyRounds != 1 || h.s.Weights()[0] != w || !slices.Equal(h.momentum(), mom) || st.Updates != 2 {
		t.Fatalf("empty round: clock %d, w %g (was %g), momentum %v (was %v), stats %+v", h.s.Clock(), h.s.Weights()[0], w, h.momentum(), mom, st)
	}
	// Round 3: two redone pushes and a leave end it empty.
	h.pushB(0, 3, 1, []float32{3})
	h.pushB(1, 3, 2, []float32{3})
	h.member(MsgLeave, 2)
	if st := h.s.Stats(); h.s.Clock() != 4 || st.EmptyRounds != 2 || st.Updates+st.Refused+st.EmptyRounds != st.Clock {
		t.Fatalf("a leave after redone pushes must end the round: clock %d, %+v", h.s.Clock(), st)
	}
	// A hardsync learner never pushes twice in a round: a redone push
	// after its gradient is ignored, not rejected.
	h.pushB(0, 4, 9, []float32{1})
	if r := h.pushB(0, 4, 9, []float32{1}); len(r.Replies) != 0 {
		t.Fatalf("a redone push after the learner's gradient: %+v", r.Replies)
	}
}

// TestConsumedCheckpoint: the consumed mini-batches survive a checkpoint
// and Restore (a redone push after the restore is ignored), and Restore
// refuses a consumed list that is not a set's canonical form.
func TestConsumedCheckpoint(t *testing.T) {
	cfg := plainConfig(2, Softsync, 2)
	h := newHarness(t, cfg, []float32{0})
	for _, b := range []uint64{1, 2, 3, 7} {
		h.pushB(0, h.s.Clock(), b, []float32{1})
	}
	cp := h.s.Checkpoint()
	if !slices.Equal(cp.Consumed, []Interval{{1, 3}, {7, 7}}) {
		t.Fatalf("checkpoint's consumed %v", cp.Consumed)
	}
	rs, err := Restore(cfg, cp, 2)
	if err != nil {
		t.Fatal(err)
	}
	r := &harness{t: t, s: rs, seq: map[uint32]uint64{0: h.seq[0]}}
	r.pushB(1, 4, 2, []float32{1})
	r.pushB(1, 4, 5, []float32{1})
	if st := rs.Stats(); st.Redone != 1 || st.Gradients != 5 || !slices.Equal(rs.Checkpoint().Consumed, []Interval{{1, 3}, {5, 5}, {7, 7}}) {
		t.Fatalf("after the restore: %+v, consumed %v", st, rs.Checkpoint().Consumed)
	}
	cp.Consumed = []Interval{{1, 3}, {4, 5}}
	if _, err := Restore(cfg, cp, 2); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("adjacent intervals restored: %v", err)
	}
}

// TestLives: a shard's life is nonzero and on every reply; a push
// computed on weights of another life (a shard restored since) is given
// up: not applied, counted in Stats.StaleLife, its sequence consumed (a
// resend is a duplicate) and its mini-batch not (the mini-batch can
// still be pushed), also when its stamp is ahead of the restored clock.
// A push of life 0 (unknown) is accepted.
func TestLives(t *testing.T) {
	cfg := plainConfig(2, Softsync, 2)
	if _, err := NewShard(cfg, 0, []float32{0}, 0); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("life 0: %v", err)
	}
	old, err := NewShard(cfg, 0, []float32{0}, 41)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(cfg, old.Checkpoint(), 0); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("restored in life 0: %v", err)
	}
	for c := range uint64(3) {
		old.Step(Msg{Type: MsgPush, Job: 7, Learner: 0, Seq: c + 1, Clock: c, Life: 41, Grad: []float32{1}})
	}
	cp := old.Checkpoint()
	old.Step(Msg{Type: MsgPush, Job: 7, Learner: 0, Seq: 4, Clock: 3, Life: 41, Grad: []float32{1}}) // after the checkpoint
	s, err := Restore(cfg, cp, 42)
	if err != nil {
		t.Fatal(err)
	}
	if s.Life() != 42 || old.Life() != 41 {
		t.Fatalf("lives %d, %d", s.Life(), old.Life())
	}
	h := &harness{t: t, s: s, seq: map[uint32]uint64{0: 4, 1: 0}}
	stale := Msg{Type: MsgPush, Job: 7, Learner: 1, Seq: 1, Clock: 4, Life: 41, Batch: 3, Grad: []float32{1}}
	if r := s.Step(stale); len(r.Replies) != 0 || len(r.Updates) != 0 {
		t.Fatalf("a push of the old life stamped ahead of the clock: %+v", r)
	}
	s.Step(stale) // its resend
	h.check("old life", counts{gradients: 3, duplicates: 1, clock: 3, w: -1.5})
	if st := s.Stats(); st.StaleLife != 1 {
		t.Fatalf("stats %+v, want 1 given up", st)
	}
	h.pushB(0, 3, 3, []float32{1}) // life unknown: accepted, and batch 3 was not consumed
	r := h.s.Step(Msg{Type: MsgPush, Job: 7, Learner: 1, Seq: 2, Clock: 4, Life: 42, Batch: 4, Grad: []float32{1}})
	h.check("new life", counts{gradients: 5, duplicates: 1, clock: 5, w: -2.5})
	if len(r.Updates) != 1 {
		t.Fatalf("push of the current life: %+v", r)
	}
	if r := h.pull(0, 0); len(r.Replies) != 1 || r.Replies[0].Weights == nil || r.Replies[0].Life != 42 {
		t.Fatalf("weights must carry the life: %+v", r.Replies)
	}
	if r := h.pushB(0, 9, 0, []float32{1}); len(r.Replies) != 1 || r.Replies[0].Err == nil || r.Replies[0].Life != 42 {
		t.Fatalf("errors must carry the life: %+v", r.Replies)
	}
}

// TestAcks: joins and leaves are acknowledged in the Step that handles
// them, to their learner and sequence, also a leave of a learner that is
// not active (it changes nothing) and a join of an active one.
func TestAcks(t *testing.T) {
	h := newHarness(t, plainConfig(2, Hardsync, 0), []float32{0})
	h.push(0, 0, []float32{1})
	acks := func(r Ready) (out []uint64) {
		for _, rep := range r.Replies {
			if rep.Ack {
				if rep.Weights != nil || rep.Err != nil || rep.To != 1 {
					t.Fatalf("acknowledgement %+v", rep)
				}
				out = append(out, rep.Seq)
			}
		}
		return out
	}
	r := h.member(MsgLeave, 1) // completes the round
	if got := acks(r); !slices.Equal(got, []uint64{h.seq[1]}) || len(r.Updates) != 1 || r.Replies[0].Clock != 1 {
		t.Fatalf("leave: acks %v, outputs %+v", got, r)
	}
	if got := acks(h.member(MsgLeave, 1)); !slices.Equal(got, []uint64{h.seq[1]}) || h.s.Active() != 1 {
		t.Fatalf("a second leave: acks %v, %d active", got, h.s.Active())
	}
	for range 2 {
		if got := acks(h.member(MsgJoin, 1)); !slices.Equal(got, []uint64{h.seq[1]}) || h.s.Active() != 2 {
			t.Fatalf("join: acks %v, %d active", got, h.s.Active())
		}
	}
	if st := h.s.Stats(); st.Rejected.Total() != 0 {
		t.Fatalf("rejections %+v", st.Rejected)
	}
}
