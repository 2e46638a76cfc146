package ps

import (
	"math"
	"testing"

	"github.com/softsync/softsync/ps/sgd"
)

// FuzzShardStep feeds arbitrary message sequences (any type, learner,
// sequence, stamp, job, gradient length, NaN, finite gradients near the
// float32 maximum, mini-batch ids that repeat, pushes of an earlier life
// of the shard) to a shard and checks that
// it never panics, answers at most one error per Step, keeps its weights
// and momentum finite, consumes each mini-batch id at most once, and
// accounts for every push and every clock tick exactly once.
func FuzzShardStep(f *testing.F) {
	f.Add([]byte{1, 3, 2, 0, 1, 0, 0, 1, 1, 0, 0, 1, 2, 1, 0, 2})
	f.Add([]byte{0, 2, 1, 0, 1, 0, 0, 0, 1, 1, 1, 0, 2, 0, 3, 5, 1, 1, 9, 0})
	f.Add([]byte{1, 0, 0, 0, 1, 0x80, 1, 0, 1, 0x80, 1, 0, 1, 0x80, 1, 0, 1, 0x80, 1, 0, 1, 0, 1, 0})
	f.Add([]byte{1, 2, 0, 0, 2, 0, 1, 0, 2, 1, 1, 0, 0x71, 0, 1, 0, 0x41, 1, 1, 0, 2, 2, 1, 0, 0x61, 2, 1, 0, 1, 2, 1, 0})
	f.Fuzz(fuzzShard)
}

func fuzzShard(t *testing.T, data []byte) {
	{
		if len(data) < 4 {
			return
		}
		learners := 1 + int(data[1]%6)
		cfg := Config{Job: 1, Learners: learners, Protocol: Protocol(data[0] % 2), N: 1 + int(data[2])%learners,
			Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.1, Momentum: 0.5, LRMode: sgd.LRMode(data[3] % 3)}}
		if cfg.Protocol == Softsync {
			cfg.MaxStaleness = int(data[3]/3) % 4
		}
		s, err := NewShard(cfg, 0, []float32{1, 2, 3}, 1)
		if err != nil {
			t.Fatal(err)
		}
		var pushes, pushRejects uint64
		seq := make([]uint64, learners+1)
		consumed := map[uint64]bool{}
		for data = data[4:]; len(data) >= 4; data = data[4:] {
			m := Msg{Type: MsgType(data[0] % 6), Job: 1, Learner: uint32(data[1] % uint8(learners+1)), Grad: []float32{0.5, -1, 2}}
			if data[1]&0x80 != 0 {
				m.Grad = []float32{1.5e38, -3e38, 1e38}
			}
			l := m.Learner % uint32(learners+1)
			seq[l] += uint64(data[2]%4) - 1 // sometimes repeats or goes back
			m.Seq = seq[l]
			m.Clock = s.Clock() - min(s.Clock(), uint64(data[3]%8)) + uint64(data[3]/128)
			m.Batch = uint64(data[3]>>3) & 7
			if data[0]&0x40 != 0 { // computed on weights of an earlier life (under hardsync: a claim)
				m.Life, m.Clock = 2, m.Clock+uint64(data[0]>>4&3)
			}
			switch data[2] / 64 {
			case 1:
				m.Grad[1] = float32(math.Inf(1))
			case 2:
				m.Grad = m.Grad[:2]
			case 3:
				m.Job = 2
			}
			before := s.Stats()
			r := s.Step(m)
			if after := s.Stats(); after.Gradients+after.Dropped > before.Gradients+before.Dropped && m.Batch != 0 {
				if consumed[m.Batch] {
					t.Fatalf("mini-batch %d consumed twice", m.Batch)
				}
				consumed[m.Batch] = true
			}
			errs := 0
			for _, rep := range r.Replies {
				if rep.Err != nil {
					errs++
					if rep.To != m.Learner {
						t.Fatalf("error for learner %d answers a message of %d", rep.To, m.Learner)
					}
				}
			}
			if errs > 1 {
				t.Fatalf("%d errors for one message", errs)
			}
			if m.Type == MsgPush {
				pushes++
				pushRejects += uint64(errs)
			}
			if v := s.Checkpoint().Solver.Momentum; sgd.FirstNonFinite(s.Weights()) >= 0 || sgd.FirstNonFinite(v) >= 0 {
				t.Fatalf("weights became %v, momentum %v", s.Weights(), v)
			}
		}
		st := s.Stats()
		if st.Gradients+st.Dropped+st.Duplicates+st.Redone+st.StaleLife+pushRejects != pushes || st.Clock != st.Updates+st.Refused+st.EmptyRounds {
			t.Fatalf("pushes %d: accepted %d dropped %d duplicates %d redone %d given up %d rejected %d; clock %d updates %d refused %d empty %d",
				pushes, st.Gradients, st.Dropped, st.Duplicates, st.Redone, st.StaleLife, pushRejects, st.Clock, st.Updates, st.Refused, st.EmptyRounds)
		}
		if cfg.MaxStaleness > 0 && st.MaxStaleness > cfg.MaxStaleness {
			t.Fatalf("accepted staleness %d > bound %d", st.MaxStaleness, cfg.MaxStaleness)
		}
	}
}
