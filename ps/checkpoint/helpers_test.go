package checkpoint

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
)

// job drives the shards of one small parameter server with seeded random
// pushes, the way learners would: each push sends every shard its slice
// of one flat gradient, stamped with that shard's clock a little behind.
type job struct {
	t      testing.TB
	cfg    ps.Config
	total  int
	shards []*ps.Shard
	pcg    *rand.PCG
	rng    *rand.Rand
	seq    []uint64
	left   []bool
	batch  uint64 // the last mini-batch id pushed
}

func testConfig(learners, shards int) ps.Config {
	return ps.Config{Job: 5, Learners: learners, Protocol: ps.Softsync, N: 1, Shards: shards, Batch: 4, DataSize: 40,
		Solver: sgd.Config{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3, LRSteps: []int{3}, LRGamma: 0.5, LRMode: sgd.LRStaleness}}
}

func newJob(t testing.TB, cfg ps.Config, total int, seed uint64) *job {
	t.Helper()
	j := &job{t: t, cfg: cfg, total: total, pcg: rand.NewPCG(seed, 1), seq: make([]uint64, cfg.Learners), left: make([]bool, cfg.Learners)}
	j.rng = rand.New(j.pcg)
	init := make([]float32, total)
	for i := range init {
		init[i] = float32(j.rng.NormFloat64())
	}
	for k := range cfg.Shards {
		s, err := ps.NewShard(cfg, k, init, 1)
		if err != nil {
			t.Fatal(err)
		}
		j.shards = append(j.shards, s)
	}
	return j
}

// push sends one gradient of learner l to every shard, of a new
// mini-batch (ids skip some, leaving gaps) or, one time in eight, of the
// last one again (redone).
func (j *job) push(l uint32) {
	j.t.Helper()
	g := make([]float32, j.total)
	for i := range g {
		g[i] = float32(j.rng.NormFloat64())
	}
	j.seq[l]++
	back := uint64(j.rng.IntN(3))
	if j.rng.IntN(8) > 0 || j.batch == 0 {
		j.batch += 1 + uint64(j.rng.IntN(4)/3)
	}
	for _, s := range j.shards {
		r := s.Range()
		stamp := s.Clock() - min(s.Clock(), back)
		rd := s.Step(ps.Msg{Type: ps.MsgPush, Job: j.cfg.Job, Shard: s.Index(), Learner: l, Seq: j.seq[l], Clock: stamp, Batch: j.batch, Grad: g[r.Lo:r.Hi]})
		for _, rep := range rd.Replies {
			if rep.Err != nil {
				j.t.Fatal(rep.Err)
			}
		}
	}
}

// run makes n pushes from random active learners.
func (j *job) run(n int) {
	for n > 0 {
		if l := j.rng.IntN(j.cfg.Learners); !j.left[l] {
			j.push(uint32(l))
			n--
		}
	}
}

// follow makes j's gradients and sequences from here on those of o.
func (j *job) follow(o *job) {
	pcg := *o.pcg
	j.pcg, j.rng = &pcg, rand.New(&pcg)
	j.seq, j.left, j.batch = append([]uint64(nil), o.seq...), append([]bool(nil), o.left...), o.batch
}

// member sends every shard a join or leave of learner l.
func (j *job) member(t ps.MsgType, l uint32) {
	j.seq[l]++
	j.left[l] = t == ps.MsgLeave
	for _, s := range j.shards {
		s.Step(ps.Msg{Type: t, Job: j.cfg.Job, Shard: s.Index(), Learner: l, Seq: j.seq[l]})
	}
}

// files returns the shard file state of every shard, with per-learner
// incarnations and evictions derived from seed.
func (j *job) files() []*Shard {
	var out []*Shard
	for _, s := range j.shards {
		sh := &Shard{Checkpoint: *s.Checkpoint(), Shards: j.cfg.Shards}
		for l := range j.cfg.Learners {
			sh.Incarnations = append(sh.Incarnations, uint32(l%3))
			sh.Evicted = append(sh.Evicted, l == 1)
		}
		out = append(out, sh)
	}
	return out
}

// flat concatenates the weights and momentum of shards in index order.
func flat(shards []*Shard) (w, m []float32) {
	for _, s := range shards {
		w = append(w, s.Weights...)
		m = append(m, s.Solver.Momentum...)
	}
	return w, m
}

// sameBits reports whether a and b hold the same float32 bit patterns.
func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
