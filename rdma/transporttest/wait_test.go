package transporttest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder records Fatalf and stops the calling function by panic.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

// failure runs f on a recorder and returns the message it failed with
// ("" if it returned).
func failure(t *testing.T, f func(tb testing.TB)) (msg string) {
	r := &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
		msg = r.msg
	}()
	f(r)
	return ""
}

// TestWaits: Eventually and Receive return once their condition holds or
// their value arrives, and otherwise fail after their time, naming what
// they waited for.
func TestWaits(t *testing.T) {
	polls := 0
	if msg := failure(t, func(tb testing.TB) {
		Eventually(tb, time.Minute, "the third poll", func() bool { polls++; return polls == 3 })
	}); msg != "" || polls != 3 {
		t.Errorf("Eventually of a condition true at the third poll: %d polls, failure %q", polls, msg)
	}
	start := time.Now()
	msg := failure(t, func(tb testing.TB) { Eventually(tb, 20*time.Millisecond, "a miracle", func() bool { return false }) })
	if !strings.Contains(msg, "a miracle") || time.Since(start) < 20*time.Millisecond {
		t.Errorf("Eventually of a false condition: failure %q after %v", msg, time.Since(start))
	}
	ch := make(chan int, 1)
	ch <- 7
	got := 0
	if msg := failure(t, func(tb testing.TB) { got = Receive(tb, ch, time.Minute, "a seven") }); msg != "" || got != 7 {
		t.Errorf("Receive of a value sent: %d, failure %q", got, msg)
	}
	start = time.Now()
	msg = failure(t, func(tb testing.TB) { Receive(tb, ch, 20*time.Millisecond, "a value never sent") })
	if !strings.Contains(msg, "a value never sent") || time.Since(start) < 20*time.Millisecond {
		t.Errorf("Receive from a silent channel: failure %q after %v", msg, time.Since(start))
	}
}
