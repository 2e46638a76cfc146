package main

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/cluster"
)

// TestLogThrottle drives a logThrottle with a clock of its own: the first
// refusal is logged at once, those within the interval are held and come
// out together at its end (flush) with the latest peer, and a refusal
// after an interval without a flush reports the held ones with it.
func TestLogThrottle(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	th := &logThrottle{every: 10 * time.Second}
	errA, errB := errors.New("a"), errors.New("b")
	note := func(s float64, peer string, err error, wantN int, wantArm bool) {
		t.Helper()
		n, flushAt, arm := th.note(at(s), peer, err)
		if n != wantN || arm != wantArm || arm && !flushAt.Equal(th.next) {
			t.Fatalf("note at %vs: %d, arm %v at %v; want %d, arm %v", s, n, arm, flushAt, wantN, wantArm)
		}
	}
	flush := func(s float64, wantN int, wantPeer string, wantErr error) {
		t.Helper()
		n, peer, err := th.flush(at(s))
		if n != wantN || n > 0 && (peer != wantPeer || err != wantErr) {
			t.Fatalf("flush at %vs: %d (%s, %v), want %d (%s, %v)", s, n, peer, err, wantN, wantPeer, wantErr)
		}
	}
	note(0, "p0", errA, 1, false)
	note(1, "p1", errA, 0, true) // the first held: flush at 10 s
	for i := range 98 {
		note(1+float64(i)/100, "p2", errA, 0, false)
	}
	note(9.9, "p3", errB, 0, false)
	flush(10, 100, "p3", errB)
	flush(10.5, 0, "", nil)
	note(11, "p4", errA, 0, true) // within the interval the flush began
	note(25, "p5", errB, 2, false)
	flush(26, 0, "", nil)
	note(36, "p6", errA, 1, false)
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAuthFailuresLogged: a hundred connections that fail authentication
// on a job network's listener are logged as a line with a count per
// authLogEvery, not a line each.
func TestAuthFailuresLogged(t *testing.T) {
	var out lockedBuffer
	app := &App{Log: slog.New(slog.NewTextHandler(&out, nil))}
	n, err := app.jobNetwork(&cluster.Config{Transport: "tcp"}, []byte("0123456789abcdef0123456789abcdef"), false)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := n.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const conns = 100
	start := time.Now()
	for range conns {
		c, err := net.Dial("tcp", ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(bytes.Repeat([]byte{0xee}, 44)) // not a handshake
		c.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	refused := func() uint64 { st := ln.Stats(); return st.AuthFailures + st.Rejected } // some shed under load
	for refused() < conns {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections refused within 20 s", refused(), conns)
		}
		time.Sleep(time.Millisecond)
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "failed authentication") {
			lines = append(lines, l)
		}
	}
	most := 2 + int(time.Since(start)/authLogEvery)
	if len(lines) == 0 || len(lines) > most || !strings.Contains(lines[0], "count=1 ") {
		t.Errorf("%d log lines for %d refused connections, want 1 to %d, the first with count=1:\n%s",
			len(lines), conns, most, strings.Join(lines, "\n"))
	}
}
