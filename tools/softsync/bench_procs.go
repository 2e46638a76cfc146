package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	argv, err := selfCommand()
	if err != nil {
		return err
	}
	argv = slices.Concat(argv, args)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := startOn(cmd, cpus); err != nil {
		return fmt.Errorf("softsync %s: %w", strings.Join(args, " "), err)
	}
	if err := cmd.Wait(); err != nil {
		tail := stderr.Bytes()[max(0, stderr.Len()-500):]
		return fmt.Errorf("softsync %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(tail)))
	}
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		return fmt.Errorf("softsync %s: output: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (p benchProcs) Launch(ctx context.Context, j bench.LaunchJob) (*bench.JobResult, error) {
	p.app.Threads = j.Threads
	return launchJob(ctx, p.app, &launchFlags{learners: j.Learners, shards: j.Shards, bind: j.Bind, pin: j.Pin}, j.Train, true)
}
