package ps

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/softsync/softsync/rdma"
)

// ServerConfig configures the server of one shard.
type ServerConfig struct {
	PS    Config     // the parameter server's configuration
	Shard int        // the shard this server runs
	Init  []float32  // the initial flat vector (the server copies its range)
	Codec rdma.Codec // encoding of the weights it sends (zero value: none)
	// QueueLen is the number of replies buffered per connection (default
	// 8). A learner has at most one pull waiting, so replies queue only
	// when a peer floods the shard with rejected messages; error replies
	// that do not fit are dropped and counted, weights never are.
	QueueLen int
	// OnUpdate, if set, is called on the shard goroutine after every
	// update; it must return quickly.
	OnUpdate func(Update)
	// OnPush, if set, is called on the shard goroutine after every Step
	// that accepted or dropped a gradient, with the number of gradients
	// the shard has consumed so far (accepted plus dropped, each standing
	// for one mini-batch of data; duplicates and rejected pushes do not
	// count) and a read-only view of the shard's weights after that Step,
	// valid during the call only. Accepted gradients still pending in the
	// next update (softsync with c > 1) are not in those weights. It must
	// return quickly: copy what it needs.
	OnPush func(consumed uint64, w []float32)
	// Logger, if set, receives connection events at debug level.
	Logger *slog.Logger
}

// ServerStats are a shard's counters plus the runtime's own.
type ServerStats struct {
	Stats
	BadFrames     uint64 // frames the transport could not decode (answered with an error, skipped)
	ErrorsDropped uint64 // error replies dropped because the peer's queue was full
}

// Server runs one shard core on one goroutine and connects it to learner
// connections. Each connection has a reader goroutine that feeds messages
// to the shard goroutine, and a writer goroutine that sends its replies;
// the core is touched by the shard goroutine only. Received messages are
// released once stepped (the core never keeps a gradient); a weights reply
// is a pooled message holding a copy of the shard's weights taken in the
// Step that served the pull.
//
// Routing: weights for learner l go to the connection of l's last
// accepted message (a rejected message never moves a route, so a bad peer
// cannot divert another learner's weights). A lost connection becomes
// MsgLeave for the learners routed to it. Serve returns once every learner
// has left.
type Server struct {
	cfg   ServerConfig
	core  *Shard
	in    chan inbound
	done  chan struct{} // closed when the shard loop ends
	stats chan chan ServerStats

	mu       sync.Mutex // guards conns and final
	conns    map[rdma.Conn]bool
	final    ServerStats
	finW     []float32
	extra    ServerStats     // runtime counters; shard goroutine only
	consumed uint64          // gradients accepted or dropped, as last reported to OnPush; shard goroutine only
	ctx      context.Context // of the running Serve; shard goroutine only
}

// inbound is a message from a connection, a recoverable receive error
// (m nil, err set), or the connection's loss (both nil).
type inbound struct {
	m   *rdma.Msg
	err error
	p   *peer
}

// peer is one connection's writer side; out is written and closed by the
// shard goroutine only, except after the loop ended (see serveConn).
type peer struct {
	conn rdma.Conn
	out  chan *rdma.Msg
}

// NewServer validates cfg and builds the shard core.
func NewServer(cfg ServerConfig) (*Server, error) {
	core, err := NewShard(cfg.PS, cfg.Shard, cfg.Init)
	if err != nil {
		return nil, err
	}
	if err := cfg.Codec.Validate(); err != nil {
		return nil, err
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 8
	}
	return &Server{cfg: cfg, core: core, in: make(chan inbound), done: make(chan struct{}),
		stats: make(chan chan ServerStats), conns: map[rdma.Conn]bool{}}, nil
}

// Serve accepts connections from ln and runs the shard until every learner
// has left (nil) or ctx ends (ctx.Err()). It then closes ln and every
// connection and waits for its goroutines.
func (s *Server) Serve(ctx context.Context, ln rdma.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
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
	err := s.run(ctx)
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
	return err
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

// serveConn reads messages from c until it fails, feeding the shard loop;
// its writer goroutine sends the replies.
func (s *Server) serveConn(ctx context.Context, c rdma.Conn) {
	p := &peer{conn: c, out: make(chan *rdma.Msg, s.cfg.QueueLen)}
	var wg sync.WaitGroup
	wg.Go(func() {
		broken := false
		for m := range p.out {
			if broken {
				m.Release()
			} else if c.Send(ctx, m) != nil { // Send owns m, also on failure
				broken = true
				c.Close() // the reader sees the loss
			}
		}
	})
	for {
		m, err := c.Recv(ctx)
		in := inbound{m: m, p: p}
		switch {
		case err == nil:
		case rdma.Recoverable(err) && ctx.Err() == nil:
			in.err = err
		default:
			if s.cfg.Logger != nil {
				s.cfg.Logger.Debug("ps: connection lost", "shard", s.cfg.Shard, "peer", c.RemoteAddr(), "err", err)
			}
		}
		select {
		case s.in <- in:
		case <-s.done:
			if m != nil {
				m.Release()
			}
			close(p.out) // the shard loop is gone: nobody else writes p.out
			wg.Wait()
			return
		}
		if m == nil && in.err == nil {
			wg.Wait() // the shard loop closes p.out on the loss
			return
		}
	}
}

// run is the shard loop.
func (s *Server) run(ctx context.Context) error {
	s.ctx = ctx
	route := make([]*peer, s.cfg.PS.Learners) // where each learner's weights go
	defer func() {
		s.mu.Lock()
		s.final, s.finW = s.snapshot(), slices.Clone(s.core.Weights())
		s.mu.Unlock()
		close(s.done)
	}()
	for {
		var in inbound
		select {
		case <-ctx.Done():
			return ctx.Err()
		case req := <-s.stats:
			req <- s.snapshot()
			continue
		case in = <-s.in:
		}
		switch {
		case in.err != nil:
			s.extra.BadFrames++
			s.sendError(in.p, 0, in.err)
		case in.m == nil:
			s.lost(in.p, route)
		default:
			s.step(in.m, in.p, route)
		}
		if s.core.Active() == 0 {
			return nil
		}
	}
}

// step feeds one received message to the core and releases it.
func (s *Server) step(rm *rdma.Msg, from *peer, route []*peer) {
	m := Msg{Type: MsgType(rm.Type), Job: rm.Job, Shard: int(rm.Shard), Learner: rm.Learner,
		Seq: rm.Seq, Clock: rm.Timestamp, Grad: rm.Payload}
	// The message's connection becomes the learner's route, unless the
	// message is rejected or is the learner's leave.
	var prev *peer
	known := int64(m.Learner) < int64(len(route))
	if known {
		prev, route[m.Learner] = route[m.Learner], from
	}
	r := s.core.Step(m)
	rm.Release()
	switch {
	case !known:
	case rejected(r):
		route[m.Learner] = prev
	case m.Type == MsgLeave:
		route[m.Learner] = nil
	}
	s.deliver(r, from, route)
	if s.cfg.OnPush != nil {
		if n := s.core.stats.Gradients + s.core.stats.Dropped; n != s.consumed {
			s.consumed = n
			s.cfg.OnPush(n, s.core.Weights())
		}
	}
}

func (s *Server) snapshot() ServerStats {
	st := s.extra
	st.Stats = s.core.Stats()
	return st
}

// rejected reports whether the message of the Step that returned r was
// rejected: its error reply is the only error a Step produces.
func rejected(r Ready) bool {
	for _, rep := range r.Replies {
		if rep.Err != nil {
			return true
		}
	}
	return false
}

// lost turns the loss of p into MsgLeave for every learner routed to it.
func (s *Server) lost(p *peer, route []*peer) {
	for l, rp := range route {
		if rp == p {
			route[l] = nil
			s.deliver(s.core.Step(Msg{Type: MsgLeave, Job: s.cfg.PS.Job, Shard: s.cfg.Shard, Learner: uint32(l)}), p, route)
		}
	}
	close(p.out)
}

// deliver sends the replies of one Step (errors to from, the connection of
// the message) and reports the updates.
func (s *Server) deliver(r Ready, from *peer, route []*peer) {
	for _, rep := range r.Replies {
		if rep.Err != nil {
			s.sendError(from, rep.Seq, rep.Err)
			continue
		}
		p := route[rep.To]
		if p == nil {
			continue
		}
		m := rdma.NewMsg(len(rep.Weights))
		copy(m.Payload, rep.Weights)
		m.Type, m.Codec, m.Learner, m.Shard, m.Timestamp, m.Seq = TypeWeights, s.cfg.Codec, rep.To, uint32(s.cfg.Shard), rep.Clock, rep.Seq
		select { // blocks only behind a peer that stopped reading
		case p.out <- m:
		case <-s.ctx.Done():
			m.Release()
		}
	}
	if s.cfg.OnUpdate != nil {
		for _, u := range r.Updates {
			s.cfg.OnUpdate(u)
		}
	}
}

// sendError queues an error reply to p without blocking; it is dropped
// and counted if p's queue is full.
func (s *Server) sendError(p *peer, seq uint64, err error) {
	m := rdma.NewErrorMsg(err)
	m.Shard, m.Seq = uint32(s.cfg.Shard), seq
	select {
	case p.out <- m:
	default:
		m.Release()
		s.extra.ErrorsDropped++
	}
}

// Stats returns the server's counters: live while it runs, final after.
func (s *Server) Stats() ServerStats {
	req := make(chan ServerStats, 1)
	select {
	case s.stats <- req:
		return <-req
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		st := s.final
		st.Stats = st.Stats.clone()
		return st
	}
}

// Weights returns a copy of the shard's weights once the server has
// stopped, nil before.
func (s *Server) Weights() []float32 {
	select {
	case <-s.done:
		return slices.Clone(s.finW)
	default:
		return nil
	}
}
