package main

import (
	"fmt"
	"os"
	"strconv"
)

// timerSlackEnv names the environment variable that sets the process's
// timer slack in nanoseconds (0: the one it inherited).
//
// Why softsync sets one: the Go runtime's monitor thread (sysmon) sleeps
// 20 µs at a time for the first few milliseconds after every idle spell
// of the process, and a learner or shard server goes idle at every step,
// while it waits for a message. Each of those wake-ups preempts a compute
// thread on a busy core; a slack of 1 ms lets the kernel batch them
// (docs/build.md, "Timer slack"). Only sleeps with a timeout are
// stretched: a thread woken by a message, a futex or a socket wakes at
// once.
const timerSlackEnv = "SOFTSYNC_TIMER_SLACK"

// checkTimerSlackEnv returns an error naming $SOFTSYNC_TIMER_SLACK if it is
// set to something other than a number of nanoseconds (≥ 0).
func checkTimerSlackEnv() error {
	v, ok := os.LookupEnv(timerSlackEnv)
	if !ok {
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
		return fmt.Errorf("%s=%q: want a number of nanoseconds, 0 or more (0 keeps the inherited timer slack)", timerSlackEnv, v)
	}
	return nil
}

// timerSlackLine describes the timer slack for softsync doctor.
func timerSlackLine() string {
	now, set := timerSlack()
	switch {
	case !timerSlackSettable:
		return fmt.Sprintf("not set: a build without cgo, or off Linux, cannot set it before the Go runtime starts ($%s is ignored)", timerSlackEnv)
	case set == 0:
		return fmt.Sprintf("%v, inherited ($%s=0)", now, timerSlackEnv)
	}
	return fmt.Sprintf("%v, set at start-up ($%s, default 1ms): batches the Go runtime's monitor wake-ups", now, timerSlackEnv)
}
