package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

func init() { addCommand(newLaunchCmd) }

// launchFlags are the flags of softsync launch itself (before --).
type launchFlags struct {
	learners, shards, restarts int
}

func newLaunchCmd(app *App) *cobra.Command {
	var lf launchFlags
	c := &cobra.Command{
		Use:   "launch -n λ [--shards S] [--restarts N] -- [train flags]",
		Short: "Run a whole job as processes on this host: λ learners, S shard servers, and this process as its head",
		Long: `Start a job of several processes on this host: S shard-server processes
(softsync ps, one shard each), λ learner processes (softsync learner), and
this process as the job's coordinator and evaluator, which shows one progress
bar for the whole job and writes one report (the flags after -- are softsync
train's: --json, --save, --plot, --expect-error included). The processes
authenticate with the job's secret, which launch passes them in
$SOFTSYNC_SECRET: the one of --secret-file after -- or of $SOFTSYNC_SECRET,
else one launch makes for the job; they listen on loopback only. Their log lines are shown
prefixed with their role.

A learner process that dies is removed from the job, which goes on without
it (its chunks of data go to the others); with --restarts N, launch starts
it again, at most N times in all, and it rejoins with a new incarnation. A
shard server that dies ends the job unless the job writes checkpoints
(--checkpoint-dir): then, within --restarts, launch starts it again with
--resume, the learners reconnect, and the gradients pushed to it since its
checkpoint are counted lost.

Metrics: with --metrics HOST:PORT after --, this process serves the job's
progress there (docs/metrics.md), and on the same HOST shard server K serves
its metrics on port PORT+1+K and learner R on PORT+1+S+R (S shard servers),
so that a scrape configuration can list them; with port 0 each process picks
a free port and logs it ("serving metrics").`,
		Example: `  softsync launch -n 2 -- --model lenet --epochs 1 --batch 16 --protocol softsync
  softsync launch -n 4 --shards 2 --restarts 2 -- --epochs 2 --json run.json
  softsync launch -n 4 --shards 2 -- --epochs 2 --metrics 127.0.0.1:9100   # learners on 9103…9106`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signalContext(cmd, app)
			defer stop()
			return runLaunch(ctx, app, &lf, args)
		},
	}
	c.Flags().IntVarP(&lf.learners, "learners", "n", 2, "λ, learner processes")
	c.Flags().IntVar(&lf.shards, "shards", 1, "shard-server processes, one shard each")
	c.Flags().IntVar(&lf.restarts, "restarts", 0, "learner processes launch starts again after they die, in all")
	return c
}

func runLaunch(ctx context.Context, app *App, lf *launchFlags, args []string) error {
	f, cfg, res, err := launchJob(ctx, app, lf, args)
	if err != nil {
		return err
	}
	return app.finish(f, cfg, res)
}

// launchJob runs a job as processes on this host (see the launch command)
// and returns its result.
func launchJob(ctx context.Context, app *App, lf *launchFlags, args []string) (*trainFlags, *cluster.Config, *cluster.Result, error) {
	switch {
	case lf.learners < 1:
		return nil, nil, nil, fmt.Errorf("-n: must be ≥ 1, got %d", lf.learners)
	case lf.shards < 1:
		return nil, nil, nil, fmt.Errorf("--shards: must be ≥ 1, got %d", lf.shards)
	case lf.restarts < 0:
		return nil, nil, nil, fmt.Errorf("--restarts: must be ≥ 0, got %d", lf.restarts)
	}
	f := new(trainFlags)
	fl := pflag.NewFlagSet("train flags", pflag.ContinueOnError)
	addJobFlags(fl, f)
	addOutputFlags(fl, f)
	addClusterFlags(fl, &f.cluster, false)
	if err := fl.Parse(args); err != nil {
		return nil, nil, nil, fmt.Errorf("train flags after --: %w", err)
	}
	for name, v := range map[string]int{"learners": lf.learners, "shards": lf.shards} {
		if fl.Changed(name) && fl.Lookup(name).Value.String() != strconv.Itoa(v) {
			return nil, nil, nil, fmt.Errorf("--%s %s after -- disagrees with launch's %d", name, fl.Lookup(name).Value, v)
		}
		if err := fl.Set(name, strconv.Itoa(v)); err != nil {
			return nil, nil, nil, err
		}
	}
	f.local = lf.learners
	secret, err := loadSecret(f.cluster.secretFile)
	if err != nil {
		return nil, nil, nil, err
	}
	if secret == nil {
		secret = newSecret()
	}
	cfg, err := prepareTrain(ctx, app, fl, f, true)
	if err != nil {
		return nil, nil, nil, err
	}
	network, err := app.jobNetwork(cfg, secret, f.cluster.insecure)
	if err != nil {
		return nil, nil, nil, err
	}
	self, err := selfCommand()
	if err != nil {
		return nil, nil, nil, err
	}
	// This process is the head, process 0 of the topology; the others
	// are started as softsync ps and softsync learner.
	p := part(f, cfg, cluster.Apart(lf.learners, lf.shards), 0, network, "")
	if err := listen(p, "127.0.0.1:0", ""); err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &lineWriter{w: os.Stderr, tty: term.IsTerminal(int(os.Stderr.Fd()))}
	g := &procGroup{app: app, self: self, secret: secret, out: out, restarts: lf.restarts, ckptDir: cmp.Or(f.cluster.ckptDir, f.cluster.resume)}
	common := append([]string{"--coordinator", p.Listeners.Coordinator.Addr(), "--log-level", app.Level, "--engine", app.Engine}, jobArgs(fl)...)
	if app.Threads > 0 {
		common = append(common, "--threads", strconv.Itoa(app.Threads))
	}
	learnerArgs := append(slices.Clip(common), "--local-learners="+strconv.Itoa(lf.learners))
	for i, r := range p.Topology.Processes[1:] {
		metrics := childMetrics(f, 1+i) // the process's index
		if len(r.Servers) > 0 {
			g.start(ctx, "ps", r.Servers[0], slices.Concat(common, metrics))
		} else {
			g.start(ctx, "learner", r.Learners[0], slices.Concat(learnerArgs, metrics))
		}
	}
	res, err := app.runJob(ctx, f, cfg, p)
	app.onInterrupt(nil) // the job is over: a signal now stops its processes at once
	g.stop(ctx, err != nil)
	return f, cfg, res, err
}

// selfArgv, when set (by tests), is the command line that runs softsync
// in place of this executable.
var selfArgv []string

// selfCommand returns the command line that runs softsync itself.
func selfCommand() ([]string, error) {
	if selfArgv != nil {
		return selfArgv, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return []string{exe}, nil
}

// jobArgs returns the job's flags that were set, to pass on to the
// processes: the job flags and the cluster flags, not the head's outputs.
func jobArgs(fl *pflag.FlagSet) []string {
	skip := map[string]bool{"json": true, "plot": true, "save": true, "expect-error": true, "quiet": true, "coordinator": true, "metrics": true}
	var args []string
	fl.Visit(func(fl *pflag.Flag) {
		if !skip[fl.Name] {
			args = append(args, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	return args
}

// procGroup runs the processes of a launched job and restarts dead
// learners.
type procGroup struct {
	app      *App
	self     []string // the command line that runs softsync
	secret   []byte
	out      *lineWriter
	mu       sync.Mutex
	restarts int    // left
	ckptDir  string // the job's checkpoints: a dead shard server restarts from them
	procs    map[*exec.Cmd]bool
	ending   bool
	wg       sync.WaitGroup
}

// start starts the role process of id and watches it.
func (g *procGroup) start(ctx context.Context, role string, id int, common []string) {
	args := append([]string{role, "--id", strconv.Itoa(id)}, common...)
	name := fmt.Sprintf("%s %d", role, id)
	if role == "ps" {
		name = fmt.Sprintf("shard server %d", id)
	}
	cmd := exec.Command(g.self[0], append(g.self[1:], args...)...)
	cmd.Env = append(os.Environ(), secretEnv+"="+string(g.secret))
	pw := g.out.prefixed("[" + name + "] ")
	cmd.Stdout, cmd.Stderr = pw, pw
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ending {
		return
	}
	if err := cmd.Start(); err != nil {
		g.app.Log.Error("cannot start a process of the job", "process", name, "err", err)
		return
	}
	if g.procs == nil {
		g.procs = map[*exec.Cmd]bool{}
	}
	g.procs[cmd] = true
	g.wg.Go(func() {
		err := cmd.Wait()
		pw.Close()
		g.mu.Lock()
		delete(g.procs, cmd)
		restart := err != nil && (role == "learner" || g.ckptDir != "") && !g.ending && g.restarts > 0 && ctx.Err() == nil
		if restart {
			g.restarts--
			if role == "ps" && !slices.Contains(common, "--resume") {
				common = append(slices.Clone(common), "--resume", g.ckptDir)
			}
		}
		ending := g.ending
		g.mu.Unlock()
		if err != nil && !ending {
			g.app.Log.Warn("a process of the job ended", "process", name, "err", err, "restarting", restart)
		}
		if restart {
			g.start(ctx, role, id, common)
		}
	})
}

// stop waits for the processes to end (the coordinator told them to),
// sends SIGTERM to those still running after a grace period (2 s if the
// job failed, at once when ctx ends: launch was interrupted), and kills
// those still running 3 s later.
func (g *procGroup) stop(ctx context.Context, failed bool) {
	g.mu.Lock()
	g.ending = true
	g.mu.Unlock()
	grace := 10 * time.Second
	if failed {
		grace = 2 * time.Second
	}
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-ctx.Done():
	case <-time.After(grace):
	}
	g.mu.Lock()
	for cmd := range g.procs {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	g.mu.Unlock()
	select {
	case <-done:
	case <-time.After(3 * time.Second): // within an interrupted launch's own stopGrace
		g.mu.Lock()
		for cmd := range g.procs {
			cmd.Process.Kill()
		}
		g.mu.Unlock()
		<-done
	}
}

// lineWriter writes whole lines from several sources to w, each line on
// a line of its own even when a progress bar is drawn on w.
type lineWriter struct {
	mu  sync.Mutex
	w   io.Writer
	tty bool // clear the line first (a progress bar may be on it)
}

// prefixed returns a writer whose lines go to l prefixed with prefix; Close
// flushes a last unterminated line.
func (l *lineWriter) prefixed(prefix string) io.WriteCloser {
	r, w := io.Pipe()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l.mu.Lock()
			if l.tty {
				fmt.Fprint(l.w, "\r\x1b[K")
			}
			fmt.Fprintf(l.w, "%s%s\n", prefix, sc.Text())
			l.mu.Unlock()
		}
		r.CloseWithError(errors.New("closed"))
	}()
	return w
}
