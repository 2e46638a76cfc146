package main

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTimerSlack: a softsync process sets its timer slack before the Go
// runtime starts, 1 ms unless $SOFTSYNC_TIMER_SLACK says otherwise (0:
// the inherited one), and refuses an invalid value by name.
func TestTimerSlack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, timerSlackEnv+"=") })
	doctor := func(env ...string) (string, error) {
		argv := append(append([]string(nil), selfArgv...), "doctor", "--threads", "1")
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(slices.Clip(base), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, "1ms, set at start-up"},
		{[]string{timerSlackEnv + "=250000"}, "250µs, set at start-up"},
		{[]string{timerSlackEnv + "=0"}, ", inherited"},
	} {
		out, err := doctor(c.env...)
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("%v softsync doctor: %v, want a line with %q:\n%s", c.env, err, c.want, out)
		}
	}
	for _, bad := range []string{"", "1ms", "-5"} {
		out, err := doctor(timerSlackEnv + "=" + bad)
		if err == nil || !strings.Contains(out, timerSlackEnv+"=") {
			t.Errorf("%s=%q softsync doctor: %v, want an error naming %s:\n%s", timerSlackEnv, bad, err, timerSlackEnv, out)
		}
	}
}
