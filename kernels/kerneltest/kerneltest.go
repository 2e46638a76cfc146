package kerneltest

import (
	"os"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
)

// Engines returns every engine this build provides: the reference engine,
// then the native one at every instruction-set level (isa.All, best
// first) that this CPU runs, so that each variant of the native kernels
// is tested; levels the CPU or build lacks are logged with the reason and
// left out (ForEachEngine reports them as skipped subtests). A native
// engine that is built in but cannot be loaded or fails its start-up
// check fails the test (t.Fatal) rather than being skipped silently:
// install OpenBLAS (make deps) or build with -tags noblas. As a test
// helper it honours OPENBLAS_CORETYPE from the environment, as the
// softsync command does.
func Engines(t testing.TB) []kernels.Engine {
	t.Helper()
	engines := []kernels.Engine{kernels.Reference()}
	for _, l := range isa.All {
		e, err := nativeAt(t, l, 0)
		if err != nil {
			t.Logf("%s: %v", Label(nil, l), err)
			continue
		}
		if e != nil {
			engines = append(engines, e)
		}
	}
	return engines
}

// Fastest returns the engine benchmarks should measure: the native
// engine at the best level the CPU runs when it is built in, else the
// reference engine.
func Fastest(t testing.TB) kernels.Engine {
	t.Helper()
	es := Engines(t)
	if len(es) > 1 {
		return es[1]
	}
	return es[0]
}

// Serial returns the native engine at level l on one thread, as softsync
// train gives its in-process learners (learner.PlanThreads), or the
// reference engine in builds without the native one. A level the CPU
// cannot run fails the test.
func Serial(t testing.TB, l isa.Level) kernels.Engine {
	t.Helper()
	e, err := nativeAt(t, l, 1)
	switch {
	case err != nil:
		t.Fatalf("%s: %v", Label(nil, l), err)
	case e == nil:
		return kernels.Reference()
	}
	return e
}

// nativeAt returns the native engine at level l on threads threads (0:
// the default): nil, nil in builds without it; nil and the reason when
// the CPU or build cannot run l.
func nativeAt(t testing.TB, l isa.Level, threads int) (kernels.Engine, error) {
	t.Helper()
	if !kernels.NativeBuilt() {
		return nil, nil
	}
	if _, err := isa.Resolve(l); err != nil {
		return nil, err
	}
	e, info, err := kernels.New(kernels.Config{CoreType: os.Getenv("OPENBLAS_CORETYPE"), ISA: l, Threads: threads})
	if err != nil {
		t.Fatalf("kernels.New: %v", err)
	}
	if info.Fallback {
		t.Fatalf("native engine built in but unavailable: %v (run `make deps`, or build with -tags noblas)", info.FallbackErr)
	}
	return e, nil
}

// Label names an engine in test and benchmark names: "reference", or
// "native-avx512", "native-avx2", "native-generic" after the level of
// the native engine's kernels. With a nil engine it names the native
// engine at level l.
func Label(e kernels.Engine, l isa.Level) string {
	if e != nil {
		if e.Name() != "native" {
			return e.Name()
		}
		l = kernels.ISAOf(e)
	}
	return "native-" + l.String()
}

// ForEachEngine runs f as a subtest named after each engine of Engines
// (see Label); native levels the CPU cannot run are skipped subtests
// that say why.
func ForEachEngine(t *testing.T, f func(t *testing.T, e kernels.Engine)) {
	t.Helper()
	t.Run("reference", func(t *testing.T) { f(t, kernels.Reference()) })
	if !kernels.NativeBuilt() {
		return
	}
	for _, l := range isa.All {
		e, err := nativeAt(t, l, 0)
		t.Run(Label(nil, l), func(t *testing.T) {
			if err != nil {
				t.Skip(err)
			}
			f(t, e)
		})
	}
}

// RunConv runs only the convolution tests of the suite, for engines whose
// convolution has configurations of its own to cover.
func RunConv(t *testing.T, e kernels.Engine) {
	t.Run("Conv", func(t *testing.T) { testConv(t, e) })
	t.Run("ConvGradient", func(t *testing.T) { testConvGradient(t, e) })
}

// Run runs the whole conformance suite against e, one subtest per method.
func Run(t *testing.T, e kernels.Engine) {
	t.Run("Gemm", func(t *testing.T) { testGemm(t, e) })
	t.Run("Conv", func(t *testing.T) { testConv(t, e) })
	t.Run("ConvGradient", func(t *testing.T) { testConvGradient(t, e) })
	t.Run("PoolShape", testPoolShape)
	t.Run("Pool", func(t *testing.T) { testPool(t, e) })
	t.Run("PoolGradient", func(t *testing.T) { testPoolGradient(t, e) })
	t.Run("ReLU", func(t *testing.T) { testReLU(t, e) })
	t.Run("LRN", func(t *testing.T) { testLRN(t, e) })
	t.Run("LRNGradient", func(t *testing.T) { testLRNGradient(t, e) })
	t.Run("LRNExtremes", func(t *testing.T) { testLRNExtremes(t, e) })
	t.Run("Add", func(t *testing.T) { testAdd(t, e) })
	t.Run("Dropout", func(t *testing.T) { testDropout(t, e) })
	t.Run("DropoutMask", func(t *testing.T) { testDropoutMask(t, e) })
	t.Run("BN", func(t *testing.T) { testBN(t, e) })
	t.Run("BNGradient", func(t *testing.T) { testBNGradient(t, e) })
	t.Run("FC", func(t *testing.T) { testFC(t, e) })
	t.Run("FCGradient", func(t *testing.T) { testFCGradient(t, e) })
	t.Run("Softmax", func(t *testing.T) { testSoftmax(t, e) })
	t.Run("Misuse", func(t *testing.T) { testMisuse(t, e) })
	t.Run("Allocs", func(t *testing.T) { testAllocs(t, e) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, e) })
}
