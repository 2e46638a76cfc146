package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// App is the state every subcommand shares: global flags, the logger and
// the compute engine, created on first use.
type App struct {
	Out     io.Writer
	Log     *slog.Logger
	Threads int    // --threads; 0 = cores available to the process
	Level   string // --log-level
	BLASLib string // --blas-lib
	Engine  string // --engine: auto, native or reference
	ISA     string // --isa, else SOFTSYNC_ISA: auto, avx512, avx2 or generic
	// Profile (--profile) and ProfileDir (--profile-dir) select a
	// runtime profile recorded while the subcommand runs (profile.go).
	Profile    string
	ProfileDir string
	// MemoryAvailable, if set, stands in for the machine's available
	// memory (availableMemory) in the memory check: tests set it.
	MemoryAvailable func() (bytes int64, where string, err error)

	engine  kernels.Engine
	info    kernels.Info
	profile *profiling // the running profile, nil if none

	interrupts *interrupts    // the running command's signal handling
	metrics    *metrics       // --metrics, served until the command ends
	pipeline   *data.Pipeline // image data's decoding threads, until the command ends

	connMu   sync.Mutex
	connSeen map[string]bool // transport choices logged (logConnect)
}

var (
	commands      []func(*App) *cobra.Command
	benchCommands []func(*App) *cobra.Command
)

// addCommand registers a top-level subcommand; call it from init.
func addCommand(f func(*App) *cobra.Command) { commands = append(commands, f) }

// addBenchCommand registers a subcommand of "softsync bench"; call it from init.
func addBenchCommand(f func(*App) *cobra.Command) { benchCommands = append(benchCommands, f) }

// printJSON writes v to the command output as indented JSON (the --json
// output of the bench commands).
func (app *App) printJSON(v any) error {
	enc := json.NewEncoder(app.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newRootCmd(out io.Writer) *cobra.Command { return newRoot(&App{Out: out}) }

// newRoot returns the root command of app (Out set).
func newRoot(app *App) *cobra.Command {
	root := &cobra.Command{
		Use:           "softsync",
		Short:         "Staleness-aware asynchronous SGD for CNNs on CPU clusters",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return app.setup()
		},
	}
	f := root.PersistentFlags()
	f.IntVar(&app.Threads, "threads", 0, "compute threads (OpenBLAS and kernels); for train and bench train: goroutines per learner over single-threaded kernels; 0 = the cores available to the process (for train: divided among the learners)")
	f.StringVar(&app.Level, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&app.BLASLib, "blas-lib", "", "path of libopenblas.so (default: the loader's search path, then the build-time libdir)")
	f.StringVar(&app.Engine, "engine", "auto", "compute engine: auto, native or reference")
	f.StringVar(&app.ISA, "isa", "", "highest instruction set of the kernels: auto, avx512, avx2 or generic (default: $"+isaEnv+", else auto, the best this CPU runs)")
	f.StringVar(&app.Profile, "profile", "", "record a profile of the run: cpu, mem, block, mutex or trace (read it with go tool pprof, or go tool trace)")
	f.StringVar(&app.ProfileDir, "profile-dir", ".", "folder the --profile file is written to (cpu.pprof, mem.pprof, block.pprof, mutex.pprof or trace.out)")
	for _, c := range commands {
		root.AddCommand(c(app))
	}
	planShownIsSuccess(root)
	stopProfileAfterRun(root, app)
	return root
}

func (a *App) setup() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(a.Level)); err != nil {
		return fmt.Errorf("--log-level %q: %w", a.Level, err)
	}
	a.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := checkTimerSlackEnv(); err != nil {
		return err
	}
	if a.Threads < 0 {
		return fmt.Errorf("--threads %d: must be ≥ 0", a.Threads)
	}
	switch a.Engine {
	case "auto", "native", "reference":
	default:
		return fmt.Errorf("--engine %q: must be auto, native or reference", a.Engine)
	}
	want, from, err := a.isaLevel()
	if err != nil {
		return err
	}
	if _, err := isa.Resolve(want); err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	// The solver's and the codecs' passes follow the same level as the
	// kernels (kernels.Config.ISA, set in EngineInfo).
	sgd.LimitISA(want)
	rdma.LimitISA(want)
	return a.startProfile()
}

// isaEnv names the environment variable that sets --isa's default.
const isaEnv = "SOFTSYNC_ISA"

// isaLevel returns the instruction-set level asked for (--isa, else
// $SOFTSYNC_ISA, else isa.Auto) and where it came from.
func (a *App) isaLevel() (isa.Level, string, error) {
	v, from := a.ISA, "--isa"
	if v == "" {
		v, from = os.Getenv(isaEnv), isaEnv
	}
	l, err := isa.Parse(v)
	if err != nil {
		return isa.Auto, from, fmt.Errorf("%s: %w", from, err)
	}
	return l, from, nil
}

// retryEnv marks a process that softsync re-executed after the OpenBLAS
// core it chose failed the start-up check; its value is that core.
const retryEnv = "SOFTSYNC_BLAS_RETRY"

// userCore returns the OPENBLAS_CORETYPE the user set (not one softsync
// set for a retry).
func userCore() string {
	if os.Getenv(retryEnv) != "" {
		return ""
	}
	return os.Getenv("OPENBLAS_CORETYPE")
}

// EngineInfo returns the compute engine, creating it on first use.
//
// Fallback: OpenBLAS picks its kernel once, when it is loaded, so a kernel
// that fails the start-up GEMM check cannot be swapped in this process.
// If softsync chose that kernel itself, it re-executes itself once with
// OPENBLAS_CORETYPE set one core lower (kernels.LowerCore) and
// SOFTSYNC_BLAS_RETRY naming the failed core; if that fails too, or the
// failed core was the user's own OPENBLAS_CORETYPE, it runs on the pure-Go
// reference engine and says so.
func (a *App) EngineInfo() (kernels.Engine, kernels.Info, error) {
	if a.engine != nil {
		return a.engine, a.info, nil
	}
	retry := os.Getenv(retryEnv)
	level, from, err := a.isaLevel()
	if err != nil {
		return nil, kernels.Info{}, err
	}
	cfg := kernels.Config{Threads: a.Threads, Library: a.BLASLib, Reference: a.Engine == "reference", ISA: level}
	cfg.CoreType = os.Getenv("OPENBLAS_CORETYPE")
	if v := os.Getenv("OPENBLAS_THREAD_TIMEOUT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, kernels.Info{}, fmt.Errorf("OPENBLAS_THREAD_TIMEOUT=%q: %w", v, err)
		}
		cfg.ThreadTimeout = n
	}
	if user := userCore(); user != "" {
		if m := kernels.MissingFeatures(kernels.DetectCPU(), user); len(m) > 0 {
			a.Log.Warn("OPENBLAS_CORETYPE names a core this CPU cannot run; OpenBLAS may die with SIGILL",
				"core", user, "missing", strings.Join(m, ","))
		}
	}
	e, info, err := kernels.New(cfg)
	if err != nil {
		if errors.Is(err, kernels.ErrISA) {
			err = fmt.Errorf("%s: %w", from, err)
		}
		return nil, info, err
	}
	if retry != "" && !info.Fallback {
		info.CoreReason = fmt.Sprintf("fallback: core %s failed the start-up GEMM check", retry)
	}
	if lower := retryCore(info, retry, userCore()); lower != "" {
		a.Log.Warn("OpenBLAS kernel failed the start-up check; re-executing with a lower core",
			"core", info.CoreType, "next", lower, "err", info.FallbackErr)
		if err := reexec(lower, info.CoreType); err != nil {
			a.Log.Error("re-exec failed", "err", err)
		}
	}
	if info.Fallback && a.Engine == "native" {
		return nil, info, fmt.Errorf("--engine native: %w", info.FallbackErr)
	}
	if info.Fallback && !errors.Is(info.FallbackErr, kernels.ErrNotBuilt) {
		a.Log.Warn("using the pure-Go reference engine", "reason", info.FallbackErr)
	}
	a.engine, a.info = e, info
	return e, info, nil
}

// retryCore returns the core to re-execute with after New reported info:
// one step below a core softsync chose itself that failed the start-up
// check, on the first attempt only (retry empty), never when the user
// chose the core (user non-empty); "" means no re-exec.
func retryCore(info kernels.Info, retry, user string) string {
	if !info.Fallback || !errors.Is(info.FallbackErr, kernels.ErrVerify) || retry != "" || user != "" {
		return ""
	}
	return kernels.LowerCore(info.CoreType)
}

// reexec replaces the process with itself, OPENBLAS_CORETYPE set to core.
func reexec(core, failed string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	os.Setenv("OPENBLAS_CORETYPE", core)
	os.Setenv(retryEnv, failed)
	return syscall.Exec(exe, os.Args, os.Environ())
}
