package ps

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/softsync/softsync/rdma"
)

// Group runs every shard server of one parameter server in this process,
// each on its own listener of one rdma.Network (the in-process deployment);
// learners connect with Group.Dial. Across processes, each server process
// runs NewServer and Serve for its shard, and learners connect with Dial.
type Group struct {
	cfg     Config
	total   int
	servers []*Server
	addrs   []string
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
}

// GroupConfig configures a Group.
type GroupConfig struct {
	PS      Config
	Init    []float32    // the initial flat vector
	Network rdma.Network // the transport; its Options.Job must be PS.Job
	// Addr is the listen address for every shard ("" for inmem,
	// "127.0.0.1:0" for loopback TCP: each shard gets its own port).
	Addr     string
	Codec    rdma.Codec   // encoding of weights replies
	OnUpdate func(Update) // see ServerConfig; called from each shard's goroutine
	// OnPush is ServerConfig.OnPush for every shard, called from each
	// shard's goroutine with the shard's index.
	OnPush func(shard int, consumed uint64, w []float32)
}

// StartGroup starts one Server per shard and returns once all listen. The
// servers run until every learner has left or ctx ends; Wait waits for
// them.
func StartGroup(ctx context.Context, cfg GroupConfig) (*Group, error) {
	g := &Group{cfg: cfg.PS, total: len(cfg.Init)}
	var lns []rdma.Listener
	for k := range cfg.PS.Shards {
		scfg := ServerConfig{PS: cfg.PS, Shard: k, Init: cfg.Init, Codec: cfg.Codec, OnUpdate: cfg.OnUpdate}
		if cfg.OnPush != nil {
			scfg.OnPush = func(n uint64, w []float32) { cfg.OnPush(k, n, w) }
		}
		s, err := NewServer(scfg)
		if err == nil {
			var ln rdma.Listener
			if ln, err = cfg.Network.Listen(cfg.Addr); err == nil {
				g.servers, g.addrs, lns = append(g.servers, s), append(g.addrs, ln.Addr()), append(lns, ln)
				continue
			}
		}
		for _, ln := range lns {
			ln.Close()
		}
		return nil, fmt.Errorf("ps: shard %d: %w", k, err)
	}
	for k, s := range g.servers {
		g.wg.Go(func() {
			if err := s.Serve(ctx, lns[k]); err != nil {
				g.mu.Lock()
				g.errs = append(g.errs, fmt.Errorf("ps: shard %d: %w", k, err))
				g.mu.Unlock()
			}
		})
	}
	return g, nil
}

// Addrs returns the listen address of each shard, in shard order.
func (g *Group) Addrs() []string { return g.addrs }

// Dial connects learner to every shard of the group and returns its client.
func (g *Group) Dial(ctx context.Context, net rdma.Network, learner uint32, codec rdma.Codec) (*Client, error) {
	return Dial(ctx, net, g.addrs, ClientConfig{Learner: learner, Protocol: g.cfg.Protocol, Total: g.total, Shards: len(g.addrs), Codec: codec})
}

// Wait waits for every server to end and returns their errors, joined.
func (g *Group) Wait() error {
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.errs...)
}

// Weights returns the final flat vector once every server has ended (after
// Wait), nil before.
func (g *Group) Weights() []float32 {
	w := make([]float32, g.total)
	rs, _ := Ranges(g.total, len(g.servers))
	for k, s := range g.servers {
		sw := s.Weights()
		if sw == nil {
			return nil
		}
		copy(w[rs[k].Lo:], sw)
	}
	return w
}

// Stats returns each shard server's counters.
func (g *Group) Stats() []ServerStats {
	st := make([]ServerStats, len(g.servers))
	for k, s := range g.servers {
		st[k] = s.Stats()
	}
	return st
}

// Dial connects a client to the shard servers at addrs (addrs[k] serves
// shard k) over net.
func Dial(ctx context.Context, net rdma.Network, addrs []string, cfg ClientConfig) (*Client, error) {
	var conns []rdma.Conn
	for _, a := range addrs {
		c, err := net.Dial(ctx, a)
		if err != nil {
			err = fmt.Errorf("ps client %d: %w", cfg.Learner, err)
			return nil, errors.Join(err, (&Client{conns: conns}).Close())
		}
		conns = append(conns, c)
	}
	c, err := NewClient(cfg, conns)
	if err != nil {
		return nil, errors.Join(err, (&Client{conns: conns}).Close())
	}
	return c, nil
}
