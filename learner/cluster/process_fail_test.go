package cluster

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/rdma"
)

// cutNet is a role's network whose control connection breaks as the
// welcome arrives on it (the welcome is lost).
type cutNet struct {
	rdma.Network
	once *sync.Once
}

func (n cutNet) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	c, err := n.Network.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: c, once: n.once}, nil
}

type cutConn struct {
	rdma.Conn
	once *sync.Once
}

func (c *cutConn) Recv(ctx context.Context) (*rdma.Msg, error) {
	m, err := c.Conn.Recv(ctx)
	if err != nil || m.Type != tWelcome {
		return m, err
	}
	c.once.Do(func() {
		if err == nil {
			m.Release()
			m, err = nil, &rdma.OpError{Op: "recv", Err: rdma.ErrClosed}
			c.Conn.Close()
		}
	})
	return m, err
}

// TestJobEndsWhenCoordinatorFails: the evaluator's control connection
// breaks as its welcome arrives, so the coordinator fails the job (it
// lost the evaluator). The process ends, failed: the evaluator, which
// joins again (its welcome was lost) without a bound in the
// coordinator's own process, is stopped (it dialled the coordinator's
// closed address for ever, and the process never ended).
func TestJobEndsWhenCoordinatorFails(t *testing.T) {
	eng := engine(t)
	synctest.Test(t, func(t *testing.T) {
		sj := newSimJob(newSimWorld(1, false))
		cfg := sj.cfg
		in := cfg.Spec.Input
		cfg.Train = data.Synthetic(sj.plan.Images, in.C, in.H, in.W, cfg.Spec.Classes(), 1)
		cfg.Engine, cfg.Transport, cfg.Workers = eng, "inmem", 1
		var once sync.Once
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		j, err := start(ctx, cfg, func(r Role, n rdma.Network) rdma.Network {
			if r == RoleEvaluator {
				return cutNet{n, &once}
			}
			return n
		})
		if err != nil {
			t.Fatal(err)
		}
		ended := make(chan error, 1)
		go func() {
			_, err := j.Wait()
			ended <- err
		}()
		select {
		case err := <-ended:
			if err == nil {
				t.Error("Wait: no error, want the job failed")
			}
		case <-time.After(10 * time.Minute):
			t.Error("the process did not end within 10 minutes (virtual) of the coordinator's failure")
			cancel()
			<-ended
		}
	})
}
