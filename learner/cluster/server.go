package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
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
	// Checkpoints, if set, is where the server writes its shards when the
	// coordinator orders a checkpoint (the job's shared folder).
	Checkpoints *checkpoint.Store
	// Resume, if set, starts the shards from a checkpoint (LoadResume)
	// instead of Init.
	Resume *Resume
	// Stop, when closed, makes the server ask the coordinator for a
	// checkpoint, wait for it (a minute at most) and stop, returning
	// ErrInterrupted: a shard server told to stop (SIGTERM) loses nothing
	// and can be restarted with its checkpoint. Closed before the job has
	// welcomed the server, it stops it at once.
	Stop <-chan struct{}
	// OnServe, if set, is called with the shard server's ps.Server once it
	// serves (after the coordinator welcomed it), so that the caller can
	// read its live counters (ps.Server.Stats, e.g. for metrics). It must
	// not stop or drive the server: RunServer does.
	OnServe func(*ps.Server)
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
	cc, w, err := joinUnlessStopped(ctx, &cfg, hello{Addr: addr, Shards: cfg.Shards})
	if err != nil {
		return err
	}
	defer cc.conn.Close()
	cfg.PS.Job = cmp.Or(cfg.Job, 1)
	if cfg.PS.DataSize == 0 {
		cfg.PS.DataSize = w.Plan.BatchesPerEpoch() * w.Plan.Batch
	}
	pcfg := ps.ServerConfig{PS: cfg.PS, Shards: cfg.Shards, Init: cfg.Init, Codec: cfg.Codec, Snapshots: true,
		NewMsg: cfg.Network.NewMsg, OnUpdate: refusalLog(cfg.log(), time.Now),
		OnLost: func(l, inc uint32) { cc.send(ctx, tLost, member{Learner: l, Incarnation: inc}) }}
	if cfg.Resume != nil {
		cfg.Resume.restoreConfig(&pcfg)
	}
	srv, err := ps.NewServer(pcfg)
	if err != nil {
		err = fmt.Errorf("%s: %w", cfg.Process, err)
		cc.send(context.Background(), tFail, failure{Err: err.Error()})
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, cfg.Listener) }()
	if cfg.OnServe != nil {
		cfg.OnServe(srv)
	}
	// Reports sent off the command loop (the final counters, checkpoint
	// reports): a report that cannot be sent fails the server, as the
	// coordinator would wait for it.
	reports := make(chan error, 2)
	go func() {
		select {
		case <-srv.Final():
			if err := cc.send(ctx, tFinal, srv.Stats()); err != nil {
				reports <- fmt.Errorf("the final counters to the coordinator: %w", err)
			}
		case <-ctx.Done():
		}
	}()
	err = serverCommands(ctx, cc, srv, &cfg, reports)
	srv.Stop()
	if serr := <-served; err == nil && serr != nil && !errors.Is(serr, context.Canceled) {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Process, err)
	}
	return nil
}

// refusalEvery is the least time between two log lines of one shard about
// refused updates; the refusals in between are counted in the next line
// (and all of them in the shard's counters).
const refusalEvery = 10 * time.Second

// refusalLog returns the hook (ps.ServerConfig.OnUpdate) that logs refused
// updates at warning level with the learners whose gradients they held:
// a shard's first at once, then at most one line per refusalEvery.
func refusalLog(log *slog.Logger, now func() time.Time) func(int, ps.Update) {
	type shardLog struct {
		last  time.Time
		since int // refused since the last line
	}
	var mu sync.Mutex // shards call from their own goroutines
	logs := map[int]*shardLog{}
	return func(shard int, u ps.Update) {
		if !u.Refused {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		l := logs[shard]
		if l == nil {
			l = &shardLog{}
			logs[shard] = l
		}
		l.since++
		if t := now(); l.last.IsZero() || t.Sub(l.last) >= refusalEvery {
			log.Warn("update refused: it would have made a weight or its momentum NaN or infinite; its gradients are discarded",
				"shard", shard, "clock", u.Clock, "learners", u.Learners, "refused_since_last_line", l.since)
			l.last, l.since = t, 0
		}
	}
}

// joinUnlessStopped joins the job (Member.join) unless cfg.Stop is closed
// first: a server stopped before its welcome has nothing to checkpoint,
// and returns ErrInterrupted at once.
func joinUnlessStopped(ctx context.Context, cfg *ServerConfig, h hello) (*ctrl, welcome, error) {
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		select {
		case <-cfg.Stop:
			close(stopped)
			cancel()
		case <-jctx.Done():
		}
	}()
	cc, w, err := cfg.join(jctx, h)
	if err == nil {
		return cc, w, nil
	}
	cancel()
	select {
	case <-stopped:
		return nil, welcome{}, fmt.Errorf("%w: %s stopped before the job started", ErrInterrupted, cfg.Process)
	default:
		return nil, welcome{}, err
	}
}

// serverCommands carries out the coordinator's commands until it stops
// the job, or until cfg.Stop asks the server to stop after a checkpoint,
// or a report could not be sent (reports).
func serverCommands(ctx context.Context, cc *ctrl, srv *ps.Server, cfg *ServerConfig, reports chan error) error {
	type msg struct {
		t   rdma.Type
		b   []byte
		err error
	}
	msgs := make(chan msg)
	go func() {
		for {
			t, b, err := cc.recv(ctx)
			select {
			case msgs <- msg{t, b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	stop, stopping := cfg.Stop, false
	var grace <-chan time.Time
	for {
		var m msg
		select {
		case m = <-msgs:
		case <-stop:
			stop, stopping = nil, true
			if cfg.Checkpoints == nil {
				return ErrInterrupted
			}
			cc.send(ctx, tCheckpointReq, nil)
			grace = time.After(time.Minute)
			continue
		case <-grace:
			return fmt.Errorf("%w: the checkpoint before stopping did not end within a minute", ErrInterrupted)
		case err := <-reports:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
		t, b, err := m.t, m.b, m.err
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
		case tStats:
			if err := cc.send(ctx, tServerStats, srv.Stats()); err != nil {
				return fmt.Errorf("the counters to the coordinator: %w", err)
			}
		case tCheckpoint:
			var o ckptOrder
			if err := decode(t, b, &o); err != nil {
				return err
			}
			go func() {
				rep := ckptReport{Version: o.Version}
				if cfg.Checkpoints == nil {
					rep.Err = "no checkpoint folder (--checkpoint-dir)"
				} else if sums, err := writeShards(cfg.Checkpoints, srv, cfg.PS.Shards, o.Version); err != nil {
					rep.Err = err.Error()
				} else {
					rep.Files = sums
				}
				if err := cc.send(ctx, tCheckpointed, rep); err != nil {
					reports <- fmt.Errorf("the checkpoint report to the coordinator: %w", err)
				}
			}()
		case tCheckpointDone:
			if stopping {
				return ErrInterrupted
			}
		case tStop:
			return stopErr(t, b)
		default:
			return fmt.Errorf("%w: message %#x from the coordinator", ErrProtocol, t)
		}
	}
}
