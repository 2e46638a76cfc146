package transporttest

import (
	"testing"
	"time"
)

// Eventually polls cond every millisecond until it holds, for up to
// within, and otherwise fails t at once (Fatalf) saying what it waited
// for: the bounded wait of every test that watches another goroutine's
// progress.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v in vain for %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Receive returns the next value from ch, or fails t at once (Fatalf)
// saying what it waited for when none arrives within the given time.
func Receive[T any](t testing.TB, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %v in vain for %s", within, what)
		var zero T
		return zero
	}
}
