package cluster

// raceDetector is set when the tests run under the race detector, which
// slows Go code down several times: the learning tests then train less.
var raceDetector bool
