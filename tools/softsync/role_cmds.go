package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/learner/cluster"
)

func init() {
	addCommand(newPSCmd)
	addCommand(newLearnerCmd)
	addCommand(newEvalCmd)
}

const roleHelp = `
Every process of a job runs with the same job flags (those of softsync
train: model, data, batch, learning rate, protocol, shards, …), which the
coordinator checks when the process arrives. softsync launch starts a whole
job of such processes on this host; mpirun and srun start one with
softsync train --cluster auto (docs/cluster.md).`

// runWorker runs a shard server or a learner started by hand: the job's
// flags, its secret, and role --id.
func runWorker(cmd *cobra.Command, app *App, f *trainFlags, role cluster.Role) error {
	ctx, stop := signalContext(cmd, app)
	defer stop()
	if f.cluster.coordinator == "" {
		return fmt.Errorf("--coordinator: required (HOST:PORT of the job's coordinator)")
	}
	secret, err := loadSecret(f.cluster.secretFile)
	if err != nil {
		return err
	}
	if secret == nil && !f.cluster.insecure {
		return fmt.Errorf("no secret: pass --secret-file PATH or set $%s (the same as the coordinator's), or --insecure", secretEnv)
	}
	f.runs = runsNone
	if role == cluster.RoleServer {
		f.runs = func(k int) bool { return k == f.cluster.id }
	}
	if err := f.byHand(role, f.cluster.id); err != nil {
		return err
	}
	cfg, err := prepareTrain(ctx, app, cmd.Flags(), f, role == cluster.RoleLearner)
	if err != nil {
		return err
	}
	if role == cluster.RoleLearner {
		if err := app.applySched(f.cluster.sched); err != nil {
			return err
		}
	}
	return app.runRole(ctx, f, cfg, secret, role, f.cluster.id)
}

// byHand sets the topology of a job started by hand (cluster.ByHand) and
// this process's place in it, role id, for the memory check.
func (f *trainFlags) byHand(role cluster.Role, id int) error {
	t, index, err := cluster.ByHand(f.learners, f.shards, role, id)
	if err != nil {
		return flagError(err)
	}
	f.topo, f.here = &t, []int{index}
	return nil
}

// runRole runs role id of a job started by hand (cluster.ByHand): the
// shard server or learner id, or the head (the evaluator, and with it
// the coordinator, listening on --coordinator), which writes the job's
// outputs.
func (app *App) runRole(ctx context.Context, f *trainFlags, cfg *cluster.Config, secret []byte, role cluster.Role, id int) error {
	t, index, err := cluster.ByHand(f.learners, f.shards, role, id)
	if err != nil {
		return flagError(err)
	}
	network, err := app.jobNetwork(cfg, secret, f.cluster.insecure)
	if err != nil {
		return err
	}
	p := part(f, cfg, t, index, network, f.cluster.coordinator)
	switch role {
	case cluster.RoleEvaluator:
		ln, err := network.Listen(f.cluster.coordinator)
		if err != nil {
			return fmt.Errorf("--coordinator: listen: %w", err)
		}
		if _, port, _ := net.SplitHostPort(f.cluster.coordinator); port == "0" {
			// The port the others need is known only now: say it
			// whatever the log level (launch chooses one and says none).
			fmt.Fprintf(os.Stderr, "coordinator listening on %s\n", ln.Addr())
		}
		p.Listeners.Coordinator = ln
		if path := f.cluster.rendezvousFile; path != "" {
			host, _ := os.Hostname()
			if err := writeRendezvous(path, rendezvousFile{Coordinator: ln.Addr(), Secret: base64.StdEncoding.EncodeToString(secret),
				Host: host, PID: os.Getpid()}); err != nil {
				ln.Close()
				return fmt.Errorf("--rendezvous-file: %w", err)
			}
		}
	case cluster.RoleServer:
		addr, err := listenAddr(f.cluster.listen, isLoopbackAddr(f.cluster.coordinator))
		if err != nil {
			return err
		}
		if err := listen(p, "", addr); err != nil {
			return err
		}
	}
	return app.runJob(ctx, f, cfg, p)
}

func newPSCmd(app *App) *cobra.Command {
	var f trainFlags
	c := &cobra.Command{
		Use:   "ps",
		Short: "Run one shard server of a job of several processes",
		Long: `Run shard server --id K of a job: it serves shard K of the parameter
server to the job's learners and evaluator, listening on --listen (default:
loopback for --coordinator on loopback, else this host's address, a free
port), until the coordinator ends the job.` + roleHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWorker(cmd, app, &f, cluster.RoleServer) },
	}
	addJobFlags(c.Flags(), &f)
	addClusterFlags(c.Flags(), &f.cluster, false)
	c.Flags().IntVar(&f.cluster.id, "id", 0, "the shard this server runs, 0 … --shards−1")
	return c
}

func newLearnerCmd(app *App) *cobra.Command {
	var f trainFlags
	c := &cobra.Command{
		Use:   "learner",
		Short: "Run one learner of a job of several processes",
		Long: `Run learner --id R of a job: it takes chunks of the training data from the
coordinator, trains on them through the shard servers and reports its
progress, until the job's data is done. A learner that starts again with the
same --id after it was lost rejoins the job (a new incarnation).` + roleHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWorker(cmd, app, &f, cluster.RoleLearner) },
	}
	addJobFlags(c.Flags(), &f)
	addClusterFlags(c.Flags(), &f.cluster, false)
	c.Flags().IntVar(&f.cluster.id, "id", 0, "this learner's id, 0 … --learners−1")
	c.Flags().IntVar(&f.local, "local-learners", 0, "learners sharing this host's cores, for the default --threads (default: --learners)")
	return c
}

func newEvalCmd(app *App) *cobra.Command {
	var f trainFlags
	c := &cobra.Command{
		Use:   "eval",
		Short: "Run the coordinator and the evaluator of a job of several processes, and report it",
		Long: `Run the head of a job: its coordinator, listening on --coordinator
(HOST:PORT; port 0 picks one, which is printed), and its evaluator, which
measures the test error at every epoch end. It shows the job's progress and,
at the end, prints the summary and writes --json, --plot and --save, as
softsync train does. The job's secret comes from --secret-file or
$SOFTSYNC_SECRET; without either (and without --insecure), one is made and written next to --json
(or in the current folder) as softsync.secret, readable by the owner only,
for the other processes' --secret-file. A softsync.secret already there is
never replaced: the head refuses to start (pass it with --secret-file, or
remove it).

To continue a job whose head died (its shard servers and learners go on
and wait for it for --ps-timeout), start it again with the job's flags and
--resume DIR (the job's checkpoints), on the same --coordinator address, or
with --rendezvous-file naming the rendezvous file of a --cluster auto job
(docs/cluster.md, "Failures").
` + roleHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd, app)
			defer stop()
			if f.cluster.coordinator == "" {
				f.cluster.coordinator = "127.0.0.1:0"
			}
			secret, err := loadSecret(f.cluster.secretFile)
			if err == nil && secret == nil && f.cluster.rendezvousFile != "" {
				secret, err = secretOf(f.cluster.rendezvousFile) // the job's, when restarting its head
			}
			if err != nil {
				return err
			}
			f.runs = runsNone
			if err := f.byHand(cluster.RoleEvaluator, 0); err != nil {
				return err
			}
			cfg, err := prepareTrain(ctx, app, cmd.Flags(), &f, true)
			if err != nil {
				return err
			}
			if secret == nil && !f.cluster.insecure {
				if secret, err = app.makeSecretFile(headSecretPath(f.jsonOut)); err != nil {
					return err
				}
			}
			return app.runRole(ctx, &f, cfg, secret, cluster.RoleEvaluator, 0)
		},
	}
	addJobFlags(c.Flags(), &f)
	addOutputFlags(c.Flags(), &f)
	addClusterFlags(c.Flags(), &f.cluster, false)
	c.Flags().StringVar(&f.endedFile, "ended-file", "", "create this file once the job's outputs are written (used by launch)")
	c.Flags().MarkHidden("ended-file")
	c.Flags().StringVar(&f.cluster.rendezvousFile, "rendezvous-file", "", "write the coordinator's address and the job's secret to this rendezvous file (replacing it; mode 0600), where the ranks of a --cluster auto job whose head this restarts find it; its secret is the job's unless --secret-file or $SOFTSYNC_SECRET gives one")
	return c
}

// headSecretPath is where a head that makes the job's secret writes it:
// softsync.secret next to the report (--json), else in the current folder.
func headSecretPath(jsonOut string) string {
	dir := "."
	if jsonOut != "" {
		dir = filepath.Dir(jsonOut)
	}
	return filepath.Join(dir, "softsync.secret")
}

// makeSecretFile makes a secret for the job and writes it to path
// (writeSecretFile), for the other processes' --secret-file.
func (app *App) makeSecretFile(path string) ([]byte, error) {
	secret := newSecret()
	if err := writeSecretFile(path, secret); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("the job's secret: %s already exists (a previous job's?): pass it with --secret-file %[1]s, or remove it", path)
		}
		return nil, fmt.Errorf("writing the job's secret: %w", err)
	}
	app.Log.Info("made the job's secret: give the other processes --secret-file", "file", path)
	return secret, nil
}
