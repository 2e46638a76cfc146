package ps

import (
	"errors"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
)

// harness drives one shard with terse helpers; seq numbers are automatic.
type harness struct {
	t   *testing.T
	s   *Shard
	seq map[uint32]uint64
}

func newHarness(t *testing.T, cfg Config, init []float32) *harness {
	t.Helper()
	s, err := NewShard(cfg, 0, init, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, s: s, seq: map[uint32]uint64{}}
}

func (h *harness) next(l uint32) uint64 { h.seq[l]++; return h.seq[l] }

func (h *harness) push(l uint32, stamp uint64, g []float32) Ready {
	return h.s.Step(Msg{Type: MsgPush, Job: h.s.cfg.Job, Learner: l, Seq: h.next(l), Clock: stamp, Grad: g})
}

func (h *harness) pull(l uint32, minClock uint64) Ready {
	return h.s.Step(Msg{Type: MsgPull, Job: h.s.cfg.Job, Learner: l, Seq: h.next(l), Clock: minClock})
}

func (h *harness) member(t MsgType, l uint32) Ready {
	return h.s.Step(Msg{Type: t, Job: h.s.cfg.Job, Learner: l, Seq: h.next(l)})
}

// served returns the learners answered with weights in r, and their stamps.
func served(r Ready) (to []uint32, stamps []uint64) {
	for _, rep := range r.Replies {
		if rep.Weights != nil {
			to, stamps = append(to, rep.To), append(stamps, rep.Clock)
		}
	}
	return to, stamps
}

func plainConfig(learners int, p Protocol, n int) Config {
	return Config{Job: 7, Learners: learners, Protocol: p, N: n, Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.5}}
}

func TestHardsyncBarrier(t *testing.T) {
	h := newHarness(t, plainConfig(3, Hardsync, 0), []float32{1, 1})
	for l := range uint32(3) {
		if to, _ := served(h.pull(l, 0)); !slices.Equal(to, []uint32{l}) {
			t.Fatalf("initial pull of %d: served %v", l, to)
		}
	}
	h.push(0, 0, []float32{1, 0})
	// A pull after a push waits for the update, even asking for clock 0.
	if to, _ := served(h.pull(0, 0)); len(to) != 0 {
		t.Fatalf("pull after push answered before the update: %v", to)
	}
	r := h.push(1, 0, []float32{0, 1})
	if len(r.Updates) != 0 || h.s.Clock() != 0 {
		t.Fatal("update before every learner pushed")
	}
	r = h.push(2, 0, []float32{1, 1})
	to, stamps := served(r)
	if len(r.Updates) != 1 || r.Updates[0].Gradients != 3 || !slices.Equal(to, []uint32{0}) || !slices.Equal(stamps, []uint64{1}) {
		t.Fatalf("after the third push: updates %+v, served %v at %v", r.Updates, to, stamps)
	}
	// w = 1 − 0.5·mean(g): mean = (2/3, 2/3).
	if w := h.s.Weights(); !sgdNear(w[0], 1-0.5*2.0/3) || !sgdNear(w[1], 1-0.5*2.0/3) {
		t.Fatalf("weights %v", w)
	}
	// A stale push (stamp 0 at clock 1) is dropped; a second push in one
	// round is rejected.
	h.push(1, 0, []float32{5, 5})
	h.push(1, 1, []float32{0, 0})
	r = h.push(1, 1, []float32{0, 0})
	if len(r.Replies) != 1 || !errors.Is(r.Replies[0].Err, ErrAlreadyPushed) {
		t.Fatalf("second push in a round: %+v", r.Replies)
	}
	st := h.s.Stats()
	if st.Dropped != 1 || st.Rejected.AlreadyPush != 1 || !slices.Equal(st.Histogram, []uint64{4}) {
		t.Fatalf("stats %+v", st)
	}
}

func sgdNear(got float32, want float64) bool { return math.Abs(float64(got)-want) < 1e-6 }

// TestMembership checks how membership changes meet the update rule:
// leaving completes a hardsync round (a partial update, its rate scaled by
// c/c₀), joining extends the barrier, softsync's c stays c₀ = ⌊λ/n⌋ of the
// configured λ whoever leaves, and the last leave applies what is pending
// as a partial update.
func TestMembership(t *testing.T) {
	h := newHarness(t, plainConfig(3, Hardsync, 0), []float32{0})
	h.push(0, 0, []float32{1})
	h.push(1, 0, []float32{1})
	r := h.member(MsgLeave, 2)
	if len(r.Updates) != 1 || r.Updates[0].Gradients != 2 {
		t.Fatalf("leave should complete the round with 2 gradients: %+v", r.Updates)
	}
	// c = 2 of c₀ = 3: the mean gradient 1 at rate 0.5·2/3.
	if w := h.s.Weights()[0]; !sgdNear(w, -0.5*2/3) || h.s.Stats().Partial != 1 {
		t.Fatalf("partial round: w = %g, want %g; stats %+v", w, -0.5*2/3, h.s.Stats())
	}
	if r := h.push(2, 1, []float32{1}); len(r.Replies) != 1 || !errors.Is(r.Replies[0].Err, ErrUnknownLearner) {
		t.Fatalf("push after leave: %+v", r.Replies)
	}
	h.member(MsgJoin, 2)
	h.member(MsgJoin, 2) // idempotent
	h.push(0, 1, []float32{1})
	h.push(1, 1, []float32{1})
	if h.s.Clock() != 1 {
		t.Fatal("the rejoined learner must be waited for")
	}
	if r := h.push(2, 1, []float32{1}); len(r.Updates) != 1 || r.Updates[0].Gradients != 3 || h.s.Stats().Partial != 1 {
		t.Fatalf("full round with the rejoined learner: %+v, stats %+v", r.Updates, h.s.Stats())
	}

	// Softsync λ = 4, n = 2: c = 2 however many learners are active; the
	// last leave applies what is pending.
	h = newHarness(t, plainConfig(4, Softsync, 2), []float32{0})
	h.push(0, 0, []float32{1})
	if h.s.Clock() != 0 {
		t.Fatal("c = 2 updated after one gradient")
	}
	for _, l := range []uint32{3, 2} {
		if r := h.member(MsgLeave, l); len(r.Updates) != 0 {
			t.Fatalf("leave of learner %d updated with one gradient pending: %+v", l, r.Updates)
		}
	}
	if r := h.push(1, 0, []float32{1}); len(r.Updates) != 1 || r.Updates[0].Gradients != 2 {
		t.Fatalf("two learners of four left: c must stay 2: %+v", r.Updates)
	}
	h.push(1, 1, []float32{1})
	if r := h.member(MsgLeave, 1); len(r.Updates) != 0 {
		t.Fatal("update while learner 0 is active")
	}
	r = h.member(MsgLeave, 0)
	if len(r.Updates) != 1 || r.Updates[0].Gradients != 1 || h.s.Stats().Partial != 1 {
		t.Fatalf("the last leave must apply the pending gradient as a partial update: %+v, stats %+v", r.Updates, h.s.Stats())
	}
	// Hardsync: a learner pushes and leaves (the round still waits for
	// learner 1); when learner 1 leaves too, the pending gradient is applied.
	h = newHarness(t, plainConfig(2, Hardsync, 0), []float32{0})
	h.push(0, 0, []float32{1})
	if r := h.member(MsgLeave, 0); len(r.Updates) != 0 {
		t.Fatal("round applied while learner 1 is active and has not pushed")
	}
	if r := h.member(MsgLeave, 1); len(r.Updates) != 1 || h.s.Clock() != 1 {
		t.Fatal("pending gradients must be applied when the last learner leaves")
	}
}

// TestStalenessRates drives τ = 4 and τ = 2 into one softsync update and
// checks the weights for each learning-rate mode against the paper's
// formula (momentum 0, no decay: w' = w − (1/c)·Σ α(τ_l)·Δθ_l).
func TestStalenessRates(t *testing.T) {
	for mode, want := range map[sgd.LRMode]float64{
		sgd.LRStaleness: 0.1 * (3.0/4 + 5.0/2) / 2,
		sgd.LRAverage:   0.1 / 3 * (3.0 + 5.0) / 2,
		sgd.LRConstant:  0.1 * (3.0 + 5.0) / 2,
	} {
		cfg := plainConfig(4, Softsync, 2)
		cfg.Solver = sgd.Config{LR: 0.1, LRMode: mode}
		h := newHarness(t, cfg, []float32{0})
		for c := range uint64(4) { // four updates of two fresh zero gradients
			h.push(0, c, []float32{0})
			h.push(1, c, []float32{0})
		}
		h.push(2, 0, []float32{3})
		r := h.push(3, 2, []float32{5})
		if len(r.Updates) != 1 {
			t.Fatal("no update")
		}
		u := r.Updates[0]
		if u.Gradients != 2 || u.MeanStaleness != 3 || u.MaxStaleness != 4 || !sgdNear(h.s.Weights()[0], -want) {
			t.Errorf("%v: update %+v, w = %g, want −%g", mode, u, h.s.Weights()[0], want)
		}
	}
}

// TestBoundedPullRule walks the pull rule of the package doc with S = 1.
func TestBoundedPullRule(t *testing.T) {
	cfg := plainConfig(3, Softsync, 3)
	cfg.MaxStaleness = 1
	h := newHarness(t, cfg, []float32{0})
	for l := range uint32(3) {
		h.pull(l, 0)
	}
	h.push(0, 0, []float32{1}) // clock 1
	if to, _ := served(h.pull(0, 0)); !slices.Equal(to, []uint32{0}) {
		t.Fatal("learners 1 and 2 are 1 behind: learner 0 may pull")
	}
	h.push(0, 1, []float32{1}) // clock 2: learners 1, 2 are 2 behind
	if to, _ := served(h.pull(0, 0)); len(to) != 0 {
		t.Fatal("pull served while learners compute 2 clocks behind")
	}
	r := h.push(1, 0, []float32{1}) // τ = 2 > 1: dropped; learner 2 still computing
	if to, _ := served(r); len(to) != 0 || h.s.Stats().Dropped != 1 || h.s.Clock() != 2 {
		t.Fatalf("after the stale push: served %v, stats %+v", to, h.s.Stats())
	}
	r = h.member(MsgLeave, 2)
	if to, stamps := served(r); !slices.Equal(to, []uint32{0}) || !slices.Equal(stamps, []uint64{2}) {
		t.Fatalf("with nobody computing the pull must be served: %v %v", to, stamps)
	}
}

// TestBoundedPullRuleGate checks that shards other than 0 do not hold
// pulls back (only their drop rule applies): the pull that shard 0 holds in
// TestBoundedPullRule is answered at once by shard 1.
func TestBoundedPullRuleGate(t *testing.T) {
	cfg := plainConfig(3, Softsync, 3)
	cfg.MaxStaleness, cfg.Shards = 1, 2
	s, err := NewShard(cfg, 1, []float32{0, 0}, 1)
	if err != nil {
		t.Fatal(err)
	}
	step := func(m Msg) Ready { m.Job, m.Shard = 7, 1; return s.Step(m) }
	for l := range uint32(3) {
		step(Msg{Type: MsgPull, Learner: l, Seq: 1})
	}
	step(Msg{Type: MsgPush, Learner: 0, Seq: 2, Clock: 0, Grad: []float32{1}})
	step(Msg{Type: MsgPush, Learner: 0, Seq: 3, Clock: 1, Grad: []float32{1}})
	if to, stamps := served(step(Msg{Type: MsgPull, Learner: 0, Seq: 4})); !slices.Equal(to, []uint32{0}) || !slices.Equal(stamps, []uint64{2}) {
		t.Fatalf("shard 1 must not gate pulls: served %v at %v", to, stamps)
	}
	step(Msg{Type: MsgPush, Learner: 1, Seq: 2, Clock: 0, Grad: []float32{1}})
	if st := s.Stats(); st.Dropped != 1 {
		t.Fatalf("shard 1 must still drop τ = 2 > 1: %+v", st)
	}
}

func TestPullMinClock(t *testing.T) {
	h := newHarness(t, plainConfig(2, Softsync, 2), []float32{0})
	if to, _ := served(h.pull(0, 2)); len(to) != 0 {
		t.Fatal("pull for clock 2 served at 0")
	}
	h.pull(0, 1) // replaces the waiting pull
	r := h.push(1, 0, []float32{1})
	if to, stamps := served(r); !slices.Equal(to, []uint32{0}) || !slices.Equal(stamps, []uint64{1}) || r.Replies[0].Seq != 2 {
		t.Fatalf("pull at clock 1: %+v", r.Replies)
	}
}

// TestDuplicates resends a push, also after a leave and a join (a
// reconnect): it is applied once.
func TestDuplicates(t *testing.T) {
	h := newHarness(t, plainConfig(2, Softsync, 2), []float32{0})
	m := Msg{Type: MsgPush, Job: 7, Learner: 0, Seq: 10, Clock: 0, Grad: []float32{1}}
	h.s.Step(m)
	h.s.Step(m)
	h.member(MsgLeave, 0)
	h.member(MsgJoin, 0)
	if r := h.s.Step(m); len(r.Replies) != 0 || len(r.Updates) != 0 {
		t.Fatalf("duplicate produced output: %+v", r)
	}
	m.Seq = 9 // older than the last applied: a duplicate too
	h.s.Step(m)
	if st := h.s.Stats(); st.Updates != 1 || st.Duplicates != 3 || st.Gradients != 1 || !sgdNear(h.s.Weights()[0], -0.5) {
		t.Fatalf("stats %+v, w %v", st, h.s.Weights())
	}
	m.Seq = 12
	if r := h.s.Step(m); len(r.Updates) != 1 {
		t.Fatal("a new sequence must be applied")
	}
}

// TestRejections sends one bad message per reason: each is answered with
// an error to that learner, counted under its reason, and changes nothing;
// the shard keeps serving.
func TestRejections(t *testing.T) {
	good := func() Msg { return Msg{Type: MsgPush, Job: 7, Learner: 1, Seq: 5, Clock: 0, Grad: []float32{1, 2}} }
	for _, tc := range []struct {
		name  string
		proto Protocol
		mut   func(*Msg)
		err   error
		count func(Rejections) uint64
	}{
		{"job", Softsync, func(m *Msg) { m.Job = 8 }, ErrWrongJob, func(r Rejections) uint64 { return r.WrongJob }},
		{"shard", Softsync, func(m *Msg) { m.Shard = 1 }, ErrWrongShard, func(r Rejections) uint64 { return r.WrongShard }},
		{"learner", Softsync, func(m *Msg) { m.Learner = 2 }, ErrUnknownLearner, func(r Rejections) uint64 { return r.UnknownLearner }},
		{"type", Softsync, func(m *Msg) { m.Type = 0 }, ErrBadType, func(r Rejections) uint64 { return r.BadType }},
		{"length", Softsync, func(m *Msg) { m.Grad = m.Grad[:1] }, ErrBadLength, func(r Rejections) uint64 { return r.BadLength }},
		{"future", Softsync, func(m *Msg) { m.Clock = 1 }, ErrFutureClock, func(r Rejections) uint64 { return r.FutureClock }},
		{"nan", Softsync, func(m *Msg) { m.Grad[1] = float32(math.NaN()) }, ErrNonFinite, func(r Rejections) uint64 { return r.NonFinite }},
		{"inf", Softsync, func(m *Msg) { m.Grad[0] = float32(math.Inf(-1)) }, ErrNonFinite, func(r Rejections) uint64 { return r.NonFinite }},
		{"double", Hardsync, func(m *Msg) { m.Seq = 4 }, ErrAlreadyPushed, func(r Rejections) uint64 { return r.AlreadyPush }},
	} {
		// Softsync with c = 1; under hardsync learner 1 has pushed once
		// this round.
		h := newHarness(t, plainConfig(2, tc.proto, 2), []float32{3, 4})
		if tc.proto == Hardsync {
			h.s.Step(Msg{Type: MsgPush, Job: 7, Learner: 1, Seq: 3, Grad: []float32{0, 0}})
		}
		m := good()
		tc.mut(&m)
		r := h.s.Step(m)
		if len(r.Replies) != 1 || !errors.Is(r.Replies[0].Err, tc.err) || r.Replies[0].To != m.Learner || r.Replies[0].Seq != m.Seq || len(r.Updates) != 0 {
			t.Errorf("%s: outputs %+v", tc.name, r)
			continue
		}
		st := h.s.Stats()
		if tc.count(st.Rejected) != 1 || st.Rejected.Total() != 1 || h.s.Clock() != 0 || !slices.Equal(h.s.Weights(), []float32{3, 4}) {
			t.Errorf("%s: stats %+v, weights %v", tc.name, st, h.s.Weights())
		}
		// The shard keeps serving: the same message, fixed, is applied.
		fixed := good()
		fixed.Learner = 0
		if r := h.s.Step(fixed); len(r.Replies) != 0 || len(r.Updates) == 0 && tc.proto == Softsync {
			t.Errorf("%s: valid push after a rejection: %+v", tc.name, r)
		}
	}
	// A departed learner is unknown too, for pulls as well.
	h := newHarness(t, plainConfig(2, Softsync, 1), []float32{0})
	h.member(MsgLeave, 1)
	if r := h.pull(1, 0); len(r.Replies) != 1 || !errors.Is(r.Replies[0].Err, ErrUnknownLearner) {
		t.Fatalf("pull from a departed learner: %+v", r.Replies)
	}
}

// TestCheckpointRestore checkpoints a shard with a pending gradient,
// restores it, and feeds both the same messages: the weights stay
// bit-identical.
func TestCheckpointRestore(t *testing.T) {
	cfg := plainConfig(3, Softsync, 1) // c = 3
	cfg.Solver = sgd.Config{LR: 0.1, Momentum: 0.9, WeightDecay: 0.01, LRMode: sgd.LRStaleness}
	a := newHarness(t, cfg, []float32{1, -1, 2})
	for c := range uint64(2) {
		for l := range uint32(3) {
			a.push(l, c, []float32{float32(l), 1, -float32(c)})
		}
	}
	a.push(0, 1, []float32{3, 3, 3}) // pending, τ = 1
	cp := a.s.Checkpoint()
	rs, err := Restore(cfg, cp, 2)
	if err != nil {
		t.Fatal(err)
	}
	b := &harness{t: t, s: rs, seq: map[uint32]uint64{}}
	for l, n := range a.seq {
		b.seq[l] = n
	}
	for _, h := range []*harness{a, b} {
		h.push(1, 2, []float32{1, 2, 3})
		h.push(2, 0, []float32{-1, 0, 1})
		h.push(0, 3, []float32{0.5, 0.5, 0.5})
	}
	if !slices.Equal(a.s.Weights(), b.s.Weights()) || a.s.Clock() != b.s.Clock() || a.s.Clock() != 3 {
		t.Fatalf("restored shard diverged: %v@%d vs %v@%d", b.s.Weights(), b.s.Clock(), a.s.Weights(), a.s.Clock())
	}
	sa, sb := a.s.Stats(), b.s.Stats()
	if !slices.Equal(sa.Histogram, sb.Histogram) || sa.Gradients != sb.Gradients {
		t.Fatalf("stats diverged: %+v vs %+v", sb, sa)
	}
	cp.Weights = cp.Weights[:1]
	if _, err := Restore(cfg, cp, 2); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("short checkpoint accepted: %v", err)
	}
}

// TestEpochSchedule checks that the shard counts samples (Batch per
// gradient, dropped ones included) into epochs for the step schedule.
func TestEpochSchedule(t *testing.T) {
	cfg := plainConfig(2, Softsync, 2) // c = 1
	cfg.Batch, cfg.DataSize = 3, 6     // 2 gradients per epoch
	cfg.Solver = sgd.Config{LR: 1, LRSteps: []int{1, 2}, LRGamma: 0.5}
	h := newHarness(t, cfg, []float32{0})
	var rates []float64
	var epochs []int
	for i := range uint64(5) {
		r := h.push(0, i, []float32{1})
		rates, epochs = append(rates, r.Updates[0].Rate), append(epochs, r.Updates[0].Epoch)
	}
	if !slices.Equal(epochs, []int{0, 0, 1, 1, 2}) || !slices.Equal(rates, []float64{1, 1, 0.5, 0.5, 0.25}) {
		t.Fatalf("epochs %v rates %v", epochs, rates)
	}
	if st := h.s.Stats(); st.Samples != 15 || st.Epoch != 2 {
		t.Fatalf("samples %d epoch %d", st.Samples, st.Epoch)
	}
}

func TestRanges(t *testing.T) {
	for _, tc := range []struct {
		total, shards int
		want          []Range
	}{
		{18, 3, []Range{{0, 6}, {6, 12}, {12, 18}}},
		{1000, 3, []Range{{0, 320}, {320, 656}, {656, 1000}}},
		{5, 5, []Range{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}},
		{7, 1, []Range{{0, 7}}},
	} {
		got, err := Ranges(tc.total, tc.shards)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Ranges(%d, %d) = %v, %v; want %v", tc.total, tc.shards, got, err, tc.want)
		}
	}
	for total := 1; total < 300; total += 7 {
		for shards := 1; shards <= min(total, 9); shards++ {
			rs, err := Ranges(total, shards)
			if err != nil {
				t.Fatal(err)
			}
			for k, r := range rs {
				aligned := total < 16*shards || r.Lo%16 == 0
				if r.Len() < 1 || (k > 0 && r.Lo != rs[k-1].Hi) || !aligned {
					t.Fatalf("Ranges(%d, %d) = %v", total, shards, rs)
				}
			}
			if rs[0].Lo != 0 || rs[shards-1].Hi != total {
				t.Fatalf("Ranges(%d, %d) = %v does not cover", total, shards, rs)
			}
		}
	}
	for _, bad := range [][2]int{{3, 4}, {3, 0}} {
		if _, err := Ranges(bad[0], bad[1]); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Ranges(%d, %d): %v", bad[0], bad[1], err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for field, mut := range map[string]func(*Config){
		"Learners":       func(c *Config) { c.Learners = 0 },
		"Protocol":       func(c *Config) { c.Protocol = 9 },
		"N":              func(c *Config) { c.N = 5 },
		"MaxStaleness":   func(c *Config) { c.MaxStaleness = -1 },
		"Shards":         func(c *Config) { c.Shards = 0 },
		"Batch":          func(c *Config) { c.Batch = 0 },
		"DataSize":       func(c *Config) { c.Solver.LRSteps, c.Solver.LRGamma = []int{3}, 0.1 },
		"Solver.LR":      func(c *Config) { c.Solver.LR = 0 },
		"Layout":         func(c *Config) { c.Layout = []param.Segment{{Name: "w", Len: 3, LRMult: 1}} },
		"Solver.LRGamma": func(c *Config) { c.DataSize, c.Solver.LRSteps = 10, []int{3} },
	} {
		cfg := plainConfig(4, Softsync, 2)
		mut(&cfg)
		_, err := NewShard(cfg, 0, make([]float32, 4), 1)
		var fe *param.FieldError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
	if _, err := NewShard(plainConfig(4, Softsync, 2), 1, make([]float32, 4), 1); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("shard index outside [0, Shards): %v", err)
	}
	hard := plainConfig(4, Hardsync, 0)
	hard.MaxStaleness = 2
	if err := hard.Validate(); err == nil {
		t.Error("hardsync with a staleness bound accepted")
	}
	if p, err := ParseProtocol("softsync"); err != nil || p != Softsync || p.String() != "softsync" {
		t.Errorf("ParseProtocol: %v %v", p, err)
	}
	if _, err := ParseProtocol("async"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ParseProtocol(async): %v", err)
	}
}

// finiteAll reports whether every element of v is finite.
func finiteAll(v []float32) bool { return sgd.FirstNonFinite(v) < 0 }

// momentum returns the shard's momentum.
func (h *harness) momentum() []float32 { return h.s.Checkpoint().Solver.Momentum }

// TestHugeGradients pushes finite but huge gradients, 3e38 four times at
// rate 0.5, which took a weight to −1.5e38, −3e38, −Inf and NaN: the
// first two updates are applied, the two that would reach −Inf are
// refused as a whole and counted against their learners, no pull is ever
// served a non-finite weight, and later good pushes are applied.
func TestHugeGradients(t *testing.T) {
	h := newHarness(t, plainConfig(2, Softsync, 2), []float32{0, 1}) // c = 1, no momentum
	wants := [][]float32{{-1.5e38, 1}, {-3e38, 1}, {-3e38, 1}, {-3e38, 1}}
	for i, want := range wants {
		l := uint32(i % 2)
		r := h.push(l, h.s.Clock(), []float32{3e38, 0})
		if len(r.Updates) != 1 || r.Updates[0].Refused != (i >= 2) || !slices.Equal(r.Updates[0].Learners, []uint32{l}) {
			t.Fatalf("push %d: updates %+v", i+1, r.Updates)
		}
		if !slices.Equal(h.s.Weights(), want) || !finiteAll(h.momentum()) {
			t.Fatalf("push %d: weights %v (want %v), momentum %v", i+1, h.s.Weights(), want, h.momentum())
		}
		if r := h.pull(l, 0); len(r.Replies) != 1 || !finiteAll(r.Replies[0].Weights) || r.Replies[0].Clock != uint64(i+1) {
			t.Fatalf("pull after push %d: %+v", i+1, r.Replies)
		}
	}
	st := h.s.Stats()
	if st.Updates != 2 || st.Refused != 2 || !slices.Equal(st.RefusedGradients, []uint64{1, 1}) || st.Clock != 4 || st.Gradients != 4 || st.Rejected.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The job goes on: a good gradient is applied to the weights as they
	// were before the refused updates.
	g := []float32{-1e38, 2}
	h.push(0, h.s.Clock(), g)
	want := []float32{wants[3][0] - 0.5*g[0], 1 - 0.5*g[1]}
	if w := h.s.Weights(); !slices.Equal(w, want) || h.s.Stats().Updates != 3 {
		t.Fatalf("good push after the refused ones: weights %v, want %v; stats %+v", w, want, h.s.Stats())
	}
}

// TestRefusedRound: an update that combines several gradients is refused
// as a whole when its combination would make any weight or momentum value
// non-finite: no element moves (the finite ones neither), the round ends
// (the clock advances, waiting pulls are answered with the weights as
// they were), and each of its gradients is counted against the learner
// that pushed it, also in a round a leave completes and in a softsync
// update holding two gradients of one learner.
func TestRefusedRound(t *testing.T) {
	cfg := plainConfig(3, Hardsync, 0)
	cfg.Solver.Momentum = 0.5
	h := newHarness(t, cfg, []float32{1, -3e38})
	w0, v0 := slices.Clone(h.s.Weights()), h.momentum()
	h.push(0, 0, []float32{1, 3e38})
	h.pull(0, 1)
	h.push(1, 0, []float32{2, 3e38})
	r := h.push(2, 0, []float32{3, 3e38}) // mean (2, 3e38): w[1] −= 1.5e38, past −MaxFloat32
	if len(r.Updates) != 1 || !r.Updates[0].Refused || r.Updates[0].Gradients != 3 || !slices.Equal(r.Updates[0].Learners, []uint32{0, 1, 2}) {
		t.Fatalf("round of three: updates %+v", r.Updates)
	}
	if !slices.Equal(h.s.Weights(), w0) || !slices.Equal(h.momentum(), v0) {
		t.Fatalf("refused round moved weights %v → %v or momentum %v → %v", w0, h.s.Weights(), v0, h.momentum())
	}
	if to, stamps := served(r); !slices.Equal(to, []uint32{0}) || !slices.Equal(stamps, []uint64{1}) || !slices.Equal(r.Replies[0].Weights, w0) {
		t.Fatalf("the waiting pull after a refused round: %+v", r.Replies)
	}
	// Good gradients: the next round is applied, and only its gradients.
	for l := range uint32(3) {
		r = h.push(l, 1, []float32{2, 0})
	}
	if len(r.Updates) != 1 || r.Updates[0].Refused || !slices.Equal(h.s.Weights(), []float32{0, -3e38}) {
		t.Fatalf("good round after a refused one: %+v, weights %v", r.Updates, h.s.Weights())
	}
	// A round that a leave completes: only the gradients in it count.
	h.push(2, 2, []float32{0, 3e38})
	h.push(0, 2, []float32{0, 3e38})
	if r := h.member(MsgLeave, 1); len(r.Updates) != 1 || !r.Updates[0].Refused || !slices.Equal(r.Updates[0].Learners, []uint32{2, 0}) {
		t.Fatalf("round completed by a leave: %+v", r.Updates)
	}
	st := h.s.Stats()
	if st.Refused != 2 || st.Updates != 1 || st.Partial != 0 || !slices.Equal(st.RefusedGradients, []uint64{2, 1, 2}) || st.Clock != 3 {
		t.Fatalf("stats %+v", st)
	}

	// Softsync, c₀ = 2: one learner's two gradients in a refused update
	// count twice.
	h = newHarness(t, plainConfig(4, Softsync, 2), []float32{-3e38})
	h.push(3, 0, []float32{2e38})
	r = h.push(3, 0, []float32{4e38 / 2})
	if len(r.Updates) != 1 || !r.Updates[0].Refused || !slices.Equal(h.s.Stats().RefusedGradients, []uint64{0, 0, 0, 2}) || h.s.Weights()[0] != -3e38 {
		t.Fatalf("softsync update of two gradients of learner 3: %+v, stats %+v, weights %v", r.Updates, h.s.Stats(), h.s.Weights())
	}
}

// TestRefusedOverflowedSum: a hardsync round whose gradients are finite
// but whose float32 sum is not (2e38 three times) is refused whatever
// its rate makes of the mean, under every rule: the weights never hold
// a NaN or an infinity.
func TestRefusedOverflowedSum(t *testing.T) {
	for _, rule := range []string{"staleness", "gap", "dc-adaptive"} {
		cfg := plainConfig(3, Hardsync, 0)
		cfg.Solver = sgd.Config{LR: 0.05, Momentum: 0.9}
		if err := cfg.Solver.ParseRule(rule); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, cfg, []float32{0.1, -0.2})
		for round := range uint64(3) {
			g := []float32{0.01, 0.02}
			if round == 2 {
				g = []float32{1e38, 2e38}
			}
			var r Ready
			for l := range uint32(3) {
				h.pull(l, round)
				r = h.push(l, round, g)
			}
			if len(r.Updates) != 1 || r.Updates[0].Refused != (round == 2) || !finiteAll(h.s.Weights()) {
				t.Fatalf("%s, round %d: updates %+v, weights %v", rule, round, r.Updates, h.s.Weights())
			}
		}
	}
}

// TestRefusedOverflowedRestore: a softsync update's pending gradients
// whose sum overflowed (+Inf) are checkpointed as they are, and the
// restored shard refuses their update as the shard it restores does.
func TestRefusedOverflowedRestore(t *testing.T) {
	cfg := plainConfig(3, Softsync, 1) // c = 3
	a := newHarness(t, cfg, []float32{1, 2})
	a.push(0, 0, []float32{3e38, 1})
	a.push(1, 0, []float32{3e38, 1})
	cp := a.s.Checkpoint()
	if !math.IsInf(float64(cp.Solver.Acc[0]), 1) {
		t.Fatalf("pending sum %v, want +Inf first", cp.Solver.Acc)
	}
	rs, err := Restore(cfg, cp, 2)
	if err != nil {
		t.Fatal(err)
	}
	b := &harness{t: t, s: rs, seq: maps.Clone(a.seq)}
	for _, h := range []*harness{a, b} {
		r := h.push(2, 0, []float32{1, 1})
		if len(r.Updates) != 1 || !r.Updates[0].Refused || !slices.Equal(h.s.Weights(), []float32{1, 2}) || h.s.Clock() != 1 {
			t.Fatalf("the update of an overflowed sum: %+v, weights %v at %d", r.Updates, h.s.Weights(), h.s.Clock())
		}
	}
}

// TestRefusedDiverges: updates refused RefusedLimit times in a row make
// the shard take the job for diverged: every later push is rejected with
// ErrDiverged (counted), pulls are still served the last finite weights.
// An applied update in between starts the count again.
func TestRefusedDiverges(t *testing.T) {
	h := newHarness(t, plainConfig(2, Softsync, 2), []float32{-3e38})
	huge, good := []float32{3e38}, []float32{-1e38}
	for range RefusedLimit - 1 {
		h.push(0, h.s.Clock(), huge)
	}
	h.push(1, h.s.Clock(), good)
	for range RefusedLimit - 1 {
		if r := h.push(1, h.s.Clock(), huge); len(r.Replies) != 0 {
			t.Fatalf("refused push answered %+v before %d refusals in a row", r.Replies, RefusedLimit)
		}
	}
	if r := h.push(0, h.s.Clock(), huge); len(r.Replies) != 0 || h.s.Stats().Refused != 2*RefusedLimit-1 {
		t.Fatalf("push %d in a row: %+v, stats %+v", RefusedLimit, r, h.s.Stats())
	}
	w := slices.Clone(h.s.Weights())
	r := h.push(1, h.s.Clock(), good)
	if len(r.Replies) != 1 || !errors.Is(r.Replies[0].Err, ErrDiverged) || len(r.Updates) != 0 {
		t.Fatalf("push after %d refused updates in a row: %+v", RefusedLimit, r)
	}
	if r := h.pull(0, 0); len(r.Replies) != 1 || r.Replies[0].Err != nil || !slices.Equal(r.Replies[0].Weights, w) {
		t.Fatalf("pull of a diverged shard: %+v", r.Replies)
	}
	if st := h.s.Stats(); st.Rejected.Diverged != 1 || st.Updates != 1 || !finiteAll(h.s.Weights()) {
		t.Fatalf("stats %+v, weights %v", st, h.s.Weights())
	}
}

// TestSeqLimits: the largest sequence number, 2⁶⁴ − 1, is a push like
// any other, and every push after it, at or below it, is a duplicate.
func TestSeqLimits(t *testing.T) {
	h := newHarness(t, plainConfig(1, Softsync, 1), []float32{0})
	top := Msg{Type: MsgPush, Job: 7, Learner: 0, Seq: Seq(MaxIncarnation, MaxMessages), Grad: []float32{1}}
	if top.Seq != math.MaxUint64 {
		t.Fatalf("Seq(MaxIncarnation, MaxMessages) = %#x", top.Seq)
	}
	if r := h.s.Step(top); len(r.Updates) != 1 {
		t.Fatalf("push of seq 2^64-1: %+v", r)
	}
	for _, seq := range []uint64{math.MaxUint64, 5, math.MaxUint64 - 1} {
		m := top
		m.Seq, m.Clock = seq, h.s.Clock()
		if r := h.s.Step(m); len(r.Updates) != 0 || len(r.Replies) != 0 {
			t.Fatalf("push of seq %#x after seq 2^64-1: %+v", seq, r)
		}
	}
	if st := h.s.Stats(); st.Duplicates != 3 || st.Updates != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestHardsyncRestoredJoin: a hardsync shard restored from a checkpoint
// with no active learner (as a restarted shard server is), whose round
// had learner 1's gradient: the round ends at the restore (its gradient
// applied), and learner 1, rejoining alone, has its pull answered with
// the next round's weights, not held for learners that have not
// rejoined (they may be waiting for learner 1 elsewhere).
func TestHardsyncRestoredJoin(t *testing.T) {
	cfg := plainConfig(3, Hardsync, 0)
	a := newHarness(t, cfg, []float32{1, 1})
	for l := range uint32(3) {
		a.pull(l, 0)
	}
	a.push(1, 0, []float32{2, 2})
	cp := a.s.Checkpoint()
	cp.Active = make([]bool, 3)
	rs, err := Restore(cfg, cp, 2)
	if err != nil {
		t.Fatal(err)
	}
	b := &harness{t: t, s: rs, seq: map[uint32]uint64{1: a.seq[1]}}
	b.member(MsgJoin, 1)
	to, stamps := served(b.pull(1, 0))
	if w := b.s.Weights()[0]; !slices.Equal(to, []uint32{1}) || !slices.Equal(stamps, []uint64{1}) || math.Abs(float64(w)-(1-0.5*2.0/3)) > 1e-6 {
		t.Fatalf("pull of the rejoined learner: served %v at %v, weights %v; want learner 1 at clock 1, weights 1 − 0.5·2/3 (one gradient of c₀ = 3)", to, stamps, b.s.Weights())
	}
}

// TestHardsyncRestoredRoundNoCycle replays a schedule of a job of three
// learners and two shards under hardsync whose shard 1 is restored from
// a checkpoint taken while its round 0 held learner 0's gradient only.
// Meanwhile shard 0 has run on: learners 1 and 2 pushed its round 1 and
// wait for learner 0's, which waits for its pull of shard 1. The learners
// rejoin the restored shard with learner 0 last. Had the restored round
// stayed open, it would wait for learners 1 and 2 to push there, and they
// would wait for shard 0 for ever; closed, learner 0's pull is answered,
// and its push ends shard 0's round, and the restored shard's round 1,
// where learners 1 and 2 count by their given-up pushes of round 1.
func TestHardsyncRestoredRoundNoCycle(t *testing.T) {
	cfg := plainConfig(3, Hardsync, 0)
	cfg.Shards = 2
	init := make([]float32, 32) // two shards of 16
	for i := range init {
		init[i] = 1
	}
	var shards [2]*Shard
	for k := range shards {
		var err error
		if shards[k], err = NewShard(cfg, k, init, 1); err != nil {
			t.Fatal(err)
		}
	}
	seq := map[uint32]uint64{}
	life := uint64(1) // of the weights a push was computed on
	step := func(k int, typ MsgType, l uint32, clock uint64, g []float32) Ready {
		seq[l]++
		return shards[k].Step(Msg{Type: typ, Job: cfg.Job, Shard: k, Learner: l, Seq: seq[l], Clock: clock, Life: life, Grad: g})
	}
	grad := func(v float32) []float32 { return slices.Repeat([]float32{v}, 16) }
	for k := range shards {
		for l := range uint32(3) {
			step(k, MsgPull, l, 0, nil)
		}
	}
	// Round 0: learner 0 pushes, shard 1 is checkpointed, learners 1 and 2
	// push; learner 0's pull of round 1 reaches shard 0 only (shard 1's
	// server dies before it answers).
	for k := range shards {
		step(k, MsgPush, 0, 0, grad(3))
	}
	resent := seq[0] // learner 0's push to shard 1, which it resends to the restored shard
	cp := shards[1].Checkpoint()
	for k := range shards {
		step(k, MsgPush, 1, 0, grad(1))
		step(k, MsgPush, 2, 0, grad(1))
	}
	if to, _ := served(step(0, MsgPull, 0, 1, nil)); !slices.Equal(to, []uint32{0}) {
		t.Fatalf("learner 0's pull of shard 0 after round 0: served %v", to)
	}
	// Round 1 on shard 0: learners 1 and 2 push and wait for the next.
	for _, l := range []uint32{1, 2} {
		step(0, MsgPull, l, 1, nil)
		step(0, MsgPush, l, 1, grad(1))
		if to, _ := served(step(0, MsgPull, l, 2, nil)); len(to) != 0 {
			t.Fatalf("learner %d's pull of round 2 answered before learner 0 pushed round 1", l)
		}
	}
	// Shard 1 comes back from the checkpoint, with no active learner (as
	// a restarted shard server's); its pushes from the earlier life are
	// given up.
	cp.Active = make([]bool, 3)
	var err error
	if shards[1], err = Restore(cfg, cp, 2); err != nil {
		t.Fatal(err)
	}
	if c := shards[1].Clock(); c != cp.Clock+1 {
		t.Fatalf("restored clock %d, want %d: the round in progress is closed", c, cp.Clock+1)
	}
	if w := shards[1].Weights()[0]; !sgdNear(w, 1-0.5*3.0/3) {
		t.Fatalf("restored weights %v, want 1 − 0.5·3/3 (learner 0's gradient of c₀ = 3)", w)
	}
	for _, l := range []uint32{1, 2, 0} {
		step(1, MsgJoin, l, 0, nil)
	}
	// Learner 0's resend of its push of round 0, which the checkpoint
	// holds: a duplicate, it places learner 0 after round 0.
	if r := shards[1].Step(Msg{Type: MsgPush, Job: cfg.Job, Shard: 1, Learner: 0, Seq: resent, Clock: 0, Life: 1, Grad: grad(3)}); len(r.Replies) != 0 {
		t.Fatalf("learner 0's resend of round 0: replies %v", r.Replies)
	}
	for _, l := range []uint32{1, 2} {
		// Its life is over: given up, the push still counts as the
		// learner's of round 1 there (claimRounds), as on shard 0.
		step(1, MsgPush, l, 1, grad(1))
		if to, _ := served(step(1, MsgPull, l, 0, nil)); len(to) != 0 {
			t.Fatalf("learner %d's pull of the restored shard: served %v, want none before learner 0 pushed round 1", l, to)
		}
	}
	if to, _ := served(step(1, MsgPull, 0, 0, nil)); !slices.Equal(to, []uint32{0}) {
		t.Fatalf("learner 0's pull of the restored shard: served %v, want learner 0 (the round its checkpoint held is closed)", to)
	}
	life = 2 // learner 0's weights of shard 1 come from the restored shard
	if to, stamps := served(step(1, MsgPush, 0, 1, grad(1))); !slices.Equal(to, []uint32{1, 2}) || !slices.Equal(stamps, []uint64{2, 2}) {
		t.Fatalf("learner 0's push of round 1 to the restored shard: served %v at %v, want learners 1 and 2 at clock 2", to, stamps)
	}
	life = 1
	if to, _ := served(step(0, MsgPush, 0, 1, grad(1))); !slices.Equal(to, []uint32{1, 2}) {
		t.Fatalf("learner 0's push of round 1 to shard 0: served %v, want learners 1 and 2", to)
	}
	if st := shards[1].Stats(); st.StaleLife != 2 || st.Duplicates != 1 {
		t.Fatalf("restored shard gave up %d pushes and ignored %d duplicates, want 2 and 1", st.StaleLife, st.Duplicates)
	}
}

// TestHardsyncRestoredRoundsKeepPairs: a hardsync shard restored from a
// checkpoint pairs the learners' pushes in its rounds as the shards that
// kept their rounds do, though some learners' pushes of the rounds it
// lost were acknowledged and others were not. Three learners, two
// shards; shard 1 is checkpointed at clock 0, then every learner pushes
// round 0 to both. Learner 2 receives shard 1's weights of round 1 and
// pushes round 1; the server of shard 1 dies before learners 0 and 1
// receive theirs. Shard 1 comes back from its checkpoint (clock 0, a new
// life, no learner active), and each learner joins again and resends
// what shard 1 never acknowledged: learners 0 and 1 their pushes of
// round 0, learner 2 its push of round 1, all of the earlier life and
// given up. Learners 0 and 1 push their next step on the restored
// weights, which shard 0 takes in its round 1 with learner 2's push of
// round 1: the restored shard must take it in the same round as
// learner 2's given-up push, so its round 0 ends empty, and learner 2's
// pull waits for its round 1 as on shard 0. Counted from the restored
// clock instead, learner 2's push of round 1 would count for nothing,
// learner 2 would push its next step into the round of the others'
// step before it, and a second such shift on another shard makes the
// learners wait for each other's rounds for ever.
func TestHardsyncRestoredRoundsKeepPairs(t *testing.T) {
	cfg := plainConfig(3, Hardsync, 0)
	cfg.Shards = 2
	init := slices.Repeat([]float32{1}, 32) // two shards of 16
	var a, b *Shard
	var err error
	if a, err = NewShard(cfg, 0, init, 1); err != nil {
		t.Fatal(err)
	}
	if b, err = NewShard(cfg, 1, init, 1); err != nil {
		t.Fatal(err)
	}
	cp := b.Checkpoint()
	seq := map[uint32]uint64{}
	grad := slices.Repeat([]float32{1}, 16)
	msg := func(s *Shard, typ MsgType, l uint32, clock, life uint64) Msg {
		seq[l]++
		m := Msg{Type: typ, Job: cfg.Job, Shard: s.Index(), Learner: l, Seq: seq[l], Clock: clock, Life: life}
		if typ == MsgPush {
			m.Grad = grad
		}
		return m
	}
	step := func(s *Shard, typ MsgType, l uint32, clock, life uint64) Ready {
		return s.Step(msg(s, typ, l, clock, life))
	}
	for l := range uint32(3) {
		step(a, MsgPull, l, 0, 0)
		step(b, MsgPull, l, 0, 0)
	}
	unacked := map[uint32]Msg{} // each learner's push shard 1's earlier life never acknowledged
	for l := range uint32(3) {
		step(a, MsgPush, l, 0, 1)
		unacked[l] = msg(b, MsgPush, l, 0, 1)
		b.Step(unacked[l])
	}
	for l := range uint32(3) {
		if to, _ := served(step(a, MsgPull, l, 1, 0)); !slices.Equal(to, []uint32{l}) {
			t.Fatalf("learner %d's pull of shard 0's round 1: served %v", l, to)
		}
	}
	if to, _ := served(step(b, MsgPull, 2, 1, 0)); !slices.Equal(to, []uint32{2}) {
		t.Fatalf("learner 2's pull of shard 1's round 1: served %v", to)
	}
	step(a, MsgPush, 2, 1, 1)
	unacked[2] = msg(b, MsgPush, 2, 1, 1)
	b.Step(unacked[2])

	cp.Active = make([]bool, 3)
	if b, err = Restore(cfg, cp, 2); err != nil {
		t.Fatal(err)
	}
	rejoin := func(l uint32) Ready {
		step(b, MsgJoin, l, 0, 0)
		b.Step(unacked[l])
		return step(b, MsgPull, l, 0, 0) // its connection was replaced: no minimum clock
	}
	for _, l := range []uint32{0, 1} {
		if to, stamps := served(rejoin(l)); !slices.Equal(to, []uint32{l}) || !slices.Equal(stamps, []uint64{1}) {
			t.Fatalf("learner %d's pull of the restored shard: served %v at %v, want learner %d at clock 1 (round 0 was pushed in the earlier life)", l, to, stamps, l)
		}
	}
	if to, _ := served(rejoin(2)); len(to) != 0 {
		t.Fatalf("learner 2's pull of the restored shard: served %v, want none before learners 0 and 1 push round 1", to)
	}
	for _, l := range []uint32{0, 1} {
		step(a, MsgPush, l, 1, 1)
		r := step(b, MsgPush, l, 1, 2)
		if to, stamps := served(r); l == 1 && (!slices.Equal(to, []uint32{2}) || !slices.Equal(stamps, []uint64{2})) {
			t.Fatalf("learner 1's push of round 1 to the restored shard: served %v at %v, want learner 2 at clock 2", to, stamps)
		}
	}
	st := b.Stats()
	if st.Clock != 2 || st.EmptyRounds != 1 || st.Updates != 1 || st.Gradients != 2 || st.StaleLife != 3 {
		t.Fatalf("restored shard: clock %d, %d empty rounds, %d updates of %d gradients, %d pushes given up; want 2, 1, 1, 2, 3",
			st.Clock, st.EmptyRounds, st.Updates, st.Gradients, st.StaleLife)
	}
	if a.Clock() != 2 {
		t.Fatalf("shard 0 at clock %d, want 2", a.Clock())
	}
}

// TestPullKeepsWeights: a pull never changes the weights, in place or
// by moving them, under either protocol, whether it is answered at once
// or waits (the shard's goroutine lends the weights across it).
func TestPullKeepsWeights(t *testing.T) {
	for _, proto := range []Protocol{Softsync, Hardsync} {
		h := newHarness(t, plainConfig(2, proto, 1), []float32{1, 2})
		h.push(0, 0, []float32{2, 2}) // a pending gradient or an open round
		before := h.s.Weights()
		want := slices.Clone(before)
		for l := range uint32(2) {
			h.pull(l, 1)
			if w := h.s.Weights(); &w[0] != &before[0] || !slices.Equal(w, want) {
				t.Errorf("%v: weights after learner %d's pull: %v (same array: %v), want %v in place", proto, l, w, &w[0] == &before[0], want)
			}
		}
	}
}

// TestMove: after Move the shard steps the new array; the array a reply
// carried before stays as it was.
func TestMove(t *testing.T) {
	h := newHarness(t, plainConfig(1, Softsync, 1), []float32{1, 2})
	r := h.pull(0, 0)
	if len(r.Replies) != 1 || r.Replies[0].Weights == nil {
		t.Fatalf("pull: %+v", r)
	}
	lent := r.Replies[0].Weights
	to := make([]float32, 2)
	h.s.Move(to)
	h.push(0, 0, []float32{2, 2})
	if w := h.s.Weights(); &w[0] != &to[0] || w[0] != 0 || w[1] != 1 {
		t.Errorf("weights after Move and a push: %v (the array moved to: %v), want [0 1] in it", w, &w[0] == &to[0])
	}
	if lent[0] != 1 || lent[1] != 2 {
		t.Errorf("the reply's weights changed to %v, want [1 2]", lent)
	}
}
