package ps

import (
	"errors"
	"math"
	"testing"

	"github.com/softsync/softsync/rdma"
)

// TestClientSeq: the client's message counter goes past 2³² without
// wrapping, its sequences grow and keep their incarnation, and it refuses
// the message after the MaxMessages-th, and an incarnation above
// MaxIncarnation, instead of wrapping either.
func TestClientSeq(t *testing.T) {
	cfg := ClientConfig{Learner: 0, Incarnation: 3, Protocol: Softsync, Total: 4, Shards: 1}
	c, err := NewClient(cfg, []rdma.Conn{nil})
	if err != nil {
		t.Fatal(err)
	}
	seqs := func(k int) (out []uint64, err error) {
		for range k {
			m, err := c.msg(MsgPull, 0, 0)
			if err != nil {
				return out, err
			}
			out = append(out, m.Seq)
			m.Release()
		}
		return out, nil
	}
	c.n.Store(math.MaxUint32 - 1)
	s, err := seqs(3)
	if err != nil || !(s[0] < s[1] && s[1] < s[2]) || Incarnation(s[2]) != 3 || s[2] != Seq(3, 1<<32+1) {
		t.Fatalf("sequences %#x across 2^32 messages (%v)", s, err)
	}
	c.n.Store(MaxMessages - 1)
	if s, err := seqs(2); !errors.Is(err, ErrSeqExhausted) || len(s) != 1 || Incarnation(s[0]) != 3 || s[0] != Seq(3, MaxMessages) {
		t.Fatalf("the last sequences of a life: %#x, %v; want one, then ErrSeqExhausted", s, err)
	}
	cfg.Incarnation = MaxIncarnation + 1
	if _, err := NewClient(cfg, []rdma.Conn{nil}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("incarnation %d: %v", cfg.Incarnation, err)
	}
}
