package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
)

func baseConfig(learners int, proto ps.Protocol, n int) Config {
	return Config{
		PS: ps.Config{Learners: learners, Protocol: proto, N: n, Shards: 2, Batch: 4,
			Solver: sgd.Config{LR: 0.1, Momentum: 0.9}},
		Init:    make([]float32, 64),
		Steps:   200,
		Compute: Dist{Kind: Uniform, Mean: 1, Spread: 0.2},
		Latency: 0.01,
	}
}

// jitters are the compute-time models of the staleness tests: ±20%
// uniform, and log-normal with a 15% coefficient of variation, the jitter of
// a homogeneous cluster.
var jitters = []Dist{{Kind: Uniform, Mean: 1, Spread: 0.2}, {Kind: LogNormal, Mean: 1, Spread: 0.15}}

// TestSoftsyncStaleness checks the paper's measured staleness for λ = 16:
// n-softsync has mean staleness within 15% of n and maximum ≤ 2n+2, on every
// shard, for several seeds and both jitter models; hardsync has τ = 0.
func TestSoftsyncStaleness(t *testing.T) {
	for _, n := range []int{1, 4, 16} {
		for _, d := range jitters {
			for seed := uint64(1); seed <= 4; seed++ {
				cfg := baseConfig(16, ps.Softsync, n)
				cfg.Compute, cfg.Seed = d, seed
				// Every update combines exactly c₀ = ⌊λ/n⌋ gradients,
				// however many learners are still active (they leave
				// after their last push), but the last, applied when
				// the last learner leaves, which may hold fewer.
				active := []int{16, 16}
				c0 := 16 / n
				cfg.Observe = func(k int, in ps.Msg, out ps.Ready) {
					if in.Type == ps.MsgLeave {
						active[k]--
					}
					for _, u := range out.Updates {
						if u.Gradients != c0 && (active[k] > 0 || u.Gradients > c0) {
							t.Fatalf("n=%d shard %d: update %d combined %d gradients with %d learners active, want %d", n, k, u.Clock, u.Gradients, active[k], c0)
						}
					}
				}
				res, err := Run(cfg)
				if err != nil {
					t.Fatal(err)
				}
				for k, st := range res.Shards {
					mean := st.MeanStaleness()
					if math.Abs(mean-float64(n)) > 0.15*float64(n) || st.MaxStaleness > 2*n+2 {
						t.Errorf("n=%d %+v seed %d shard %d: mean %.3f max %d, want mean within 15%% of %d and max ≤ %d; histogram %v",
							n, d, seed, k, mean, st.MaxStaleness, n, 2*n+2, st.Histogram)
					}
					if want := uint64(16 * 200); st.Gradients != want || st.Dropped != 0 {
						t.Errorf("n=%d shard %d: %d gradients accepted, %d dropped, want %d and 0", n, k, st.Gradients, st.Dropped, want)
					}
				}
			}
		}
	}
}

func TestHardsyncStalenessZero(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		cfg := baseConfig(16, ps.Hardsync, 0)
		cfg.Compute, cfg.Seed = jitters[seed%2], seed
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for k, st := range res.Shards {
			if !slices.Equal(st.Histogram, []uint64{16 * 200}) || st.Updates != 200 || st.Dropped != 0 {
				t.Errorf("seed %d shard %d: histogram %v, %d updates, %d dropped; want all 3200 at τ=0 in 200 updates",
					seed, k, st.Histogram, st.Updates, st.Dropped)
			}
		}
	}
}

// stalenessOracle re-derives, from the messages and outputs alone, what the
// bounded-staleness rules promise, independently of the core's own state.
type stalenessOracle struct {
	t         *testing.T
	bound     int
	clock     []uint64   // per shard, from the updates seen
	computing [][]bool   // [shard][learner]: answered a pull, no push/pull/leave since
	holds     [][]uint64 // [shard][learner]: stamp of the last weights received
	drops     []uint64   // per shard, gradients with τ > bound
	pushes    []uint64   // per shard
}

func newOracle(t *testing.T, shards, learners, bound int) *stalenessOracle {
	o := &stalenessOracle{t: t, bound: bound, clock: make([]uint64, shards), drops: make([]uint64, shards), pushes: make([]uint64, shards)}
	for range shards {
		o.computing = append(o.computing, make([]bool, learners))
		o.holds = append(o.holds, make([]uint64, learners))
	}
	return o
}

func (o *stalenessOracle) observe(k int, in ps.Msg, out ps.Ready) {
	if in.Type == ps.MsgPush {
		o.pushes[k]++
		if int(o.clock[k]-in.Clock) > o.bound {
			o.drops[k]++
		}
	}
	o.computing[k][in.Learner] = false
	for _, u := range out.Updates {
		if u.MaxStaleness > o.bound {
			o.t.Errorf("shard %d applied a gradient of staleness %d > bound %d", k, u.MaxStaleness, o.bound)
		}
		o.clock[k] = u.Clock
	}
	for _, r := range out.Replies {
		if r.Ack {
			continue // a leave's: no weights
		}
		if r.Clock != o.clock[k] {
			o.t.Errorf("shard %d answered with stamp %d at clock %d", k, r.Clock, o.clock[k])
		}
		o.computing[k][r.To], o.holds[k][r.To] = true, r.Clock
	}
	if k != 0 {
		return // only shard 0 gates pulls
	}
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for l, c := range o.computing[k] {
		if c {
			lo, hi = min(lo, o.holds[k][l]), max(hi, o.holds[k][l])
		}
	}
	if lo <= hi && hi-lo > uint64(o.bound) {
		o.t.Errorf("shard %d: computing learners hold stamps %d…%d, more than %d apart", k, lo, hi, o.bound)
	}
}

// TestBoundedStalenessProperties runs random configurations (learners,
// n, bound S, shards, compute and network jitter, one straggler) and
// checks, for every seed: the run finishes (no deadlock, also when network
// jitter lets the shards' clocks diverge); no applied gradient has τ > S;
// learners computing on shard 0's weights never hold stamps more than S
// apart; exactly the pushes with τ > S are dropped; every push is either
// applied or dropped. It also checks that the bound matters: the same runs
// without it exceed S.
func TestBoundedStalenessProperties(t *testing.T) {
	const seeds = 100
	exceeded := 0
	for seed := range uint64(seeds) {
		r := rand.New(rand.NewPCG(seed, 99))
		learners := 2 + r.IntN(15)
		cfg := baseConfig(learners, ps.Softsync, 1+r.IntN(learners))
		cfg.PS.MaxStaleness = 1 + r.IntN(4)
		cfg.PS.Shards = 1 + r.IntN(3)
		cfg.Steps = 40
		cfg.Seed = seed
		cfg.Compute = Dist{Kind: LogNormal, Mean: 1, Spread: 0.5 * r.Float64()}
		cfg.Speed = make([]float64, learners)
		for i := range cfg.Speed {
			cfg.Speed[i] = 1
		}
		cfg.Speed[r.IntN(learners)] = 1 + 3*r.Float64()
		cfg.Latency = 0.05 * r.Float64()
		cfg.Jitter = r.Float64() * r.Float64()
		name := fmt.Sprintf("seed %d λ=%d n=%d S=%d shards=%d", seed, learners, cfg.PS.N, cfg.PS.MaxStaleness, cfg.PS.Shards)

		o := newOracle(t, cfg.PS.Shards, learners, cfg.PS.MaxStaleness)
		cfg.Observe = o.observe
		res, err := Run(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for k, st := range res.Shards {
			if st.MaxStaleness > cfg.PS.MaxStaleness || st.Dropped != o.drops[k] ||
				st.Gradients+st.Dropped != uint64(learners*cfg.Steps) || o.pushes[k] != uint64(learners*cfg.Steps) {
				t.Errorf("%s shard %d: max τ %d, dropped %d (oracle %d), accepted %d, pushes %d",
					name, k, st.MaxStaleness, st.Dropped, o.drops[k], st.Gradients, o.pushes[k])
			}
		}

		cfg.PS.MaxStaleness, cfg.Observe = 0, nil
		free, err := Run(cfg)
		if err != nil {
			t.Fatalf("%s unbounded: %v", name, err)
		}
		if free.Shards[0].MaxStaleness > o.bound {
			exceeded++
		}
	}
	if exceeded < seeds/2 {
		t.Errorf("only %d of %d unbounded runs exceed the bound: the property test does not exercise it", exceeded, seeds)
	}
}

// TestEndOfJobKeepsC runs λ = 30 learners of speeds spread over 1× to 3×,
// so that they finish at very different times, and checks that the end of
// the job does not change the update rule: every update combines c₀ =
// ⌊λ/n⌋ gradients, however many learners are left, but the last one of
// each shard, applied when the last learner leaves, which may hold fewer
// (a partial update at a rate scaled by c/c₀). Learners have either a
// fixed share of the steps each or the job's budget to share, in which case
// faster learners take more steps and every step of the budget is pushed.
func TestEndOfJobKeepsC(t *testing.T) {
	const learners, per = 30, 40
	speed := make([]float64, learners)
	for i := range speed {
		speed[i] = 1 + 2*float64(i)/(learners-1)
	}
	for _, n := range []int{1, 10, 30} {
		for _, budget := range []bool{false, true} {
			cfg := baseConfig(learners, ps.Softsync, n)
			cfg.Speed, cfg.Compute, cfg.Seed = speed, jitters[1], uint64(n)
			if budget {
				cfg.Steps, cfg.TotalSteps = 0, learners*per+7
			} else {
				cfg.Steps = per
			}
			c0 := learners / n
			active := []int{learners, learners}
			var last [2]int // gradients of each shard's last update
			cfg.Observe = func(k int, in ps.Msg, out ps.Ready) {
				if in.Type == ps.MsgLeave {
					active[k]--
				}
				for _, u := range out.Updates {
					if last[k] != 0 && last[k] != c0 {
						t.Fatalf("n=%d budget=%v shard %d: a partial update of %d gradients before the end", n, budget, k, last[k])
					}
					last[k] = u.Gradients
					if u.Gradients > c0 || (u.Gradients < c0 && active[k] > 0) {
						t.Fatalf("n=%d budget=%v shard %d: update %d combined %d gradients with %d learners active, want c₀ = %d",
							n, budget, k, u.Clock, u.Gradients, active[k], c0)
					}
				}
			}
			res, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			total := learners * per
			if budget {
				total = cfg.TotalSteps
				if res.Steps[0] <= res.Steps[learners-1] {
					t.Errorf("n=%d: the fastest learner took %d steps, the slowest %d", n, res.Steps[0], res.Steps[learners-1])
				}
			}
			for k, st := range res.Shards {
				want := uint64((total + c0 - 1) / c0)
				if st.Gradients != uint64(total) || st.Updates != want || st.Partial != min(1, uint64(total%c0)) {
					t.Errorf("n=%d budget=%v shard %d: %d gradients, %d updates (%d partial), want %d, %d, %d",
						n, budget, k, st.Gradients, st.Updates, st.Partial, total, want, min(1, total%c0))
				}
			}
		}
	}
}

// TestDeterministic checks that a run depends only on its Config: the same
// seed gives bit-identical weights, stats and time; another seed does not.
func TestDeterministic(t *testing.T) {
	run := func(seed uint64) *Result {
		cfg := baseConfig(8, ps.Softsync, 4)
		cfg.Steps, cfg.Seed, cfg.Compute = 50, seed, jitters[1]
		cfg.Gradient = func(learner, step int, w, grad []float32) {
			for i := range grad {
				grad[i] = 0.01*w[i] + float32(learner-step%3)*1e-3
			}
		}
		cfg.Init[3] = 1
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b, c := run(7), run(7), run(8)
	if !slices.Equal(a.Weights, b.Weights) || a.Time != b.Time || !slices.Equal(a.Shards[1].Histogram, b.Shards[1].Histogram) {
		t.Fatal("two runs with the same seed differ")
	}
	if a.Time == c.Time || slices.Equal(a.Weights, c.Weights) {
		t.Fatal("runs with different seeds are identical")
	}
}

func TestConfigErrors(t *testing.T) {
	for field, mut := range map[string]func(*Config){
		"Init":       func(c *Config) { c.Init = nil },
		"Steps":      func(c *Config) { c.Steps = 0 },
		"TotalSteps": func(c *Config) { c.TotalSteps = 10 },
		"Compute":    func(c *Config) { c.Compute.Spread = 1 },
		"Speed":      func(c *Config) { c.Speed = []float64{1} },
		"Speed[1]":   func(c *Config) { c.Speed = []float64{1, 0, 1, 1} },
		"Latency":    func(c *Config) { c.Latency = math.NaN() },
		"Jitter":     func(c *Config) { c.Jitter = -1 },
		"N":          func(c *Config) { c.PS.N = 5 },
		"Solver.LR":  func(c *Config) { c.PS.Solver.LR = -1 },
	} {
		cfg := baseConfig(4, ps.Softsync, 2)
		mut(&cfg)
		_, err := Run(cfg)
		var fe *param.FieldError
		if !errors.Is(err, ps.ErrInvalidConfig) || !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
}

// TestRunDiverges: with a rate at which every update would overflow, the
// shards refuse every update, keep their initial weights, and the run ends
// at the first push a shard rejects as diverged.
func TestRunDiverges(t *testing.T) {
	for _, proto := range []ps.Protocol{ps.Hardsync, ps.Softsync} {
		cfg := baseConfig(4, proto, 2)
		cfg.PS.Solver.LR = 1e39 // a float32 rate of +Inf
		cfg.Gradient = func(_, _ int, _, grad []float32) {
			for i := range grad {
				grad[i] = 1
			}
		}
		res, err := Run(cfg)
		if !errors.Is(err, ps.ErrDiverged) || res == nil {
			t.Fatalf("%v: %v, want ps.ErrDiverged and the result so far", proto, err)
		}
		if !slices.Equal(res.Weights, cfg.Init) {
			t.Fatalf("%v: weights moved: %v", proto, res.Weights)
		}
		diverged := false
		for k, st := range res.Shards {
			if st.Updates != 0 || st.Refused < ps.RefusedLimit-1 || st.Refused > ps.RefusedLimit {
				t.Fatalf("%v: shard %d: %d updates applied, %d refused", proto, k, st.Updates, st.Refused)
			}
			diverged = diverged || st.Rejected.Diverged == 1
		}
		if !diverged {
			t.Fatalf("%v: no shard rejected a push as diverged: %+v", proto, res.Shards)
		}
	}
}

// TestMiniBatchIDs: the simulated learners push each mini-batch of the
// job once, with its id (its place in the job's budget, 1 … TotalSteps, or
// one id per learner and step with Steps), and the lives of the weights
// they pulled: no push is redone or given up, and each shard consumes
// every id once.
func TestMiniBatchIDs(t *testing.T) {
	for _, total := range []int{0, 90} {
		for _, proto := range []ps.Protocol{ps.Softsync, ps.Hardsync} {
			cfg := baseConfig(4, proto, 2)
			cfg.Jitter, cfg.Seed = 0.3, 7
			if total > 0 {
				cfg.Steps, cfg.TotalSteps = 0, total
			} else {
				cfg.Steps = 20
			}
			ids := []map[uint64]int{{}, {}}
			lives := []map[uint64]bool{{}, {}}
			cfg.Observe = func(k int, in ps.Msg, out ps.Ready) {
				if in.Type == ps.MsgPush {
					ids[k][in.Batch]++
					lives[k][in.Life] = true
				}
			}
			res, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := max(total, 4*20)
			for k, sh := range res.Shards {
				if len(ids[k]) != want || len(lives[k]) != 1 || lives[k][0] || sh.Redone != 0 || sh.StaleLife != 0 {
					t.Fatalf("%v, %d total: shard %d: %d ids for %d mini-batches, lives %v, %+v", proto, total, k, len(ids[k]), want, lives[k], sh)
				}
				for id, n := range ids[k] {
					if id == 0 || n != 1 || (total > 0 && id > uint64(total)) {
						t.Fatalf("%v, %d total: shard %d: mini-batch %d pushed %d times", proto, total, k, id, n)
					}
				}
			}
		}
	}
}
