package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
)

// ServerConfig configures a shard-server role.
type ServerConfig struct {
	Member
	PS     ps.Config
	Shards []int      // the shards this server runs
	Init   []float32  // the initial flat vector
	Codec  rdma.Codec // encoding of the weights it sends
	// Listener is where learners and the evaluator connect; Advertise is
	// the address they dial ("": Listener.Addr()).
	Listener  rdma.Listener
	Advertise string
}

// RunServer runs a shard server: it registers with the coordinator,
// serves its shards until the coordinator stops the job, and reports its
// counters once its shards are final. It returns nil when the job ended
// well, the job's failure otherwise. It closes the listener.
func RunServer(ctx context.Context, cfg ServerConfig) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer cfg.Listener.Close()
	addr := cfg.Advertise
	if addr == "" {
		addr = cfg.Listener.Addr()
	}
	cc, w, err := cfg.join(ctx, hello{Addr: addr, Shards: cfg.Shards})
	if err != nil {
		return err
	}
	defer cc.conn.Close()
	cfg.PS.Job = cmp.Or(cfg.Job, 1)
	if cfg.PS.DataSize == 0 {
		cfg.PS.DataSize = w.Plan.BatchesPerEpoch() * w.Plan.Batch
	}
	srv, err := ps.NewServer(ps.ServerConfig{PS: cfg.PS, Shards: cfg.Shards, Init: cfg.Init, Codec: cfg.Codec, Snapshots: true,
		OnLost: func(l, inc uint32) { cc.send(ctx, tLost, member{Learner: l, Incarnation: inc}) }})
	if err != nil {
		err = fmt.Errorf("%s: %w", cfg.Process, err)
		cc.send(context.Background(), tFail, failure{Err: err.Error()})
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, cfg.Listener) }()
	go func() {
		select {
		case <-srv.Final():
			cc.send(ctx, tFinal, srv.Stats())
		case <-ctx.Done():
		}
	}()
	err = serverCommands(ctx, cc, srv)
	srv.Stop()
	if serr := <-served; err == nil && serr != nil && !errors.Is(serr, context.Canceled) {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Process, err)
	}
	return nil
}

// serverCommands carries out the coordinator's commands until it stops
// the job.
func serverCommands(ctx context.Context, cc *ctrl, srv *ps.Server) error {
	for {
		t, b, err := cc.recv(ctx)
		if err != nil {
			return fmt.Errorf("%w: lost the coordinator: %v", ErrJobFailed, err)
		}
		switch t {
		case tEvict:
			var m member
			if err := decode(t, b, &m); err != nil {
				return err
			}
			srv.Evict(m.Learner, m.Incarnation)
		case tFinish:
			srv.Finish()
		case tStop:
			return stopped(t, b)
		default:
			return fmt.Errorf("%w: message %#x from the coordinator", ErrProtocol, t)
		}
	}
}
