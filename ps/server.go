package ps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// Errors of the shard server, sent to the peer in error replies and
// counted in ServerStats.
var (
	// ErrRefused: a learner message from a connection the learner is not
	// bound to (another connection of the same incarnation is alive), or
	// from an incarnation that is over (evicted, or older than the
	// learner's latest).
	ErrRefused = errors.New("learner message refused")
	// ErrNotHosted: a message for a shard this server does not run.
	ErrNotHosted = errors.New("shard not run by this server")
	// errSnapshotsOff answers an epoch snapshot request to a server
	// without ServerConfig.Snapshots.
	errSnapshotsOff = errors.New("this server keeps no epoch snapshots")
)

// ServerConfig configures a shard server.
type ServerConfig struct {
	PS     Config    // the parameter server's configuration
	Shards []int     // the shards this server runs (nil: every shard of PS)
	Init   []float32 // the initial flat vector (each shard copies its range)
	Codec  rdma.Codec
	// QueueLen is the number of replies buffered per connection (default
	// 8). A learner has at most one pull waiting per shard, so replies
	// queue only when a peer floods the server with rejected messages;
	// error replies that do not fit are dropped and counted, weights
	// never are.
	QueueLen int
	// Snapshots keeps a copy of each shard's weights at every epoch end
	// for an evaluator's TypeSnapshot requests: the weights right after
	// the shard consumed (accepted or dropped) its (e·P)-th gradient, P =
	// PS.DataSize/PS.Batch. Accepted gradients still pending in an update
	// (softsync with c₀ > 1) are not in them. A snapshot is kept until a
	// request for a later epoch or for the final weights arrives, so that
	// an evaluator that restarts can ask for the same epoch again.
	Snapshots bool
	// OnUpdate, if set, is called on the shard's goroutine after every
	// update, applied or refused (Update.Refused; u.Learners is valid
	// during the call only); it must return quickly.
	OnUpdate func(shard int, u Update)
	// OnLost, if set, is called when the connection a learner is bound to
	// is lost, with the learner and its incarnation; membership is then
	// the caller's decision (Evict). Without OnLost, the server evicts
	// the learner at once (a job with no coordinator).
	OnLost func(learner, incarnation uint32)
	// Logger, if set, receives connection events at debug level.
	Logger *slog.Logger
	// Restore, if set, starts each shard from its checkpoint instead of
	// Init: one per shard, in the order of Shards, taken under the same
	// PS configuration; Identities (optional) restores the learners'
	// incarnations (Server.Checkpoint).
	Restore    []*Checkpoint
	Identities []Identity
	// NewMsg, if set, allocates the memory each shard keeps its weights
	// in: the network's allocator (rdma.Network.NewMsg), so that a reply
	// goes out of memory the transport can lend its peer (shm's lend
	// segment: the learner copies its weights straight out of the shard's).
	NewMsg func(n int) *rdma.Msg
	// Inactive starts every shard with no active learner: learners join
	// when they connect. A shard server that replaces an earlier life of
	// its own sets it: learners that finished or left while it was away
	// would never leave again, and it would never be final.
	Inactive bool
	// UpdateThreads is the number of goroutines each shard spreads the
	// long passes of its work over: the check of a pushed gradient and
	// the passes of its update (Shard.SetParallel, with sgd.Spread). 0
	// or 1: each shard works on its own goroutine alone. The weights are
	// the same bits for any value; the shards of a server update at once
	// when their gradients arrive together, so that a server of k shards
	// keeps k·UpdateThreads goroutines busy.
	UpdateThreads int
}

// ServerStats are a shard server's counters.
type ServerStats struct {
	Shards        []Stats // per shard, in the order of ServerConfig.Shards
	BadFrames     uint64  // frames the transport, or a push's data, could not be decoded (answered with an error, skipped)
	ErrorsDropped uint64  // error replies dropped because the peer's queue was full
	Refused       uint64  // learner messages refused (ErrRefused)
	NotHosted     uint64  // messages for a shard this server does not run
	Lost          uint64  // connections lost while learners were bound to them
	// Detached counts weights replies still reading the shard's weights
	// lendWait after the shard was to change them: the shard went on with
	// a copy (a learner on a slow link, or one that stopped reading, whose
	// reply is bigger than the transport's buffers, or lies in shm's lend
	// segment, where the learner copies it straight out of the shard's
	// memory).
	Detached uint64
}

// Add adds o's counters to s's (Shards aside).
func (s *ServerStats) Add(o *ServerStats) {
	s.BadFrames += o.BadFrames
	s.ErrorsDropped += o.ErrorsDropped
	s.Refused += o.Refused
	s.NotHosted += o.NotHosted
	s.Lost += o.Lost
	s.Detached += o.Detached
}

// Server runs one or more shard cores behind one listener, each core on a
// goroutine of its own, so that shards update in parallel (each spreading
// its long passes over ServerConfig.UpdateThreads goroutines): it is the
// runtime of a ServerCore, whose decisions it carries out. Each
// connection has a reader goroutine, which checks the learner's identity
// and hands each message to its shard's goroutine, and a writer goroutine
// that sends the replies. Received messages are released once stepped
// (the core never keeps a gradient); a weights reply lends the transport
// the shard's own weights (rdma.Msg.Borrow), and the shard's goroutine
// waits until the connection's writer has sent it, before its next Step
// changes them. A learner's binding to a connection is checked by the
// connection's reader, under the server's lock only for the first message
// of an incarnation on that connection, or after a binding changed.
//
// Identity: a learner (id and incarnation, from the message's Seq) is
// bound to the connection of its first message; while that connection is
// alive, the same incarnation's messages from any other connection are
// refused (ErrRefused): a second connection never evicts the first. A
// higher incarnation takes the learner over (a restarted learner), and an
// incarnation that is over (Evict, or older than the latest) is refused.
// A lost connection unbinds its learners, which may reconnect; whether a
// learner has left the job is decided by the caller through Evict (see
// ServerConfig.OnLost), or by the learner's own MsgLeave.
//
// Routing: weights for learner l go to the connection of l's last
// accepted message on that shard (a rejected message never moves a route).
//
// Lifecycle: Serve runs until Stop or its context ends. Finish announces
// that the job's data is done; once every learner has then left every
// shard, the shards are final (Final is closed): their pending gradients
// applied, their final weights kept for Weights and for TypeSnapshot
// requests of epoch 0.
type Server struct {
	cfg     ServerConfig
	core    *ServerCore[*peer] // its identities under mu; each shard on its loop's goroutine
	loops   []*shardLoop
	byShard map[int]*shardLoop
	ctrl    chan struct{} // closed when Serve starts its loops
	ending  chan struct{} // closed when Serve stops its loops
	stopped chan struct{} // closed when Serve has returned
	stop    chan struct{}
	stopMu  sync.Once
	final   chan struct{} // closed when every shard is final
	nFinal  atomic.Int32
	done    atomic.Bool // Finish was called

	badFrames, errorsDropped, refused, notHosted, lost, detached atomic.Uint64
	// retiring runs the goroutines that release the memory of weights a
	// shard moved away from while writers still sent them (lends.retire).
	retiring sync.WaitGroup

	mu    sync.Mutex // guards conns and the core's identities
	conns map[rdma.Conn]bool
	// bindGen counts the changes of the identities (written under mu): a
	// connection's admission of a learner holds while it is unchanged.
	bindGen atomic.Uint64
}

// peer is one connection's writer side: replies queue on out until the
// writer sends them; gone is closed when the connection is lost, exited
// when the writer has returned. admitted is the reader's record of the
// learners this connection speaks for.
type peer struct {
	conn     rdma.Conn
	out      chan reply
	gone     chan struct{}
	exited   chan struct{}
	admitted []admission // by learner id; reader goroutine only
}

// reply is a message queued for a peer's writer; done, if not nil,
// receives the peer once Send has returned, so that a shard goroutine that
// lent the message its weights (rdma.Msg.Borrow) knows when it may change
// them (lends).
type reply struct {
	m    *rdma.Msg
	done chan *peer
}

// admission is a connection's record that it may speak for a learner in
// incarnation inc, as of the server's binding generation gen (valid when
// gen is not 0).
type admission struct {
	inc uint32
	gen uint64
}

// inbound is a message for a shard goroutine, from peer p.
type inbound struct {
	m *rdma.Msg
	p *peer
}

// NewServer validates cfg and builds the shard cores.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Codec.Validate(); err != nil {
		return nil, err
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 8
	}
	if cfg.UpdateThreads < 0 {
		return nil, param.Fieldf("UpdateThreads", "must be ≥ 0, got %d", cfg.UpdateThreads)
	}
	core, err := NewServerCore[*peer](cfg, newLife)
	if err != nil {
		return nil, err
	}
	par := sgd.Spread(cfg.UpdateThreads) // shared: each call starts its own goroutines
	for _, sh := range core.Shards() {
		sh.Core().SetParallel(par)
	}
	cfg.Shards = core.cfg.Shards
	s := &Server{cfg: cfg, core: core, byShard: map[int]*shardLoop{}, ctrl: make(chan struct{}), ending: make(chan struct{}), stopped: make(chan struct{}),
		stop: make(chan struct{}), final: make(chan struct{}), conns: map[rdma.Conn]bool{}}
	for _, sh := range core.Shards() {
		l := &shardLoop{s: s, sh: sh, core: sh.Core(), in: make(chan inbound), do: make(chan func()), lends: newLends(cfg.PS.Learners)}
		s.loops = append(s.loops, l)
		s.byShard[sh.Core().Index()] = l
	}
	// Each shard copied its range: the server keeps neither the initial
	// vector nor the checkpoints.
	s.cfg.Init, s.cfg.Restore, s.cfg.Identities = nil, nil, nil
	return s, nil
}

// Shards returns the shards the server runs.
func (s *Server) Shards() []int { return slices.Clone(s.cfg.Shards) }

// newLife draws a shard's life: a random nonzero number, new at every
// start of a server (2⁻⁶⁴ odds of meeting an earlier one).
func newLife() uint64 {
	for {
		if v := rand.Uint64(); v != 0 {
			return v
		}
	}
}

// Lives returns each shard's life (Shard.Life), in the order of Shards:
// drawn at random by NewServer, so that a gradient computed on weights
// the shard served before a restart is told apart.
func (s *Server) Lives() []uint64 {
	lives := make([]uint64, len(s.loops))
	for i, l := range s.loops {
		lives[i] = l.core.Life()
	}
	return lives
}

// Serve accepts connections from ln and runs the shards until Stop is
// called (nil) or ctx ends (ctx.Err()). It then closes ln and every
// connection and waits for its goroutines. Serve may be called once.
func (s *Server) Serve(ctx context.Context, ln rdma.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, l := range s.loops {
		wg.Go(func() { l.run(ctx) })
	}
	close(s.ctrl)
	wg.Go(func() {
		for {
			c, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			if !s.track(c) {
				c.Close()
				return
			}
			wg.Go(func() { s.serveConn(ctx, c) })
		}
	})
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.stop:
	}
	close(s.ending)
	cancel()
	ln.Close()
	s.mu.Lock()
	conns := slices.Collect(maps.Keys(s.conns))
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	s.retiring.Wait() // the writers have ended: at once
	close(s.stopped)
	return err
}

// Stop ends Serve. It may be called any number of times, from any
// goroutine.
func (s *Server) Stop() { s.stopMu.Do(func() { close(s.stop) }) }

// Finish announces that the job's data is done: no learner will take a
// step after it leaves. Once every learner has left every shard, the
// shards are final (see Final).
func (s *Server) Finish() {
	s.done.Store(true)
	s.each(func(l *shardLoop) { l.finish() })
}

// Final returns a channel closed once Finish was called and every learner
// has left every shard of the server.
func (s *Server) Final() <-chan struct{} { return s.final }

// Evict removes incarnation inc of learner from every shard (the
// coordinator's decision that it has left: lost, or gone silent). Its
// gradients already accepted stay in the pending update; its messages,
// and those of any earlier incarnation, are refused from then on. An
// Evict of an incarnation older than the learner's latest does nothing.
func (s *Server) Evict(learner, inc uint32) {
	s.mu.Lock()
	evicted := s.core.Evict(learner, inc)
	if evicted {
		s.bindGen.Add(1)
	}
	s.mu.Unlock()
	if evicted {
		s.each(func(l *shardLoop) {
			// A newer incarnation admitted since (its join already
			// stepped, or queued behind this) keeps its membership.
			s.mu.Lock()
			dead := s.core.Dead(learner, inc)
			s.mu.Unlock()
			if dead {
				l.evict(learner)
			}
		})
	}
}

// each runs f on every shard's goroutine, one after the other, and
// waits for it; it does nothing for loops that are not running.
func (s *Server) each(f func(*shardLoop)) {
	for _, l := range s.loops {
		s.each1(l, func() { f(l) })
	}
}

// Stats returns the server's counters: live while Serve runs, final once
// it has returned (while Serve is stopping, it waits for it to return).
// Called before Serve, it waits for Serve to start. It is safe to call
// from any goroutine but those Serve waits for.
func (s *Server) Stats() ServerStats {
	st := ServerStats{BadFrames: s.badFrames.Load(), ErrorsDropped: s.errorsDropped.Load(), Refused: s.refused.Load(),
		NotHosted: s.notHosted.Load(), Lost: s.lost.Load(), Detached: s.detached.Load()}
	for _, l := range s.loops {
		var ls Stats
		if !s.each1(l, func() { ls = l.core.Stats() }) {
			<-s.stopped // the loop has ended and written last
			ls = l.last.clone()
		}
		st.Shards = append(st.Shards, ls)
	}
	return st
}

// each1 runs f on l's goroutine, waiting for Serve to start the loops,
// and reports whether it ran: not once Serve is stopping.
func (s *Server) each1(l *shardLoop, f func()) bool {
	select {
	case <-s.ctrl:
	case <-s.ending:
		return false
	}
	done := make(chan struct{})
	select {
	case l.do <- func() { f(); close(done) }:
		<-done
		return true
	case <-s.ending:
		return false
	}
}

// Identity is the server's view of one learner's identity, for
// checkpoints: its latest incarnation and whether that one was evicted.
type Identity struct {
	Incarnation uint32
	Evicted     bool
}

// Checkpoint returns each shard's durable state (Shard.Checkpoint, taken
// on the shard's goroutine between two messages), in the order of
// Shards, and the learners' identities (by learner id). Shards do not
// synchronise: their checkpoints are taken one after the other. It
// returns nil once Serve has returned.
func (s *Server) Checkpoint() ([]*Checkpoint, []Identity) {
	var cps []*Checkpoint
	for _, l := range s.loops {
		var cp *Checkpoint
		if !s.each1(l, func() { cp = l.core.Checkpoint() }) {
			return nil, nil
		}
		cps = append(cps, cp)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return cps, s.core.Identities()
}

// Identities returns the learners' identities, by learner id: each
// one's latest incarnation and whether that one was evicted.
func (s *Server) Identities() []Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core.Identities()
}

// Consumed returns, per shard in the order of Shards, the mini-batch ids
// the shard has consumed (accepted or dropped), as Shard.Consumed gives
// them, each taken on the shard's goroutine between two messages: what a
// restarted coordinator needs to know which mini-batches the shards have.
// It returns nil once Serve has returned.
func (s *Server) Consumed() [][]Interval {
	var out [][]Interval
	for _, l := range s.loops {
		var iv []Interval
		if !s.each1(l, func() { iv = l.core.Consumed() }) {
			return nil
		}
		out = append(out, iv)
	}
	return out
}

// Weights returns a copy of each shard's final weights, in the order of
// Shards, once Final is closed; nil before.
func (s *Server) Weights() [][]float32 {
	select {
	case <-s.final:
	default:
		return nil
	}
	var ws [][]float32
	for _, l := range s.loops {
		_, w := l.sh.Final()
		ws = append(ws, slices.Clone(w))
	}
	return ws
}

// track registers c for closing at the end; false once the server ended.
func (s *Server) track(c rdma.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		return false
	}
	s.conns[c] = true
	return true
}

// admit checks that p may speak for learner in incarnation inc and binds
// it (ServerCore.Bind). It runs on p's reader goroutine and takes the
// server's lock only when p has not spoken for that incarnation yet, or
// when a binding changed since it last did.
func (s *Server) admit(learner, inc uint32, p *peer) error {
	a := &p.admitted[learner]
	if a.gen != 0 && a.inc == inc && a.gen == s.bindGen.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed, err := s.core.Bind(learner, inc, p)
	if err != nil {
		return err
	}
	if changed {
		s.bindGen.Add(1) // voids the admissions recorded before
	}
	*a = admission{inc: inc, gen: s.bindGen.Load()}
	return nil
}

// serveConn reads messages from c until it fails, handing them to the
// shard goroutines; its writer goroutine sends the replies.
func (s *Server) serveConn(ctx context.Context, c rdma.Conn) {
	p := &peer{conn: c, out: make(chan reply, s.cfg.QueueLen), gone: make(chan struct{}), exited: make(chan struct{}),
		admitted: make([]admission, s.cfg.PS.Learners)}
	var wg sync.WaitGroup
	wg.Go(func() { p.write(ctx) })
	for {
		m, err := c.Recv(ctx)
		if err != nil {
			if rdma.Recoverable(err) && ctx.Err() == nil {
				s.badFrames.Add(1)
				s.reject(p, errorMsg(0, 0, err))
				continue
			}
			if s.cfg.Logger != nil {
				s.cfg.Logger.Debug("ps: connection lost", "peer", c.RemoteAddr(), "err", err)
			}
			break
		}
		if !s.dispatch(ctx, m, p) {
			break
		}
	}
	close(p.gone)
	c.Close()
	wg.Wait()
	s.connLost(p)
}

// dispatch checks one received message and hands it to its shard's
// goroutine; false once ctx ended.
func (s *Server) dispatch(ctx context.Context, m *rdma.Msg, p *peer) bool {
	why := Admitted
	sh, err := s.core.Shard(int(m.Shard), describe(m))
	if err != nil {
		why = RefusedShard
	} else if err = checkPushData(m); err != nil {
		why, err = RefusedFrame, fmt.Errorf("%s: %w", describe(m), err)
	} else if l, inc, ok := s.core.Speaker(coreMsg(m)); ok {
		if err = s.admit(l, inc, p); err != nil {
			why, err = RefusedID, fmt.Errorf("%s: %w", describe(m), err)
		}
	}
	if err != nil {
		[]*atomic.Uint64{RefusedShard: &s.notHosted, RefusedFrame: &s.badFrames, RefusedID: &s.refused}[why].Add(1)
		s.reject(p, errorMsg(int(m.Shard), m.Seq, err))
		m.Release()
		return true
	}
	select {
	case s.byShard[sh.Core().Index()].in <- inbound{m, p}:
		return true
	case <-ctx.Done():
		m.Release()
		return false
	}
}

// reject queues an error reply to p without blocking; it is dropped and
// counted if p's queue is full.
func (s *Server) reject(p *peer, m *rdma.Msg) {
	if !p.trySend(m) {
		s.errorsDropped.Add(1)
	}
}

// connLost unbinds the learners bound to p and reports them (or evicts
// them, without OnLost).
func (s *Server) connLost(p *peer) {
	s.mu.Lock()
	gone := s.core.Lost(p)
	if len(gone) > 0 {
		s.bindGen.Add(1)
	}
	if s.conns != nil {
		delete(s.conns, p.conn)
	}
	s.mu.Unlock()
	select {
	case <-s.ending: // the server closed it
		return
	default:
	}
	if len(gone) > 0 {
		s.lost.Add(1)
	}
	for _, g := range gone {
		if s.cfg.OnLost != nil {
			s.cfg.OnLost(g.Learner, g.Incarnation)
		} else {
			s.Evict(g.Learner, g.Incarnation)
		}
	}
}

// String names p's peer (its address), for errors.
func (p *peer) String() string { return p.conn.RemoteAddr() }

// write sends p's replies until the connection is lost.
func (p *peer) write(ctx context.Context) {
	defer close(p.exited)
	for {
		select {
		case r := <-p.out:
			err := p.conn.Send(ctx, r.m) // Send owns m, also on failure
			if r.done != nil {
				r.done <- p
			}
			if err != nil {
				p.conn.Close() // the reader sees the loss
				return
			}
		case <-p.gone:
			return
		}
	}
}

// trySend queues m without blocking; false (m released) if the queue is
// full or the connection is gone.
func (p *peer) trySend(m *rdma.Msg) bool {
	select {
	case p.out <- reply{m: m}:
		return true
	case <-p.gone:
	default:
	}
	m.Release()
	return false
}

// send queues m, waiting behind a peer that stopped reading; false (m
// released) if the connection is gone or ctx ended.
func (p *peer) send(ctx context.Context, m *rdma.Msg) bool { return p.queue(ctx, reply{m: m}) }

// queue queues r; false (r.m released) if the connection is gone or ctx
// ended.
func (p *peer) queue(ctx context.Context, r reply) bool {
	select {
	case p.out <- r:
		return true
	case <-p.gone:
	case <-ctx.Done():
	}
	r.m.Release()
	return false
}
