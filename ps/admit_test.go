package ps

import (
	"errors"
	"testing"
	"time"

	"github.com/softsync/softsync/ps/sgd"
)

// TestAdmitOncePerConnection checks that a connection's learner messages
// take the server's lock only to bind the learner: once admitted, the
// same incarnation is admitted with the lock held elsewhere; a change of
// the binding (here a restarted learner on another connection) voids the
// record, and the old incarnation is refused.
func TestAdmitOncePerConnection(t *testing.T) {
	cfg := Config{Job: 1, Learners: 2, Protocol: Softsync, N: 2, Shards: 1, Batch: 1, Solver: sgd.Config{LR: 0.1}}
	srv, err := NewServer(ServerConfig{PS: cfg, Init: make([]float32, 8)})
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{admitted: make([]admission, cfg.Learners)}
	if err := srv.admit(1, 0, p); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	done := make(chan error, 1)
	go func() { done <- srv.admit(1, 0, p) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an admitted learner's message waited for the server's lock")
	}
	srv.mu.Unlock()
	q := &peer{admitted: make([]admission, cfg.Learners)}
	if err := srv.admit(1, 1, q); err != nil {
		t.Fatalf("a new incarnation: %v", err)
	}
	if err := srv.admit(1, 0, p); !errors.Is(err, ErrRefused) {
		t.Fatalf("the old incarnation admitted after the new one: %v", err)
	}
}
