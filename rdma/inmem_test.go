package rdma

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestInmemDialClosingListener: a dial that finds the listener and puts
// its connection in the backlog as the listener closes (after Close
// emptied the backlog) is refused or reset, never left connected to
// nobody: the dialer's Recv fails instead of waiting for ever.
func TestInmemDialClosingListener(t *testing.T) {
	n, err := NewInmem(Options{Job: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 { // enqueue's select picks the backlog or the close at random
		ln, err := n.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		l := ln.(*inmemListener)
		l.Close()
		a, b := newInmemConn(n.opts, "inmem-client:x", l.addr), newInmemConn(n.opts, l.addr, "inmem-client:x")
		a.peer, b.peer = b, a
		c, err := l.enqueue(context.Background(), a, b)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("dial %d: %v, want refused", i, err)
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = c.Recv(ctx)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("dial %d to a closed listener connected: Recv %v, want the connection closed", i, err)
		}
		c.Close()
	}
}
