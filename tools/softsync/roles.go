package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/rdma"
)

// This file runs this process's part of a job (learner/cluster's
// StartProcess; Start for softsync train in one process): the commands
// train, ps, learner, eval and launch, and train --cluster auto, decide
// the topology and this process's place in it from their flags.

// jobNetwork opens the transport of a multi-process job (cfg.Transport),
// authenticated by secret, logging refused connections (at most a line
// per authLogEvery) and the transport chosen per peer; cfg.Job becomes
// the job id of the secret.
func (app *App) jobNetwork(cfg *cluster.Config, secret []byte, insecure bool) (rdma.Network, error) {
	cfg.Job = cluster.JobID(secret)
	opts := rdma.Options{Job: cfg.Job, Secret: secret, Insecure: insecure, OnConnect: app.logConnect,
		OnAuthFailure: app.onAuthFailure(), MaxElems: cfg.MessageLimit()}
	n, err := rdma.Open(cfg.Transport, opts)
	if err != nil {
		return nil, fmt.Errorf("--transport: %w", err)
	}
	return n, nil
}

// part returns this process's place in a job of several processes: the
// process index of topology t, the network, and where the coordinator
// is (listen opens the listeners). Its roles get the job's heartbeat and
// rendezvous bounds (--heartbeat, --rendezvous-timeout), which a job in
// one process does without.
func part(f *trainFlags, cfg *cluster.Config, t cluster.Topology, index int, network rdma.Network, coordinator string) *cluster.ProcessConfig {
	cfg.Heartbeat, cfg.Rendezvous = f.cluster.heartbeat, f.cluster.rendezvous
	host, _ := os.Hostname()
	return &cluster.ProcessConfig{Topology: t, Index: index, Network: network, Coordinator: coordinator, Host: host}
}

// listen opens the listeners of p's roles: the coordinator's on coord,
// the shard servers' on server.
func listen(p *cluster.ProcessConfig, coord, server string) error {
	r := p.Topology.Processes[p.Index]
	fail := func(err error) error {
		p.Listeners.Close()
		p.Listeners = cluster.Listeners{}
		return err
	}
	if r.Coordinator {
		ln, err := p.Network.Listen(coord)
		if err != nil {
			return fail(fmt.Errorf("coordinator: listen on %s: %w", coord, err))
		}
		p.Listeners.Coordinator = ln
	}
	for _, k := range r.Servers {
		ln, err := p.Network.Listen(server)
		if err != nil {
			return fail(fmt.Errorf("shard server %d: listen on %s: %w", k, server, err))
		}
		p.Listeners.Servers = append(p.Listeners.Servers, ln)
	}
	return nil
}

// runJob runs this process's part p of the job cfg (nil: every role, in
// this process) until it ends. Where this process runs the coordinator it
// shows the job's progress, serves its metrics and writes the job's
// outputs (App.finish). The first signal interrupts the job
// (Job.Interrupt) where that ends it gracefully.
func (app *App) runJob(ctx context.Context, f *trainFlags, cfg *cluster.Config, p *cluster.ProcessConfig) error {
	c := *cfg
	var r cluster.Roles
	if p != nil {
		r = p.Topology.Processes[p.Index]
		setServerProcs(p.Topology, r)
	}
	head := p == nil || r.Coordinator
	prog := newProgress(app, f.quiet, c.Epochs, c.Learners)
	// The head writes the job's outputs before the other processes are
	// told to stop (Config.OnResult): a head that dies before it is done
	// is restarted with the job still there.
	var finished bool
	var finishErr error
	if head {
		c.OnEpoch = prog.epoch
		c.OnResult = func(res *cluster.Result) {
			prog.stop()
			finished, finishErr = true, app.finish(f, cfg, res)
			if f.endedFile != "" {
				app.markEnded(f.endedFile, finishErr)
			}
		}
	}
	app.metrics.observeJob(&c)
	var job *cluster.Job
	var err error
	if p == nil {
		job, err = cluster.Start(ctx, c)
	} else {
		job, err = cluster.StartProcess(ctx, c, *p)
	}
	if err != nil {
		return flagError(err)
	}
	// The roles took what they need of the initial weights (--load) and of
	// the resume; let them go (alexnet's are 244 MB each).
	c.Init, c.Resume, cfg.Init, cfg.Resume = nil, nil, nil, nil
	if job.Interruptible() {
		app.onInterrupt(job.Interrupt)
	}
	if p != nil {
		if r.Coordinator {
			app.Log.Info("coordinator listening", "addr", p.Listeners.Coordinator.Addr(), "learners", c.Learners, "shard_servers", c.Shards)
		}
		for i, k := range r.Servers {
			app.Log.Info("shard server listening", "shard", k, "addr", p.Listeners.Servers[i].Addr())
		}
	}
	if head {
		app.metrics.watchJob(job)
		app.Log.Debug("job started", "learners", c.Learners, "threads", c.Workers)
		prog.run(job)
	}
	res, err := job.Wait()
	prog.stop()
	if err != nil && (res == nil || !errors.Is(err, cluster.ErrInterrupted)) {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped: %w", ctx.Err())
		}
		return err
	}
	if res != nil && !finished {
		return app.finish(f, cfg, res)
	}
	return finishErr
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

// markEnded creates path, holding the text of err (empty: the outputs
// were written): the mark launch reads before it starts a dead head again.
func (app *App) markEnded(path string, err error) {
	var msg string
	if err != nil {
		msg = err.Error()
	}
	if werr := os.WriteFile(path, []byte(msg), 0o600); werr != nil {
		app.Log.Warn("cannot mark the job ended", "file", path, "err", werr)
	}
}
