package ps

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// BenchmarkShardPush measures one shard on one core: every op is one push
// through Step (validation, life and mini-batch checks, finite check,
// accumulation, and the fused update every c pushes), for LeNet's 431,080
// parameters with momentum and decay; each push is of a new mini-batch,
// as in a job. Bytes are gradient bytes; the gbps metric is 1e9 bytes/s, the
// unit of the 2 GB/s goal. memmove of the same bytes is the reference.
func BenchmarkShardPush(b *testing.B) {
	const n, learners = 431080, 8
	init := make([]float32, n)
	grad := normalGrad(n, 1)
	for _, tc := range []struct {
		proto Protocol
		n     int
	}{{Softsync, learners}, {Softsync, 2}, {Hardsync, 0}} {
		name := fmt.Sprintf("%v/c=%d", tc.proto, max(1, learners/max(tc.n, 1)))
		if tc.proto == Hardsync {
			name = fmt.Sprintf("hardsync/c=%d", learners)
		}
		b.Run(name, func(b *testing.B) {
			cfg := Config{Learners: learners, Protocol: tc.proto, N: tc.n, Shards: 1, Batch: 4,
				Solver: sgd.Config{LR: 0.01, Momentum: 0.9, WeightDecay: 0.004, LRMode: sgd.LRStaleness}}
			s, err := NewShard(cfg, 0, init, 1)
			if err != nil {
				b.Fatal(err)
			}
			m := Msg{Type: MsgPush, Grad: grad, Life: s.Life()}
			i := 0
			for ; i < learners; i++ { // one round first: allocates the accumulator
				m.Learner, m.Seq, m.Clock, m.Batch = uint32(i%learners), uint64(i+1), s.Clock(), uint64(i+1)
				s.Step(m)
			}
			b.SetBytes(4 * n)
			b.ReportAllocs()
			for b.Loop() {
				m.Learner, m.Seq, m.Clock, m.Batch = uint32(i%learners), uint64(i+1), s.Clock(), uint64(i+1)
				if r := s.Step(m); len(r.Replies) != 0 {
					b.Fatal(r.Replies[0].Err)
				}
				i++
			}
			if st := s.Stats(); st.Gradients != uint64(i) || st.Redone+st.Duplicates+st.StaleLife != 0 {
				b.Fatalf("%d pushes, stats %+v", i, st)
			}
			b.ReportMetric(float64(b.N)*4*n/b.Elapsed().Seconds()/1e9, "gbps")
		})
	}
	b.Run("memmove", func(b *testing.B) {
		dst := make([]float32, n)
		b.SetBytes(4 * n)
		for b.Loop() {
			copy(dst, grad)
		}
		b.ReportMetric(float64(b.N)*4*n/b.Elapsed().Seconds()/1e9, "gbps")
	})
}

// BenchmarkServerRoundTrip measures the runtime end to end: one learner
// (client) does Pull then Push of LeNet's 431,080 parameters against
// the shards of one or two servers over the transport, each op one
// push+pull round trip; gbps counts gradient plus weights bytes (2·4·n
// per op), the unit of `softsync bench transport`. Steady state
// allocates nothing: allocs/op is 0 on every transport, with one server
// or two (whose answers the client receives at once, see receivers).
func BenchmarkServerRoundTrip(b *testing.B) {
	const n = 431080
	for _, kind := range []string{"inmem", "tcp", "shm"} {
		for _, sv := range [][2]int{{1, 1}, {2, 1}, {2, 2}} {
			shards, servers := sv[0], sv[1]
			b.Run(fmt.Sprintf("%s/shards=%d/servers=%d", kind, shards, servers), func(b *testing.B) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				cfg := Config{Job: 1, Learners: 1, Protocol: Softsync, N: 1, Shards: shards, Batch: 1,
					Solver: sgd.Config{LR: 0.01, Momentum: 0.9}}
				net, addr := network(b, kind, 1)
				grp, err := StartGroup(ctx, GroupConfig{PS: cfg, Init: make([]float32, n), Network: net, Addr: addr, Servers: servers})
				if err != nil {
					b.Fatal(err)
				}
				grp.Finish() // final once the learner leaves
				c, err := grp.Dial(ctx, net, 0, rdma.Codec{})
				if err != nil {
					b.Fatal(err)
				}
				w, g := make([]float32, n), make([]float32, n)
				round := func() {
					if err := c.Pull(ctx, w); err != nil {
						b.Fatal(err)
					}
					if err := c.Push(ctx, g, 0); err != nil {
						b.Fatal(err)
					}
				}
				for range 5 { // warm up: pools, queues and buffers reach their sizes
					round()
				}
				b.SetBytes(2 * 4 * n)
				b.ReportAllocs()
				for b.Loop() {
					round()
				}
				b.ReportMetric(float64(b.N)*2*4*n/b.Elapsed().Seconds()/1e9, "gbps")
				c.Leave(ctx)
				if err := grp.Wait(); err != nil {
					b.Fatal(err)
				}
				c.Close()
			})
		}
	}
}

// BenchmarkShardRules measures one shard on one core under each
// staleness rule: every op is one learner's push of the gradient of its
// previous pull, then its next pull, round robin over λ = 8 learners
// (τ = 7 for every gradient), an update per push (c₀ = 1), for LeNet's
// 431,080 parameters with momentum and decay. The pull keeps a copy of
// the weights for the rules that need it. pulled-MB is the memory of
// those copies (Stats.PulledBytes) at the end.
func BenchmarkShardRules(b *testing.B) {
	const n, learners = 431080, 8
	init := make([]float32, n)
	grad := normalGrad(n, 1e-3)
	for _, rule := range []string{"constant", "staleness", "average", "poly:0.5", "hinge:4,1",
		"staleness/momentum-comp", "dc:0.04", "dc:0.04+staleness", "dc-adaptive:2", "gap"} {
		b.Run(rule, func(b *testing.B) {
			cfg := Config{Learners: learners, Protocol: Softsync, N: learners, Shards: 1, Batch: 4,
				Solver: sgd.Config{LR: 0.01, Momentum: 0.9, WeightDecay: 0.004}}
			spelling, comp := strings.CutSuffix(rule, "/momentum-comp")
			cfg.Solver.MomentumComp = comp
			if err := cfg.Solver.ParseRule(spelling); err != nil {
				b.Fatal(err)
			}
			s, err := NewShard(cfg, 0, init, 1)
			if err != nil {
				b.Fatal(err)
			}
			seq := make([]uint64, learners)
			stamp := make([]uint64, learners)
			pull := func(l int) {
				seq[l]++
				rd := s.Step(Msg{Type: MsgPull, Learner: uint32(l), Seq: seq[l], Clock: stamp[l]})
				if len(rd.Replies) != 1 || rd.Replies[0].Err != nil {
					b.Fatalf("pull of %d: %+v", l, rd.Replies)
				}
				stamp[l] = rd.Replies[0].Clock
			}
			m := Msg{Type: MsgPush, Grad: grad, Life: s.Life()}
			step := func(i int) {
				l := i % learners
				seq[l]++
				m.Learner, m.Seq, m.Clock, m.Batch = uint32(l), seq[l], stamp[l], uint64(i+1)
				if rd := s.Step(m); len(rd.Replies) != 0 {
					b.Fatal(rd.Replies[0].Err)
				}
				pull(l)
			}
			for l := range learners {
				pull(l)
			}
			i := 0
			for ; i < 2*learners; i++ { // allocates the accumulator and the copies
				step(i)
			}
			b.SetBytes(4 * n)
			b.ReportAllocs()
			for b.Loop() {
				step(i)
				i++
			}
			st := s.Stats()
			if st.Gradients != uint64(i) || st.Refused != 0 {
				b.Fatalf("%d pushes, stats %+v", i, st)
			}
			b.ReportMetric(float64(b.N)*4*n/b.Elapsed().Seconds()/1e9, "gbps")
			b.ReportMetric(float64(st.PulledBytes)/1e6, "pulled-MB")
		})
	}
}

// normalGrad returns the benchmarks' gradient of n elements: normal
// draws of seed 1 times scale.
func normalGrad(n int, scale float32) []float32 {
	grad := make([]float32, n)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range grad {
		grad[i] = float32(r.NormFloat64()) * scale
	}
	return grad
}
