package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/rdma"
)

// This file runs the roles of a job of several processes (docs/cluster.md):
// the head (coordinator and evaluator, which reports the job), shard
// servers and learners. The commands ps, learner, eval, launch and
// train --cluster auto wire them.

// jobNetwork opens the transport of a multi-process job, authenticated by
// secret, logging refused connections (at most a line per authLogEvery)
// and the transport chosen per peer.
func (app *App) jobNetwork(f *trainFlags, st *trainSetup, secret []byte) (rdma.Network, error) {
	st.job = jobID(secret)
	opts := rdma.Options{Job: jobID(secret), Secret: secret, Insecure: f.cluster.insecure, OnConnect: app.logConnect,
		OnAuthFailure: app.onAuthFailure()}
	n, err := rdma.Open(cmp.Or(f.cluster.transport, "auto"), opts)
	if err != nil {
		return nil, fmt.Errorf("--transport: %w", err)
	}
	return n, nil
}

// self returns this process's identity.
func self(rank int, role cluster.Role, id int) cluster.Process {
	host, _ := os.Hostname()
	return cluster.Process{Rank: rank, Role: role, ID: id, Host: host, PID: os.Getpid()}
}

// member is what a role of this process needs to join the job.
func (app *App) member(f *trainFlags, st *trainSetup, network rdma.Network, coord string, p cluster.Process) cluster.Member {
	return cluster.Member{Network: network, Job: st.job, Coordinator: coord, Process: p, Settings: st.settings,
		Rendezvous: f.cluster.rendezvous, PSTimeout: f.cluster.psTimeout, Logger: app.Log}
}

// oneShardEach deals the job's shards to shard servers, one each.
func oneShardEach(shards int) [][]int {
	s := make([][]int, shards)
	for k := range s {
		s[k] = []int{k}
	}
	return s
}

// weightsCodec is the codec of the weights the shards send: the
// gradients' codec when it is lossless, else none.
func weightsCodec(c rdma.Codec) rdma.Codec {
	if c.ID.Lossless() {
		return c
	}
	return rdma.Codec{}
}

// initialWeights returns the network's layout and the job's initial
// weights: --load's, or the spec's fillers drawn from the seed.
func initialWeights(cfg *cluster.Config) ([]param.Segment, []float32, error) {
	net, err := nn.New(cfg.Spec, kernels.Reference(), nn.Config{Batch: 1})
	if err != nil {
		return nil, nil, err
	}
	defer net.Close()
	if cfg.Init != nil {
		return net.Layout(), cfg.Init, nil
	}
	net.Init(cfg.Seed)
	return net.Layout(), slices.Clone(net.Params()), nil
}

// runShardServer runs shard server id (running shard id) listening on
// listen, until the job ends. With signals, the process's first SIGINT or
// SIGTERM stops the server after a checkpoint (not when it shares its
// process with the job's head, which handles them for the whole job).
func (app *App) runShardServer(ctx context.Context, f *trainFlags, st *trainSetup, m cluster.Member, id int, listen string, signals bool) error {
	layout, init, err := initialWeights(&st.cfg)
	if err != nil {
		return err
	}
	ln, err := m.Network.Listen(listen)
	if err != nil {
		return fmt.Errorf("shard server %d: listen on %s: %w", id, listen, err)
	}
	app.Log.Info("shard server listening", "shard", id, "addr", ln.Addr())
	stop := make(chan struct{})
	if signals {
		app.onInterrupt(func() { close(stop) })
	}
	return cluster.RunServer(ctx, cluster.ServerConfig{Member: m, PS: st.cfg.PSConfig(layout, 0), Shards: []int{id},
		Init: init, Codec: weightsCodec(st.cfg.Codec), Listener: ln, Checkpoints: st.store, Resume: st.resume, Stop: stop,
		OnServe: app.metrics.onServe()})
}

// runLearner runs learner id until the job's data is done.
func (app *App) runLearner(ctx context.Context, st *trainSetup, m cluster.Member, id int) error {
	c := &st.cfg
	return cluster.RunLearner(ctx, cluster.LearnerConfig{Member: m, ID: id, Spec: c.Spec, Engine: c.Engine, Train: c.Train,
		Normalizer: st.norm, Workers: c.Workers, Protocol: c.Protocol, Shards: c.Shards, Codec: c.Codec, Overlap: c.Overlap,
		OnClient: app.metrics.onClient(c.Batch)})
}

// runHead runs the job's coordinator on ln and its evaluator in this
// process, shows the job's progress and writes its report and outputs.
// expect names the processes of the job, for the messages of the
// rendezvous.
func (app *App) runHead(ctx context.Context, f *trainFlags, st *trainSetup, network rdma.Network, ln rdma.Listener, rank int, expect []cluster.Process) error {
	res, err := app.head(ctx, f, st, network, ln, rank, expect)
	if err != nil {
		return err
	}
	return app.finish(f, st, res)
}

// head runs the job's coordinator and evaluator (see runHead) and
// returns the job's result.
func (app *App) head(ctx context.Context, f *trainFlags, st *trainSetup, network rdma.Network, ln rdma.Listener, rank int, expect []cluster.Process) (*cluster.Result, error) {
	c := &st.cfg
	prog := newProgress(app, f.quiet, c.Epochs)
	coord, err := cluster.NewCoordinator(cluster.CoordinatorConfig{Settings: st.settings, Plan: c.Plan(c.Train.N),
		Learners: c.Learners, Servers: oneShardEach(c.Shards), Evaluator: true, Expect: expect,
		Heartbeat: f.cluster.heartbeat, Rendezvous: f.cluster.rendezvous, ServerTimeout: f.cluster.psTimeout,
		Checkpoints: st.store, CheckpointEvery: st.every, CheckpointInterval: st.interval, Resume: st.resume,
		Logger: app.Log, OnEpoch: app.metrics.onEpoch(prog.epoch)})
	if err != nil {
		return nil, err
	}
	app.metrics.watchJob(coord)
	app.Log.Info("coordinator listening", "addr", ln.Addr(), "learners", c.Learners, "shard_servers", c.Shards)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var weights []float32
	var evalErr error
	wg.Go(func() {
		m := app.member(f, st, network, ln.Addr(), self(rank, cluster.RoleEvaluator, 0))
		weights, evalErr = cluster.RunEvaluator(ctx, cluster.EvaluatorConfig{Member: m, Spec: c.Spec, Engine: c.Engine,
			Test: c.Test, Normalizer: st.norm, Batch: c.EvalBatch, Workers: max(c.Workers, 1), Shards: c.Shards})
	})
	prog.run(coord)
	app.onInterrupt(coord.Interrupt)
	res, err := coord.Serve(ctx, ln)
	if res == nil { // failed, or interrupted before it started
		cancel()
	}
	wg.Wait()
	prog.stop()
	interrupted := res != nil && errors.Is(err, cluster.ErrInterrupted)
	if (err == nil || interrupted) && evalErr != nil {
		err = evalErr
	}
	if err != nil && !interrupted {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("stopped: %w", err)
		}
		return nil, err
	}
	res.Weights, res.Normalizer = weights, st.norm
	return res, nil
}

// listenAddr returns the address to listen on: --listen's host (and
// port), or loopback for a job on one host, else this host's address;
// port 0 picks a free one.
func listenAddr(flag string, oneHost bool) (string, error) {
	host, port := flag, "0"
	if h, p, err := net.SplitHostPort(flag); err == nil {
		host, port = h, p
	}
	if host == "" {
		if oneHost {
			host = "127.0.0.1"
		} else {
			ip, err := hostAddr()
			if err != nil {
				return "", err
			}
			host = ip
		}
	}
	if _, err := strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("--listen %s: bad port %q", flag, port)
	}
	return net.JoinHostPort(host, port), nil
}

// hostAddr returns this host's first non-loopback IPv4 address (IPv6 if
// it has none): the one other hosts reach it at, short of --listen.
func hostAddr() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("this host's addresses: %w", err)
	}
	var v6 string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			return ipn.IP.String(), nil
		}
		if v6 == "" {
			v6 = ipn.IP.String()
		}
	}
	if v6 != "" {
		return v6, nil
	}
	return "", errors.New("this host has no address but loopback: pass --listen HOST")
}
