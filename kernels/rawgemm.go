//go:build cgo && !noblas

package kernels

/*
#include "softsync.h"
#cgo noescape ss_sgemm_loop
#cgo nocallback ss_sgemm_loop
*/
import "C"

import "time"

// RawGemmLoop times reps calls of cblas_sgemm (row-major, no transposes,
// packed m×k · k×n → m×n) on threads OpenBLAS threads, as a native engine
// of that many threads runs its GEMMs, made by a C loop with no Go in
// between: the baseline the Go API's overhead is measured against. It
// needs a native engine from New (ErrNotBuilt or ErrNoLibrary otherwise).
func RawGemmLoop(threads, m, n, k int, a, b, c []float32, reps int) (time.Duration, error) {
	if !bool(C.ss_blas_loaded() != 0) {
		return 0, ErrNoLibrary
	}
	checkGemm(false, false, m, n, k, a, k, b, n, c, n)
	fits32("RawGemmLoop", m, n, k, reps)
	threads = min(max(threads, 1), maxThreads)
	if m == 0 || n == 0 || k == 0 {
		return 0, nil
	}
	s := C.ss_sgemm_loop(C.int(threads), C.int(m), C.int(n), C.int(k), fptr(a), fptr(b), fptr(c), C.int(reps))
	return time.Duration(float64(s) * 1e9), nil
}
