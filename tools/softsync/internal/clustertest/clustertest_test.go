package clustertest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/tools/softsync/internal/launcher"
)

// record, when set, makes TestLaunchers write each process's launcher
// variables to this directory: the recorded environments of the launcher
// package's tests (launcher/testdata/env).
var record = flag.String("clustertest.record", "", "write the launcher environments seen by TestLaunchers to this `dir`")

func TestMain(m *testing.M) {
	Main(m, map[string]func([]string) int{
		"world": worldMain,
		"echo":  echoMain,
		"dial":  dialMain,
		"die":   dieMain,
	})
}

// worldLine is what the "world" helper prints, one line per process.
type worldLine struct {
	Launcher             launcher.Kind
	Rank, Size           int
	LocalRank, LocalSize int
	Node                 string
	Nodes                []string
	Batch                bool
	JobID, StepID        string
	Err                  string `json:",omitempty"`
}

const worldPrefix = "WORLD "

// worldMain prints what launcher.Detect finds. Arguments: a scenario name
// and, optionally, a directory to record the environment in.
func worldMain(args []string) int {
	w, err := launcher.Detect(os.Getenv)
	line := worldLine{w.Launcher, w.Rank, w.Size, w.LocalRank, w.LocalSize, w.Node, w.Nodes, w.Batch, w.JobID, w.StepID, ""}
	if err != nil {
		line.Err = err.Error()
	}
	data, _ := json.Marshal(line)
	fmt.Printf("%s%s\n", worldPrefix, data)
	if len(args) >= 2 && args[1] != "" {
		name := fmt.Sprintf("%s-rank%d.env", args[0], w.Rank)
		if w.Batch {
			name = args[0] + ".env"
		}
		if err := os.WriteFile(filepath.Join(args[1], name), []byte(recordedEnv()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// recordedEnv returns the launcher variables of this process, sorted, one
// KEY=VALUE per line, without paths, addresses and keys of this machine.
func recordedEnv() string {
	var lines []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !launcherVar(name) || name == markerVar {
			continue
		}
		switch {
		case strings.HasPrefix(name, "OMPI_") && !strings.HasPrefix(name, "OMPI_COMM_WORLD_") &&
			name != "OMPI_UNIVERSE_SIZE" && name != "OMPI_MCA_ess_base_jobid" && name != "OMPI_MCA_ess_base_vpid":
			continue
		case strings.HasPrefix(name, "PMIX_") && name != "PMIX_RANK" && name != "PMIX_NAMESPACE" && name != "PMIX_HOSTNAME":
			continue
		case name == "SLURM_CONF" || name == "SLURM_SUBMIT_DIR" || name == "SLURM_WORKING_CLUSTER" ||
			name == "SLURM_SRUN_COMM_PORT" || name == "SLURM_STEP_LAUNCHER_PORT" || name == "SLURM_TASK_PID":
			continue
		}
		lines = append(lines, kv)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// worlds parses the helper's WORLD lines out of a job's output.
func worlds(t *testing.T, out string) []worldLine {
	t.Helper()
	var ws []worldLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		text, ok := strings.CutPrefix(sc.Text(), worldPrefix)
		if !ok {
			continue
		}
		var w worldLine
		if err := json.Unmarshal([]byte(text), &w); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		ws = append(ws, w)
	}
	return ws
}

// checkWorld checks that ws are the n processes of one world of launcher
// kind, each rank exactly once.
func checkWorld(t *testing.T, what string, ws []worldLine, kind launcher.Kind, n int, out string) {
	t.Helper()
	seen := make(map[int]int)
	for _, w := range ws {
		if w.Err != "" || w.Launcher != kind || w.Size != n || w.Batch {
			t.Errorf("%s: a process saw %+v, want launcher %s, size %d", what, w, kind, n)
		}
		seen[w.Rank]++
	}
	for r := 0; r < n; r++ {
		if seen[r] != 1 {
			t.Errorf("%s: rank %d seen %d times", what, r, seen[r])
		}
	}
	if len(ws) != n || t.Failed() {
		t.Fatalf("%s: %d processes reported, want %d; output:\n%s", what, len(ws), n, out)
	}
}

func TestLaunchers(t *testing.T) {
	const n = 4
	for _, tc := range []struct {
		kind launcher.Kind
		l    func(t *testing.T) *Launcher
	}{
		{launcher.OpenMPI, func(t *testing.T) *Launcher { return OpenMPI(t) }},
		{launcher.MPICH, func(t *testing.T) *Launcher { return MPICH(t) }},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			l := tc.l(t)
			out := l.MustRun(t, Spec{N: n, Argv: Self("world", string(tc.kind), *record)})
			ws := worlds(t, out)
			checkWorld(t, l.Name, ws, tc.kind, n, out)
			checkLocal(t, ws, n)
		})
	}
	t.Run("slurm", func(t *testing.T) {
		s := StartSlurm(t)
		// srun --mpi=pmi2 also sets PMI_RANK and PMI_SIZE, as MPICH does.
		for _, scenario := range []string{"slurm", "slurm-pmi2"} {
			t.Run(scenario, func(t *testing.T) {
				spec := Spec{N: n, Argv: Self("world", scenario, *record)}
				if scenario == "slurm-pmi2" {
					spec.LauncherArgs = []string{"--mpi=pmi2"}
				}
				out := s.Srun().MustRun(t, spec)
				ws := worlds(t, out)
				checkWorld(t, scenario, ws, launcher.Slurm, n, out)
				checkLocal(t, ws, n)
				for _, w := range ws {
					if len(w.Nodes) != 1 || w.Nodes[0] != "localhost" || w.Node != "localhost" || w.JobID == "" || w.StepID == "" {
						t.Errorf("rank %d: node %q of %q, job %q step %q; want localhost of [localhost] and ids", w.Rank, w.Node, w.Nodes, w.JobID, w.StepID)
					}
				}
			})
		}
		t.Run("sbatch", func(t *testing.T) { testBatch(t, s) })
	})
}

// checkLocal checks the local ranks of a world of n processes on one node.
func checkLocal(t *testing.T, ws []worldLine, n int) {
	t.Helper()
	for _, w := range ws {
		if w.LocalSize != n || w.LocalRank != w.Rank {
			t.Errorf("rank %d: local rank %d of %d, want %d of %d (one node)", w.Rank, w.LocalRank, w.LocalSize, w.Rank, n)
		}
	}
}

// testBatch runs, in one sbatch script, the script's own detection and
// then srun, mpirun and mpiexec inside the allocation: the MPI launchers'
// ranks inherit the script's SLURM_PROCID=0 and must still be told apart.
func testBatch(t *testing.T, s *Slurm) {
	mpirun := OpenMPI(t)
	mpich := MPICH(t)
	quote := func(argv []string) string {
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		return strings.Join(q, " ")
	}
	script := "#!/bin/sh\nset -e\n"
	for _, step := range []struct {
		name string
		l    *Launcher
	}{{"batch", Exec()}, {"srun", s.Srun()}, {"mpirun", mpirun}, {"mpich", mpich}} {
		spec := Spec{N: 4, Argv: Self("world", step.name+"-in-batch", *record)}
		if step.l.Name == "exec" {
			spec = Spec{Argv: Self("world", "slurm-batch", *record)}
		}
		script += "echo '== " + step.name + "'\n" + quote(step.l.Args(spec)) + "\n"
	}
	r := s.Batch(t, BatchSpec{Script: script, Tasks: 4})
	if r.State != "COMPLETED" || r.ExitCode != 0 {
		t.Fatalf("batch job %s: %s, exit %d:%d\n%s\nscript:\n%s", r.JobID, r.State, r.ExitCode, r.Signal, r.Output, script)
	}
	sections := map[string]string{}
	var name string
	for _, line := range strings.SplitAfter(r.Output, "\n") {
		if h, ok := strings.CutPrefix(line, "== "); ok {
			name = strings.TrimSpace(h)
			continue
		}
		sections[name] += line
	}
	batch := worlds(t, sections["batch"])
	if len(batch) != 1 || batch[0].Launcher != launcher.Slurm || !batch[0].Batch || batch[0].Size != 1 || batch[0].JobID != r.JobID {
		t.Errorf("batch script saw %+v, want one Slurm batch process of job %s", batch, r.JobID)
	}
	checkWorld(t, "srun in sbatch", worlds(t, sections["srun"]), launcher.Slurm, 4, r.Output)
	checkWorld(t, "mpirun in sbatch", worlds(t, sections["mpirun"]), launcher.OpenMPI, 4, r.Output)
	checkWorld(t, "mpiexec in sbatch", worlds(t, sections["mpich"]), launcher.MPICH, 4, r.Output)
}

// TestTimeout checks that a job past its timeout is killed with all its
// processes and reported as timed out, and that Stop does the same at once.
func TestTimeout(t *testing.T) {
	l := OpenMPI(t)
	j := l.Start(t, Spec{N: 2, Argv: []string{"sleep", "600"}, Timeout: 2 * time.Second})
	r := j.Wait()
	if !r.TimedOut || !errors.Is(r.Err, context.DeadlineExceeded) || r.ExitCode == 0 {
		t.Fatalf("want a timeout, got %s", r)
	}
	if !strings.Contains(r.String(), "sleep 600") || !strings.Contains(r.String(), "timed out") {
		t.Errorf("result does not quote the command line and the timeout: %s", r)
	}
	if left := marked([]byte(markerVar+"="+j.marker), os.Getpid()); len(left) > 0 {
		t.Errorf("processes %v of the job left after its timeout", left)
	}
	j = l.Start(t, Spec{N: 2, Argv: []string{"sh", "-c", "echo started; exec sleep 600"}})
	for deadline := time.Now().Add(time.Minute); strings.Count(j.Output(), "started") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("processes not started after a minute: %q", j.Output())
		}
	}
	j.Stop()
	if r := j.Wait(); r.TimedOut || r.Err == nil {
		t.Errorf("stopped job: %s", r)
	}
	if left := marked([]byte(markerVar+"="+j.marker), os.Getpid()); len(left) > 0 {
		t.Errorf("processes %v of the job left after Stop", left)
	}
}

// TestExecEnv checks that Spec.Env reaches the process and that the test
// process's own launcher variables do not.
func TestExecEnv(t *testing.T) {
	t.Setenv("SLURM_PROCID", "7")
	t.Setenv("OMPI_COMM_WORLD_RANK", "7")
	out := Exec().MustRun(t, Spec{Argv: []string{"sh", "-c", `echo "x=$X procid=$SLURM_PROCID ompi=$OMPI_COMM_WORLD_RANK"`}, Env: []string{"X=1"}})
	if strings.TrimSpace(out) != "x=1 procid= ompi=" {
		t.Fatalf("got %q", out)
	}
}

func TestNeedRequire(t *testing.T) {
	// need must fail rather than skip when EnvRequire=1: run it in a
	// subtest of a fake TB and look at the outcome.
	for _, req := range []string{"", "1"} {
		t.Setenv(EnvRequire, req)
		f := &fakeTB{TB: t}
		func() {
			defer func() { _ = recover() }()
			need(f, "thing", "missing")
		}()
		if req == "1" && (!f.failed || f.skipped) {
			t.Errorf("%s=1: need did not fail (failed %v, skipped %v)", EnvRequire, f.failed, f.skipped)
		}
		if req == "" && (f.failed || !f.skipped) {
			t.Errorf("%s unset: need did not skip (failed %v, skipped %v)", EnvRequire, f.failed, f.skipped)
		}
		if !strings.Contains(f.msg, "thing: missing") {
			t.Errorf("message %q does not name what is missing", f.msg)
		}
	}
}

// fakeTB records Fatalf and Skipf and stops the calling function by panic.
type fakeTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	panic(f)
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	panic(f)
}
