package main

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// allowedCPUs returns the CPUs this process may run on (its affinity
// mask: a cpuset or taskset may give fewer than the machine has), in
// increasing order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("the CPUs this process may use: %w", err)
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// startOn starts cmd with its CPU affinity set to cpus (every CPU this
// process may use when cpus is empty). The mask is set on the OS thread
// that forks the child, which the child inherits before it runs a single
// instruction, so every thread it ever starts is pinned too; the thread's
// own mask is restored afterwards.
func startOn(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 {
			return fmt.Errorf("pinning to CPUs %v: no CPU %d", cpus, c)
		}
		set.Set(c)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("pinning to CPUs %v: %w", cpus, err)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning to CPUs %v: %w", cpus, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil {
		err = errors.Join(err, fmt.Errorf("restoring the CPU affinity after starting a process: %w", rerr))
	}
	return err
}
