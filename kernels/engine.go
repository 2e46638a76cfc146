package kernels

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/softsync/softsync/kernels/isa"
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
	// ErrISA reports a Config.ISA that this CPU, its operating system or
	// this build cannot run.
	ErrISA = errors.New("kernels: instruction set not available")
)

// Config selects how New builds the native engine. The zero value asks
// for the defaults: threads = cores available to the process, the
// OpenBLAS kernel chosen from the CPU's features, the library found by the
// dynamic loader or in the directory recorded at build time.
//
// OpenBLAS reads its settings from the environment, once, when it is
// loaded; New therefore sets OPENBLAS_CORETYPE and OPENBLAS_THREAD_TIMEOUT
// in the process environment just before loading it. It reads none.
type Config struct {
	// Threads is the number of threads the engine's GEMMs (on OpenBLAS's
	// threads) and C kernels split their work over, the calling thread
	// included; 0 means the number of cores available to the process (its
	// CPU affinity set). At most 256 are used. It is the engine's own:
	// engines made later with other counts do not change it (see the
	// package doc for OpenBLAS's process-wide count).
	Threads int
	// CoreType is an OpenBLAS core the user asked for (the value of
	// OPENBLAS_CORETYPE, read by the caller). Empty means: choose from the
	// CPU's features (see ChooseCore). A non-empty value is used as given.
	CoreType string
	// Library is the path of the OpenBLAS shared library. Empty means
	// "libopenblas.so.0" through the dynamic loader's search path, then the
	// OpenBLAS libdir recorded at build time.
	Library string
	// ThreadTimeout is OpenBLAS's OPENBLAS_THREAD_TIMEOUT: after a GEMM its
	// worker threads spin for 2^ThreadTimeout cycles before they sleep.
	// OpenBLAS's default, 28 (a tenth of a second), keeps a core busy
	// through the im2col, pooling and LRN work between GEMMs, which then
	// competes with it; 0 means DefaultThreadTimeout. Valid: 4 to 30.
	ThreadTimeout int
	// Reference forces the pure-Go engine.
	Reference bool
	// ISA is the highest instruction-set level the native engine's own
	// kernels (convolutions, pooling, LRN, ReLU, small fully connected
	// layers) may use: isa.Auto (the zero value) means the best the CPU
	// and the build support (isa.Best); a lower level runs that level's
	// variants, as on a CPU without the higher ones (tests use it to
	// cover every variant on one machine). A level the CPU cannot run
	// makes New fail with ErrISA. OpenBLAS chooses its own kernels
	// (CoreType).
	ISA isa.Level
}

// DefaultThreadTimeout lets OpenBLAS workers spin 2^16 cycles (tens of
// microseconds) after a GEMM: long enough for back-to-back GEMMs, short
// enough to free the core for the kernels in between.
const DefaultThreadTimeout = 16

// Validate reports the first invalid field, wrapping ErrConfig.
func (c Config) Validate() error {
	if c.Threads < 0 {
		return fmt.Errorf("%w: Threads = %d, must be ≥ 0", ErrConfig, c.Threads)
	}
	if c.ThreadTimeout != 0 && (c.ThreadTimeout < 4 || c.ThreadTimeout > 30) {
		return fmt.Errorf("%w: ThreadTimeout = %d, must be 0 or 4 to 30", ErrConfig, c.ThreadTimeout)
	}
	if c.ISA > isa.AVX512 {
		return fmt.Errorf("%w: ISA = %v", ErrConfig, c.ISA)
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
	Threads    int    // the engine's threads (OpenBLAS's and the C kernels'; 1 for the reference engine)
	// ThreadTimeout is the OPENBLAS_THREAD_TIMEOUT OpenBLAS was loaded with.
	ThreadTimeout int
	// Fallback is set when the reference engine runs although the native
	// one was wanted; FallbackErr says why (errors.Is ErrNotBuilt,
	// ErrNoLibrary or ErrVerify).
	Fallback    bool
	FallbackErr error
	// ISA is the instruction-set level of the native engine's kernels
	// (isa.Generic for the reference engine), ISAReason why that level.
	ISA       isa.Level
	ISAReason string
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
// it. Each engine keeps the thread count it was made with (Config.Threads):
// a later New with another count does not change the engines already
// returned.
func New(cfg Config) (Engine, Info, error) {
	if err := cfg.Validate(); err != nil {
		return nil, Info{}, err
	}
	if cfg.Threads == 0 {
		cfg.Threads = DefaultThreads()
	}
	if cfg.ThreadTimeout == 0 {
		cfg.ThreadTimeout = DefaultThreadTimeout
	}
	if cfg.Reference {
		return Reference(), Info{Engine: "reference", Threads: 1, ISA: isa.Generic, ISAReason: referenceISA}, nil
	}
	level, err := isa.Resolve(cfg.ISA)
	if err != nil {
		return nil, Info{}, fmt.Errorf("%w: %w", ErrISA, err)
	}
	e, info, err := newNative(cfg, level)
	if err != nil {
		info.Engine = "reference"
		info.Fallback = true
		info.FallbackErr = err
		info.ISA, info.ISAReason = isa.Generic, referenceISA
		return Reference(), info, nil
	}
	info.Engine = e.Name()
	return e, info, nil
}

const referenceISA = "the pure-Go reference engine (plain Go loops)"

// isaReason says why the native engine runs at level got when asked for
// want (isa.Auto or a concrete level) and the C kernels run up to cbest.
func isaReason(want, got, cbest isa.Level) string {
	switch {
	case want != isa.Auto && got == want:
		return fmt.Sprintf("requested (the CPU and build support up to %v: %s)", isa.Best(), isa.Reason())
	case got < isa.Best() && got == cbest:
		return fmt.Sprintf("the C compiler of this build lacks %v (the CPU has it: %s)", isa.Best(), isa.Reason())
	}
	return isa.Reason()
}

// ISAOf returns the instruction-set level of e's kernels: the native
// engine's level, isa.Generic for any other engine.
func ISAOf(e Engine) isa.Level {
	if l, ok := e.(interface{ ISA() isa.Level }); ok {
		return l.ISA()
	}
	return isa.Generic
}

// ConvOwnKernels reports whether e runs every pass of the convolution s
// on softsync's own kernels, whose bits do not depend on its thread count
// (the native engine's direct kernels), rather than on OpenBLAS's GEMMs;
// false for the other engines.
func ConvOwnKernels(e Engine, s ConvShape) bool {
	if o, ok := e.(interface{ convOwn(ConvShape) bool }); ok {
		return o.convOwn(s)
	}
	return false
}

// ThreadsOf returns the number of threads e splits its work over: the
// native engine's own count (Info.Threads when New made it), 1 for any
// other engine.
func ThreadsOf(e Engine) int {
	if t, ok := e.(interface{ Threads() int }); ok {
		return t.Threads()
	}
	return 1
}
