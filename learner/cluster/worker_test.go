package cluster

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/rdma"
)

// TestLearnerLastReportAfterRejoin: a learner whose last progress report
// (done) fails because the head died under it does not fail the job: the
// report waits for the rejoin, then goes to the coordinator rejoined,
// with the steps the failed one carried.
func TestLearnerLastReportAfterRejoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n, err := rdma.Open("inmem", rdma.Options{Job: 1})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := n.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		// The first head: it accepts the learner's connection and dies.
		accepted := make(chan rdma.Conn, 1)
		go func() {
			c, err := ln.Accept(ctx)
			if err != nil {
				t.Error(err)
				close(accepted)
				return
			}
			accepted <- c
		}()
		old, err := n.Dial(ctx, ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		head := <-accepted
		if head == nil {
			return
		}
		head.Close()
		// The learner's end is reset too, so that the report's send fails
		// (a send racing only the peer's close may be queued and lost, as
		// on TCP: another path).
		old.Close()
		synctest.Wait()

		r := &worker{
			cfg: LearnerConfig{Member: Member{Network: n, Coordinator: ln.Addr(), PSTimeout: time.Minute,
				Process: Process{Role: RoleLearner, Rank: 3, ID: 2}}, ID: 2},
			cc: &ctrl{conn: old}, joined: make(chan struct{}), core: newWorkerCore(welcome{}),
			replies: make(chan chunkReply, 1), addrs: make(chan addr, 1), redial: newWaitLock(),
		}
		r.core.stepped(0, 2.5)
		last := make(chan error, 1)
		go func() { last <- r.flushLast(ctx) }()
		synctest.Wait()
		select {
		case err := <-last:
			t.Fatalf("the last report with the head dead: %v, want it to wait for the rejoin", err)
		default:
		}

		// The head restarted: the learner rejoins it, and its last report
		// goes there.
		got := make(chan progress, 1)
		go func() {
			defer close(got)
			c, err := ln.Accept(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			cc := &ctrl{conn: c}
			typ, b, err := cc.recv(ctx)
			var h hello
			if err != nil || typ != tHello || decode(typ, b, &h) != nil || !h.Rejoin {
				t.Errorf("got %#x %s (%v), want a rejoining hello", typ, b, err)
				return
			}
			if err := cc.send(ctx, tWelcome, welcome{}); err != nil {
				t.Error(err)
				return
			}
			for {
				typ, b, err := cc.recv(ctx)
				if err != nil {
					t.Errorf("recv: %v", err)
					return
				}
				if typ != tProgress {
					continue
				}
				var p progress
				if err := decode(typ, b, &p); err != nil {
					t.Error(err)
					return
				}
				got <- p
				return
			}
		}()
		if err := r.rejoin(ctx, r.ctrl(), errors.New("rdma: closed")); err != nil {
			t.Fatal(err)
		}
		if err := <-last; err != nil {
			t.Fatalf("the last report after the rejoin: %v", err)
		}
		p, ok := <-got
		if !ok {
			return
		}
		if !p.Done || len(p.Epochs) != 1 || p.Epochs[0].Steps != 1 || p.Epochs[0].Loss != 2.5 {
			t.Errorf("the coordinator rejoined got %+v, want the last report (done) with 1 step of loss 2.5", p)
		}
		r.ctrl().conn.Close()
	})
}

// TestLearnerRejoinHelloEnded: a learner told the end of the data says
// so when it rejoins (a restarted coordinator then knows the data was
// done), from the moment the reply arrives: the reader, which builds the
// rejoin hello when the connection fails next, may do so before Next has
// taken the reply. One told it is idle does not.
func TestLearnerRejoinHelloEnded(t *testing.T) {
	c := newWorkerCore(welcome{})
	reply := func(rep chunkReply) workerCmd {
		t.Helper()
		b, err := ctrlData(tChunk, rep)
		if err != nil {
			t.Fatal(err)
		}
		return c.command(tChunk, b)
	}
	c.ask(false)
	if cmd := reply(chunkReply{Idle: true}); cmd.chunk == nil || !cmd.chunk.Idle {
		t.Fatalf("idle reply: %+v", cmd)
	}
	if h := c.rejoinHello(); h.Ended {
		t.Errorf("rejoin hello %+v after an idle reply, want not ended", h)
	}
	c.ask(true)
	cmd := reply(chunkReply{End: true})
	if h := c.rejoinHello(); !h.Ended {
		t.Errorf("rejoin hello %+v once the end arrived, want ended", h)
	}
	if _, err := c.took(*cmd.chunk); !errors.Is(err, data.ErrEnd) {
		t.Fatalf("end reply: %v", err)
	}
}
