//go:build cgo && !noblas

package kernels

/*
#include <stdlib.h>
#include "softsync.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/softsync/softsync/kernels/isa"
)

// buildLibDir is OpenBLAS's libdir (pkg-config --variable=libdir openblas)
// recorded at build time by the Makefile with
// -ldflags "-X github.com/softsync/softsync/kernels.buildLibDir=DIR".
var buildLibDir string

const soname = "libopenblas.so.0"

// openblas is the process-wide OpenBLAS: loaded once, by the first newNative.
var openblas struct {
	sync.Mutex
	tried bool
	info  Info
	err   error
}

func newNative(cfg Config, level isa.Level) (Engine, Info, error) {
	openblas.Lock()
	defer openblas.Unlock()
	if !openblas.tried {
		openblas.tried = true
		openblas.info, openblas.err = loadBLAS(cfg)
	}
	info := openblas.info
	if openblas.err != nil {
		return nil, info, openblas.err
	}
	cb := cBest()
	info.ISA = min(level, cb)
	info.ISAReason = isaReason(cfg.ISA, info.ISA, cb)
	e := newNativeAt(cISA(info.ISA), cfg.Threads)
	info.Threads = e.Threads()
	return e, info, nil
}

// libraryCandidates lists what to dlopen, in order.
func libraryCandidates(cfg Config) []string {
	if cfg.Library != "" {
		return []string{cfg.Library}
	}
	c := []string{soname}
	if buildLibDir != "" {
		c = append(c, filepath.Join(buildLibDir, soname))
	}
	return c
}

// loadBLAS sets OPENBLAS_CORETYPE and OPENBLAS_THREAD_TIMEOUT in the
// process environment (OpenBLAS reads them there, once, when loaded),
// loads OpenBLAS and checks its GEMM.
func loadBLAS(cfg Config) (Info, error) {
	var info Info
	cpu := DetectCPU()
	var errs []error
	for _, lib := range libraryCandidates(cfg) {
		core, reason := cfg.CoreType, "requested by the user (OPENBLAS_CORETYPE)"
		if core == "" {
			var avail []string // nil: the classic cores
			if strings.Contains(lib, "/") {
				avail, _ = LibraryCores(lib)
			}
			core, reason = ChooseCore(cpu, avail)
		} else if m := MissingFeatures(cpu, core); len(m) > 0 {
			reason += "; this CPU lacks " + strings.Join(m, ", ")
		}
		// OpenBLAS reads its core type from the environment, once, when
		// it is loaded: set it just before.
		if core != "" {
			os.Setenv("OPENBLAS_CORETYPE", core)
		} else {
			os.Unsetenv("OPENBLAS_CORETYPE")
		}
		os.Setenv("OPENBLAS_THREAD_TIMEOUT", strconv.Itoa(cfg.ThreadTimeout))
		info.CoreType, info.CoreReason, info.ThreadTimeout = core, reason, cfg.ThreadTimeout
		cpath := C.CString(lib)
		var msg [512]C.char
		rc := C.ss_blas_load(cpath, &msg[0], C.size_t(len(msg)))
		C.free(unsafe.Pointer(cpath))
		if rc != 0 {
			errs = append(errs, errors.New(C.GoString(&msg[0])))
			continue
		}
		info.Library = C.GoString(C.ss_blas_path())
		info.BLASConfig = C.GoString(C.ss_blas_config())
		info.CoreName = C.GoString(C.ss_blas_corename())
		if err := verifyGemm(newNativeAt(C.SS_ISA_GENERIC, cfg.Threads)); err != nil {
			return info, fmt.Errorf("%w: core %s (%s): %v", ErrVerify, info.CoreName, lib, err)
		}
		return info, nil
	}
	return info, fmt.Errorf("%w: %w", ErrNoLibrary, errors.Join(errs...))
}

// verifyGemm checks e's GEMM against a float64 loop on a 64³ product and
// on a larger transposed one that OpenBLAS splits over its threads: a
// kernel built for another CPU gives errors of order one (or crashes),
// rounding errors stay far below the tolerance of 1e-4 relative to the
// magnitudes summed.
func verifyGemm(e Engine) error {
	r := rand.New(rand.NewPCG(64, 64))
	for _, c := range []struct {
		tA, tB  bool
		m, n, k int
	}{{false, false, 64, 64, 64}, {true, true, 192, 160, 96}} {
		a, b := make([]float32, c.m*c.k), make([]float32, c.k*c.n)
		for i := range a {
			a[i] = 2*r.Float32() - 1
		}
		for i := range b {
			b[i] = 2*r.Float32() - 1
		}
		lda, ldb := c.k, c.n
		if c.tA {
			lda = c.m
		}
		if c.tB {
			ldb = c.k
		}
		got := make([]float32, c.m*c.n)
		e.Gemm(c.tA, c.tB, c.m, c.n, c.k, 1, a, lda, b, ldb, 0, got, c.n)
		for i := 0; i < c.m; i++ {
			for j := 0; j < c.n; j++ {
				var want, mag float64
				for p := 0; p < c.k; p++ {
					ai, bi := i*lda+p, p*ldb+j
					if c.tA {
						ai = p*lda + i
					}
					if c.tB {
						bi = j*ldb + p
					}
					av, bv := a[ai], b[bi]
					want += float64(av) * float64(bv)
					mag += math.Abs(float64(av) * float64(bv))
				}
				if d := math.Abs(float64(got[i*c.n+j]) - want); !(d <= 1e-4*mag) {
					return fmt.Errorf("sgemm %d×%d×%d (transA=%v, transB=%v): C[%d][%d] = %g, want %g",
						c.m, c.n, c.k, c.tA, c.tB, i, j, got[i*c.n+j], want)
				}
			}
		}
	}
	return nil
}
