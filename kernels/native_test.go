//go:build cgo && !noblas

package kernels

import (
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softsync/softsync/kernels/isa"
)

func TestNativeInfo(t *testing.T) {
	e, info, err := New(Config{Threads: 1, CoreType: os.Getenv("OPENBLAS_CORETYPE")})
	if err != nil || info.Fallback {
		t.Fatalf("New: %v, fallback %v", err, info.FallbackErr)
	}
	if e.Name() != "native" || info.Library == "" || info.CoreName == "" || info.BLASConfig == "" || info.Threads != 1 {
		t.Errorf("info %+v", info)
	}
	if cores, err := LibraryCores(info.Library); err != nil || !slices.Contains(cores, "HASWELL") {
		t.Errorf("LibraryCores(%s) = %v, %v; want a DYNAMIC_ARCH list with HASWELL", info.Library, cores, err)
	}
	// A second New reuses the loaded library, with threads of its own.
	_, info2, _ := New(Config{Threads: 2})
	if info2.Library != info.Library || info2.CoreName != info.CoreName || info2.Threads != 2 {
		t.Errorf("second New: %+v", info2)
	}
}

func TestVerifyGemmCatchesWrongKernel(t *testing.T) {
	if err := verifyGemm(wrongGemm{Reference()}); err == nil {
		t.Fatal("verifyGemm accepted a GEMM that is off by 1e-2")
	}
	if err := verifyGemm(Reference()); err != nil {
		t.Fatalf("verifyGemm rejected the reference: %v", err)
	}
}

// wrongGemm perturbs one element of every product, as a miscompiled
// kernel might.
type wrongGemm struct{ Engine }

func (w wrongGemm) Gemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	w.Engine.Gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	c[ldc+1] += 1e-2
}

// SetMinParallelFloats, ParallelMaxParts and BLASThreads are exported to
// the external tests.
var (
	SetMinParallelFloats = setMinParallelFloats
	ParallelMaxParts     = parallelMaxParts
	BLASThreads          = blasThreads
	SetWgradTest         = setWgradTest
	SetWinogradTest      = setWinogradTest
)

// NativeWith returns the native engine with a given convolution
// column-matrix budget (floats; 0 = default), a forced convolution method
// ("chwn", "image"; "direct", "winograd", "winograd6" and "s2d" where the
// shape and level allow them, others choosing per shape; or "" to choose
// per shape) and instruction-set level (lowered to what the CPU runs),
// over DefaultThreads threads, for tests and tuning.
func NativeWith(floats int, method string, l isa.Level) Engine {
	m := map[string]int{"chwn": methodCHWN, "image": methodImage, "direct": methodDirect,
		"winograd": methodWinograd, "winograd6": methodWinograd6, "s2d": methodS2D}[method]
	e := newNativeAt(cISA(min(l, isa.Best())), DefaultThreads())
	e.budget, e.method = floats, m
	return e
}

// NativeWithThreads is NativeWith over threads threads. Like NativeWith,
// it needs OpenBLAS loaded by an earlier New.
func NativeWithThreads(floats int, method string, l isa.Level, threads int) Engine {
	e := NativeWith(floats, method, l).(native)
	return newNativeAt(e.isa, threads).with(e.budget, e.method)
}

func (e native) with(budget, method int) native {
	e.budget, e.method = budget, method
	return e
}

func TestYieldSlice(t *testing.T) {
	// The decision, on a clock of the test's own: a yield is due once a
	// period has passed since the last, and only one caller gets it.
	p := int64(yieldPeriod)
	var last atomic.Int64
	for _, step := range []struct {
		now  int64
		want bool
	}{{p, true}, {p, false}, {p + p/2, false}, {2*p - 1, false}, {2 * p, true}, {2 * p, false}, {10 * p, true}, {10*p + 1, false}} {
		before := last.Load()
		if got := yieldDue(&last, step.now); got != step.want {
			t.Fatalf("last yield at %v, now %v: due %v, want %v", time.Duration(before), time.Duration(step.now), got, step.want)
		}
		if want := map[bool]int64{true: step.now, false: before}[step.want]; last.Load() != want {
			t.Fatalf("now %v: last yield recorded at %v, want %v", time.Duration(step.now), time.Duration(last.Load()), time.Duration(want))
		}
	}
	// yieldSlice on the process clock: two periods after the last yield,
	// it yields and records a time no earlier than its call.
	now := int64(time.Since(clockBase))
	lastYield.Store(now - 2*p)
	yieldSlice()
	if got := lastYield.Load(); got < now {
		t.Fatalf("after %v without a yield, yieldSlice left lastYield at %d (< %d)", 2*yieldPeriod, got, now)
	}
}
