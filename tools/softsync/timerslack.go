package main

/*
#include <stdlib.h>
#include <sys/prctl.h>

// softsync_timer_slack runs before the Go runtime starts (a constructor of
// the executable), so that every thread the runtime makes inherits the
// timer slack it sets: $SOFTSYNC_TIMER_SLACK nanoseconds, else
// SOFTSYNC_DEFAULT_SLACK; 0, or a value that is not a number, keeps the
// slack the process inherited (timerSlackEnv reports the latter).
#define SOFTSYNC_DEFAULT_SLACK 1000000L
static long softsync_slack = -1;

__attribute__((constructor)) static void softsync_timer_slack(void) {
	const char *s = getenv("SOFTSYNC_TIMER_SLACK");
	long ns = SOFTSYNC_DEFAULT_SLACK;
	if (s != NULL) {
		char *end;
		ns = strtol(s, &end, 10);
		if (*s == 0 || *end != 0 || ns < 0) {
			return;
		}
	}
	if (ns > 0 && prctl(PR_SET_TIMERSLACK, (unsigned long)ns, 0, 0, 0) == 0) {
		softsync_slack = ns;
	}
}

static long softsync_timer_slack_set(void) { return softsync_slack; }
static long softsync_timer_slack_now(void) { return prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0); }
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"time"
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

// timerSlack returns the timer slack of the calling thread, and the one
// the process set at start-up (0 if it kept the inherited one).
func timerSlack() (now, set time.Duration) {
	set = time.Duration(C.softsync_timer_slack_set())
	if set < 0 {
		set = 0
	}
	return time.Duration(C.softsync_timer_slack_now()), set
}

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
	if set == 0 {
		return fmt.Sprintf("%v, inherited ($%s=0)", now, timerSlackEnv)
	}
	return fmt.Sprintf("%v, set at start-up ($%s, default 1ms): batches the Go runtime's monitor wake-ups", now, timerSlackEnv)
}
