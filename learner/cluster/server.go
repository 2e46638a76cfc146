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
	"github.com/softsync/softsync/rdma/errcode"
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
//
// A coordinator lost without its stop (it died, or the connection did)
// does not stop the shards: they go on serving while the server dials the
// coordinator again, for PSTimeout at most (see Member.rejoin), and says
// hello as a rejoining process with what its shards have consumed and,
// once final, its final counters.
func RunServer(ctx context.Context, cfg ServerConfig) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer cfg.Listener.Close()
	addr := cfg.Advertise
	if addr == "" {
		addr = cfg.Listener.Addr()
	}
	// What its shards have consumed: nothing, or what their checkpoint
	// says (a coordinator hands out again what they lack).
	r := &serverRole{cfg: &cfg, hello: hello{Addr: addr, Shards: cfg.Shards, Consumed: make([][]ps.Interval, len(cfg.Shards))}}
	if cfg.Resume != nil {
		r.hello.Consumed = cfg.Resume.consumed(cfg.Shards)
	}
	cc, w, err := joinUnlessStopped(ctx, &cfg, r.hello)
	if err != nil {
		return err
	}
	r.setCtrl(cc)
	defer func() { r.ctrl().conn.Close() }()
	cfg.PS.Job = cmp.Or(cfg.Job, 1)
	if cfg.PS.DataSize == 0 {
		cfg.PS.DataSize = w.Plan.BatchesPerEpoch() * w.Plan.Batch
	}
	pcfg := ps.ServerConfig{PS: cfg.PS, Shards: cfg.Shards, Init: cfg.Init, Codec: cfg.Codec, Snapshots: true,
		OnUpdate: refusalLog(cfg.log(), time.Now),
		OnLost:   func(l, inc uint32) { r.ctrl().send(ctx, tLost, member{Learner: l, Incarnation: inc}) }}
	if cfg.Network != nil {
		pcfg.NewMsg = cfg.Network.NewMsg
	}
	if cfg.Resume != nil {
		cfg.Resume.restoreConfig(&pcfg)
	}
	// Learners join when they connect (RunLearner, and ps.Client after a
	// reconnection): a learner that finished, or left while idle, after
	// the checkpoint, or while this server was away, would never leave
	// again and keep the shards from being final.
	pcfg.Inactive = cfg.Resume != nil || w.Returning
	srv, err := ps.NewServer(pcfg)
	cfg.Init, cfg.Resume, pcfg = nil, nil, ps.ServerConfig{} // copied into the shards
	if err != nil {
		err = fmt.Errorf("%s: %w", cfg.Process, err)
		cc.send(context.Background(), tFail, failure{errcode.Encode(err)})
		return err
	}
	r.srv = srv
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, cfg.Listener) }()
	if cfg.OnServe != nil {
		cfg.OnServe(srv)
	}
	err = r.commands(ctx)
	srv.Stop()
	if serr := <-served; err == nil && serr != nil && !errors.Is(serr, context.Canceled) {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Process, err)
	}
	return nil
}

// serverRole is a running shard server's connection to the coordinator.
type serverRole struct {
	cfg   *ServerConfig
	srv   *ps.Server
	hello hello // its first hello (a rejoin's adds what its shards have)
	mu    sync.Mutex
	cc    *ctrl // the current connection to the coordinator
}

func (r *serverRole) ctrl() *ctrl {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cc
}

func (r *serverRole) setCtrl(cc *ctrl) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cc = cc
}

// ctrlMsg is a message received on a control connection (cc).
type ctrlMsg struct {
	cc  *ctrl
	t   rdma.Type
	b   []byte
	err error
}

// readCtrlTo receives cc's messages into msgs until an error, which it
// delivers too, or until ctx ends.
func readCtrlTo(ctx context.Context, cc *ctrl, msgs chan<- ctrlMsg) {
	for {
		t, b, err := cc.recv(ctx)
		select {
		case msgs <- ctrlMsg{cc, t, b, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// commands carries out the coordinator's commands until it stops the
// job, or until cfg.Stop asks the server to stop after a checkpoint, or
// a report could not be sent for another reason than a lost connection.
// It sends the final counters once the shards are final, and the
// checkpoint reports; a lost coordinator is dialled again (rejoin).
func (r *serverRole) commands(ctx context.Context) error {
	cfg, srv := r.cfg, r.srv
	msgs := make(chan ctrlMsg)
	go readCtrlTo(ctx, r.ctrl(), msgs)
	ckpts := make(chan ckptReport)
	stop, stopping := cfg.Stop, false
	final := srv.Final()
	var grace <-chan time.Time
	// report sends a report on the current connection; a connection that
	// fails is the reader's to notice, any other failure is the server's.
	report := func(t rdma.Type, v any, what string) error {
		if err := r.ctrl().send(ctx, t, v); err != nil && rdma.Recoverable(err) {
			return fmt.Errorf("%s to the coordinator: %w", what, err)
		}
		return nil
	}
	for {
		var m ctrlMsg
		select {
		case m = <-msgs:
		case <-final:
			final = nil
			if err := report(tFinal, srv.Stats(), "the final counters"); err != nil {
				return err
			}
			continue
		case rep := <-ckpts:
			if err := report(tCheckpointed, rep, "the checkpoint report"); err != nil {
				return err
			}
			continue
		case <-stop:
			stop, stopping = nil, true
			if cfg.Checkpoints == nil {
				return ErrInterrupted
			}
			r.ctrl().send(ctx, tCheckpointReq, nil)
			grace = time.After(time.Minute)
			continue
		case <-grace:
			return fmt.Errorf("%w: the checkpoint before stopping did not end within a minute", ErrInterrupted)
		case <-ctx.Done():
			return ctx.Err()
		}
		if m.cc != r.ctrl() {
			continue // a connection replaced since
		}
		t, b, err := m.t, m.b, m.err
		if err != nil {
			if stopping {
				return fmt.Errorf("%w: lost the coordinator while stopping: %v", ErrInterrupted, err)
			}
			cc, err := r.rejoin(ctx, err)
			if err != nil {
				return err
			}
			m.cc.conn.Close()
			r.setCtrl(cc)
			go readCtrlTo(ctx, cc, msgs)
			if final == nil && r.final() { // its counters went on the old connection, if at all
				if err := report(tFinal, srv.Stats(), "the final counters"); err != nil {
					return err
				}
			}
			continue
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
			if err := report(tServerStats, srv.Stats(), "the counters"); err != nil {
				return err
			}
		case tConsumedReq:
			if err := report(tConsumed, consumed{Shards: srv.Consumed()}, "what the shards consumed"); err != nil {
				return err
			}
		case tCheckpoint:
			var o ckptOrder
			if err := decode(t, b, &o); err != nil {
				return err
			}
			go func() {
				rep := ckptReport{Version: o.Version}
				if cfg.Checkpoints == nil {
					rep.Text = "no checkpoint folder (--checkpoint-dir)"
				} else if sums, err := writeShards(cfg.Checkpoints, srv, cfg.PS.Shards, o.Version); err != nil {
					rep.Wire = errcode.Encode(err)
				} else {
					rep.Files = sums
				}
				select {
				case ckpts <- rep:
				case <-ctx.Done():
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

// rejoin dials the coordinator again after its connection failed with
// cause, and says hello as a rejoining shard server: what its shards
// have consumed, and its final counters if they are final. cfg.Stop
// ends the attempt.
func (r *serverRole) rejoin(ctx context.Context, cause error) (*ctrl, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.cfg.Stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	cc, _, err := r.cfg.rejoin(ctx, func() hello {
		h := r.hello
		h.Consumed = r.srv.Consumed()
		if r.final() {
			st := r.srv.Stats()
			h.Final = &st
		}
		return h
	}, cause)
	return cc, err
}

// final reports whether the server's shards are final.
func (r *serverRole) final() bool {
	select {
	case <-r.srv.Final():
		return true
	default:
		return false
	}
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
