package ps

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
)

// ServerConfig configures the server of one shard.
type ServerConfig struct {
	PS    Config    // the parameter server's configuration
	Shard int       // the shard this server runs
	Init  []float32 // the initial flat vector (the server copies its range)
	// QueueLen is the number of replies buffered per connection (default
	// 8). A learner has at most one pull waiting, so replies queue only
	// when a peer floods the shard with rejected messages; error replies
	// that do not fit are dropped and counted, weights never are.
	QueueLen int
	// OnUpdate, if set, is called on the shard goroutine after every
	// update; it must return quickly.
	OnUpdate func(Update)
	// Logger, if set, receives connection events at debug level.
	Logger *slog.Logger
}

// Server runs one shard core on one goroutine and connects it to learner
// connections. Each connection has a reader goroutine that feeds frames to
// the shard goroutine, and a writer goroutine that sends its replies; the
// core is touched by the shard goroutine only.
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
	stats chan chan Stats

	mu       sync.Mutex // guards conns, final, errDrops
	conns    map[Conn]bool
	final    Stats
	finalW   []float32
	errDrops uint64
}

// inbound is a frame from a connection, or its loss (f nil).
type inbound struct {
	f *Frame
	p *peer
}

// peer is one connection's writer side; out is written by the shard
// goroutine only, which closes it.
type peer struct {
	conn Conn
	out  chan *Frame
}

// NewServer validates cfg and builds the shard core.
func NewServer(cfg ServerConfig) (*Server, error) {
	core, err := NewShard(cfg.PS, cfg.Shard, cfg.Init)
	if err != nil {
		return nil, err
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 8
	}
	return &Server{cfg: cfg, core: core, in: make(chan inbound), done: make(chan struct{}),
		stats: make(chan chan Stats), conns: map[Conn]bool{}}, nil
}

// Serve accepts connections from ln and runs the shard until every learner
// has left (nil) or ctx ends (ctx.Err()). It then closes ln and every
// connection and waits for its goroutines.
func (s *Server) Serve(ctx context.Context, ln Listener) error {
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
func (s *Server) track(c Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		return false
	}
	s.conns[c] = true
	return true
}

// serveConn reads frames from c until it fails, feeding the shard loop;
// the writer goroutine sends the replies.
func (s *Server) serveConn(ctx context.Context, c Conn) {
	p := &peer{conn: c, out: make(chan *Frame, s.cfg.QueueLen)}
	var wg sync.WaitGroup
	wg.Go(func() {
		broken := false
		for f := range p.out {
			if !broken && c.Send(ctx, f) != nil {
				broken = true
				c.Close() // the reader sees the loss
			}
		}
	})
	for {
		f, err := c.Recv(ctx)
		if err != nil {
			if s.cfg.Logger != nil {
				s.cfg.Logger.Debug("ps: connection lost", "shard", s.cfg.Shard, "err", err)
			}
			f = nil
		}
		select {
		case s.in <- inbound{f, p}:
		case <-s.done:
			close(p.out) // the shard loop is gone: nobody else writes p.out
			wg.Wait()
			return
		}
		if f == nil {
			wg.Wait() // the shard loop closes p.out on the loss
			return
		}
	}
}

// run is the shard loop.
func (s *Server) run(ctx context.Context) error {
	route := make([]*peer, s.cfg.PS.Learners) // where each learner's weights go
	defer func() {
		s.mu.Lock()
		s.final, s.finalW = s.core.Stats(), slices.Clone(s.core.Weights())
		s.mu.Unlock()
		close(s.done)
	}()
	for {
		var in inbound
		select {
		case <-ctx.Done():
			return ctx.Err()
		case req := <-s.stats:
			req <- s.core.Stats()
			continue
		case in = <-s.in:
		}
		if in.f == nil {
			s.lost(in.p, route)
		} else {
			m := Msg{Type: MsgType(in.f.Type), Job: in.f.Job, Shard: int(in.f.Shard), Learner: in.f.Learner,
				Seq: in.f.Seq, Clock: in.f.Timestamp, Grad: in.f.Payload}
			// The message's connection becomes the learner's route, unless
			// the message is rejected (no hijacking by a bad peer) or is
			// the learner's leave.
			var prev *peer
			known := int64(m.Learner) < int64(len(route))
			if known {
				prev, route[m.Learner] = route[m.Learner], in.p
			}
			r := s.core.Step(m)
			switch {
			case !known:
			case rejected(r):
				route[m.Learner] = prev
			case m.Type == MsgLeave:
				route[m.Learner] = nil
			}
			s.deliver(r, in.p, route)
		}
		if s.core.Active() == 0 {
			return nil
		}
	}
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
		f := &Frame{Job: s.cfg.PS.Job, Learner: rep.To, Shard: uint32(s.cfg.Shard), Timestamp: rep.Clock, Seq: rep.Seq}
		if rep.Err != nil {
			f.Type, f.Data = FrameError, []byte(rep.Err.Error())
			select {
			case from.out <- f:
			default:
				s.mu.Lock()
				s.errDrops++
				s.mu.Unlock()
			}
			continue
		}
		if p := route[rep.To]; p != nil {
			f.Type, f.Payload = FrameWeights, slices.Clone(rep.Weights)
			p.out <- f
		}
	}
	if s.cfg.OnUpdate != nil {
		for _, u := range r.Updates {
			s.cfg.OnUpdate(u)
		}
	}
}

// Stats returns the shard's counters: live while the server runs, final
// after. ErrorsDropped counts error replies dropped on full queues.
func (s *Server) Stats() (st Stats, errorsDropped uint64) {
	req := make(chan Stats, 1)
	select {
	case s.stats <- req:
		st = <-req
	case <-s.done:
		s.mu.Lock()
		st = s.final.clone()
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return st, s.errDrops
}

// Weights returns a copy of the shard's weights once the server has
// stopped, nil before.
func (s *Server) Weights() []float32 {
	select {
	case <-s.done:
		return slices.Clone(s.finalW)
	default:
		return nil
	}
}
