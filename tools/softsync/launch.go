package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/tools/bench"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

func init() { addCommand(newLaunchCmd) }

// launchFlags are the flags of softsync launch itself (before --).
type launchFlags struct {
	learners, shards, restarts int
	// bind is --bind: "learners" pins each learner to CPUs of its own
	// (bindLearners), "none" leaves every process to the scheduler.
	bind string
	// pin, when set (by the benchmarks), gives the CPUs of each process
	// by role ("eval", "ps", "learner") and id, whatever bind says.
	pin func(role string, id int) []int
}

func newLaunchCmd(app *App) *cobra.Command {
	var lf launchFlags
	c := &cobra.Command{
		Use:   "launch -n λ [--shards S] [--restarts N] -- [train flags]",
		Short: "Run a whole job as processes on this host: its head, λ learners and S shard servers",
		Long: `Start a job of several processes on this host: its head (softsync eval: the
coordinator and the evaluator, which shows one progress bar for the whole
job and writes one report: the flags after -- are softsync train's, --json,
--save, --plot and --expect-error included), S shard-server processes
(softsync ps, one shard each) and λ learner processes (softsync learner).
launch itself only starts them, restarts them, and passes an interruption
(Ctrl-C) to the head, which ends the job in order; it exits with the head's
status. The processes authenticate with the job's secret, which launch
passes them in $SOFTSYNC_SECRET: the one of --secret-file after -- or of
$SOFTSYNC_SECRET, else one launch makes for the job; they listen on loopback
only. The log lines of the shard servers and learners are shown prefixed with
their role.

Any one process may die (docs/cluster.md, "Failures"); with --restarts N,
launch starts dead processes again, N times in all:
  - a learner rejoins with a new incarnation; the mini-batches it had not
    delivered go to the others (without --restarts the job goes on without
    it);
  - a shard server restarts with --resume from the job's checkpoints
    (--checkpoint-dir; without one it starts from the initial weights), and
    the mini-batches its checkpoint lacks are computed again;
  - the head restarts on the same address, with --resume when the job has a
    checkpoint: the shard servers and learners, which went on meanwhile,
    rejoin it within --ps-timeout.
A process that ends with an error of the job (exit status 1) is not
restarted.

Placement: with --bind learners (the default), learner i is pinned to the
i-th of λ equal blocks of the CPUs launch may use (SMT siblings kept in one
block), when there are at least λ; the head and the shard servers run
anywhere. Learners run under SCHED_BATCH (--sched after --), so that a
learner woken by a shard server never preempts it while it still wakes the
others (docs/cluster.md, "Placement"). --bind none leaves every process to
the scheduler.

Metrics: with --metrics HOST:PORT after --, the head serves the job's
progress there (docs/metrics.md), and on the same HOST shard server K serves
its metrics on port PORT+1+K and learner R on PORT+1+S+R (S shard servers),
so that a scrape configuration can list them; with port 0 each process picks
a free port and logs it ("serving metrics").`,
		Example: `  softsync launch -n 2 -- --model lenet --epochs 1 --batch 16 --protocol softsync
  softsync launch -n 4 --shards 2 --restarts 2 -- --epochs 2 --json run.json --checkpoint-dir ckpt
  softsync launch -n 4 --shards 2 -- --epochs 2 --metrics 127.0.0.1:9100   # learners on 9103…9106`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signalContext(cmd, app)
			defer stop()
			_, err := launchJob(ctx, app, &lf, args, false)
			return err
		},
	}
	c.Flags().IntVarP(&lf.learners, "learners", "n", 2, "λ, learner processes")
	c.Flags().IntVar(&lf.shards, "shards", 1, "shard-server processes, one shard each")
	c.Flags().IntVar(&lf.restarts, "restarts", 0, "processes launch starts again after they die (learners, shard servers, the head), in all")
	addBindFlag(c.Flags(), &lf.bind)
	return c
}

// launchJob runs a job as processes on this host (see the launch
// command) and returns what its processes used, and the head's report
// when report is set (from its --json, or a file of launch's own).
func launchJob(ctx context.Context, app *App, lf *launchFlags, args []string, report bool) (*bench.JobResult, error) {
	switch {
	case lf.learners < 1:
		return nil, fmt.Errorf("-n: must be ≥ 1, got %d", lf.learners)
	case lf.shards < 1:
		return nil, fmt.Errorf("--shards: must be ≥ 1, got %d", lf.shards)
	case lf.restarts < 0:
		return nil, fmt.Errorf("--restarts: must be ≥ 0, got %d", lf.restarts)
	}
	pin := lf.pin
	if pin == nil {
		var err error
		if pin, err = bindLearners(app, lf.bind, lf.learners); err != nil {
			return nil, err
		}
	}
	f := new(trainFlags)
	fl := pflag.NewFlagSet("train flags", pflag.ContinueOnError)
	addJobFlags(fl, f)
	addOutputFlags(fl, f)
	addClusterFlags(fl, &f.cluster, false)
	if err := fl.Parse(args); err != nil {
		return nil, fmt.Errorf("train flags after --: %w", err)
	}
	for name, v := range map[string]int{"learners": lf.learners, "shards": lf.shards} {
		if fl.Changed(name) && fl.Lookup(name).Value.String() != strconv.Itoa(v) {
			return nil, fmt.Errorf("--%s %s after -- disagrees with launch's %d", name, fl.Lookup(name).Value, v)
		}
		if err := fl.Set(name, strconv.Itoa(v)); err != nil {
			return nil, err
		}
	}
	f.local = lf.learners
	secret, err := loadSecret(f.cluster.secretFile)
	if err != nil {
		return nil, err
	}
	if secret == nil {
		secret = newSecret()
	}
	// The flags are checked here, before any process starts; the head
	// loads the data and serves the job's metrics.
	metrics := f.cluster.metrics
	f.cluster.metrics = ""
	f.runs = runsNone // launch runs no role itself
	t := cluster.Apart(lf.learners, lf.shards)
	f.topo, f.here = &t, upTo(len(t.Processes)) // every process on this host
	if _, err := prepareTrain(ctx, app, fl, f, false); err != nil {
		return nil, err
	}
	f.cluster.metrics = metrics
	coord, err := freeLoopback()
	if err != nil {
		return nil, err
	}
	self, err := selfCommand()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "softsync-launch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ended := filepath.Join(dir, "ended")
	headArgs := []string{"--ended-file", ended}
	if report && f.jsonOut == "" {
		f.jsonOut = filepath.Join(dir, "report.json")
		headArgs = append(headArgs, "--json", f.jsonOut)
	}
	out := &lineWriter{w: os.Stderr, tty: term.IsTerminal(int(os.Stderr.Fd()))}
	g := &procGroup{app: app, self: self, secret: secret, out: out, restarts: lf.restarts, ckptDir: cmp.Or(f.cluster.ckptDir, f.cluster.resume),
		ended: ended, pin: pin}
	common := append([]string{"--coordinator", coord, "--log-level", app.Level, "--engine", app.Engine}, jobArgs(fl)...)
	if app.Threads > 0 {
		common = append(common, "--threads", strconv.Itoa(app.Threads))
	}
	if report {
		g.headOut = io.Discard // the caller prints the report its own way
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	head := g.start(ctx, "eval", 0, slices.Concat(common, headArgs, headOutputs(fl)))
	procs := []*proc{head}
	// An interruption (Ctrl-C, SIGTERM) goes to the head, which ends the
	// job in order; its processes are in process groups of their own,
	// out of the terminal's reach.
	app.onInterrupt(func() { g.signal(head, syscall.SIGINT) })
	learnerArgs := append(slices.Clip(common), "--local-learners="+strconv.Itoa(lf.learners))
	for i, r := range cluster.Apart(lf.learners, lf.shards).Processes[1:] {
		metrics := childMetrics(f, 1+i) // the process's index
		if len(r.Servers) > 0 {
			procs = append(procs, g.start(ctx, "ps", r.Servers[0], slices.Concat(common, metrics)))
		} else {
			procs = append(procs, g.start(ctx, "learner", r.Learners[0], slices.Concat(learnerArgs, metrics)))
		}
	}
	err = g.wait(ctx, head)
	app.onInterrupt(nil) // the job is over: a signal now stops its processes at once
	g.stop(ctx, err != nil)
	if err != nil {
		return nil, err
	}
	res := &bench.JobResult{Usage: g.usage(procs)}
	if !report {
		return res, nil
	}
	b, err := os.ReadFile(f.jsonOut)
	if err != nil {
		return nil, fmt.Errorf("the head's report: %w", err)
	}
	res.Report = new(cluster.Report)
	if err := json.Unmarshal(b, res.Report); err != nil {
		return nil, fmt.Errorf("the head's report %s: %w", f.jsonOut, err)
	}
	return res, nil
}

// freeLoopback returns a loopback address with a port free now, where
// the head listens (again, when it restarts).
func freeLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("a port for the coordinator: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// headOutputs returns the outputs of the job the head writes, as set
// after --.
func headOutputs(fl *pflag.FlagSet) []string {
	var args []string
	for _, name := range []string{"json", "plot", "save", "expect-error", "quiet", "metrics"} {
		if f := fl.Lookup(name); f.Changed {
			args = append(args, "--"+name+"="+f.Value.String())
		}
	}
	return args
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
