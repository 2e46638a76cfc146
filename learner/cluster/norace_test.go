package cluster

import "testing"

// raceDetector is set when the tests run under the race detector, which
// slows Go code down several times: the learning tests then train less.
var raceDetector bool

// nativeOnly skips, under the race detector, a test that computes
// without goroutines of its own (nothing for the detector to find, its
// time multiplied tenfold); make test's native pass runs it (its -run
// list names every such test).
func nativeOnly(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("race detector: computation without goroutines; make test runs it natively")
	}
}
