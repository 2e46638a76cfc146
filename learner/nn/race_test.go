//go:build race

package nn

func init() { raceDetector = true }
