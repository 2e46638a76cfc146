// Command softsync is the one binary of softsync: it reads flags and
// environment variables, sets up logging and the compute engine, and runs
// the subcommands (doctor, bench, …).
//
// Adding a subcommand is a one-file change: a file whose init calls
// addCommand (top level) or addBenchCommand (under "softsync bench") with
// a constructor that receives the shared *App.
//
// Environment variables read here and nowhere else:
//
//	OPENBLAS_CORETYPE     an OpenBLAS core chosen by the user; respected as given
//	SOFTSYNC_BLAS_RETRY   set by softsync itself when it re-executes after a
//	                      start-up GEMM check failed (see App.Engine)
package main
