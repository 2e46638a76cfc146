package ps

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
)

// reversedPieces is a runner that runs each piece on its own, last first,
// on the calling goroutine.
func reversedPieces(n int, body func(lo, hi int)) {
	for k := n - 1; k >= 0; k-- {
		body(k, k+1)
	}
}

// parTotal is a vector whose second shard's range is long enough for the
// solver and the gradient check to spread their passes, and is not a
// multiple of a kernel block.
const parTotal = 2*(1<<18+3<<16) + 11

// parShards returns shard 1 of cfg over init three times: serial, with
// sgd.Spread(3) and with reversedPieces.
func parShards(t *testing.T, cfg Config, init []float32) []*Shard {
	t.Helper()
	var ss []*Shard
	for _, p := range []sgd.Parallel{nil, sgd.Spread(3), reversedPieces} {
		s, err := NewShard(cfg, 1, init, 1)
		if err != nil {
			t.Fatal(err)
		}
		s.SetParallel(p)
		ss = append(ss, s)
	}
	return ss
}

// stepAll steps each shard of ss with m and fails unless their weights,
// momentum, clocks and replies agree with the first's, bit for bit; it
// returns the first's Ready.
func stepAll(t *testing.T, ss []*Shard, m Msg) Ready {
	t.Helper()
	var first Ready
	for i, s := range ss {
		r := s.Step(m)
		if i == 0 {
			first = Ready{Replies: slices.Clone(r.Replies), Updates: slices.Clone(r.Updates)}
			continue
		}
		same := len(r.Replies) == len(first.Replies) && len(r.Updates) == len(first.Updates) && s.Clock() == ss[0].Clock() &&
			sameBits(s.Weights(), ss[0].Weights()) && sameBits(s.Checkpoint().Solver.Momentum, ss[0].Checkpoint().Solver.Momentum)
		for k := range r.Replies {
			same = same && fmt.Sprint(r.Replies[k].Err) == fmt.Sprint(first.Replies[k].Err) && r.Replies[k].Clock == first.Replies[k].Clock
		}
		if !same {
			t.Fatalf("%v of learner %d (seq %d): parallel shard %d differs from the serial one", m.Type, m.Learner, m.Seq, i)
		}
	}
	return first
}

// sameBits reports whether a and b hold the same float32 bit patterns.
func sameBits(a, b []float32) bool {
	bs := func(v []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)) }
	return len(a) == len(b) && bytes.Equal(bs(a), bs(b))
}

// TestShardParallel drives a serial shard and shards with parallel
// runners with the same pulls and pushes, under hardsync and softsync
// (with a rule that compares gradients with the pulled weights too): the
// weights, the momentum and every reply agree bit for bit throughout.
func TestShardParallel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proto Protocol
		rule  string
	}{{"hardsync", Hardsync, "staleness"}, {"softsync", Softsync, "staleness"}, {"softsync-dc", Softsync, "dc:0.5"}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Job: 7, Learners: 3, Protocol: tc.proto, N: 2, Shards: 2, Batch: 4,
				Solver: sgd.Config{LR: 0.01, Momentum: 0.9, WeightDecay: 0.004}}
			if err := cfg.Solver.ParseRule(tc.rule); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(31, 32))
			ss := parShards(t, cfg, randVec(r, parTotal))
			n := ss[0].Range().Len()
			grads := randVec(r, n+64) // push k sends grads[7k:][:n]
			seq := make([]uint64, cfg.Learners)
			stamp := make([]uint64, cfg.Learners)
			msg := func(typ MsgType, l int, clock uint64, g []float32) Msg {
				seq[l]++
				return Msg{Type: typ, Job: 7, Shard: 1, Learner: uint32(l), Seq: seq[l], Clock: clock, Grad: g}
			}
			// do steps m and notes the stamp of every weights reply: a
			// hardsync pull is answered when its round ends.
			do := func(m Msg) {
				for _, rep := range stepAll(t, ss, m).Replies {
					if rep.Err != nil {
						t.Fatalf("%v refused: %v", m.Type, rep.Err)
					}
					if rep.Weights != nil {
						stamp[rep.To] = rep.Clock
					}
				}
			}
			for l := range cfg.Learners {
				do(msg(MsgPull, l, 0, nil))
			}
			for k := range 9 {
				l := k % cfg.Learners
				do(msg(MsgPush, l, stamp[l], grads[7*k:][:n]))
				do(msg(MsgPull, l, 0, nil))
			}
			if ss[0].Clock() < 3 {
				t.Fatalf("%d updates, want at least 3", ss[0].Clock())
			}
		})
	}
}

// TestShardParallelNonFinite pushes gradients with a NaN or an infinity
// in a late piece of the shard's range (and a second one after it) to
// shards with and without parallel runners: each refuses the push naming
// the first element that is not finite.
func TestShardParallelNonFinite(t *testing.T) {
	cfg := plainConfig(2, Softsync, 2)
	cfg.Shards = 2
	r := rand.New(rand.NewPCG(33, 34))
	ss := parShards(t, cfg, randVec(r, parTotal))
	lo, n := ss[0].Range().Lo, ss[0].Range().Len()
	for i, at := range []int{n - 1, n - 1<<16 + 5, 1 << 18} {
		g := randVec(r, n)
		g[at] = [2]float32{float32(math.NaN()), float32(math.Inf(-1))}[i%2]
		if at+1 < n {
			g[at+1] = float32(math.Inf(1))
		}
		rd := stepAll(t, ss, Msg{Type: MsgPush, Job: 7, Shard: 1, Learner: 0, Seq: uint64(i + 1), Grad: g})
		want := fmt.Sprintf("element %d (flat index %d)", at, lo+at)
		if len(rd.Replies) != 1 || !errors.Is(rd.Replies[0].Err, ErrNonFinite) || !strings.Contains(rd.Replies[0].Err.Error(), want) {
			t.Fatalf("gradient with %g at %d: replies %+v, want ErrNonFinite naming %s", g[at], at, rd.Replies, want)
		}
	}
}

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// TestServerUpdateThreads runs one learner (its gradients, and so the
// weights, do not depend on timing) through servers of one and of two
// shards, with and without UpdateThreads: the final weights are the same
// bits. A negative UpdateThreads is refused, naming the field.
func TestServerUpdateThreads(t *testing.T) {
	const total = 1<<19 + 5
	init := randVec(rand.New(rand.NewPCG(35, 36)), total)
	grad := func(_, s int, w, g []float32) {
		for k := range g {
			g[k] = 0.5*w[k] + float32(s+1)*1e-3*float32(k%7-3)
		}
	}
	for _, proto := range []Protocol{Hardsync, Softsync} {
		for _, shards := range []int{1, 2} {
			cfg := Config{Job: 5, Learners: 1, Protocol: proto, N: 1, Shards: shards, Batch: 2,
				Solver: sgd.Config{LR: 0.1, Momentum: 0.9, WeightDecay: 0.004}}
			serial, _ := clusterOpts(t, "inmem", cfg, init, 4, grad, clusterOptions{})
			spread, _ := clusterOpts(t, "inmem", cfg, init, 4, grad, clusterOptions{updateThreads: 3})
			if !sameBits(serial, spread) || sameBits(serial, init) {
				t.Fatalf("%v, %d shards: the weights with UpdateThreads 3 differ from the serial ones (or training did not move them)", proto, shards)
			}
		}
	}
	_, err := NewServer(ServerConfig{PS: plainConfig(1, Hardsync, 0), Init: []float32{1}, UpdateThreads: -1})
	var fe *param.FieldError
	if !errors.As(err, &fe) || fe.Field != "UpdateThreads" || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("UpdateThreads −1: %v", err)
	}
}
