package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
)

// interrupts turns SIGINT and SIGTERM into a graceful end, then a hard
// one: the first signal calls the job's interrupt (set with onInterrupt:
// the job writes its checkpoint, the weights reached and the report so
// far), or cancels the context when no job has set one; the second
// cancels the context, which stops everything at once.
type interrupts struct {
	mu     sync.Mutex
	hook   func()
	cancel context.CancelFunc
	n      int
}

// signalContext returns the command's context, ended as interrupts says,
// and a function that releases the signal handler and stops serving the
// command's metrics (--metrics), at the end of the command.
func signalContext(cmd *cobra.Command, app *App) (context.Context, func()) {
	ctx, cancel := context.WithCancel(cmd.Context())
	in := &interrupts{cancel: cancel}
	app.interrupts = in
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
			case <-done:
				return
			}
			in.mu.Lock()
			in.n++
			hook := in.hook
			if in.n > 1 || hook == nil {
				hook = nil
				cancel()
			}
			in.mu.Unlock()
			if hook != nil {
				app.Log.Warn("interrupted: ending the job (its checkpoint, the weights reached and the report so far); interrupt again to stop at once")
				hook()
			}
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
		app.closeMetrics()
	}
}

// onInterrupt sets what the first signal does (nil: cancel).
func (app *App) onInterrupt(f func()) {
	if in := app.interrupts; in != nil {
		in.mu.Lock()
		in.hook = f
		in.mu.Unlock()
	}
}
