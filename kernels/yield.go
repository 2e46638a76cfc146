//go:build cgo && !noblas

package kernels

import (
	"runtime"
	"sync/atomic"
	"time"
)

// The Go scheduler gives a goroutine 10 ms per scheduling slice. A
// goroutine that spends its slice in back-to-back cgo calls, as a
// training step or a GEMM loop does, is then due for preemption, which a
// goroutine inside C cannot honour: the runtime's monitor thread instead
// takes its P at every tick (20 µs) it finds it in a call, wakes another
// thread for the P, and keeps ticking at that rate; on return the
// goroutine must win a P back. On cores that OpenBLAS keeps busy that is
// several context switches per C call, which `softsync bench gemm` shows as
// the Go API's rate falling below the raw C loop's on short calls. yieldSlice starts a fresh slice, with
// runtime.Gosched, once the process has gone yieldPeriod without one, so
// that no goroutine reaches the 10 ms mark while it keeps calling C.

// yieldPeriod is the time between yields, well under the scheduler's
// 10 ms slice even when several goroutines share the yields.
const yieldPeriod = time.Millisecond

var (
	clockBase = time.Now()
	lastYield atomic.Int64 // nanoseconds since clockBase of the last yield
)

// yieldSlice yields the processor if no goroutine did for yieldPeriod.
// It costs a monotonic clock read otherwise.
func yieldSlice() {
	if yieldDue(&lastYield, int64(time.Since(clockBase))) {
		runtime.Gosched()
	}
}

// yieldDue reports whether a yield is due at now (nanoseconds since
// clockBase) given the time of the last yield: it is when at least
// yieldPeriod has passed, and the goroutine whose compare-and-swap moves
// last to now is the one that yields.
func yieldDue(last *atomic.Int64, now int64) bool {
	l := last.Load()
	return now-l >= int64(yieldPeriod) && last.CompareAndSwap(l, now)
}
