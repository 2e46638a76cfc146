package cluster

import (
	"log/slog"
	"time"
)

// DefaultWaitWarn is how long a wait at start-up lasts before it is news
// (CoordinatorConfig.WaitWarn, Member.WaitWarn): the coordinator waiting
// for the job's processes, a process dialling a coordinator that does not
// listen yet. Such waits are normal (a head loads its data before it
// listens, a launcher starts ranks one after another; seconds on a busy
// host) and logged at debug level; one that lasts longer, twice the
// default heartbeat, is a warning (docs/cluster.md, "Start-up").
const DefaultWaitWarn = 10 * time.Second

// waitLog paces the log lines of a wait: one at debug level when it is
// first asked, then a warning each time the wait has lasted another warn.
// It keeps no clock: the caller says when.
type waitLog struct {
	warn   time.Duration // ≤ 0: DefaultWaitWarn
	since  time.Time     // the wait began (zero: not yet)
	said   bool          // the debug line was logged
	warned int           // warnings logged
}

// begin begins the wait at now, unless it has begun.
func (w *waitLog) begin(now time.Time) {
	if w.since.IsZero() {
		w.since = now
	}
}

// next returns whether a line is due at now and its level; it begins the
// wait if it has not begun.
func (w *waitLog) next(now time.Time) (slog.Level, bool) {
	w.begin(now)
	every := w.warn
	if every <= 0 {
		every = DefaultWaitWarn
	}
	switch n := int(now.Sub(w.since) / every); {
	case n > w.warned:
		w.said, w.warned = true, n
		return slog.LevelWarn, true
	case !w.said:
		w.said = true
		return slog.LevelDebug, true
	}
	return 0, false
}

// waited returns how long the wait has lasted at now, rounded for a log.
func (w *waitLog) waited(now time.Time) time.Duration {
	return now.Sub(w.since).Round(100 * time.Millisecond)
}
