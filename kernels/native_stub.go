//go:build noblas || !cgo

package kernels

import (
	"time"

	"github.com/softsync/softsync/kernels/isa"
)

// NativeBuilt reports whether this binary contains the native engine.
func NativeBuilt() bool { return false }

func newNative(Config, isa.Level) (Engine, Info, error) { return nil, Info{}, ErrNotBuilt }

// RawGemmLoop needs the native engine, which this build lacks.
func RawGemmLoop(threads, m, n, k int, a, b, c []float32, reps int) (time.Duration, error) {
	return 0, ErrNotBuilt
}

// NativeImages returns ErrNotBuilt: this build has no C kernels.
func NativeImages() (Images, error) { return nil, ErrNotBuilt }

// NativeImagesAt returns ErrNotBuilt: this build has no C kernels.
func NativeImagesAt(isa.Level) (Images, error) { return nil, ErrNotBuilt }
