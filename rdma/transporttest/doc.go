// Package transporttest is the conformance suite every rdma transport
// passes: Run drives a Network through ordering, concurrency, large
// messages, close and cancellation semantics, codec round trips, error
// reports, limits, steady-state allocations and goroutine leaks.
// WaitGoroutines and Crowd (connections that never authenticate, held
// open on a listener) serve the tests of the packages above rdma too.
package transporttest
