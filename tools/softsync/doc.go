// Command softsync is the one binary of softsync: it reads flags and
// environment variables, sets up logging and the compute engine, and runs
// the subcommands (doctor, bench, …).
//
// A training job's wiring lives in learner/cluster: train, launch, ps,
// learner, eval and train --cluster auto parse their flags into a
// cluster.Config, pick the topology and this process's place in it, and
// run it with cluster.StartProcess (runJob); they print the summary and
// the plots of cluster.NewReport's report.
//
// The harnesses behind bench, repro and sim are libraries (tools/bench,
// tools/repro, ps/sim/costmodel; docs/architecture.md, "Rooms"): this
// package parses their flags into their configurations, gives them what
// only the binary has (bench.Processes: softsync started as processes of
// its own; the compute engine, created on first use), and prints their
// results.
//
// Adding a subcommand is a one-file change here: a file whose init calls
// addCommand (top level) or addBenchCommand (under "softsync bench") with
// a constructor that receives the shared *App.
//
// Environment variables read here and nowhere else:
//
//	OPENBLAS_CORETYPE     an OpenBLAS core chosen by the user; respected as given
//	OPENBLAS_THREAD_TIMEOUT  OpenBLAS workers' spin time after a job, 2^n
//	                      cycles; default kernels.DefaultThreadTimeout
//	SOFTSYNC_BLAS_RETRY   set by softsync itself when it re-executes after a
//	                      start-up GEMM check failed (see App.Engine)
//	SOFTSYNC_ISA          the default of --isa: the highest instruction-set
//	                      level (auto, avx512, avx2, generic) of the kernels,
//	                      the solver's passes and the codecs
package main
