package launcher

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// recorded reads an environment recorded from a real run
// (testdata/env/NAME.env, KEY=VALUE lines) as a getenv function.
func recorded(t *testing.T, name string) func(string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "env", name+".env"))
	if err != nil {
		t.Fatal(err)
	}
	return envOf(strings.Split(strings.TrimSpace(string(data)), "\n")...)
}

// envOf makes a getenv function of KEY=VALUE entries.
func envOf(kvs ...string) func(string) string {
	env := make(map[string]string)
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return func(k string) string { return env[k] }
}

// TestDetectRecorded checks Detect on the environments that Open MPI 4.1,
// MPICH 4.0 and Slurm 22.05 gave the 4 processes of a job on this machine
// kind, alone and inside an sbatch allocation of 4 tasks.
func TestDetectRecorded(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		kind     Kind
		node     string
		nodes    []string
	}{
		{"openmpi", OpenMPI, "vm", nil},
		{"mpich", MPICH, "", nil},
		{"slurm", Slurm, "localhost", []string{"localhost"}},
		{"srun-in-batch", Slurm, "localhost", []string{"localhost"}},
		// srun --mpi=pmi2 also sets PMI_RANK, PMI_SIZE and PMI_JOBID.
		{"slurm-pmi2", Slurm, "localhost", []string{"localhost"}},
		// mpirun and mpiexec inside sbatch: every rank also sees the batch
		// shell's SLURM_PROCID=0 and SLURM_NTASKS=4.
		{"mpirun-in-batch", OpenMPI, "vm", nil},
		{"mpich-in-batch", MPICH, "", nil},
	} {
		for rank := 0; rank < 4; rank++ {
			name := tc.scenario + "-rank" + string(rune('0'+rank))
			getenv := recorded(t, name)
			w, err := Detect(getenv)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if w.Launcher != tc.kind || w.Rank != rank || w.Size != 4 || w.LocalRank != rank || w.LocalSize != 4 ||
				w.Node != tc.node || !reflect.DeepEqual(w.Nodes, tc.nodes) || w.Batch {
				t.Errorf("%s: %+v", name, w)
			}
			if err := w.Check(4); err != nil {
				t.Errorf("%s: Check(4): %v", name, err)
			}
			if tc.kind == Slurm && (w.JobID == "" || w.StepID == "" || w.NodeID != 0) {
				t.Errorf("%s: job %q step %q node id %d", name, w.JobID, w.StepID, w.NodeID)
			}
			if tc.kind == OpenMPI && w.JobID != getenv("OMPI_MCA_ess_base_jobid") {
				t.Errorf("%s: job id %q", name, w.JobID)
			}
		}
	}
}

// TestDetectBatchScript: the batch script itself is one process, although
// Slurm gives it SLURM_PROCID=0 and the allocation's SLURM_NTASKS=4.
func TestDetectBatchScript(t *testing.T) {
	w, err := Detect(recorded(t, "slurm-batch"))
	if err != nil {
		t.Fatal(err)
	}
	if w.Launcher != Slurm || !w.Batch || w.Rank != 0 || w.Size != 1 || w.StepID != "" || w.JobID == "" ||
		!reflect.DeepEqual(w.Nodes, []string{"localhost"}) {
		t.Fatalf("%+v", w)
	}
	if err := w.Check(1); err != nil {
		t.Fatalf("Check(1): %v", err)
	}
	err = w.Check(4)
	if !errors.Is(err, ErrBatchScript) || !strings.Contains(err.Error(), "SLURM_NTASKS=4") || !strings.Contains(err.Error(), "srun") {
		t.Fatalf("Check(4) = %v", err)
	}
}

func TestDetectNone(t *testing.T) {
	w, err := Detect(envOf("HOME=/root", "PATH=/bin"))
	if err != nil {
		t.Fatal(err)
	}
	want := World{Launcher: None, Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, NodeID: -1}
	if !reflect.DeepEqual(w, want) {
		t.Fatalf("got %+v, want %+v", w, want)
	}
	if err := w.Check(1); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(0); err != nil {
		t.Fatal(err)
	}
	err = w.Check(4)
	if !errors.Is(err, ErrNoLauncher) || !strings.Contains(err.Error(), "4 processes") || !strings.Contains(err.Error(), "mpirun -np 4") {
		t.Fatalf("Check(4) = %v", err)
	}
}

// TestDetectMultiNode: rank 5 of 8 tasks on the third of four nodes, two
// tasks per node, as srun would set it.
func TestDetectMultiNode(t *testing.T) {
	w, err := Detect(envOf(
		"SLURM_JOB_ID=77", "SLURM_STEP_ID=3", "SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_STEP_NUM_TASKS=8",
		"SLURM_LOCALID=1", "SLURM_NODEID=2", "SLURMD_NODENAME=node03", "SLURM_NNODES=4",
		"SLURM_JOB_NODELIST=node[01-04,07]", "SLURM_STEP_NODELIST=node[01-04]",
		"SLURM_TASKS_PER_NODE=2(x5)", "SLURM_STEP_TASKS_PER_NODE=2(x4)",
	))
	if err != nil {
		t.Fatal(err)
	}
	want := World{
		Launcher: Slurm, Rank: 5, Size: 8, LocalRank: 1, LocalSize: 2, NodeID: 2, Node: "node03",
		Nodes: []string{"node01", "node02", "node03", "node04"}, JobID: "77", StepID: "3",
	}
	w.Vars = nil
	if !reflect.DeepEqual(w, want) {
		t.Fatalf("got %+v\nwant %+v", w, want)
	}
}

// TestDetectPrecedence: Open MPI's variables win over MPICH's and Slurm's,
// MPICH's over Slurm's.
func TestDetectPrecedence(t *testing.T) {
	slurm := []string{"SLURM_JOB_ID=9", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=1"}
	mpich := []string{"PMI_RANK=2", "PMI_SIZE=3"}
	ompi := []string{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2"}
	for _, tc := range []struct {
		env        []string
		kind       Kind
		rank, size int
	}{
		{append(append(slurm, mpich...), ompi...), OpenMPI, 1, 2},
		{append(slurm, mpich...), MPICH, 2, 3},
		{slurm, Slurm, 0, 1},
		// srun --mpi=pmi2's own PMI variables: the same world as Slurm's.
		{append(slurm, "PMI_RANK=0", "PMI_SIZE=1", "PMI_JOBID=9.0"), Slurm, 0, 1},
		// A Hydra started by srun: its ranks inherit the step's PMI_JOBID
		// but have Hydra's rank and size.
		{append(slurm, "PMI_RANK=2", "PMI_SIZE=3", "PMI_JOBID=9.0"), MPICH, 2, 3},
		{append(slurm, "PMI_RANK=0", "PMI_SIZE=3", "PMI_JOBID=9.0"), MPICH, 0, 3},
	} {
		w, err := Detect(envOf(tc.env...))
		if err != nil || w.Launcher != tc.kind || w.Rank != tc.rank || w.Size != tc.size {
			t.Errorf("%v: %+v, %v", tc.env, w, err)
		}
	}
}

func TestDetectInvalid(t *testing.T) {
	for _, env := range [][]string{
		{"OMPI_COMM_WORLD_RANK=0"}, // no size
		{"OMPI_COMM_WORLD_RANK=x", "OMPI_COMM_WORLD_SIZE=2"},
		{"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2"},
		{"OMPI_COMM_WORLD_RANK=-1", "OMPI_COMM_WORLD_SIZE=2"},
		{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=0"},
		{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2"},
		{"PMI_RANK=1", "PMI_SIZE=1"},
		{"PMI_RANK=0", "PMI_SIZE=two"},
		{"SLURM_STEP_ID=0", "SLURM_PROCID=0"}, // no task count
		{"SLURM_STEP_ID=0", "SLURM_PROCID=4", "SLURM_NTASKS=4"},
		{"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_STEP_NODELIST=n[1-"},
		{"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_STEP_NODELIST=n1", "SLURM_STEP_TASKS_PER_NODE=4(x"},
		{"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_STEP_NODELIST=n[1-2]", "SLURM_NODEID=2"},
		{"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=3", "SLURM_NODEID=0", "SLURM_STEP_TASKS_PER_NODE=2,2"},
	} {
		w, err := Detect(envOf(env...))
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: %+v, %v; want ErrInvalid", env, w, err)
		}
	}
}

// TestCheck checks the mismatch errors and that they quote the evidence.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		env      []string
		want     int
		err      error
		contains []string
	}{
		// Every process a singleton: an MPI launcher that reports a world
		// of one to each of them, with Slurm's variables beside.
		{[]string{"PMI_RANK=0", "PMI_SIZE=1", "SLURM_STEP_ID=0", "SLURM_PROCID=2", "SLURM_NTASKS=4"}, 4, ErrSingleton,
			[]string{"4 processes expected", "mpich reports rank 0 of 1", "PMI_RANK=0", "PMI_SIZE=1", "SLURM_PROCID=2", "SLURM_NTASKS=4"}},
		{[]string{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1"}, 8, ErrSingleton,
			[]string{"8 processes expected", "openmpi", "OMPI_COMM_WORLD_SIZE=1", "mpirun -np 8"}},
		{[]string{"SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_NTASKS=3"}, 4, ErrSizeMismatch,
			[]string{"4 processes expected", "slurm reports 3", "SLURM_NTASKS=3"}},
		{[]string{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=4"}, 2, ErrSizeMismatch,
			[]string{"2 processes expected", "openmpi reports 4"}},
		{[]string{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=4"}, 4, nil, nil},
		{[]string{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=4"}, 0, nil, nil},
	} {
		w, err := Detect(envOf(tc.env...))
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		err = w.Check(tc.want)
		if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%v: Check(%d) = %v, want %v", tc.env, tc.want, err, tc.err)
			continue
		}
		for _, s := range tc.contains {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%v: Check(%d) = %q, does not say %q", tc.env, tc.want, err, s)
			}
		}
	}
}

func TestWorldString(t *testing.T) {
	w, err := Detect(recorded(t, "slurm-rank2"))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.String(); got != "slurm rank 2 of 4 on localhost" {
		t.Fatalf("%q", got)
	}
}
