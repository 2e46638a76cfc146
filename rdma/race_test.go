//go:build race

package rdma

// raceEnabled: the race detector slows the Go loops of the tests several
// times, so exhaustive sweeps are thinned under it.
const raceEnabled = true
