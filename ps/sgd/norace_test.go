//go:build !race

package sgd

const raceEnabled = false
