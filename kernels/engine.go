package kernels

import (
	"errors"
	"fmt"
	"runtime"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrConfig reports an invalid Config field.
	ErrConfig = errors.New("kernels: invalid config")
	// ErrNotBuilt reports that this binary has no native engine (built
	// with the noblas tag or CGO_ENABLED=0).
	ErrNotBuilt = errors.New("kernels: native engine not built (noblas or CGO_ENABLED=0)")
	// ErrNoLibrary reports that OpenBLAS could not be loaded.
	ErrNoLibrary = errors.New("kernels: cannot load OpenBLAS")
	// ErrVerify reports that the loaded OpenBLAS kernel computed a wrong
	// GEMM in the start-up check against the reference engine.
	ErrVerify = errors.New("kernels: OpenBLAS failed the start-up GEMM check")
)

// Config selects how New builds the native engine. The zero value asks
// for the defaults: BLAS threads = cores available to the process, the
// OpenBLAS kernel chosen from the CPU's features, the library found by the
// dynamic loader or in the directory recorded at build time.
type Config struct {
	// Threads is the number of OpenBLAS threads; 0 means the number of
	// cores available to the process (its CPU affinity set).
	Threads int
	// CoreType is an OpenBLAS core the user asked for (the value of
	// OPENBLAS_CORETYPE, read by the caller). Empty means: choose from the
	// CPU's features (see ChooseCore). A non-empty value is used as given.
	CoreType string
	// Library is the path of the OpenBLAS shared library. Empty means
	// "libopenblas.so.0" through the dynamic loader's search path, then the
	// OpenBLAS libdir recorded at build time.
	Library string
	// Reference forces the pure-Go engine.
	Reference bool
}

// Validate reports the first invalid field, wrapping ErrConfig.
func (c Config) Validate() error {
	if c.Threads < 0 {
		return fmt.Errorf("%w: Threads = %d, must be ≥ 0", ErrConfig, c.Threads)
	}
	return nil
}

// Info describes the engine New selected and how OpenBLAS was set up.
type Info struct {
	Engine     string // "native" or "reference"
	Library    string // path of the loaded OpenBLAS ("" if none)
	BLASConfig string // openblas_get_config()
	CoreName   string // openblas_get_corename(): the kernel in use
	CoreType   string // OPENBLAS_CORETYPE in force when OpenBLAS was loaded ("" = OpenBLAS's own detection)
	CoreReason string // why that core type
	Threads    int    // BLAS threads in use
	// Fallback is set when the reference engine runs although the native
	// one was wanted; FallbackErr says why (errors.Is ErrNotBuilt,
	// ErrNoLibrary or ErrVerify).
	Fallback    bool
	FallbackErr error
}

// DefaultThreads is the number of cores available to the process.
func DefaultThreads() int { return runtime.NumCPU() }

// New returns the best engine this build and machine provide: the native
// engine when it is built in, OpenBLAS loads and passes the start-up GEMM
// check; otherwise the reference engine, with Info.Fallback set and
// Info.FallbackErr saying why. The error is non-nil only for an invalid
// Config (ErrConfig).
//
// OpenBLAS is loaded once per process: the first New that loads it fixes
// its library and core type for the life of the process; later calls reuse
// it and only change the thread count.
func New(cfg Config) (Engine, Info, error) {
	if err := cfg.Validate(); err != nil {
		return nil, Info{}, err
	}
	if cfg.Threads == 0 {
		cfg.Threads = DefaultThreads()
	}
	if cfg.Reference {
		return Reference(), Info{Engine: "reference", Threads: 1}, nil
	}
	e, info, err := newNative(cfg)
	if err != nil {
		info.Engine = "reference"
		info.Fallback = true
		info.FallbackErr = err
		return Reference(), info, nil
	}
	info.Engine = e.Name()
	return e, info, nil
}
