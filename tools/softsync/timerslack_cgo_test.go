//go:build cgo && linux

package main

import (
	"strings"
	"testing"
)

// TestTimerSlack: a softsync process sets its timer slack before the Go
// runtime starts, 1 ms unless $SOFTSYNC_TIMER_SLACK says otherwise (0:
// the inherited one).
func TestTimerSlack(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, "1ms, set at start-up"},
		{[]string{timerSlackEnv + "=250000"}, "250µs, set at start-up"},
		{[]string{timerSlackEnv + "=0"}, ", inherited"},
	} {
		out, err := doctorWith(t, c.env...)
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("%v softsync doctor: %v, want a line with %q:\n%s", c.env, err, c.want, out)
		}
	}
}
