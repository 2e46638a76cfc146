package ps

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

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
			seq, err := c.core.nextSeq()
			if err != nil {
				return out, err
			}
			out = append(out, seq)
		}
		return out, nil
	}
	c.core.n = math.MaxUint32 - 1
	s, err := seqs(3)
	if err != nil || !(s[0] < s[1] && s[1] < s[2]) || Incarnation(s[2]) != 3 || s[2] != Seq(3, 1<<32+1) {
		t.Fatalf("sequences %#x across 2^32 messages (%v)", s, err)
	}
	c.core.n = MaxMessages - 1
	if s, err := seqs(2); !errors.Is(err, ErrSeqExhausted) || len(s) != 1 || Incarnation(s[0]) != 3 || s[0] != Seq(3, MaxMessages) {
		t.Fatalf("the last sequences of a life: %#x, %v; want one, then ErrSeqExhausted", s, err)
	}
	cfg.Incarnation = MaxIncarnation + 1
	if _, err := NewClient(cfg, []rdma.Conn{nil}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("incarnation %d: %v", cfg.Incarnation, err)
	}
}

// TestPushBatchOnTheWire: a push's mini-batch id travels in its data, so
// that the shard ignores a second gradient of the mini-batch from another
// learner; a push whose data has another length is a bad frame, answered
// with an error and counted, and never stepped.
func TestPushBatchOnTheWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net, addr := network(t, "inmem", 23)
	g, err := StartGroup(ctx, GroupConfig{PS: softConfig(23, 2), Init: make([]float32, 16), Network: net, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	w, grad := make([]float32, 16), slices.Repeat([]float32{1}, 16)
	for l := range uint32(2) {
		c, err := g.Dial(ctx, net, l, rdma.Codec{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, grad, 9); err != nil {
			t.Fatal(err)
		}
		if err := c.Pull(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := net.Dial(ctx, g.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	m := wireMsg(rdma.NewMsg, MsgPush, 1, 0, Seq(0, 99), 1, 16)
	m.Data = append(m.Data, 1, 2, 3)
	if err := raw.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	rep, err := raw.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Type != rdma.TypeError || rep.Seq != Seq(0, 99) || !strings.Contains(string(rep.Data), errBadPushData.Error()) {
		t.Fatalf("a push with 3 bytes of data: type %d seq %#x %q", rep.Type, rep.Seq, rep.Data)
	}
	rep.Release()
	shards, st := g.Stats()
	if sh := shards[0]; sh.Gradients != 1 || sh.Redone != 1 || st.BadFrames != 1 || w[0] != -0.5 {
		t.Fatalf("shard %+v, server %+v, w[0] = %g: want 1 gradient, 1 redone, 1 bad frame", sh, st, w[0])
	}
}
