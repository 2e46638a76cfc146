//go:build cgo && linux

package main

/*
#include <stdlib.h>
#include <sys/prctl.h>

// softsync_timer_slack runs before the Go runtime starts (a constructor of
// the executable), so that every thread the runtime makes inherits the
// timer slack it sets: $SOFTSYNC_TIMER_SLACK nanoseconds, else
// SOFTSYNC_DEFAULT_SLACK; 0, or a value that is not a number, keeps the
// slack the process inherited (checkTimerSlackEnv refuses the latter).
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

import "time"

// timerSlackSettable: this build sets the timer slack at start-up.
const timerSlackSettable = true

// timerSlack returns the timer slack of the calling thread, and the one
// the process set at start-up (0 if it kept the inherited one).
func timerSlack() (now, set time.Duration) {
	set = time.Duration(C.softsync_timer_slack_set())
	if set < 0 {
		set = 0
	}
	return time.Duration(C.softsync_timer_slack_now()), set
}
