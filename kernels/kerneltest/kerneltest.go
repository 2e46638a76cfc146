package kerneltest

import (
	"os"
	"testing"

	"github.com/softsync/softsync/kernels"
)

// Engines returns every engine this build provides: the reference engine,
// and the native one when it is built in. A native engine that is built in
// but cannot be loaded or fails its start-up check fails the test (t.Fatal)
// rather than being skipped silently: install OpenBLAS (make deps) or build
// with -tags noblas. As a test helper it honours OPENBLAS_CORETYPE from
// the environment, as the softsync command does.
func Engines(t testing.TB) []kernels.Engine {
	t.Helper()
	engines := []kernels.Engine{kernels.Reference()}
	if !kernels.NativeBuilt() {
		return engines
	}
	e, info, err := kernels.New(kernels.Config{CoreType: os.Getenv("OPENBLAS_CORETYPE")})
	if err != nil {
		t.Fatalf("kernels.New: %v", err)
	}
	if info.Fallback {
		t.Fatalf("native engine built in but unavailable: %v (run `make deps`, or build with -tags noblas)", info.FallbackErr)
	}
	return append(engines, e)
}

// ForEachEngine runs f as a subtest named after each engine of Engines.
func ForEachEngine(t *testing.T, f func(t *testing.T, e kernels.Engine)) {
	t.Helper()
	for _, e := range Engines(t) {
		t.Run(e.Name(), func(t *testing.T) { f(t, e) })
	}
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
	t.Run("FC", func(t *testing.T) { testFC(t, e) })
	t.Run("FCGradient", func(t *testing.T) { testFCGradient(t, e) })
	t.Run("Softmax", func(t *testing.T) { testSoftmax(t, e) })
	t.Run("Misuse", func(t *testing.T) { testMisuse(t, e) })
	t.Run("Allocs", func(t *testing.T) { testAllocs(t, e) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, e) })
}
