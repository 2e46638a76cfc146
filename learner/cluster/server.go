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
	// UpdateThreads is the goroutines each shard spreads its updates over
	// (ps.ServerConfig.UpdateThreads; 0: one, its own).
	UpdateThreads int
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
	r := &serverRole{cfg: &cfg, hello: cfg.firstHello(addr)}
	cc, w, err := joinUnlessStopped(ctx, &cfg, r.hello)
	if err != nil {
		return err
	}
	r.setCtrl(cc)
	defer func() { r.ctrl().conn.Close() }()
	pcfg := cfg.psServer(w)
	pcfg.OnUpdate = refusalLog(cfg.log(), time.Now)
	pcfg.OnLost = func(l, inc uint32) { r.ctrl().send(ctx, tLost, member{Learner: l, Incarnation: inc}) }
	if cfg.Network != nil {
		pcfg.NewMsg = cfg.Network.NewMsg
	}
	srv, err := ps.NewServer(pcfg)
	cfg.Init, cfg.Resume, pcfg = nil, nil, ps.ServerConfig{} // copied into the shards
	if err != nil {
		err = fmt.Errorf("%s: %w", cfg.Process, err)
		cc.send(context.Background(), tFail, failure{errcode.Encode(err)})
		return err
	}
	r.srv, r.core = srv, newServerCore(srv, r.hello, cfg.Checkpoints != nil)
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

// firstHello is the shard server's first hello: where it listens (addr),
// its shards and what they have consumed: nothing, or what their
// checkpoint says (a coordinator hands out again what they lack).
func (cfg *ServerConfig) firstHello(addr string) hello {
	h := hello{Addr: addr, Shards: cfg.Shards, Consumed: make([][]ps.Interval, len(cfg.Shards))}
	if cfg.Resume != nil {
		h.Consumed = cfg.Resume.consumed(cfg.Shards)
		h.Incarnations = cfg.Resume.Shards[cfg.Shards[0]].Incarnations
	}
	return h
}

// psServer returns the configuration of the parameter server of a shard
// server the coordinator welcomed with w (without its hooks and memory
// allocator).
func (cfg *ServerConfig) psServer(w welcome) ps.ServerConfig {
	pc := cfg.PS
	pc.Job = cmp.Or(cfg.Job, 1)
	if pc.DataSize == 0 {
		pc.DataSize = w.Plan.BatchesPerEpoch() * w.Plan.Batch
	}
	s := ps.ServerConfig{PS: pc, Shards: cfg.Shards, Init: cfg.Init, Codec: cfg.Codec, Snapshots: true, UpdateThreads: cfg.UpdateThreads}
	if cfg.Resume != nil {
		cfg.Resume.restoreConfig(&s)
	}
	// Learners join when they connect (RunLearner, and ps.Client after a
	// reconnection): a learner that finished, or left while idle, after
	// the checkpoint, or while this server was away, would never leave
	// again and keep the shards from being final.
	s.Inactive = cfg.Resume != nil || w.Returning
	return s
}

// serverRole is a running shard server's connection to the coordinator:
// the runtime of its core (serverCore).
type serverRole struct {
	cfg   *ServerConfig
	srv   *ps.Server
	core  *serverCore
	hello hello // its first hello
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

// commands runs the role's core until it ends the role: it feeds it the
// coordinator's commands, the loss of the coordinator, the shards'
// finality, the checkpoint writes' ends and cfg.Stop, and carries out
// what the core asks for. A report that cannot be sent for another
// reason than a lost connection ends the role; a lost connection is the
// reader's to notice.
func (r *serverRole) commands(ctx context.Context) error {
	cfg, srv, core := r.cfg, r.srv, r.core
	msgs := make(chan ctrlMsg)
	go readCtrlTo(ctx, r.ctrl(), msgs)
	ckpts := make(chan ckptReport)
	stop := cfg.Stop
	final := srv.Final()
	var grace <-chan time.Time
	var cause error // the loss of the last connection
	for {
		var rd *serverReady
		select {
		case m := <-msgs:
			switch {
			case m.cc != r.ctrl():
				continue // a connection replaced since
			case m.err != nil:
				rd, cause = core.lost(m.err), m.err
			default:
				rd = core.command(m.t, m.b)
			}
		case <-final:
			final, rd = nil, core.finalNow()
		case rep := <-ckpts:
			rd = core.checkpointed(rep)
		case <-stop:
			stop, rd = nil, core.stop()
		case <-grace:
			rd = core.graceOver()
		case <-ctx.Done():
			return ctx.Err()
		}
		if rd.rejoin {
			old := r.ctrl()
			cc, err := r.rejoin(ctx, cause)
			if err != nil {
				return err
			}
			old.conn.Close()
			r.setCtrl(cc)
			go readCtrlTo(ctx, cc, msgs)
			rd = core.rejoined()
		}
		for _, m := range rd.sends {
			if err := r.ctrl().send(ctx, m.t, m.v); err != nil && rdma.Recoverable(err) {
				return fmt.Errorf("%s to the coordinator: %w", reportName(m.t), err)
			}
		}
		if v, ok := rd.write(); ok {
			go func() {
				rep := ckptReport{Version: v}
				if sums, err := writeShards(cfg.Checkpoints, srv, cfg.PS.Shards, v); err != nil {
					rep.Wire = errcode.Encode(err)
				} else {
					rep.Files = sums
				}
				select {
				case ckpts <- rep:
				case <-ctx.Done():
				}
			}()
		}
		if rd.grace {
			grace = time.After(stopWait)
		}
		if rd.exit {
			return rd.err
		}
	}
}

// rejoin dials the coordinator again after its connection failed, and
// says hello as a rejoining shard server (serverCore.rejoinHello).
// cfg.Stop ends the attempt.
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
	cc, _, err := r.cfg.rejoin(ctx, r.core.rejoinHello, cause)
	return cc, err
}

// stopWait bounds how long a shard server told to stop waits for the
// checkpoint it asked for.
const stopWait = time.Minute

// shardHost is the parameter server a shard-server role runs: its
// ps.Server, or in the chaos simulator a ps.ServerCore over simulated
// connections.
type shardHost interface {
	Evict(learner, inc uint32)
	Finish()
	Stats() ps.ServerStats
	Consumed() [][]ps.Interval
	Checkpoint() ([]*ps.Checkpoint, []ps.Identity)
	Identities() []ps.Identity
}

// serverCore is the shard-server role's protocol with the coordinator as
// a deterministic core: each input (a command, the loss of the
// coordinator's connection and the rejoin, the shards' finality, the end
// of a checkpoint write, the request to stop and its grace) returns what
// to do: reports to send on the current control connection, in order, a
// checkpoint to write, a rejoin, the end of the role. The runtime
// (serverRole.commands) feeds it from its goroutines and channels.
type serverCore struct {
	host     shardHost
	hello    hello // the server's first hello
	store    bool  // it has a checkpoint folder
	stopping bool  // told to stop: it waits for its checkpoint
	final    bool  // its shards are final
	rd       serverReady
}

// serverReady is what one input of a serverCore asks for.
type serverReady struct {
	sends   []outMsg // on the current control connection, in order (conn unused)
	version uint64   // write the shards into this checkpoint version (0: none)
	rejoin  bool     // rejoin the coordinator (rejoinHello), then rejoined
	grace   bool     // wait stopWait for the checkpoint, then graceOver
	exit    bool     // the role ends with err
	err     error
}

// write returns the checkpoint version to write, if any.
func (rd *serverReady) write() (uint64, bool) { return rd.version, rd.version != 0 }

func newServerCore(host shardHost, h hello, store bool) *serverCore {
	return &serverCore{host: host, hello: h, store: store}
}

func (c *serverCore) reset() *serverReady {
	c.rd = serverReady{sends: c.rd.sends[:0]}
	return &c.rd
}

func (c *serverCore) send(t rdma.Type, v any) { c.rd.sends = append(c.rd.sends, outMsg{t: t, v: v}) }

func (c *serverCore) exit(err error) *serverReady {
	c.rd.exit, c.rd.err = true, err
	return &c.rd
}

// command carries out the coordinator's message t with data b.
func (c *serverCore) command(t rdma.Type, b []byte) *serverReady {
	rd := c.reset()
	switch t {
	case tEvict:
		var m member
		if err := decode(t, b, &m); err != nil {
			return c.exit(err)
		}
		c.host.Evict(m.Learner, m.Incarnation)
	case tFinish:
		c.host.Finish()
	case tStats:
		c.send(tServerStats, c.host.Stats())
	case tConsumedReq:
		c.send(tConsumed, consumed{Shards: c.host.Consumed()})
	case tCheckpoint:
		var o ckptOrder
		if err := decode(t, b, &o); err != nil {
			return c.exit(err)
		}
		if !c.store {
			c.send(tCheckpointed, ckptReport{Version: o.Version, Wire: errcode.Wire{Text: "no checkpoint folder (--checkpoint-dir)"}})
		} else {
			rd.version = o.Version
		}
	case tCheckpointDone:
		if c.stopping {
			return c.exit(ErrInterrupted)
		}
	case tStop:
		return c.exit(stopErr(t, b))
	default:
		return c.exit(fmt.Errorf("%w: message %#x from the coordinator", ErrProtocol, t))
	}
	return rd
}

// lost takes the loss of the connection to the coordinator (cause): the
// server rejoins it, unless it is stopping.
func (c *serverCore) lost(cause error) *serverReady {
	rd := c.reset()
	if c.stopping {
		return c.exit(fmt.Errorf("%w: lost the coordinator while stopping: %v", ErrInterrupted, cause))
	}
	rd.rejoin = true
	return rd
}

// rejoinHello is the hello of an attempt to rejoin: what its shards have
// consumed and, once they are final, its final counters.
func (c *serverCore) rejoinHello() hello {
	h := c.hello
	h.Consumed = c.host.Consumed()
	h.Incarnations = nil
	for _, id := range c.host.Identities() {
		h.Incarnations = append(h.Incarnations, id.Incarnation)
	}
	if c.final {
		st := c.host.Stats()
		h.Final = &st
	}
	return h
}

// rejoined takes the new connection to the coordinator: the final
// counters go again (they went on the old connection, if at all).
func (c *serverCore) rejoined() *serverReady {
	rd := c.reset()
	if c.final {
		c.send(tFinal, c.host.Stats())
	}
	return rd
}

// finalNow takes the shards' finality: the final counters go to the
// coordinator.
func (c *serverCore) finalNow() *serverReady {
	rd := c.reset()
	c.final = true
	c.send(tFinal, c.host.Stats())
	return rd
}

// checkpointed takes the end of a checkpoint write: its report goes to
// the coordinator.
func (c *serverCore) checkpointed(rep ckptReport) *serverReady {
	rd := c.reset()
	c.send(tCheckpointed, rep)
	return rd
}

// stop takes the request to stop (ServerConfig.Stop): the server asks
// for a checkpoint and waits for it, or stops at once without a
// checkpoint folder.
func (c *serverCore) stop() *serverReady {
	rd := c.reset()
	c.stopping = true
	if !c.store {
		return c.exit(ErrInterrupted)
	}
	c.send(tCheckpointReq, nil)
	rd.grace = true
	return rd
}

// graceOver takes the end of the wait for the checkpoint before stopping.
func (c *serverCore) graceOver() *serverReady {
	c.reset()
	return c.exit(fmt.Errorf("%w: the checkpoint before stopping did not end within %v", ErrInterrupted, stopWait))
}

// reportName names a shard server's report for errors.
func reportName(t rdma.Type) string {
	switch t {
	case tFinal:
		return "the final counters"
	case tCheckpointed:
		return "the checkpoint report"
	case tServerStats:
		return "the counters"
	case tConsumed:
		return "what the shards consumed"
	}
	return fmt.Sprintf("message %#x", t)
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
