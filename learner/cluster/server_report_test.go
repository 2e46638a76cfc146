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

// TestServerReportUnsent: a shard server whose counters cannot reach the
// coordinator (here a network that carries only 1 KiB of data a frame,
// less than the counters of its 20 shards) fails, naming what it could
// not send, instead of leaving the coordinator waiting for them: the
// final counters at the end of the job, and the counters asked for when
// the job is interrupted.
func TestServerReportUnsent(t *testing.T) {
	for _, cmd := range []rdma.Type{tFinish, tStats} {
		t.Run(map[rdma.Type]string{tFinish: "final", tStats: "stats"}[cmd], func(t *testing.T) {
			n, err := rdma.Open("inmem", rdma.Options{Job: 1, MaxData: 1 << 10})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			coordLn, _ := n.Listen("coordinator")
			psLn, _ := n.Listen("server")
			const shards = 20
			layout := []param.Segment{{Name: "w", Len: 100}}
			ids := make([]int, shards)
			for k := range ids {
				ids[k] = k
			}
			// The coordinator: welcome the server, then the command.
			go func() {
				conn, err := coordLn.Accept(ctx)
				if err != nil {
					return
				}
				cc := &ctrl{conn: conn}
				if _, _, err := cc.recv(ctx); err != nil {
					t.Error(err)
					return
				}
				cc.send(ctx, tWelcome, welcome{Plan: data.Plan{Images: 64, Batch: 8, Group: 1, Chunk: 1, Epochs: 1}})
				cc.send(ctx, tEvict, member{Learner: 0})
				cc.send(ctx, cmd, nil)
				<-ctx.Done()
			}()
			pc := ps.Config{Learners: 1, Protocol: ps.Softsync, N: 1, Shards: shards, Batch: 8, Layout: layout,
				Solver: sgd.Config{LR: 0.1, LRMode: sgd.LRConstant}}
			done := make(chan error, 1)
			go func() {
				done <- RunServer(ctx, ServerConfig{Member: Member{Network: n, Coordinator: coordLn.Addr(), Process: Process{Role: RoleServer}},
					PS: pc, Shards: ids, Init: make([]float32, 100), Listener: psLn})
			}()
			select {
			case err := <-done:
				if !errors.Is(err, rdma.ErrFrameTooLarge) {
					t.Errorf("RunServer: %v, want the send's failure (rdma.ErrFrameTooLarge)", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the shard server still runs 30 s after its counters could not be sent")
			}
		})
	}
}
