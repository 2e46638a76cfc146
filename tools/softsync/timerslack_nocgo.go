//go:build !cgo || !linux

package main

import "time"

// timerSlackSettable: a build without cgo (or off Linux) has no code that runs before the
// Go runtime starts its threads, so it leaves the timer slack as it is.
const timerSlackSettable = false

// timerSlack returns zeros: the slack is not known and was not set.
func timerSlack() (now, set time.Duration) { return 0, 0 }
