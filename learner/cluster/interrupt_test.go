package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// waitErr waits for a role's result on done, failing the test if none
// comes within a minute.
func waitErr(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s still runs a minute after the interruption", what)
		return nil
	}
}

// TestInterruptAtRendezvous interrupts a coordinator whose job has not
// started (a learner never comes) while a shard server and a learner
// wait at rendezvous: Serve returns ErrInterrupted at once, with no
// result, and the two processes stop, the learner with ErrInterrupted.
func TestInterruptAtRendezvous(t *testing.T) {
	n, err := rdma.Open("inmem", rdma.Options{Job: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	coordLn, _ := n.Listen("coordinator")
	psLn, _ := n.Listen("server")
	plan := data.Plan{Images: 64, Batch: 8, Group: 1, Chunk: 1, Epochs: 1}
	coord, err := NewCoordinator(CoordinatorConfig{Plan: plan, Learners: 2, Servers: [][]int{{0}}})
	if err != nil {
		t.Fatal(err)
	}
	type served struct {
		res *Result
		err error
	}
	serve := make(chan served, 1)
	go func() {
		res, err := coord.Serve(ctx, coordLn)
		serve <- served{res, err}
	}()
	member := func(role Role) Member {
		return Member{Network: n, Coordinator: coordLn.Addr(), Process: Process{Rank: -1, Role: role}}
	}
	pc := ps.Config{Learners: 2, Protocol: ps.Softsync, N: 2, Shards: 1, Batch: 8, Layout: []param.Segment{{Name: "w", Len: 10}},
		Solver: sgd.Config{LR: 0.1, LRMode: sgd.LRConstant}}
	server, learner := make(chan error, 1), make(chan error, 1)
	go func() {
		server <- RunServer(ctx, ServerConfig{Member: member(RoleServer), PS: pc, Shards: []int{0}, Init: make([]float32, 10), Listener: psLn})
	}()
	go func() {
		learner <- RunLearner(ctx, LearnerConfig{Member: member(RoleLearner), Spec: spec(t, "mlp"), Shards: 1})
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		arrived, _ := coord.rendezvous()
		if arrived == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the shard server and the learner arrived at rendezvous within a minute", arrived)
		}
		time.Sleep(10 * time.Millisecond)
	}
	coord.Interrupt()
	select {
	case s := <-serve:
		if !errors.Is(s.err, ErrInterrupted) || s.res != nil {
			t.Errorf("Serve: %v, %v; want no result and ErrInterrupted", s.res, s.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve still runs a minute after the interruption at rendezvous")
	}
	if err := waitErr(t, "the learner", learner); !errors.Is(err, ErrInterrupted) {
		t.Errorf("learner: %v, want ErrInterrupted", err)
	}
	if err := waitErr(t, "the shard server", server); !errors.Is(err, ErrInterrupted) {
		t.Errorf("shard server: %v, want ErrInterrupted", err)
	}
}

// TestServerStopAtRendezvous: a shard server told to stop (Stop) while
// it still waits for a coordinator that does not listen yet stops at
// once with ErrInterrupted.
func TestServerStopAtRendezvous(t *testing.T) {
	n, err := rdma.Open("inmem", rdma.Options{Job: 1})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := n.Listen("server")
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- RunServer(context.Background(), ServerConfig{
			Member: Member{Network: n, Coordinator: "nobody-listens-here", Process: Process{Rank: -1, Role: RoleServer}},
			PS:     ps.Config{Learners: 1, Protocol: ps.Hardsync, Shards: 1, Batch: 8, Layout: []param.Segment{{Name: "w", Len: 10}}},
			Shards: []int{0}, Init: make([]float32, 10), Listener: ln, Stop: stop})
	}()
	time.Sleep(200 * time.Millisecond) // dialing, again and again
	close(stop)
	if err := waitErr(t, "the shard server", done); !errors.Is(err, ErrInterrupted) {
		t.Errorf("RunServer: %v, want ErrInterrupted", err)
	}
}
