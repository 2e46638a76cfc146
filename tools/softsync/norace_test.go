package main

// raceDetector is set when the tests run under the race detector, which
// makes the processes the multi-process tests start too slow for make
// test: they run natively instead.
var raceDetector bool
