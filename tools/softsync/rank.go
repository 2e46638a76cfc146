package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/tools/softsync/internal/launcher"
)

// runRank runs this process's part of a job started by a launcher
// (train --cluster auto): its rank's roles in the topology cluster.Ranks
// (the shard servers first, rank 0 also the coordinator and the
// evaluator, which reports the job; the learners after them). See
// docs/cluster.md.
func runRank(ctx context.Context, app *App, fl *pflag.FlagSet, f *trainFlags) error {
	if f.cluster.mode != "auto" {
		return fmt.Errorf("--cluster %q: the only mode is auto (the rank and size come from the launcher)", f.cluster.mode)
	}
	w, err := launcher.Detect(os.Getenv)
	if err != nil {
		return fmt.Errorf("--cluster auto: %w", err)
	}
	S := f.shards
	if S < 1 {
		return fmt.Errorf("--shards: must be ≥ 1, got %d", S)
	}
	want := 0
	if fl.Changed("learners") {
		want = S + f.learners
	}
	if err := w.Check(want); err != nil {
		return fmt.Errorf("--cluster auto with --shards %d --learners %d: %w", S, f.learners, err)
	}
	topo, err := cluster.Ranks(w.Size, S)
	if err != nil {
		return fmt.Errorf("--cluster auto: %s: %w: start more processes, or if you did, the launcher's variables did not reach softsync (found %s)", w, err, w.Vars)
	}
	f.learners = topo.Learners()
	oneHost := w.LocalSize == w.Size || len(w.Nodes) == 1
	if oneHost {
		f.local = f.learners
	} else if w.LocalSize > 0 {
		f.local = w.LocalSize
	}
	rank := w.Rank
	roles := topo.Processes[rank]
	if f.cluster.metrics != "" {
		f.cluster.metrics = metricsAddr(f.cluster.metrics, rank)
	}
	f.runs = func(k int) bool {
		return slices.ContainsFunc(roles.Servers, func(s int) bool { return slices.Contains(topo.Servers[s], k) })
	}
	// The memory check counts this rank's process; rank 0 counts every
	// rank's when they all run on this host (the others, starting at the
	// same time, would count what rank 0 took already).
	f.topo, f.here = &topo, []int{rank}
	if oneHost && rank == 0 {
		f.here = upTo(len(topo.Processes))
	}
	secret, err := rankSecret(&f.cluster) // before the data: a refused job loads none
	if err != nil {
		return err
	}
	cfg, err := prepareTrain(ctx, app, fl, f, roles.Coordinator || len(roles.Learners) > 0)
	if err != nil {
		return err
	}
	if len(roles.Learners) > 0 && len(roles.Servers) == 0 && !roles.Coordinator {
		if err := app.applySched(f.cluster.sched); err != nil {
			return err
		}
	}
	app.Log.Debug("cluster", "world", w.String(), "shards", S, "learners", f.learners)
	coord, secret, cleanup, err := rendezvous(ctx, app, f, w, oneHost, secret)
	if err != nil {
		return err
	}
	defer cleanup()
	network, err := app.jobNetwork(cfg, secret, f.cluster.insecure)
	if err != nil {
		return err
	}
	listenOn, err := listenAddr(f.cluster.listen, oneHost)
	if err != nil {
		return err
	}
	p := part(f, cfg, topo, rank, network, coord.addr)
	p.Locate = coord.locate
	if err := listen(p, coord.listen, listenOn); err != nil {
		return err
	}
	if roles.Coordinator {
		if err := coord.publish(p.Listeners.Coordinator.Addr()); err != nil {
			p.Listeners.Close()
			return err
		}
	}
	return app.runJob(ctx, f, cfg, p)
}

// meeting is how the processes of a job find the coordinator: rank 0
// listens on listen and publishes its address (in a rendezvous file);
// the others dial addr.
type meeting struct {
	listen  string // rank 0: where the coordinator listens
	addr    string // the others: where they dial it
	publish func(addr string) error
	// locate, for the others, tells where the coordinator is now: the
	// address in the rendezvous file, which a head started again writes
	// anew (eval --rendezvous-file); "" when the file names none alive.
	locate func() string
}

// rankSecret is the secret given to a rank (--secret-file or
// $SOFTSYNC_SECRET), nil if none; with --coordinator HOST:PORT a rank
// needs one unless --insecure.
func rankSecret(c *clusterFlags) ([]byte, error) {
	secret, err := loadSecret(c.secretFile)
	if err != nil {
		return nil, err
	}
	if c.coordinator != "" && secret == nil && !c.insecure {
		return nil, fmt.Errorf("--coordinator %s: the job needs the same secret on every rank: --secret-file PATH or $%s (e.g. export %[2]s=$(openssl rand -hex 32); mpirun -x %[2]s …), "+
			"or leave out --coordinator to have rank 0 make one and hand it out in the rendezvous file; --insecure runs without one", c.coordinator, secretEnv)
	}
	return secret, nil
}

// rendezvous decides, for this rank, where the coordinator is and the
// job's secret, given the rank's (rankSecret): --coordinator HOST:PORT
// (the secret given, none only with --insecure), or a rendezvous file
// that rank 0 writes (in
// --rendezvous-dir, or for a job on one host in a folder of this user's),
// holding the coordinator's address and a secret rank 0 makes unless one
// is given. cleanup removes rank 0's file.
func rendezvous(ctx context.Context, app *App, f *trainFlags, w launcher.World, oneHost bool, secret []byte) (meeting, []byte, func(), error) {
	none := func() {}
	c := &f.cluster
	if c.coordinator != "" {
		return meeting{listen: c.coordinator, addr: c.coordinator, publish: func(string) error { return nil }}, secret, none, nil
	}
	dir := c.rendezvousDir
	if dir == "" {
		if !oneHost {
			return meeting{}, nil, none, fmt.Errorf("--cluster auto: the job runs on several hosts (%s): give every rank --coordinator HOST:PORT (rank 0's host) or --rendezvous-dir DIR (a folder all hosts share); see docs/cluster.md",
				strings.Join(w.Nodes, ", "))
		}
		var err error
		if dir, err = localRendezvousDir(); err != nil {
			return meeting{}, nil, none, err
		}
	}
	path := filepath.Join(dir, "softsync-"+jobKey(w)+".json")
	if w.Rank != 0 {
		r, fileSecret, err := readRendezvous(ctx, path, c.rendezvous, func() {
			app.Log.Info("waiting for rank 0's rendezvous file", "file", path, "me", w.String())
		})
		if err != nil {
			return meeting{}, nil, none, err
		}
		if secret == nil {
			secret = fileSecret
		}
		return meeting{addr: r.Coordinator, locate: func() string { return locateRendezvous(path) }}, secret, none, nil
	}
	if secret == nil {
		secret = newSecret()
	}
	listen, err := listenAddr(c.listen, oneHost)
	if err != nil {
		return meeting{}, nil, none, err
	}
	os.Remove(path) // a previous job's
	host, _ := os.Hostname()
	m := meeting{listen: listen, publish: func(addr string) error {
		return writeRendezvous(path, rendezvousFile{Coordinator: addr, Secret: base64.StdEncoding.EncodeToString(secret), Host: host, PID: os.Getpid()})
	}}
	return m, secret, func() { os.Remove(path) }, nil
}

// jobKey names a launcher's job for its rendezvous file: the launcher's
// job id, or the launching process shared by the ranks of one host.
func jobKey(w launcher.World) string {
	key := w.JobID
	if w.StepID != "" {
		key += "." + w.StepID
	}
	if key == "" {
		key = fmt.Sprintf("ppid%d", os.Getppid())
	}
	return fmt.Sprintf("%s-%s", w.Launcher, strings.NewReplacer("/", "_", "@", "_").Replace(key))
}

func isLoopbackAddr(addr string) bool {
	host := addr
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		host = strings.Trim(addr[:i], "[]")
	}
	return host == "localhost" || strings.HasPrefix(host, "127.") || host == "::1"
}
