package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// EnvRequire is the environment variable that turns the skips of this
// package into failures: with EnvRequire=1 (set by the Makefile's test
// target) a missing launcher binary or a missing root privilege fails the
// test instead of skipping it, so that CI never passes by skipping.
const EnvRequire = "SOFTSYNC_REQUIRE_LAUNCHERS"

// DefaultTimeout bounds a job whose Spec sets no Timeout.
const DefaultTimeout = 2 * time.Minute

// markerVar is set in the environment of every process this package
// starts; its value identifies the job, so that cleanup finds and kills
// exactly the processes of that job and nothing else (see sweep).
const markerVar = "SOFTSYNC_CLUSTERTEST_JOB"

// Spec describes a job: N processes running Argv.
type Spec struct {
	// N is the number of processes (mpirun -np, mpiexec -n, srun -n).
	N int
	// Argv is the command every process runs; Self builds one that runs
	// a helper of the test binary.
	Argv []string
	// Env holds "KEY=VALUE" entries added to the environment of the
	// launcher and so of every process.
	Env []string
	// Dir is the working directory ("" for the test's).
	Dir string
	// Timeout bounds the whole job; 0 means DefaultTimeout. When it
	// expires, every process of the job is killed.
	Timeout time.Duration
	// LauncherArgs are more options for the launcher, put after the
	// package's own (srun --mpi=pmi2, mpirun -x NAME, ...). Exec, which
	// has no launcher, ignores them.
	LauncherArgs []string
	// KeepGoing starts the job with the launcher's options that keep the
	// other processes running when one dies (docs/cluster.md, "When a
	// process dies"). Without it each launcher applies its default.
	KeepGoing bool
}

// Result is the outcome of a finished job.
type Result struct {
	// Cmdline is the launcher's command line.
	Cmdline []string
	// Output is the combined standard output and error of the launcher
	// and all processes, interleaved as they wrote it.
	Output string
	// ExitCode is the launcher's exit status, or -1 when it was ended by
	// a signal. At the timeout it is either: the launcher may exit by
	// itself once its processes, told to quit first, have ended.
	ExitCode int
	// TimedOut is true when the job ran past its Timeout and was killed.
	TimedOut bool
	// Err is nil for exit status 0; otherwise an *exec.ExitError, a start
	// failure, or an error wrapping context.DeadlineExceeded at timeout.
	Err error
}

// String describes r for failure messages: command line, status and output.
func (r Result) String() string {
	status := "exit 0"
	switch {
	case r.TimedOut:
		status = "timed out: " + r.Err.Error()
	case r.Err != nil:
		status = r.Err.Error()
	}
	return fmt.Sprintf("%s: %s\n--- output ---\n%s--- end of output ---", strings.Join(r.Cmdline, " "), status, r.Output)
}

// Launcher starts jobs with one launcher (OpenMPI, MPICH, Slurm.Srun,
// Exec, or one of them inside a network namespace, Host.In).
type Launcher struct {
	// Name is "openmpi", "mpich", "slurm", "exec", or a host's name
	// followed by the name of the launcher it wraps.
	Name string
	argv func(Spec) []string
	env  []string
}

// Args returns the command line that starts s.
func (l *Launcher) Args(s Spec) []string { return l.argv(s) }

// Exec returns a launcher that runs Spec.Argv as one plain process with no
// launcher variables; Spec.N must be 0 or 1.
func Exec() *Launcher {
	return &Launcher{Name: "exec", argv: func(s Spec) []string {
		if s.N > 1 {
			panic(fmt.Sprintf("clustertest: Exec runs one process, Spec.N is %d", s.N))
		}
		return s.Argv
	}}
}

// Job is a running job.
type Job struct {
	t       testing.TB
	cmd     *exec.Cmd
	cmdline []string
	out     *lockedBuffer
	marker  string
	cancel  context.CancelFunc
	done    chan struct{}
	res     Result
}

var jobSeq atomic.Int64

// Start starts s under l and returns at once. The job is killed, with every
// process it started, when the test ends (t.Cleanup) if it is still
// running then.
func (l *Launcher) Start(t testing.TB, s Spec) *Job {
	t.Helper()
	if len(s.Argv) == 0 {
		t.Fatalf("clustertest: %s: Spec.Argv is empty", l.Name)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	argv := l.Args(s)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	j := &Job{
		t: t, cmdline: argv, out: new(lockedBuffer), cancel: cancel, done: make(chan struct{}),
		marker: fmt.Sprintf("%d-%d", os.Getpid(), jobSeq.Add(1)),
	}
	j.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	j.cmd.Dir = s.Dir
	j.cmd.Env = jobEnv(append(append([]string{markerVar + "=" + j.marker}, l.env...), s.Env...))
	j.cmd.Stdout, j.cmd.Stderr = j.out, j.out
	// A process group of its own, so that a timeout kills the launcher and
	// what it forked at once; sweep finds the rest by the marker.
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	j.cmd.Cancel = func() error {
		// A job that hangs tells where: its processes print their
		// goroutines (Go's SIGQUIT) before they are killed, the
		// launcher's children first, while it still relays their output.
		quit(j.marker, j.cmd.Process.Pid)
		time.Sleep(2 * time.Second)
		_ = syscall.Kill(j.cmd.Process.Pid, syscall.SIGQUIT)
		time.Sleep(time.Second)
		return syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
	}
	j.cmd.WaitDelay = 8 * time.Second
	if err := j.cmd.Start(); err != nil {
		cancel()
		j.res = Result{Cmdline: argv, ExitCode: -1, Err: err}
		close(j.done)
		return j
	}
	go func() {
		err := j.cmd.Wait()
		sweep(j.marker)
		j.res = Result{Cmdline: argv, Output: j.out.String(), ExitCode: j.cmd.ProcessState.ExitCode(), Err: err}
		if ctx.Err() == context.DeadlineExceeded {
			j.res.TimedOut = true
			j.res.Err = fmt.Errorf("killed after %v: %w", timeout, context.DeadlineExceeded)
		}
		cancel()
		close(j.done)
	}()
	t.Cleanup(j.Stop)
	return j
}

// Wait waits for the job to end and returns its result.
func (j *Job) Wait() Result {
	<-j.done
	return j.res
}

// Output returns what the job has written so far.
func (j *Job) Output() string { return j.out.String() }

// Stop kills the job and every process it started, and waits for the
// launcher to end. Stopping a finished job does nothing.
func (j *Job) Stop() {
	j.cancel()
	<-j.done
}

// Run starts s under l and waits for it to end. It does not judge the
// result: tests that expect a failure inspect it.
func (l *Launcher) Run(t testing.TB, s Spec) Result {
	t.Helper()
	return l.Start(t, s).Wait()
}

// MustRun runs s under l and fails the test, quoting the command line and
// the whole output, unless the launcher exits with status 0. It returns
// the combined output.
func (l *Launcher) MustRun(t testing.TB, s Spec) string {
	t.Helper()
	r := l.Run(t, s)
	if r.Err != nil {
		t.Fatalf("clustertest: %s", r)
	}
	return r.Output
}

// jobEnv is this process's environment without the variables of any
// launcher that may have started the test itself (so that a test run
// under srun or mpirun does not pass its own rank on), plus extra.
func jobEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if launcherVar(name) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// launcherVar reports whether name belongs to a launcher's environment.
func launcherVar(name string) bool {
	for _, p := range []string{"OMPI_", "PMI_", "PMIX_", "MPI_LOCAL", "HYDRA_", "SLURM", "PRTE_", "PRRTE_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return name == markerVar
}

// need skips the test with reason, or fails it when EnvRequire=1.
func need(t testing.TB, what, reason string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("clustertest: %s: %s (%s=1 makes this a failure)", what, reason, EnvRequire)
	}
	t.Skipf("clustertest: skipping: %s: %s", what, reason)
}

// needRoot skips or fails (see need) unless the process runs as root.
func needRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		need(t, what, "needs root")
	}
}

// lookPath finds the first of names on PATH, or skips or fails the test.
func lookPath(t testing.TB, what string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	need(t, what, fmt.Sprintf("%s not found on PATH (make deps installs it)", strings.Join(names, " or ")))
	return ""
}

// run runs a short administrative command (ip, tc, scontrol) and returns
// its combined output, or an error quoting it.
func run(ctx context.Context, env []string, argv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if env != nil {
		cmd.Env = env
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}

// mustRun is run with a 30 s limit that fails the test on error.
func mustRun(t testing.TB, env []string, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := run(ctx, env, argv...)
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	return out
}

// lockedBuffer is a bytes.Buffer safe for one writer and many readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
