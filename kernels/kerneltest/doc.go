// Package kerneltest is the conformance suite every kernels.Engine must
// pass, and helpers for other packages' tests.
//
// Run checks each Engine method against a naive float64 loop reference
// (per-op tolerances, documented at each check), every backward method
// against central finite differences of its forward method (fixed seeds),
// that inputs are never modified, that outputs are overwritten and nothing
// past their required length is written, that misuse panics with a
// message naming the argument, that steady-state calls allocate nothing,
// and that concurrent use with separate workspaces is safe.
//
// Engines and ForEachEngine give other packages every engine of the build
// (the reference engine, and the native one at every instruction-set
// level the CPU runs), so that layer and network tests run on every
// variant of the kernels alike; levels the CPU lacks are reported as
// skipped, with the reason.
//
// ThreadsAgree checks that two engines which differ only in their thread
// counts give the same results, one after the other and at once.
package kerneltest
