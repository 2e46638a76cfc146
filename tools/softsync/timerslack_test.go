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

// doctorWith runs softsync doctor as a child process whose environment is
// this one's without $SOFTSYNC_TIMER_SLACK, plus env.
func doctorWith(t *testing.T, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, timerSlackEnv+"=") })
	argv := append(append([]string(nil), selfArgv...), "doctor", "--threads", "1")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(base, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestTimerSlackInvalid: an invalid $SOFTSYNC_TIMER_SLACK is refused by
// name, in every build.
func TestTimerSlackInvalid(t *testing.T) {
	for _, bad := range []string{"", "1ms", "-5"} {
		out, err := doctorWith(t, timerSlackEnv+"="+bad)
		if err == nil || !strings.Contains(out, timerSlackEnv+"=") {
			t.Errorf("%s=%q softsync doctor: %v, want an error naming %s:\n%s", timerSlackEnv, bad, err, timerSlackEnv, out)
		}
	}
}
