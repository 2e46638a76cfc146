//go:build race

package learner

func init() { raceDetector = true }
