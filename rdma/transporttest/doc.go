// Package transporttest is the conformance suite every rdma transport
// passes: Run drives a Network through ordering, concurrency, large
// messages, close and cancellation semantics, codec round trips, error
// reports, limits, steady-state allocations and goroutine leaks.
package transporttest
