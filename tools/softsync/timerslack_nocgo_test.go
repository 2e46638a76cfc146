//go:build !cgo || !linux

package main

import (
	"strings"
	"testing"
)

// TestTimerSlack: without cgo nothing runs before the Go runtime starts,
// and doctor says the slack is not set, whatever $SOFTSYNC_TIMER_SLACK
// asks.
func TestTimerSlack(t *testing.T) {
	out, err := doctorWith(t, timerSlackEnv+"=250000")
	if err != nil || !strings.Contains(out, "not set: a build without cgo") {
		t.Errorf("softsync doctor: %v, want the timer slack not set:\n%s", err, out)
	}
}
