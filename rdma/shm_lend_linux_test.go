package rdma_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// lentFrame is the size of a frame whose payload is lent: its reference
// takes the payload's place in the ring.
const lentFrame = rdma.HeaderSize + 16 + rdma.TrailerSize

// TestShmLent: a payload of the network's NewMsg, or memory lent from
// one (a learner's gradient), travels as a reference: the ring carries
// 72 bytes, Send waits until the receiver has copied the payload (so the
// lender may overwrite it as soon as Send returns), and the received
// message is the receiver's own memory; a held one (BorrowHeld) is not
// waited for. A payload from elsewhere, or a small one, goes through the
// ring and Send does not wait.
func TestShmLent(t *testing.T) {
	n := newShm(t, rdma.Options{})
	c, s := shmPair(t, n)
	const elems = 1 << 18

	t.Run("borrowed", func(t *testing.T) {
		g := n.NewMsg(elems)
		defer g.Release()
		if !rdma.ShmInLend(g.Payload) {
			t.Fatal("a 1 MiB message of NewMsg is not in the lend segment")
		}
		for i := range g.Payload {
			g.Payload[i] = float32(i)
		}
		want := slices.Clone(g.Payload)
		m := rdma.NewMsg(0)
		m.Borrow(g.Payload)
		m.Seq = 7
		done := transporttest.WhenBlocked(t, "Send", func() error {
			err := c.Send(recvCtx(t), m)
			for i := range g.Payload { // the lender's next gradient
				g.Payload[i] = -1
			}
			return err
		})
		if unread, _ := rdma.ShmUnread(s); unread != lentFrame {
			t.Fatalf("%d bytes in the ring, want %d: the reference only", unread, lentFrame)
		}
		got := mustRecvExt(t, s)
		if err := transporttest.Receive(t, done, 20*time.Second, "the lent Send"); err != nil {
			t.Fatal(err)
		}
		if got.Seq != 7 || !slices.Equal(got.Payload, want) {
			t.Fatalf("received seq %d, payload differs from the lent one at %d", got.Seq, firstDiff(got.Payload, want))
		}
		if rdma.ShmInLend(got.Payload) {
			t.Fatal("the received payload lies in the lend segment")
		}
		got.Release()
	})

	t.Run("held", func(t *testing.T) {
		// BorrowHeld: Send returns with the frame unread; the lender
		// keeps the payload until an answer, which the receiver sends
		// after it has read (copied) it.
		g := n.NewMsg(elems)
		defer g.Release()
		for i := range g.Payload {
			g.Payload[i] = float32(i)
		}
		want := slices.Clone(g.Payload)
		m := rdma.NewMsg(0)
		m.BorrowHeld(g.Payload)
		ctx, cancel := context.WithTimeout(recvCtx(t), 20*time.Second)
		defer cancel()
		if err := c.Send(ctx, m); err != nil {
			t.Fatalf("held Send with nobody reading: %v", err)
		}
		if unread, _ := rdma.ShmUnread(s); unread != lentFrame {
			t.Fatalf("%d bytes in the ring, want %d: the reference only", unread, lentFrame)
		}
		got := mustRecvExt(t, s)
		if err := s.Send(recvCtx(t), rdma.NewMsg(1)); err != nil { // the answer
			t.Fatal(err)
		}
		mustRecvExt(t, c).Release()
		for i := range g.Payload { // the lender's next gradient
			g.Payload[i] = -1
		}
		if !slices.Equal(got.Payload, want) {
			t.Fatalf("payload differs from the lent one at %d", firstDiff(got.Payload, want))
		}
		got.Release()

		// Closed before an answer, the lender may have changed it: the
		// receiver drops the frame.
		c2, s2 := shmPair(t, n)
		m = rdma.NewMsg(0)
		m.BorrowHeld(g.Payload)
		if err := c2.Send(recvCtx(t), m); err != nil {
			t.Fatal(err)
		}
		c2.Close()
		if _, err := s2.Recv(recvCtx(t)); !errors.Is(err, rdma.ErrTruncated) {
			t.Fatalf("recv of a held lent frame whose sender closed: %v, want a truncated frame", err)
		}
	})

	t.Run("own", func(t *testing.T) {
		for round := range 3 { // the extent is recycled
			m := n.NewMsg(elems)
			for i := range m.Payload {
				m.Payload[i] = float32(round*elems + i)
			}
			want := slices.Clone(m.Payload)
			done := transporttest.WhenBlocked(t, "Send", func() error { return c.Send(recvCtx(t), m) })
			got := mustRecvExt(t, s)
			if err := transporttest.Receive(t, done, 20*time.Second, "the lent Send"); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Payload, want) {
				t.Fatalf("round %d: payload differs at %d", round, firstDiff(got.Payload, want))
			}
			got.Release()
		}
	})

	t.Run("both ways at once", func(t *testing.T) {
		a, b := n.NewMsg(elems), n.NewMsg(elems)
		for i := range a.Payload {
			a.Payload[i], b.Payload[i] = 1, 2
		}
		errs := make(chan error, 2)
		go func() { errs <- c.Send(recvCtx(t), a) }()
		go func() { errs <- s.Send(recvCtx(t), b) }()
		ga, gb := mustRecvExt(t, s), mustRecvExt(t, c)
		for range 2 {
			if err := transporttest.Receive(t, errs, 20*time.Second, "the lent Sends"); err != nil {
				t.Fatal(err)
			}
		}
		if ga.Payload[elems-1] != 1 || gb.Payload[elems-1] != 2 {
			t.Fatalf("received %v and %v", ga.Payload[elems-1], gb.Payload[elems-1])
		}
		ga.Release()
		gb.Release()
	})

	t.Run("heap and small payloads use the ring", func(t *testing.T) {
		small := n.NewMsg(1000)
		if rdma.ShmInLend(small.Payload) {
			t.Fatal("a 4 KB message of NewMsg is in the lend segment")
		}
		small.Release()
		m := rdma.NewMsg(elems)
		if err := c.Send(recvCtx(t), m); err != nil { // returns: the ring holds it
			t.Fatal(err)
		}
		if unread, _ := rdma.ShmUnread(s); unread != lentFrame-16+4*elems {
			t.Fatalf("%d bytes in the ring, want the whole frame", unread)
		}
		mustRecvExt(t, s).Release()
	})
}

// TestShmLentGiveUp: a lent Send that stops waiting (cancelled, or its
// connection closed) fails for good, and the receiver, which may be
// copying the payload while the lender overwrites it, drops the frame as
// truncated instead of delivering it.
func TestShmLentGiveUp(t *testing.T) {
	n := newShm(t, rdma.Options{})
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			c, s := shmPair(t, n)
			m := n.NewMsg(1 << 18)
			ctx, cancel := context.WithCancel(recvCtx(t))
			defer cancel()
			done := transporttest.WhenBlocked(t, "Send", func() error { return c.Send(ctx, m) })
			if how == "cancel" {
				cancel()
			} else {
				c.Close()
			}
			err := transporttest.Receive(t, done, 20*time.Second, "the lent Send")
			if how == "cancel" && (!errors.Is(err, context.Canceled) || rdma.Recoverable(err)) {
				t.Fatalf("cancelled lent Send: %v, want a fatal context.Canceled", err)
			}
			if how == "close" && !errors.Is(err, rdma.ErrClosed) {
				t.Fatalf("lent Send on a closed connection: %v", err)
			}
			if _, err := s.Recv(recvCtx(t)); !errors.Is(err, rdma.ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("recv of a lent frame its sender gave up: %v, want a truncated frame", err)
			}
			if err := c.Send(recvCtx(t), rdma.NewMsg(10)); err == nil {
				t.Fatal("send after a lent Send gave up succeeded")
			}
		})
	}
}

// TestShmLentPeerKilled: a process killed while its lent Send waits has
// published the whole frame, and its lend segment stays mapped on this
// end: the frame arrives whole. A lent Send to a process that is killed
// before it reads returns ErrClosed.
func TestShmLentPeerKilled(t *testing.T) {
	n := newShm(t, rdma.Options{})
	ln, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Run("sender killed", func(t *testing.T) {
		cmd, c := child(t, ln, "lent")
		kill(t, cmd)
		m, err := c.Recv(recvCtx(t))
		if err != nil {
			t.Fatalf("the lent frame of a killed sender: %v", err)
		}
		if len(m.Payload) != rdma.ShmChildLentElems || m.Payload[0] != 5 || m.Payload[len(m.Payload)-1] != 5 {
			t.Fatalf("received %d elements", len(m.Payload))
		}
		m.Release()
		if _, err := c.Recv(recvCtx(t)); !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("recv after the frame: %v", err)
		}
	})
	t.Run("receiver killed", func(t *testing.T) {
		cmd, c := child(t, ln, "frames")
		done := transporttest.WhenBlocked(t, "Send", func() error { return c.Send(context.Background(), n.NewMsg(1<<18)) })
		kill(t, cmd)
		if err := transporttest.Receive(t, done, time.Minute, "the lent Send to a killed peer"); !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("lent Send to a killed peer: %v", err)
		}
	})
}

func mustRecvExt(t *testing.T, c rdma.Conn) *rdma.Msg {
	t.Helper()
	m, err := c.Recv(recvCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func firstDiff(a, b []float32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
