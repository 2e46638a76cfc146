//go:build linux

package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// shmConns connects two ends of a shm network with rings of ring bytes.
func shmConns(t *testing.T, opts Options, ring int) (client, server *shmConn) {
	t.Helper()
	n, err := NewShm(opts)
	if err != nil {
		t.Skipf("no shared-memory transport: %v", err)
	}
	n.ring = ring
	c, s, err := vpair(t, n, n)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*shmConn), s.(*shmConn)
}

// TestShmHostileIndices: ring indices the peer writes out of range — a
// tail past the ring or gone back, a head past the tail or gone back —
// fail the direction that reads them with ErrProtocol, for good, and
// touch nothing outside the ring.
func TestShmHostileIndices(t *testing.T) {
	const ring = 64 << 10
	for _, tc := range []struct {
		name string
		// poke writes, as the peer p of the end under test, a bad index
		// into the ring the end reads (recv) or writes.
		poke func(p *shmConn)
		recv bool
	}{
		{"tail past the ring", func(p *shmConn) { p.tx.ring.tail.Store(p.tx.tail + ring + 1) }, true},
		{"tail far ahead", func(p *shmConn) { p.tx.ring.tail.Store(p.tx.tail + 1<<62) }, true},
		{"tail gone back", func(p *shmConn) { p.tx.ring.tail.Store(p.tx.tail - 1) }, true},
		{"head past the tail", func(p *shmConn) { p.rx.ring.head.Store(p.rx.head + ring) }, false},
		{"head gone back", func(p *shmConn) { p.rx.ring.head.Store(p.rx.head - 1) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := shmConns(t, Options{}, ring)
			// One message each way first, so that every index is past 0.
			for _, p := range [][2]*shmConn{{c, s}, {s, c}} {
				if err := p[0].Send(testCtx(t), fill(NewMsg(1000), 1)); err != nil {
					t.Fatal(err)
				}
				mustRecv(t, p[1]).Release()
				p[0].tx.room() // the writer sees the head move past the message
			}
			var err error
			if tc.recv { // s reads what c writes
				tc.poke(c)
				_, err = s.Recv(testCtx(t))
			} else { // c writes what s reads; a frame larger than the ring reads the head
				tc.poke(s)
				err = c.Send(testCtx(t), NewMsg(ring))
			}
			if !errors.Is(err, ErrProtocol) || Recoverable(err) {
				t.Fatalf("%v, want a fatal ErrProtocol", err)
			}
			if tc.recv {
				_, err = s.Recv(testCtx(t))
			} else {
				err = c.Send(testCtx(t), NewMsg(1))
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("after a bad index: %v, want ErrProtocol again", err)
			}
		})
	}
}

// TestAutoShm: auto networks on one host connect over shm, with or
// without a secret, say so on both ends, keep the TCP addresses, and
// carry messages both ways.
func TestAutoShm(t *testing.T) {
	key := []byte("an auto secret of thirty-two by.")
	for _, opts := range []Options{{}, {Job: 3, Secret: key}} {
		a, _ := NewAuto(opts)
		b, _ := NewAuto(opts)
		if a.shm == nil {
			t.Skip("no shared-memory transport here")
		}
		c, s, err := vpair(t, a, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, end := range []Conn{c, s} {
			ti := end.Transport()
			if ti.Name != "shm" || !strings.Contains(ti.Reason, "same host") || !strings.Contains(ti.Reason, "@softsync-auto/") {
				t.Fatalf("transport %+v, want shm on the same host", ti)
			}
			if _, _, err := net.SplitHostPort(end.RemoteAddr()); err != nil {
				t.Fatalf("remote address %q is not the TCP peer's", end.RemoteAddr())
			}
		}
		for i, p := range [][2]Conn{{c, s}, {s, c}} {
			if err := p[0].Send(testCtx(t), fill(NewMsg(100_000), i)); err != nil {
				t.Fatal(err)
			}
			m := mustRecv(t, p[1])
			if m.Seq != uint64(i) || len(m.Payload) != 100_000 || m.Job != opts.Job {
				t.Fatalf("got seq %d, %d elements, job %d", m.Seq, len(m.Payload), m.Job)
			}
			m.Release()
		}
	}
}

// TestAutoShmOtherNamespace: a dialer whose unix sockets live in another
// network namespace, as on another host, cannot reach the listener's
// abstract socket: both ends stay on TCP and say why.
func TestAutoShmOtherNamespace(t *testing.T) {
	if err := inNewNetns(func() error { return nil }); err != nil {
		t.Skipf("cannot make a network namespace here: %v", err)
	}
	a, _ := NewAuto(Options{})
	b, _ := NewAuto(Options{})
	if a.shm == nil {
		t.Skip("no shared-memory transport here")
	}
	a.shm.dialUnix = func(_ context.Context, name string) (nc net.Conn, err error) {
		if nerr := inNewNetns(func() error {
			nc, err = net.Dial("unix", name)
			return nil
		}); nerr != nil {
			return nil, nerr
		}
		return nc, err
	}
	c, s := checkFallback(t, a, b, "shm: local: unix socket @softsync-auto/", "shm: peer: unix socket @softsync-auto/")
	for _, end := range []Conn{c, s} {
		if why := end.Transport().Reason; !strings.Contains(why, "another host or network namespace") {
			t.Fatalf("reason %q does not say why shm was not used", why)
		}
	}
}

// inNewNetns runs f on a thread of its own in a new network namespace;
// the thread ends with it.
func inNewNetns(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread, in its namespace, ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	return <-done
}

// TestShmHostileLent: references a peer writes for a lent payload that
// lie outside its lend segment (beyond its size, or wrapping around),
// that disagree with the header's length, or that come from a peer that
// gave no lend segment, fail the receiving direction with ErrProtocol,
// for good, and read nothing outside the segment.
func TestShmHostileLent(t *testing.T) {
	const elems = 1 << 16
	for _, tc := range []struct {
		name     string
		off, n   uint64
		noPeer   bool // the receiver has no lend segment of the peer's
		wantText string
	}{
		{"beyond the segment", shmLendSpan - 4096, 4 * elems, false, "outside"},
		{"beyond its size", shmLendSpan/2 - 4*elems, 4 * elems, false, "beyond the peer's lend segment"},
		{"wrapping around", 1<<64 - 16, 4 * elems, false, "outside"},
		{"length", 0, 4*elems - 4, false, "the header says"},
		{"no lend segment", 0, 4 * elems, true, "gave no lend segment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := shmConns(t, Options{}, 1<<20)
			if tc.noPeer {
				s.peerLend.close()
				s.peerLend = nil
			}
			h := Header{Flags: FlagNoPayloadCRC | flagLent, Elems: elems, PayloadLen: 4 * elems}
			var frame [HeaderSize + shmRefSize + TrailerSize]byte
			PutHeader(frame[:], &h)
			binary.LittleEndian.PutUint64(frame[HeaderSize:], tc.off)
			binary.LittleEndian.PutUint64(frame[HeaderSize+8:], tc.n)
			c.tx.copyIn(frame[:])
			c.tx.publish()
			for range 2 {
				_, err := s.Recv(testCtx(t))
				if !errors.Is(err, ErrProtocol) || Recoverable(err) || !strings.Contains(err.Error(), tc.wantText) {
					t.Fatalf("%v, want a fatal ErrProtocol saying %q", err, tc.wantText)
				}
			}
		})
	}
}

// TestShmWakeAt: an end that stores its index (a tail, a head) clears
// the other end's sleep word, and so wakes it, only once the index has
// reached the sleeper's "wakes at" word, modulo 2⁶⁴.
func TestShmWakeAt(t *testing.T) {
	const r = 4096
	for _, base := range []uint64{0, 1<<64 - 100} {
		seg := make([]byte, shmSegSize(r))
		ring := ringOf(seg, r, 0)
		ring.tail.Store(base)
		ring.head.Store(base)
		w := ringWriter{ring: ring, tail: base, head: base}
		rd := ringReader{ring: ring, head: base, tail: base}

		// The consumer sleeps until 300 bytes are readable.
		ring.cwake.Store(base + 300)
		ring.csleep.Store(1)
		w.copyIn(make([]byte, 200))
		if w.publish() || ring.csleep.Load() != 1 {
			t.Fatalf("base %d: the consumer was woken with 200 of the 300 bytes it waits for", base)
		}
		w.copyIn(make([]byte, 100))
		if !w.publish() || ring.csleep.Load() != 0 {
			t.Fatalf("base %d: 300 bytes published and the consumer not woken", base)
		}
		w.copyIn(make([]byte, 1))
		if w.publish() {
			t.Fatalf("base %d: a consumer that does not sleep was woken", base)
		}

		// The producer sleeps until the ring is empty: the head at the tail.
		if _, err := rd.poll(); err != nil {
			t.Fatal(err)
		}
		ring.pwake.Store(w.tail)
		ring.psleep.Store(1)
		rd.discard(150)
		if rd.release() || ring.psleep.Load() != 1 {
			t.Fatalf("base %d: the producer was woken with 150 of 301 bytes freed", base)
		}
		rd.discard(rd.readable())
		if !rd.release() || ring.psleep.Load() != 0 {
			t.Fatalf("base %d: the ring is empty and the producer not woken", base)
		}
	}
}

// TestShmWakeOnce: a reader that sleeps until a frame's remaining bytes
// are in the ring is woken once, when the last piece is published, not
// for every piece; a writer waiting for room likewise.
func TestShmWakeOnce(t *testing.T) {
	const ring, want = 1 << 20, 600 << 10 // pieces of 128 KiB
	c, s := shmConns(t, Options{}, ring)
	ctx := testCtx(t)
	// sleeping starts w waiting for want bytes (room) and returns once
	// it sleeps, with where the bytes it woke with arrive.
	sleeping := func(what string, w *shmWaiter) chan uint64 {
		t.Helper()
		got := make(chan uint64, 1)
		go func() {
			n, err := w.wait(ctx, 1, want)
			if err != nil {
				t.Error(err)
			}
			got <- n
		}()
		for deadline := time.Now().Add(20 * time.Second); w.sleep.Load() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never went to sleep", what)
			}
		}
		return got
	}
	waited := func(ch chan uint64, what string) uint64 {
		t.Helper()
		select {
		case n := <-ch:
			return n
		case <-time.After(20 * time.Second):
			t.Fatalf("%s still waits", what)
			return 0
		}
	}

	// Bytes written: s waits for want bytes.
	got := sleeping("the reader", &s.rdata)
	var crc uint32
	if err := c.write(ctx, make([]byte, 512<<10), false, &crc); err != nil {
		t.Fatal(err)
	}
	c.publishTx()
	if n := c.wakes.Load(); n != 0 {
		t.Fatalf("%d wake-ups for 512 KiB of the %d bytes the reader waits for", n, want)
	}
	if err := c.write(ctx, make([]byte, want-512<<10), false, &crc); err != nil {
		t.Fatal(err)
	}
	c.publishTx()
	if n := waited(got, "the reader"); n < want {
		t.Fatalf("the reader woke with %d bytes, want %d", n, want)
	}
	if n := c.wakes.Load(); n != 1 {
		t.Fatalf("%d wake-ups for one wait, want 1", n)
	}

	// Room freed: the ring is full, c waits for room for want bytes.
	if err := c.write(ctx, make([]byte, ring-want), false, &crc); err != nil {
		t.Fatal(err)
	}
	c.publishTx()
	got = sleeping("the writer", &c.wroom)
	if _, err := s.rx.poll(); err != nil {
		t.Fatal(err)
	}
	for freed := 0; freed < 512<<10; freed += 128 << 10 {
		s.rx.discard(128 << 10)
		s.unrel += 128 << 10
		s.releaseRx()
	}
	if n := s.wakes.Load(); n != 0 {
		t.Fatalf("%d wake-ups for 512 KiB of the %d bytes of room the writer waits for", n, want)
	}
	s.rx.discard(want - 512<<10)
	s.unrel += want - 512<<10
	s.releaseRx()
	if n := waited(got, "the writer"); n < want {
		t.Fatalf("the writer woke with room for %d bytes, want %d", n, want)
	}
	if n := s.wakes.Load(); n != 1 {
		t.Fatalf("%d wake-ups for one wait, want 1", n)
	}
}
