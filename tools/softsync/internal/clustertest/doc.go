// Package clustertest runs real multi-process jobs in tests: under Open
// MPI's mpirun, MPICH's mpiexec, a throw-away single-node Slurm (srun and
// sbatch), and on several "hosts" made of network namespaces joined by
// veth pairs with an optional bandwidth limit. Tests of softsync's roles
// use it to start N processes the way users do; the launcher package reads
// the resulting environment.
//
// # Launchers and jobs
//
// A Launcher (OpenMPI, MPICH, Slurm.Srun, Exec, or Host.In of one of them)
// turns a Spec (N processes of Argv, extra environment, timeout,
// KeepGoing) into a command line. Launcher.Start runs it and returns a
// Job; Run waits for the Result (combined output, exit status, timeout);
// MustRun fails the test with the command line and the whole output
// unless the launcher exits 0. Every process a job starts carries a marker
// in its environment, and when the launcher ends, times out or the test
// ends, every process with that marker is killed: nothing outlives the
// test. The environment of the test process loses its own launcher
// variables (OMPI_*, PMI_*, SLURM_*, ...) before it is passed on, so that
// tests behave the same when make test itself runs under a launcher.
//
// Main and Self let the test binary be the program the launchers start:
// Self("name", args...) is the command line that runs helper "name"
// registered with Main in the package's TestMain.
//
// # When a process dies
//
// Each launcher kills the whole job or not by its own rules; Spec.KeepGoing
// selects the options that keep the others running (OpenMPIKeepGoingArgs,
// ExitStatusWrapper for MPICH, SlurmKeepGoingArgs). docs/cluster.md
// records what each launcher does and what the survivors see; the tests of
// this package check it.
//
// # Slurm
//
// StartSlurm starts slurmctld and slurmd on 127.0.0.1 with auth/none,
// ports in 20000-29999 and all state in a temporary directory, waits until
// the node is idle, and shuts the cluster down when the test ends. A lock
// file serializes clusters across test processes on the machine.
//
// # Network namespaces
//
// NewNetwork (TwoHosts for two) creates hosts as network namespaces with
// addresses in Subnet (198.18.0.0/24, from the benchmarking range
// 198.18.0.0/15), joined by a veth pair or, for more than two, a bridge in
// a namespace of its own, optionally shaped by a tbf qdisc on both ends of
// each link (Link). Host.In runs a launcher's command inside a host;
// Host.Listen and Host.DialContext open sockets in a host's network from
// the test process itself. Everything is removed when the test ends.
//
// # Skipping
//
// Without a launcher binary, or without root for Slurm and namespaces, the
// tests skip with the reason. With EnvRequire=1 in the environment (the
// Makefile's test target sets it) they fail instead, so that CI cannot
// pass by skipping. The package is Linux-only: it reads /proc and enters
// namespaces with setns.
package clustertest
