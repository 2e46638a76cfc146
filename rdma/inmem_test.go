package rdma

import (
	"context"
	"errors"
	"testing"
)

// A dial whose listener closes while the dial puts its connection into the
// backlog is refused, and the connection closed: were it left in the
// backlog of the closed listener, nothing would accept or close it, and
// its dialer would wait for an answer for ever (a shard server killed as
// a learner dials it: the learner's join never ended). Dial looks the
// listener up, then enqueues; the listener here closes in between. With
// the listener's done closed and a free slot in its backlog, a select
// picks either at random: 64 tries show a lost connection all but
// surely.
func TestInmemDialRacingCloseIsRefused(t *testing.T) {
	n, err := NewInmem(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		ln, err := n.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		l := ln.(*inmemListener)
		ln.Close()
		a, b := newInmemConn(n.opts, "client", l.addr), newInmemConn(n.opts, l.addr, "client")
		a.peer, b.peer = b, a
		err = l.enqueue(context.Background(), b)
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("try %d: a dial racing the listener's close: %v, want %v", i, err, ErrRefused)
		}
		if len(l.conns) != 0 && !b.closed.Load() {
			t.Fatalf("try %d: the refused connection is left open in the closed listener's backlog", i)
		}
	}
}

// A connection dialled and accepted before the listener closes stays
// open; one dialled and not accepted is closed by the close.
func TestInmemCloseClosesTheBacklogOnly(t *testing.T) {
	n, err := NewInmem(Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c1, err := n.Dial(ctx, ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	s1, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := n.Dial(ctx, ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := c2.Recv(ctx); err == nil {
		t.Fatal("a connection left in the backlog of a closed listener received a message")
	}
	if _, err := n.Dial(ctx, ln.Addr()); !errors.Is(err, ErrRefused) {
		t.Fatalf("dial of a closed listener: %v, want %v", err, ErrRefused)
	}
	m := NewMsg(0)
	m.Type = 1
	if err := s1.Send(ctx, m); err != nil {
		t.Fatalf("an accepted connection after its listener closed: %v", err)
	}
	if r, err := c1.Recv(ctx); err != nil || r.Type != 1 {
		t.Fatalf("an accepted connection after its listener closed: %v, %v", r, err)
	}
	c1.Close()
	s1.Close()
	c2.Close()
}
