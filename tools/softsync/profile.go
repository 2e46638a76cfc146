package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/pkg/profile"
	"github.com/spf13/cobra"
)

// profiling is a runtime profile being recorded (--profile).
type profiling struct {
	stop interface{ Stop() }
	path string
}

// profileModes maps --profile to the pkg/profile option and the file it writes.
var profileModes = map[string]struct {
	opt  func(*profile.Profile)
	file string
}{
	"cpu":   {profile.CPUProfile, "cpu.pprof"},
	"mem":   {profile.MemProfileAllocs, "mem.pprof"},
	"block": {profile.BlockProfile, "block.pprof"},
	"mutex": {profile.MutexProfile, "mutex.pprof"},
	"trace": {profile.TraceProfile, "trace.out"},
}

// startProfile starts the profile --profile asks for, writing into
// --profile-dir (created if needed). pkg/profile exits the process when
// it cannot create its file, so the folder is checked here first.
func (a *App) startProfile() error {
	if a.Profile == "" {
		return nil
	}
	m, ok := profileModes[a.Profile]
	if !ok {
		return fmt.Errorf("--profile %q: must be cpu, mem, block, mutex or trace", a.Profile)
	}
	if a.profile != nil {
		return nil // already recording (one profile per process)
	}
	if err := os.MkdirAll(a.ProfileDir, 0o755); err != nil {
		return fmt.Errorf("--profile-dir: %w", err)
	}
	path := filepath.Join(a.ProfileDir, m.file)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--profile-dir: %w", err)
	}
	f.Close()
	stop := profile.Start(m.opt, profile.ProfilePath(a.ProfileDir), profile.Quiet, profile.NoShutdownHook)
	a.profile = &profiling{stop: stop, path: path}
	return nil
}

// stopProfile writes the running profile, if any, and says where it is.
func (a *App) stopProfile() {
	if a.profile == nil {
		return
	}
	a.profile.stop.Stop()
	a.Log.Info("profile written", "file", a.profile.path)
	a.profile = nil
}

// stopProfileAfterRun makes every runnable command under root stop the
// profile and the image pipeline when it returns, whether it succeeded
// or not (cobra skips the post-run hooks after an error).
func stopProfileAfterRun(root *cobra.Command, app *App) {
	if run := root.RunE; run != nil {
		root.RunE = func(cmd *cobra.Command, args []string) error {
			defer app.stopProfile()
			defer app.closePipeline()
			return run(cmd, args)
		}
	}
	for _, c := range root.Commands() {
		stopProfileAfterRun(c, app)
	}
}
