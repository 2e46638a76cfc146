package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"

	"github.com/softsync/softsync/tools/bench"
)

// benchProcs is the binary's bench.Processes: softsync itself started as
// this executable (selfCommand), pinned with startOn, and jobs run as
// launch runs them (launchJob).
type benchProcs struct{ app *App }

func (app *App) processes() bench.Processes { return benchProcs{app} }

func (p benchProcs) RunJSON(ctx context.Context, cpus []int, v any, args ...string) error {
	var stdout bytes.Buffer
	if _, err := runSelf(ctx, cpus, &stdout, args); err != nil {
		return err
	}
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		return fmt.Errorf("softsync %s: output: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (p benchProcs) Run(ctx context.Context, cpus []int, args ...string) (bench.ProcUsage, error) {
	return runSelf(ctx, cpus, io.Discard, args)
}

// runSelf runs softsync with args pinned to cpus, its standard output
// to stdout, and returns its CPU time and peak resident set; the error of
// a process that failed names its command line and ends with the tail of
// its standard error.
func runSelf(ctx context.Context, cpus []int, stdout io.Writer, args []string) (bench.ProcUsage, error) {
	var u bench.ProcUsage
	argv, err := selfCommand()
	if err != nil {
		return u, err
	}
	argv = slices.Concat(argv, args)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	if err := startOn(cmd, cpus); err != nil {
		return u, fmt.Errorf("softsync %s: %w", strings.Join(args, " "), err)
	}
	u.CPUs = cpus
	u.PeakRSS, u.CPUSeconds, err = waitUsage(cmd)
	if err != nil {
		tail := stderr.Bytes()[max(0, stderr.Len()-500):]
		return u, fmt.Errorf("softsync %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(tail)))
	}
	return u, nil
}

func (p benchProcs) Launch(ctx context.Context, j bench.LaunchJob) (*bench.JobResult, error) {
	p.app.Threads = j.Threads
	return launchJob(ctx, p.app, &launchFlags{learners: j.Learners, shards: j.Shards, bind: j.Bind, pin: j.Pin}, j.Train, true)
}
