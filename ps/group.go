package ps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/softsync/softsync/rdma"
)

// Group runs the shard servers of one parameter server in this process,
// each on its own listener of one rdma.Network: a job's parameter server
// when everything runs in one process, and the harness of this package's
// tests. Learners connect with Group.Dial.
type Group struct {
	cfg     GroupConfig
	servers []*Server
	addrs   []string // per shard: its server's address
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
}

// GroupConfig configures a Group.
type GroupConfig struct {
	PS      Config
	Init    []float32    // the initial flat vector
	Network rdma.Network // the transport; its Options.Job must be PS.Job
	// Addr is the listen address of every server ("" for inmem,
	// "127.0.0.1:0" for loopback TCP: each server gets its own port).
	Addr string
	// Servers is the number of shard servers (0 means 1); shard k runs on
	// server k mod Servers.
	Servers   int
	Codec     rdma.Codec // encoding of weights replies
	Snapshots bool       // see ServerConfig
	// UpdateThreads is each server's ServerConfig.UpdateThreads.
	UpdateThreads int
	OnUpdate      func(shard int, u Update)
	OnLost        func(learner, incarnation uint32)
}

// StartGroup starts the servers and returns once all listen. They run
// until Wait (after Finish) or ctx ends.
func StartGroup(ctx context.Context, cfg GroupConfig) (*Group, error) {
	n := max(cfg.Servers, 1)
	if n > cfg.PS.Shards {
		return nil, fmt.Errorf("ps: %d servers for %d shards: %w", n, cfg.PS.Shards, ErrInvalidConfig)
	}
	g := &Group{cfg: cfg, addrs: make([]string, cfg.PS.Shards)}
	var lns []rdma.Listener
	fail := func(err error) (*Group, error) {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, err
	}
	for i := range n {
		var shards []int
		for k := i; k < cfg.PS.Shards; k += n {
			shards = append(shards, k)
		}
		// Listening first opens the network's device, if it has one, so
		// that the shards' weights come from registered memory.
		ln, err := cfg.Network.Listen(cfg.Addr)
		if err != nil {
			return fail(fmt.Errorf("ps: server %d: %w", i, err))
		}
		lns = append(lns, ln)
		s, err := NewServer(ServerConfig{PS: cfg.PS, Shards: shards, Init: cfg.Init, Codec: cfg.Codec,
			Snapshots: cfg.Snapshots, OnUpdate: cfg.OnUpdate, OnLost: cfg.OnLost, NewMsg: cfg.Network.NewMsg, UpdateThreads: cfg.UpdateThreads})
		if err != nil {
			return fail(fmt.Errorf("ps: server %d: %w", i, err))
		}
		for _, k := range shards {
			g.addrs[k] = ln.Addr()
		}
		g.servers = append(g.servers, s)
	}
	for i, s := range g.servers {
		g.wg.Go(func() {
			if err := s.Serve(ctx, lns[i]); err != nil {
				g.mu.Lock()
				g.errs = append(g.errs, fmt.Errorf("ps: server %d: %w", i, err))
				g.mu.Unlock()
			}
		})
	}
	return g, nil
}

// Addrs returns, per shard, the address of the server that runs it.
func (g *Group) Addrs() []string { return slices.Clone(g.addrs) }

// Servers returns the group's servers.
func (g *Group) Servers() []*Server { return slices.Clone(g.servers) }

// Dial connects learner to every server of the group and returns its
// client (incarnation 0).
func (g *Group) Dial(ctx context.Context, net rdma.Network, learner uint32, codec rdma.Codec) (*Client, error) {
	return Dial(ctx, net, g.addrs, ClientConfig{Learner: learner, Protocol: g.cfg.PS.Protocol, Total: len(g.cfg.Init),
		Shards: g.cfg.PS.Shards, Codec: codec})
}

// Finish calls Finish on every server.
func (g *Group) Finish() {
	for _, s := range g.servers {
		s.Finish()
	}
}

// Evict calls Evict on every server.
func (g *Group) Evict(learner, inc uint32) {
	for _, s := range g.servers {
		s.Evict(learner, inc)
	}
}

// Final returns a channel closed once every server is final.
func (g *Group) Final() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for _, s := range g.servers {
			<-s.Final()
		}
		close(done)
	}()
	return done
}

// Wait waits until every server is final (see Finish) or has ended,
// stops them and returns their errors, joined.
func (g *Group) Wait() error {
	for _, s := range g.servers {
		select {
		case <-s.Final():
		case <-s.stopped:
		}
		s.Stop()
	}
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.errs...)
}

// Weights returns the final flat vector once every server is final, nil
// before.
func (g *Group) Weights() []float32 {
	w := make([]float32, len(g.cfg.Init))
	rs, _ := Ranges(len(g.cfg.Init), g.cfg.PS.Shards)
	for _, s := range g.servers {
		ws := s.Weights()
		if ws == nil {
			return nil
		}
		for i, k := range s.Shards() {
			copy(w[rs[k].Lo:], ws[i])
		}
	}
	return w
}

// Stats returns each shard's counters, in shard order, and the servers'
// own counters summed.
func (g *Group) Stats() ([]Stats, ServerStats) {
	shards := make([]Stats, g.cfg.PS.Shards)
	var sum ServerStats
	for _, s := range g.servers {
		st := s.Stats()
		for i, k := range s.Shards() {
			shards[k] = st.Shards[i]
		}
		sum.Add(&st)
	}
	return shards, sum
}

// Dial connects a client to the shard servers at addrs (addrs[k] is the
// address of the server that runs shard k; a server running several
// shards is dialled once) over net.
func Dial(ctx context.Context, net rdma.Network, addrs []string, cfg ClientConfig) (*Client, error) {
	conns := make([]rdma.Conn, len(addrs))
	byAddr := map[string]rdma.Conn{}
	closeAll := func() error {
		var errs []error
		for _, c := range byAddr {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	for k, a := range addrs {
		c := byAddr[a]
		if c == nil {
			var err error
			if c, err = net.Dial(ctx, a); err != nil {
				return nil, errors.Join(fmt.Errorf("ps client %d: shard %d: %w", cfg.Learner, k, err), closeAll())
			}
			byAddr[a] = c
		}
		conns[k] = c
	}
	if cfg.NewMsg == nil {
		cfg.NewMsg = net.NewMsg
	}
	c, err := NewClient(cfg, conns)
	if err != nil {
		return nil, errors.Join(err, closeAll())
	}
	return c, nil
}
