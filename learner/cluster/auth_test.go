package cluster

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// TestJobRefusesStrangers attacks the listeners of a job running over
// loopback TCP (its own random secret) while it trains: a peer with
// another secret, one without any that sends well-formed push frames
// claiming learner 0, garbage, connections that stall in the handshake,
// and a hundred connections at once. Every one is refused, the job ends
// as it would have (every mini-batch pushed once, nothing rejected by the
// shards), and no goroutine is left behind.
func TestJobRefusesStrangers(t *testing.T) {
	base := runtime.NumGoroutine()
	train, test := mnistSubset(t, 2000, 200)
	var failures atomic.Int64
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 2, Batch: 8,
		Protocol: ps.Softsync, N: 2, Shards: 1, Epochs: 2, Seed: 1, Transport: "tcp",
		Solver:        sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness},
		OnAuthFailure: func(string, error) { failures.Add(1) }}
	j, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var attackers sync.WaitGroup
	var stalled []net.Conn
	attacks := int64(0)
	for _, addr := range j.addrs {
		// Another secret: the handshake fails on both sides.
		other, err := rdma.NewTCP(rdma.Options{Job: 1, Secret: []byte("another job's secret, 32 bytes!")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Dial(ctx, addr); !errors.Is(err, rdma.ErrAuth) {
			t.Errorf("dial %s with another secret: %v, want ErrAuth", addr, err)
		}
		// No secret: push frames claiming learner 0 are never read.
		plain, _ := rdma.NewTCP(rdma.Options{Job: 1})
		if c, err := plain.Dial(ctx, addr); err == nil {
			for seq := range 5 {
				m := rdma.NewMsg(cfg.Spec.VectorLen())
				m.Type, m.Learner, m.Seq = rdma.Type(ps.MsgPush), 0, uint64(seq+1)
				c.Send(ctx, m)
			}
			c.Close()
		}
		// Garbage, and connections that never finish a handshake.
		for i := range 100 {
			nc, err := net.Dial("tcp", addr)
			if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) {
				// The listener shed the connection as it came in, or
				// closed at the end of the job: refused either way.
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				attackers.Go(func() {
					nc.Write([]byte("GET / HTTP/1.1\r\nHost: softsync\r\n\r\n"))
					nc.Close()
				})
			} else {
				stalled = append(stalled, nc)
			}
		}
		attacks += 2 + 100
	}
	res, err := j.Wait()
	attackers.Wait()
	for _, nc := range stalled {
		nc.Close()
	}
	if err != nil {
		t.Fatalf("the job failed: %v", err)
	}
	var pushed int64
	for _, n := range res.LearnerSteps {
		pushed += n
	}
	st := res.Shards[0]
	if pushed != res.Steps || st.Gradients+st.Dropped != uint64(res.Steps) || st.Rejected.Total() != 0 || res.Server.Refused != 0 {
		t.Errorf("the job was disturbed: steps %d (learners %v), shard %+v, server %+v", res.Steps, res.LearnerSteps, st, res.Server)
	}
	if res.Steps != int64(2*res.BatchesPerEpoch) || res.TestError > 0.3 {
		t.Errorf("%d steps of %d, test error %.3f", res.Steps, 2*res.BatchesPerEpoch, res.TestError)
	}
	// Refused connections are reported (those still in a handshake when
	// the job ended are closed without a report).
	if n := failures.Load(); n < 4 || n > attacks {
		t.Errorf("%d authentication failures reported for %d attacks", n, attacks)
	}
	transporttest.WaitGoroutines(t, base+2, 20*time.Second)
}

// TestJobAmidACrowd holds hundreds of connections that never
// authenticate (idle, a byte a second, stalled after a hello) open on the
// coordinator's and the shard server's ports of a job over loopback TCP
// before any of its roles dials: every role still gets in, and the job
// ends as it would have.
func TestJobAmidACrowd(t *testing.T) {
	base := runtime.NumGoroutine()
	train, test := mnistSubset(t, 1000, 200)
	var failures atomic.Int64
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 3, Batch: 8,
		Protocol: ps.Softsync, N: 3, Shards: 2, Epochs: 1, Seed: 1, Transport: "tcp", PSTimeout: time.Minute,
		Solver:        sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness},
		OnAuthFailure: func(string, error) { failures.Add(1) }}
	const idle, slow, stalled = 200, 50, 50
	cfg.listening = func(coord, server rdma.Listener) {
		for _, ln := range []rdma.Listener{coord, server} {
			transporttest.Crowd(t, ln, 1, idle, slow, stalled)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("the job amid %d connections on each port: %v", idle+slow+stalled, err)
	}
	checkResult(t, cfg, res)
	if res.Steps != int64(res.BatchesPerEpoch) {
		t.Errorf("%d steps of %d", res.Steps, res.BatchesPerEpoch)
	}
	if n := failures.Load(); n < 2*(idle+slow+stalled-64) {
		t.Errorf("%d connections refused, want at least %d", n, 2*(idle+slow+stalled-64))
	}
	transporttest.WaitGoroutines(t, base+3, 20*time.Second)
}
