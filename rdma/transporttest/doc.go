// Package transporttest is the conformance suite every rdma transport
// passes: Run drives a Network through ordering, concurrency, large
// messages, close and cancellation semantics, codec round trips, error
// reports, limits, steady-state allocations and goroutine leaks.
//
// It also holds the bounded waits that the tests of rdma and of the
// packages above it share: Eventually (poll until a condition holds),
// Receive (a channel receive) and WaitGoroutines (a goroutine-leak
// check), each failing the test with what it waited for when its time
// runs out, and Crowd (connections that never authenticate, held open on
// a listener).
package transporttest
