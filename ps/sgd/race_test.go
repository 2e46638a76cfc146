//go:build race

package sgd

// raceEnabled: the race detector slows the Go loops of the tests many
// times, so the parallel tests' sweeps are thinned under it.
const raceEnabled = true
