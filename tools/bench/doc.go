// Package bench is softsync's benchmark harness: what softsync bench
// measures and how its results are kept, without the command line. The
// binary (tools/softsync) parses the flags into the configurations here,
// gives the benchmarks that start processes a Processes of its own, and
// prints the results; the package itself never reads flags or the
// environment and never prints (a *slog.Logger from the caller says what
// it is doing).
//
// The benchmarks, each a configuration and a function returning its
// result:
//
//   - Peak: FMA peak per instruction-set level and copy bandwidth, the
//     yardsticks of the others (kernels/peak).
//   - Gemm: sgemm through the Go API, a raw C loop and the pure-Go
//     reference.
//   - Train: images/s of full training steps of one in-process job on
//     random data, against the FMA peak.
//   - Speedup: the same job with 1, 2, … learner processes
//     (Processes.Launch), and λ independent in-process jobs (the
//     ceiling); Scale: the same with each process on a CPU of its own,
//     beside the cost model's prediction (ps/sim/costmodel), whose inputs
//     MeasureInputs measures.
//   - All: every benchmark in a process of its own (Processes.RunJSON,
//     their --json output) beside its references (PyTorch, iperf3), into
//     Results (bench/results.json, schema in docs/bench.md), rendered as
//     markdown by RenderSummary and RegenerateDoc.
//
// A benchmark that runs whole jobs sits here, above learner/cluster; one
// of a single layer stays beside what it measures (rdma/transportbench,
// kernels/peak, go test -bench). A new bench subcommand adds its
// configuration, function and result type here and a file of flags and
// printing in tools/softsync; a figure of bench all adds a step to All
// and a group to groupTitles.
package bench
