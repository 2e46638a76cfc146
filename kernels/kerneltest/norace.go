//go:build !race

package kerneltest

// raceEnabled: the package is built with the race detector (go test
// -race); see nativeOnly.
const raceEnabled = false
