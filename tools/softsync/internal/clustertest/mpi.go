package clustertest

import (
	"strconv"
	"testing"
)

// OpenMPIArgs are the options OpenMPI adds before -np: running as root
// (CI is root), more processes than cores, no binding of each process to
// one core (softsync's processes are multi-threaded), and the runtime's own
// traffic kept on the loopback interface (it is the one interface every
// machine and every network namespace of this package has).
var OpenMPIArgs = []string{
	"--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
	"--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo",
}

// OpenMPIKeepGoingArgs keep the other processes running when one dies
// (Spec.KeepGoing). Verified with Open MPI 4.1.4: "--mca
// orte_abort_on_non_zero_status 0" alone keeps them running after a
// non-zero exit but leaves mpirun hanging after a death by a signal;
// --enable-recovery covers both, and mpirun then exits 0 whatever the
// processes did (docs/cluster.md).
var OpenMPIKeepGoingArgs = []string{"--enable-recovery"}

// OpenMPI returns a launcher for Open MPI's mpirun (Debian's
// mpirun.openmpi, else mpirun), or skips the test when it is not installed
// (fails with EnvRequire=1).
func OpenMPI(t testing.TB) *Launcher {
	t.Helper()
	bin := lookPath(t, "OpenMPI", "mpirun.openmpi", "mpirun")
	return &Launcher{Name: "openmpi", argv: func(s Spec) []string {
		a := append([]string{bin}, OpenMPIArgs...)
		if s.KeepGoing {
			a = append(a, OpenMPIKeepGoingArgs...)
		}
		a = append(append(a, s.LauncherArgs...), "-np", strconv.Itoa(s.N))
		return append(a, s.Argv...)
	}}
}

// MPICH returns a launcher for MPICH's Hydra (mpiexec.mpich, else
// mpiexec.hydra), or skips the test when it is not installed (fails with
// EnvRequire=1).
//
// Hydra 4.0.2 kills every process with SIGKILL when one dies by a signal,
// with or without -disable-auto-cleanup, while a non-zero exit status
// leaves the others running. With Spec.KeepGoing each process therefore
// runs under "sh -c '"$@"; exit $?'", which turns a death by signal N into
// exit status 128+N (docs/cluster.md).
func MPICH(t testing.TB) *Launcher {
	t.Helper()
	bin := lookPath(t, "MPICH", "mpiexec.mpich", "mpiexec.hydra")
	return &Launcher{Name: "mpich", argv: func(s Spec) []string {
		a := append(append([]string{bin}, s.LauncherArgs...), "-n", strconv.Itoa(s.N))
		if s.KeepGoing {
			a = append(a, ExitStatusWrapper...)
		}
		return append(a, s.Argv...)
	}}
}

// ExitStatusWrapper, put before a command, runs it in a shell that
// outlives it and exits with its status: a death by signal N becomes exit
// status 128+N, which launchers treat as an ordinary failure.
var ExitStatusWrapper = []string{"sh", "-c", `"$@"; exit $?`, "sh"}
