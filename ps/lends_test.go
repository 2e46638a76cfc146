package ps

import (
	"context"
	"testing"
	"time"
)

func testPeer() *peer { return &peer{exited: make(chan struct{})} }

// fired returns a timeout that has fired.
func fired() <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

// settled runs settle with no timeout and reports whether it returned
// true within a deadline.
func settled(t *testing.T, l *lends) bool {
	t.Helper()
	done := make(chan bool, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- l.settle(ctx, nil) }()
	select {
	case ok := <-done:
		return ok
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		return false
	}
}

// TestLendsSettle: a lend is settled by its writer's token, one per
// reply (two replies to one peer need two), or by its writer's end, and
// not otherwise.
func TestLendsSettle(t *testing.T) {
	a, b := testPeer(), testPeer()
	l := newLends(2)
	l.add(a)
	l.add(a)
	l.add(b)
	l.tokens <- a
	l.tokens <- b
	if l.settle(context.Background(), fired()) {
		t.Fatal("settled with one of a's two replies still out")
	}
	if len(l.out) != 1 || l.out[0] != a {
		t.Fatalf("outstanding after the timeout: %d replies, want a's one", len(l.out))
	}
	l.tokens <- a
	if !settled(t, l) || len(l.out) != 0 {
		t.Fatalf("not settled after a's second token: %d replies out", len(l.out))
	}

	// A writer that ended sent its tokens before; the replies it never
	// took have none to come.
	l.add(a)
	l.add(b)
	l.add(b)
	l.tokens <- b
	close(b.exited)
	if l.settle(context.Background(), fired()) {
		t.Fatal("settled while a's reply is out")
	}
	if len(l.out) != 1 || l.out[0] != a || len(l.tokens) != 0 {
		t.Fatalf("after b's writer ended: %d replies out, %d tokens left; want a's reply, no token", len(l.out), len(l.tokens))
	}
	close(a.exited)
	if !settled(t, l) {
		t.Fatal("not settled once a's writer ended")
	}
}

// TestLendsRetire: retire releases the array once the last reply reading
// it is done, whether by a token or by its writer's end, and not before.
func TestLendsRetire(t *testing.T) {
	a, b := testPeer(), testPeer()
	l := newLends(2)
	l.add(a)
	l.add(b)
	released := make(chan struct{})
	go l.retire(func() { close(released) })
	l.tokens <- a
	select {
	case <-released:
		t.Fatal("released while b's reply is out")
	case <-time.After(20 * time.Millisecond):
	}
	close(b.exited)
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("not released after b's writer ended")
	}
}

// TestLendsFull: a tracker is full once it holds as many replies as it
// has room for tokens.
func TestLendsFull(t *testing.T) {
	l := newLends(1)
	for range cap(l.tokens) {
		if l.full() {
			t.Fatalf("full at %d replies", len(l.out))
		}
		l.add(testPeer())
	}
	if !l.full() {
		t.Fatalf("not full at %d replies, room for %d tokens", len(l.out), cap(l.tokens))
	}
}
