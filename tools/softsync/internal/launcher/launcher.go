package launcher

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kind names the launcher that started the process.
type Kind string

// The launchers Detect knows, in the order it looks for them after None.
const (
	// None: no launcher variables; a world of one process.
	None Kind = "none"
	// OpenMPI: Open MPI's mpirun/mpiexec (ORTE in 4.x, PRRTE in 5.x).
	OpenMPI Kind = "openmpi"
	// MPICH: MPICH's Hydra (mpiexec.hydra, mpiexec.mpich) and the launchers
	// derived from it, through the PMI-1 variables.
	MPICH Kind = "mpich"
	// Slurm: a task of a Slurm job step (srun), or the batch script itself.
	Slurm Kind = "slurm"
)

var (
	// ErrInvalid: a launcher variable is present but malformed (not a
	// number, a rank outside the world, a node list that does not parse).
	ErrInvalid = errors.New("launcher: invalid launcher variable")
	// ErrNoLauncher: several processes were expected but no launcher
	// started this one.
	ErrNoLauncher = errors.New("launcher: no launcher found")
	// ErrSingleton: several processes were expected but the launcher
	// reports a world of one, as it does for each process when the
	// launcher and the program do not match.
	ErrSingleton = errors.New("launcher: process started as a world of one")
	// ErrSizeMismatch: the launcher's world size is not the expected one.
	ErrSizeMismatch = errors.New("launcher: world size mismatch")
	// ErrBatchScript: several processes were expected but this is the
	// Slurm batch script itself, not a task started by srun.
	ErrBatchScript = errors.New("launcher: running in the Slurm batch script, not in a job step")
)

// Var is one environment variable as Detect found it.
type Var struct {
	Name, Value string
}

func (v Var) String() string { return v.Name + "=" + v.Value }

// World is this process's place among the processes a launcher started
// together: its rank in 0..Size-1 and where it runs. Fields a launcher does
// not tell are -1 (numbers), "" (strings) or nil (Nodes).
type World struct {
	// Launcher is the launcher whose variables gave Rank and Size.
	Launcher Kind
	// Rank in 0..Size-1 and Size, the number of processes started together.
	Rank, Size int
	// LocalRank in 0..LocalSize-1 among the LocalSize processes of this
	// job on this node.
	LocalRank, LocalSize int
	// NodeID is this node's index in Nodes (Slurm only).
	NodeID int
	// Node is this node's name as the launcher knows it (PMIX_HOSTNAME,
	// SLURMD_NODENAME); MPICH's Hydra tells none, and callers fall back to
	// os.Hostname.
	Node string
	// Nodes lists the job step's nodes, expanded, in Slurm's order (Slurm
	// only: the step's node list, or the job's when there is no step).
	Nodes []string
	// JobID and StepID identify the job and the step where the launcher
	// tells them (Slurm: SLURM_JOB_ID, SLURM_STEP_ID; Open MPI: its job id).
	JobID, StepID string
	// Batch is true in a Slurm batch script outside any srun step: there
	// Slurm sets SLURM_PROCID=0 and the allocation's task count, yet the
	// script is one process. Detect then reports Rank 0 of Size 1.
	Batch bool
	// Vars holds every launcher variable present in the environment, of
	// any launcher, in a fixed order (Open MPI, MPICH, PMIx, Slurm): the
	// evidence that error messages quote.
	Vars []Var
}

// knownVars are the variables World.Vars records, per launcher, in order.
var knownVars = []string{
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
	"OMPI_COMM_WORLD_NODE_RANK", "OMPI_MCA_ess_base_jobid",
	"PMI_RANK", "PMI_SIZE", "PMI_JOBID", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
	"PMIX_RANK", "PMIX_NAMESPACE", "PMIX_HOSTNAME",
	"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_NTASKS",
	"SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NNODES",
	"SLURMD_NODENAME", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST",
	"SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
}

// Detect finds the launcher that started this process and its place in the
// launcher's world, from the environment that getenv reads (os.Getenv, or a
// recorded environment in tests). Without launcher variables it returns a
// World of Launcher None, rank 0 of 1, and no error.
//
// The launchers are tried in this order, and the first whose rank
// variable is set decides:
//
//  1. Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//     OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE, PMIX_HOSTNAME.
//  2. MPICH's Hydra: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS;
//     unless srun --mpi=pmi2 set them (PMI_JOBID names the Slurm step, and
//     rank and size are the step's), then Slurm.
//  3. Slurm: SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS),
//     SLURM_LOCALID, SLURM_NODEID, SLURMD_NODENAME, SLURM_STEP_NODELIST
//     (else SLURM_JOB_NODELIST), SLURM_STEP_TASKS_PER_NODE (else
//     SLURM_TASKS_PER_NODE), SLURM_JOB_ID, SLURM_STEP_ID.
//
// The MPI launchers come before Slurm because an mpirun or mpiexec started
// inside a Slurm allocation (an sbatch script, salloc) passes the Slurm
// variables of the batch shell on to every rank it starts: each rank then
// sees SLURM_PROCID=0 and the allocation's SLURM_NTASKS, and only the MPI
// variables tell the ranks apart. The reverse does not happen: srun does
// not set MPI variables (with --mpi=pmix it sets PMIX_RANK, which Detect
// does not use, since PMIx tells the size only through its library).
//
// In a Slurm batch script, outside srun (SLURM_PROCID set but no
// SLURM_STEP_ID), the result is Launcher Slurm with Batch set, rank 0 of 1.
//
// A variable that is present but malformed, or a rank outside 0..size-1,
// is an error wrapping ErrInvalid.
func Detect(getenv func(string) string) (World, error) {
	var vars []Var
	for _, name := range knownVars {
		if v := getenv(name); v != "" {
			vars = append(vars, Var{name, v})
		}
	}
	w := World{Launcher: None, Size: 1, LocalSize: 1, NodeID: -1, Vars: vars}
	p := parser{getenv: getenv}
	switch {
	case getenv("OMPI_COMM_WORLD_RANK") != "":
		p.mpi(&w, OpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
		w.Node = getenv("PMIX_HOSTNAME")
		w.JobID = getenv("OMPI_MCA_ess_base_jobid")
		if w.JobID == "" {
			w.JobID = getenv("PMIX_NAMESPACE")
		}
	case getenv("PMI_RANK") != "" && !slurmPMI(getenv):
		p.mpi(&w, MPICH, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
	case getenv("SLURM_PROCID") != "":
		w.Launcher = Slurm
		w.JobID = getenv("SLURM_JOB_ID")
		w.StepID = getenv("SLURM_STEP_ID")
		w.Node = getenv("SLURMD_NODENAME")
		w.Batch = w.StepID == ""
		list, tasks := "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"
		if w.Batch || getenv(list) == "" {
			list = "SLURM_JOB_NODELIST"
		}
		if w.Batch || getenv(tasks) == "" {
			tasks = "SLURM_TASKS_PER_NODE"
		}
		if nodes, err := ExpandNodeList(getenv(list)); err != nil {
			p.fail(fmt.Errorf("%s: %w", list, err))
		} else {
			w.Nodes = nodes
		}
		w.NodeID = p.opt("SLURM_NODEID", -1)
		if w.Batch {
			// One process: the batch script. SLURM_NTASKS is the
			// allocation's, for the steps the script will start.
			w.Rank, w.LocalRank, w.LocalSize = 0, 0, 1
			break
		}
		w.Rank = p.req("SLURM_PROCID")
		if getenv("SLURM_STEP_NUM_TASKS") != "" {
			w.Size = p.req("SLURM_STEP_NUM_TASKS")
		} else {
			w.Size = p.req("SLURM_NTASKS")
		}
		w.LocalRank = p.opt("SLURM_LOCALID", -1)
		w.LocalSize = -1
		perNode, err := ExpandTasksPerNode(getenv(tasks))
		switch {
		case err != nil:
			p.fail(fmt.Errorf("%s: %w", tasks, err))
		case w.NodeID >= 0 && w.NodeID < len(perNode):
			w.LocalSize = perNode[w.NodeID]
		}
	}
	if p.err != nil {
		return World{}, p.err
	}
	if err := w.validate(); err != nil {
		return World{}, err
	}
	return w, nil
}

// slurmPMI reports whether the PMI variables were set by srun --mpi=pmi2
// rather than by an MPI launcher: PMI_JOBID names the Slurm step
// ("JOB.STEP") and PMI's rank and size are the step's. Slurm's own
// variables then say more (nodes, job). A Hydra started by srun passes the
// step's PMI_JOBID on to its ranks but gives them its own PMI_RANK and
// PMI_SIZE, which do not match, so they stay MPICH's.
func slurmPMI(getenv func(string) string) bool {
	job, step := getenv("SLURM_JOB_ID"), getenv("SLURM_STEP_ID")
	tasks := getenv("SLURM_STEP_NUM_TASKS")
	if tasks == "" {
		tasks = getenv("SLURM_NTASKS")
	}
	return job != "" && step != "" && getenv("PMI_JOBID") == job+"."+step &&
		getenv("PMI_RANK") == getenv("SLURM_PROCID") && getenv("PMI_SIZE") == tasks
}

// validate checks the ranges of the numbers Detect read.
func (w World) validate() error {
	switch {
	case w.Launcher == None:
		return nil
	case w.Size < 1:
		return fmt.Errorf("launcher: %s world size %d (%s): %w", w.Launcher, w.Size, w.evidence(), ErrInvalid)
	case w.Rank < 0 || w.Rank >= w.Size:
		return fmt.Errorf("launcher: %s rank %d outside 0..%d (%s): %w", w.Launcher, w.Rank, w.Size-1, w.evidence(), ErrInvalid)
	case w.LocalRank >= 0 && w.LocalSize >= 0 && w.LocalRank >= w.LocalSize:
		return fmt.Errorf("launcher: %s local rank %d outside 0..%d (%s): %w", w.Launcher, w.LocalRank, w.LocalSize-1, w.evidence(), ErrInvalid)
	case w.Nodes != nil && w.NodeID >= len(w.Nodes):
		return fmt.Errorf("launcher: %s node id %d but %d nodes (%s): %w", w.Launcher, w.NodeID, len(w.Nodes), w.evidence(), ErrInvalid)
	}
	return nil
}

// parser reads integer variables and keeps the first error.
type parser struct {
	getenv func(string) string
	err    error
}

// mpi fills in the launcher, rank, size and local rank and size of an MPI
// launcher from the variables named.
func (p *parser) mpi(w *World, kind Kind, rank, size, localRank, localSize string) {
	w.Launcher = kind
	w.Rank, w.Size = p.req(rank), p.req(size)
	w.LocalRank, w.LocalSize = p.opt(localRank, -1), p.opt(localSize, -1)
}

// req parses a required variable.
func (p *parser) req(name string) int {
	if p.getenv(name) == "" {
		p.fail(fmt.Errorf("launcher: %s is not set: %w", name, ErrInvalid))
		return -1
	}
	return p.opt(name, -1)
}

// opt parses an optional variable, def when it is unset.
func (p *parser) opt(name string, def int) int {
	s := p.getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		p.fail(fmt.Errorf("launcher: %s=%q is not a non-negative integer: %w", name, s, ErrInvalid))
		return def
	}
	return v
}

func (p *parser) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// evidence lists the launcher variables found, for error messages.
func (w World) evidence() string {
	if len(w.Vars) == 0 {
		return "no launcher variables set"
	}
	s := make([]string, len(w.Vars))
	for i, v := range w.Vars {
		s[i] = v.String()
	}
	return strings.Join(s, " ")
}

// String describes w in one line, for logs: "openmpi rank 2 of 4 on n1".
func (w World) String() string {
	s := fmt.Sprintf("%s rank %d of %d", w.Launcher, w.Rank, w.Size)
	if w.Node != "" {
		s += " on " + w.Node
	}
	if w.Batch {
		s += " (batch script)"
	}
	return s
}

// Check returns nil if w is a world of want processes, and otherwise an
// error that names what was found: the launcher, the variables and their
// values, and the likely cause. want 0 accepts any size.
//
// The errors wrap ErrNoLauncher (want > 1, no launcher variables),
// ErrBatchScript (want > 1 in a Slurm batch script outside srun),
// ErrSingleton (want > 1 but the launcher says one process: launcher and
// program do not match, so each process started alone, e.g. an Open MPI 5
// program under srun --mpi=pmi2 without PMIx support, or an MPICH program
// under Open MPI's mpirun) or ErrSizeMismatch (any other size).
func (w World) Check(want int) error {
	if want <= 0 || w.Size == want {
		return nil
	}
	hint := fmt.Sprintf("start %d processes with mpirun -np %[1]d, mpiexec -n %[1]d or srun -n %[1]d", want)
	switch {
	case w.Launcher == None:
		return fmt.Errorf("launcher: %d processes expected, but no launcher variables are set (looked for OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID): %s: %w",
			want, hint, ErrNoLauncher)
	case w.Batch:
		return fmt.Errorf("launcher: %d processes expected, but this is the batch script of Slurm job %s, one process (%s): run the command under srun inside the script: %w",
			want, w.JobID, w.evidence(), ErrBatchScript)
	case w.Size == 1:
		return fmt.Errorf("launcher: %d processes expected, but %s reports rank %d of 1 (%s): each process was probably started alone because launcher and program do not match; %s: %w",
			want, w.Launcher, w.Rank, w.evidence(), hint, ErrSingleton)
	default:
		return fmt.Errorf("launcher: %d processes expected, but %s reports %d (rank %d; %s): %w",
			want, w.Launcher, w.Size, w.Rank, w.evidence(), ErrSizeMismatch)
	}
}
