package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SlurmKeepGoingArgs keep the other tasks running when one dies
// (Spec.KeepGoing). It is srun's default unless the cluster sets
// KillOnBadExit=1; the flag makes it explicit (docs/cluster.md).
var SlurmKeepGoingArgs = []string{"--kill-on-bad-exit=0"}

// SlurmCPUs is the CPU count the throw-away cluster's node claims
// (SlurmdParameters=config_overrides lets it exceed the real cores), so
// that jobs of up to SlurmCPUs tasks run at once on any machine.
const SlurmCPUs = 16

// slurmLock serializes the throw-away clusters of all test processes on
// the machine: go test runs packages in parallel, and other worktrees may
// test at the same time.
var slurmLock = filepath.Join(os.TempDir(), "softsync-clustertest-slurm.lock")

// Slurm is a throw-away single-node Slurm cluster: slurmctld and slurmd on
// 127.0.0.1, authentication none, free ports, state, spool and logs in a
// temporary directory. StartSlurm starts it; it is shut down when the test
// ends.
type Slurm struct {
	// Dir holds slurm.conf, the state, spool and log files, and job
	// output files.
	Dir string
	// Conf is the path of slurm.conf (SLURM_CONF for the commands).
	Conf string

	t       testing.TB
	srun    string
	marker  string
	daemons []*exec.Cmd
	lock    *os.File
	seq     int
}

// StartSlurm starts a throw-away Slurm cluster and waits until its node is
// idle. It skips the test (fails with EnvRequire=1) when the Slurm
// binaries are missing or the process is not root. Only one such cluster
// runs on the machine at a time: StartSlurm waits for another test's to
// end. At the end of the test (t.Cleanup) it runs scontrol shutdown and
// kills whatever of the cluster is left, jobs included; when the test has
// failed, it logs the tail of the daemons' logs first.
func StartSlurm(t testing.TB) *Slurm {
	t.Helper()
	needRoot(t, "Slurm")
	for _, b := range []string{"slurmctld", "slurmd", "sbatch", "sinfo", "scontrol"} {
		lookPath(t, "Slurm", b)
	}
	srun := lookPath(t, "Slurm", "srun")
	lock, err := acquire(slurmLock, 10*time.Minute)
	if err != nil {
		t.Fatalf("clustertest: Slurm: %v", err)
	}
	s := &Slurm{
		t: t, Dir: t.TempDir(), lock: lock, srun: srun,
		marker: fmt.Sprintf("%d-%d-slurm", os.Getpid(), jobSeq.Add(1)),
	}
	s.Conf = filepath.Join(s.Dir, "slurm.conf")
	t.Cleanup(s.shutdown)
	for _, d := range []string{"state", "spool"} {
		if err := os.Mkdir(filepath.Join(s.Dir, d), 0o755); err != nil {
			t.Fatalf("clustertest: Slurm: %v", err)
		}
	}
	port, err := slurmPorts()
	if err != nil {
		t.Fatalf("clustertest: Slurm: %v", err)
	}
	if err := os.WriteFile(s.Conf, []byte(slurmConf(s.Dir, port)), 0o644); err != nil {
		t.Fatalf("clustertest: Slurm: %v", err)
	}
	s.daemon("slurmctld", "-D")
	s.daemon("slurmd", "-D", "-N", "localhost")
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, _ := run(ctx, s.env(), "sinfo", "-h", "-o", "%T")
		cancel()
		if strings.TrimSpace(out) == "idle" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("clustertest: Slurm: node not idle after 60 s (sinfo: %q)\n%s", out, s.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s
}

// slurmConf is the configuration of the throw-away cluster, with the
// ports from slurmPorts.
func slurmConf(dir string, port int) string {
	return fmt.Sprintf(`ClusterName=softsynctest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=%d
SlurmdPort=%d
SrunPortRange=%d-%d
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd.pid
SlurmctldLogFile=%[5]s/slurmctld.log
SlurmdLogFile=%[5]s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MailProg=/bin/true
SlurmdParameters=config_overrides
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=%[6]d RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
`, port, port+1, port+2, port+101, dir, SlurmCPUs)
}

// slurmPorts picks a base port p such that p (slurmctld) and p+1
// (slurmd) are free now; srun uses p+2 to p+101. All lie in 20000-29999,
// below the kernel's ephemeral ports, away from Slurm's usual 6817-6818.
func slurmPorts() (int, error) {
	start := (os.Getpid() * 7919) % 9800
	for i := 0; i < 95; i++ {
		p := 20000 + (start+i*103)%9800
		if portFree(p) && portFree(p+1) {
			return p, nil
		}
	}
	return 0, errors.New("no free ports in 20000-29999")
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// env is the environment of the Slurm commands and daemons.
func (s *Slurm) env() []string {
	return jobEnv([]string{"SLURM_CONF=" + s.Conf, markerVar + "=" + s.marker})
}

// Env returns the "SLURM_CONF=…" entry that points Slurm's commands at
// this cluster, for tests that run them themselves.
func (s *Slurm) Env() []string { return []string{"SLURM_CONF=" + s.Conf} }

func (s *Slurm) daemon(argv ...string) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = s.env()
	out, err := os.Create(filepath.Join(s.Dir, argv[0]+".out"))
	if err != nil {
		s.t.Fatalf("clustertest: Slurm: %v", err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("clustertest: Slurm: %s: %v", argv[0], err)
	}
	s.daemons = append(s.daemons, cmd)
}

// shutdown stops the cluster: scontrol shutdown, a wait for the daemons,
// then SIGKILL for whatever of the cluster is left.
func (s *Slurm) shutdown() {
	if s.t.Failed() && len(s.daemons) > 0 {
		s.t.Logf("clustertest: Slurm logs:\n%s", s.logs())
	}
	if len(s.daemons) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, _ = run(ctx, s.env(), "scontrol", "shutdown")
		cancel()
	}
	for _, d := range s.daemons {
		done := make(chan struct{})
		go func() { _ = d.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-d.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	s.daemons = nil
	sweep(s.marker)
	if s.lock != nil {
		s.lock.Close() // releases the flock
		s.lock = nil
	}
}

// logs returns the last lines of the daemons' logs.
func (s *Slurm) logs() string {
	var b strings.Builder
	for _, f := range []string{"slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"} {
		data, err := os.ReadFile(filepath.Join(s.Dir, f))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Fprintf(&b, "--- %s ---\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

// Srun returns a launcher that starts jobs with srun -n N on this cluster.
func (s *Slurm) Srun() *Launcher {
	return &Launcher{Name: "slurm", env: s.Env(), argv: func(sp Spec) []string {
		a := []string{s.srun, "-n", strconv.Itoa(sp.N)}
		if sp.KeepGoing {
			a = append(a, SlurmKeepGoingArgs...)
		}
		a = append(a, sp.LauncherArgs...)
		return append(a, sp.Argv...)
	}}
}

// BatchSpec describes a batch job.
type BatchSpec struct {
	// Script is the batch script's text, starting with "#!".
	Script string
	// Tasks is the allocation's task count (sbatch -n).
	Tasks int
	// Args holds more sbatch options.
	Args []string
	// Env holds "KEY=VALUE" entries added to the script's environment.
	Env []string
	// Timeout bounds the wait for the job's end; 0 means DefaultTimeout.
	Timeout time.Duration
}

// BatchResult is the outcome of a batch job.
type BatchResult struct {
	// JobID is Slurm's job id.
	JobID string
	// State is the job's final state: COMPLETED, FAILED, CANCELLED, ...
	State string
	// ExitCode and Signal are the script's exit status and the signal
	// that ended it (Slurm's ExitCode=code:signal).
	ExitCode, Signal int
	// Output is the job's output file (the script's standard output and
	// error, and those of the steps it ran).
	Output string
}

// slurmDone lists Slurm's final job states.
var slurmDone = map[string]bool{
	"COMPLETED": true, "FAILED": true, "CANCELLED": true, "TIMEOUT": true, "NODE_FAIL": true,
	"OUT_OF_MEMORY": true, "PREEMPTED": true, "BOOT_FAIL": true, "DEADLINE": true,
}

// Batch submits b with sbatch and waits for the job to end. It fails the
// test, quoting what it knows, if submission fails or the job does not end
// within the timeout; a job that ends in another state than COMPLETED is
// returned for the test to judge.
func (s *Slurm) Batch(t testing.TB, b BatchSpec) BatchResult {
	t.Helper()
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	s.seq++
	script := filepath.Join(s.Dir, fmt.Sprintf("batch-%d.sh", s.seq))
	output := filepath.Join(s.Dir, fmt.Sprintf("batch-%d.out", s.seq))
	if err := os.WriteFile(script, []byte(b.Script), 0o755); err != nil {
		t.Fatalf("clustertest: sbatch: %v", err)
	}
	args := []string{"sbatch", "--parsable", "-o", output}
	if b.Tasks > 0 {
		args = append(args, "-n", strconv.Itoa(b.Tasks))
	}
	args = append(append(args, b.Args...), script)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	out, err := run(ctx, append(s.env(), b.Env...), args...)
	cancel()
	if err != nil {
		t.Fatalf("clustertest: %v\n%s", err, s.logs())
	}
	r := BatchResult{JobID: strings.TrimSpace(strings.Split(out, ";")[0])}
	deadline := time.Now().Add(timeout)
	var show string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		show, _ = run(ctx, s.env(), "scontrol", "show", "job", "-o", r.JobID)
		cancel()
		r.State = field(show, "JobState")
		if slurmDone[r.State] {
			break
		}
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = run(ctx, s.env(), "scancel", r.JobID)
			cancel()
			data, _ := os.ReadFile(output)
			t.Fatalf("clustertest: batch job %s not done after %v (state %q)\n--- output ---\n%s--- end of output ---\n%s",
				r.JobID, timeout, r.State, data, s.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, sig, _ := strings.Cut(field(show, "ExitCode"), ":")
	r.ExitCode, _ = strconv.Atoi(code)
	r.Signal, _ = strconv.Atoi(sig)
	data, err := os.ReadFile(output)
	if err != nil {
		t.Fatalf("clustertest: batch job %s (%s): %v", r.JobID, r.State, err)
	}
	r.Output = string(data)
	return r
}

// field returns the value of key in scontrol's one-line "Key=Value ..."
// output.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// acquire takes an exclusive flock on path, polling until timeout.
func acquire(path string, timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
