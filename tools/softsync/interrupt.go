package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// interrupts turns SIGINT and SIGTERM into a graceful end, then a hard
// one, then an exit, so that a process ends within seconds of a signal
// whatever its job is doing (at rendezvous, training, writing its
// checkpoint, ending):
//
//   - the first signal calls the job's interrupt (set with onInterrupt:
//     the job writes its checkpoint, the weights reached and the report
//     so far), or stops at once when no job has set one;
//   - a second signal, or interruptGrace after the first, stops at once:
//     the command's context is cancelled;
//   - a process still running stopGrace after that exits, with status
//     128 + the signal's number.
type interrupts struct {
	mu   sync.Mutex
	hook func()
}

// interruptGrace bounds the graceful end of the first signal (a job of
// the sizes softsync runs ends its step, writes its checkpoint and
// measures its weights well within it); stopGrace bounds the stop.
const interruptGrace, stopGrace = 10 * time.Second, 5 * time.Second

// signalContext returns the command's context, ended as interrupts says,
// and a function that releases the signal handler and stops serving the
// command's metrics (--metrics), at the end of the command.
func signalContext(cmd *cobra.Command, app *App) (context.Context, func()) {
	ctx, cancel := context.WithCancel(cmd.Context())
	in := &interrupts{}
	app.interrupts = in
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var grace, exit <-chan time.Time
		status := 1
		for {
			select {
			case sig := <-ch:
				if s, ok := sig.(syscall.Signal); ok {
					status = 128 + int(s)
				}
				if exit != nil { // stopping already
					continue
				}
				in.mu.Lock()
				hook := in.hook
				in.mu.Unlock()
				if grace == nil && hook != nil {
					app.Log.Warn("interrupted: ending the job (its checkpoint, the weights reached and the report so far); interrupt again to stop at once")
					grace = time.After(interruptGrace)
					go hook() // it may wait for peers; the timers go on
					continue
				}
			case <-grace:
				app.Log.Warn("the job did not end within the grace of an interruption: stopping at once", "grace", interruptGrace)
			case <-exit:
				app.Log.Error("still running after it was stopped: exiting", "after", stopGrace)
				os.Exit(status)
			case <-done:
				return
			}
			cancel()
			grace, exit = nil, time.After(stopGrace)
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
		app.closeMetrics()
	}
}

// onInterrupt sets what the first signal does (nil: stop at once).
func (app *App) onInterrupt(f func()) {
	if in := app.interrupts; in != nil {
		in.mu.Lock()
		in.hook = f
		in.mu.Unlock()
	}
}
