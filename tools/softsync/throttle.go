package main

import (
	"sync"
	"time"
)

// authLogEvery is how often, at most, a process logs the connections its
// job listeners refused (softsync_auth_failures_total counts every one).
const authLogEvery = 10 * time.Second

// logThrottle turns a stream of refused connections into at most one log
// line per interval: the first refusal is logged at once; those that
// follow within the interval are held, and logged as one line with their
// count and the latest peer and reason when the interval ends (flush).
// It is safe for concurrent use; the clock is the caller's.
type logThrottle struct {
	every time.Duration

	mu   sync.Mutex
	next time.Time // refusals before it are held
	held int       // refusals since the last line
	peer string    // the latest refusal's
	err  error
}

// note records a refusal at now. It returns how many refusals the line
// to write now reports (0: none is due), and whether the caller must
// call flush at the end of the interval, the first time one is held.
func (t *logThrottle) note(now time.Time, peer string, err error) (n int, flushAt time.Time, arm bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.held++
	t.peer, t.err = peer, err
	if now.Before(t.next) {
		return 0, t.next, t.held == 1
	}
	n, t.held, t.next = t.held, 0, now.Add(t.every)
	return n, time.Time{}, false
}

// flush returns the refusals held since the last line, with the latest
// one, and starts a new interval if there were any.
func (t *logThrottle) flush(now time.Time) (n int, peer string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, peer, err = t.held, t.peer, t.err
	if n > 0 {
		t.held, t.next = 0, now.Add(t.every)
	}
	return n, peer, err
}

// onAuthFailure returns the OnAuthFailure of a job network: each refused
// connection is counted in the metrics, and logged through a
// logThrottle of authLogEvery.
func (app *App) onAuthFailure() func(peer string, err error) {
	t := &logThrottle{every: authLogEvery}
	warn := func(n int, peer string, err error) {
		app.Log.Warn("refused connections that failed authentication", "count", n, "peer", peer, "err", err)
	}
	return func(peer string, err error) {
		app.metrics.authFailure()
		n, at, arm := t.note(time.Now(), peer, err)
		if n > 0 {
			warn(n, peer, err)
		}
		if arm {
			time.AfterFunc(time.Until(at), func() {
				if n, peer, err := t.flush(time.Now()); n > 0 {
					warn(n, peer, err)
				}
			})
		}
	}
}
