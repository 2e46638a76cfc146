package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

func init() { addCommand(newDoctorCmd) }

// cpuFeatures are the features that decide the OpenBLAS core and the
// kernels' instruction-set level.
var cpuFeatures = []string{"AVX", "AVX2", "FMA3", "F16C", "AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL",
	"AVX512BF16", "AMXTILE", "AMXBF16"}

func newDoctorCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Describe the CPU, RDMA devices, the BLAS library and kernel in use, threads, engine and timer slack",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			w := tabwriter.NewWriter(app.Out, 18, 0, 2, ' ', 0) // fixed width: flushed in two parts
			cpu := kernels.DetectCPU()
			fmt.Fprintf(w, "CPU\t%s (%s), %d cores available, GOARCH %s\n", cpu.Brand, cpu.Vendor, runtime.NumCPU(), runtime.GOARCH)
			var have []string
			for _, f := range cpuFeatures {
				mark := "-"
				if cpu.Has(f) {
					mark = "+"
				}
				have = append(have, mark+f)
			}
			fmt.Fprintf(w, "CPU features\t%s\n", strings.Join(have, " "))
			printRDMA(w, rdma.ProbeVerbs(rdma.Options{}))
			if user := userCore(); user != "" {
				fmt.Fprintf(w, "OPENBLAS_CORETYPE\t%s (set by the user)\n", user)
				if m := kernels.MissingFeatures(cpu, user); len(m) > 0 {
					fmt.Fprintf(w, "WARNING\tthis CPU lacks %s, which core %s needs: OpenBLAS would die with SIGILL\n", strings.Join(m, ", "), user)
					fmt.Fprintf(w, "BLAS\tnot loaded; unset OPENBLAS_CORETYPE to let softsync choose from the CPU's features\n")
					return w.Flush()
				}
			}
			w.Flush() // before loading OpenBLAS, in case its kernel crashes

			_, info, err := app.EngineInfo()
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "Engine\t%s\n", info.Engine)
			fallback := "no"
			if info.Fallback {
				fallback = "yes: " + info.FallbackErr.Error()
			}
			fmt.Fprintf(w, "Pure-Go fallback\t%s\n", fallback)
			if info.Library != "" {
				lib := info.Library
				if real, err := filepath.EvalSymlinks(lib); err == nil && real != lib {
					lib += " → " + real
				}
				fmt.Fprintf(w, "BLAS library\t%s\n", lib)
				fmt.Fprintf(w, "BLAS config\t%s\n", info.BLASConfig)
				if cores, err := kernels.LibraryCores(info.Library); err == nil {
					slices.Sort(cores)
					fmt.Fprintf(w, "BLAS cores\t%s\n", strings.Join(cores, " "))
				}
			}
			core := info.CoreType
			if core == "" {
				core = "(OpenBLAS's own detection)"
			}
			if info.CoreName != "" {
				fmt.Fprintf(w, "Core in use\t%s; OPENBLAS_CORETYPE=%s: %s\n", info.CoreName, core, info.CoreReason)
				if info.CoreType != "" && !strings.EqualFold(info.CoreName, info.CoreType) {
					fmt.Fprintf(w, "WARNING\tOpenBLAS runs %s, not the requested %s (unknown to this library?)\n", info.CoreName, info.CoreType)
				}
			}
			reason := info.ISAReason
			if want, from, _ := app.isaLevel(); want != isa.Auto {
				reason = fmt.Sprintf("%s=%s %s", from, want, reason)
			}
			fmt.Fprintf(w, "Kernel ISA\t%s: %s\n", info.ISA, reason)
			fmt.Fprintf(w, "Solver, codecs\t%s (ps/sgd), %s (rdma): their Go assembly, at most the kernels' level\n", sgd.ISA(), rdma.ISA())
			fmt.Fprintf(w, "Threads\t%d (--threads; cores available %d)\n", info.Threads, kernels.DefaultThreads())
			if info.ThreadTimeout != 0 {
				fmt.Fprintf(w, "BLAS spin\tOPENBLAS_THREAD_TIMEOUT=%d (workers spin 2^%d cycles after a job)\n", info.ThreadTimeout, info.ThreadTimeout)
			}
			fmt.Fprintf(w, "Timer slack\t%s\n", timerSlackLine())
			if _, ok := os.LookupEnv("OPENBLAS_NUM_THREADS"); ok {
				fmt.Fprintf(w, "Note\tOPENBLAS_NUM_THREADS is set; --threads overrides it\n")
			}
			return w.Flush()
		},
	}
}

// printRDMA writes the RDMA section: the devices and ports the verbs
// transport sees, the locked-memory limit, and what --transport auto
// would use, or why there is nothing.
func printRDMA(w io.Writer, p rdma.VerbsProbe) {
	switch {
	case p.Provider == "":
		fmt.Fprintf(w, "RDMA\t%s\n", strings.TrimPrefix(p.Reason, "rdma: unsupported: "))
	case len(p.Devices) == 0:
		fmt.Fprintf(w, "RDMA devices\tnone: %s\n", strings.TrimPrefix(p.Reason, "rdma: unsupported: "))
	}
	for _, d := range p.Devices {
		if d.Err != nil {
			fmt.Fprintf(w, "RDMA device\t%s: %v\n", d.Name, d.Err)
			continue
		}
		fmt.Fprintf(w, "RDMA device\t%s (firmware %s, %d port(s))\n", d.Name, d.Firmware, len(d.Ports))
		for _, port := range d.Ports {
			s := fmt.Sprintf("%s, %s, MTU %d", port.State, port.LinkLayer, port.MTU)
			if port.LID != 0 {
				s += fmt.Sprintf(", LID %d", port.LID)
			}
			if port.GID != "" {
				s += ", GID " + port.GID
			}
			if port.Err != nil {
				s += fmt.Sprintf(" (%v)", port.Err)
			}
			fmt.Fprintf(w, "  port %d\t%s\n", port.Num, s)
		}
	}
	limit := "unlimited"
	if p.Memlock != rdma.MemlockUnlimited {
		limit = fmt.Sprintf("%d KiB (ulimit -l)", p.Memlock/1024)
	}
	if p.MemlockExempt {
		limit += ", not binding: this process has CAP_IPC_LOCK"
	}
	fmt.Fprintf(w, "Locked memory\t%s; verbs registers %d MiB regions\n", limit, p.RegionSize>>20)
	if p.MemlockErr != nil {
		fmt.Fprintf(w, "WARNING\t%v\n", strings.TrimPrefix(p.MemlockErr.Error(), "rdma: "))
	}
	switch {
	case p.Usable != "" && p.MemlockErr == nil:
		fmt.Fprintf(w, "Transport auto\tverbs on %s with peers that have RDMA too, else TCP\n", p.Usable)
	case p.Usable != "":
		fmt.Fprintf(w, "Transport auto\tTCP: the locked-memory limit is too low for verbs on %s\n", p.Usable)
	default:
		fmt.Fprintf(w, "Transport auto\tTCP: no usable RDMA device\n")
	}
}
