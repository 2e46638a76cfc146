package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A learner process (softsync learner, a learner's rank under --cluster
// auto) runs under SCHED_BATCH by default (--sched): the kernel then never
// lets one of its threads that wakes up, its weights arrived, preempt the
// task running on that core, which is often the shard server still waking
// the job's other learners, nor another learner's compute. The shard server and the head keep the
// normal policy, so that their short work preempts a learner at once.

// setSchedPolicy puts every thread of this process that runs under
// SCHED_NORMAL or SCHED_BATCH under policy (one of them, nice unchanged);
// a thread under another policy (real-time, SCHED_IDLE: the user's
// choice, e.g. chrt) keeps it. The threads the process starts later
// inherit the policy of the thread that starts them.
func setSchedPolicy(policy uint32) error {
	done := map[int]bool{}
	for changed := true; changed; { // again, for threads started meanwhile
		changed = false
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("scheduling policy: %w", err)
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			attr, err := unix.SchedGetAttr(tid, 0)
			if err == nil && (attr.Policy == unix.SCHED_NORMAL || attr.Policy == unix.SCHED_BATCH) {
				attr.Policy, attr.Flags = policy, attr.Flags&unix.SCHED_FLAG_RESET_ON_FORK
				err = unix.SchedSetAttr(tid, attr, 0)
			}
			if err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: the thread has ended
				return fmt.Errorf("scheduling policy of thread %d: %w", tid, err)
			}
			done[tid], changed = true, true
		}
	}
	return nil
}

// schedPolicy returns the policy --sched names.
func schedPolicy(name string) (uint32, error) {
	switch name {
	case "batch":
		return unix.SCHED_BATCH, nil
	case "normal":
		return unix.SCHED_NORMAL, nil
	}
	return 0, fmt.Errorf("--sched: %q, want batch or normal", name)
}

// applySched sets the policy --sched names. A name that is not one is an
// error; a kernel or sandbox that refuses the policy (seccomp, gVisor) is
// only worth a warning, as the learner runs as well without it.
func (app *App) applySched(name string) error {
	p, err := schedPolicy(name)
	if err != nil {
		return err
	}
	if err := setSchedPolicy(p); err != nil {
		app.Log.Warn("the learner's scheduling policy is not set", "sched", name, "err", err)
	}
	return nil
}
