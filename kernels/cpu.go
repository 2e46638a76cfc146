package kernels

import (
	"debug/elf"
	"fmt"
	"strings"

	"github.com/klauspost/cpuid/v2"
)

// CPU describes the processor as far as the choice of an OpenBLAS kernel
// is concerned.
type CPU struct {
	Brand    string   // brand string, e.g. "AMD EPYC 7B13"
	Vendor   string   // e.g. "AMD", "Intel"
	Features []string // every feature the CPU and the OS support
	Family   int      // CPUID family and model (extended ones included), 0 when unknown
	Model    int
	has      map[string]bool
}

// DetectCPU reads the running processor's features (CPUID, including the
// operating system's support for AVX and AVX-512 register state).
func DetectCPU() CPU {
	c := NewCPU(cpuid.CPU.BrandName, cpuid.CPU.VendorID.String(), cpuid.CPU.FeatureSet())
	c.Family, c.Model = cpuid.CPU.Family, cpuid.CPU.Model
	return c
}

// NewCPU builds a CPU from a brand, vendor and feature names as printed by
// DetectCPU (for tests and for describing other machines).
func NewCPU(brand, vendor string, features []string) CPU {
	c := CPU{Brand: brand, Vendor: vendor, Features: features, has: map[string]bool{}}
	for _, f := range features {
		c.has[strings.ToUpper(f)] = true
	}
	return c
}

// Has reports whether the CPU has every named feature.
func (c CPU) Has(features ...string) bool {
	for _, f := range features {
		if !c.has[f] {
			return false
		}
	}
	return true
}

// HalfRate512 reports whether the CPU runs AVX-512 but executes each
// 512-bit FMA as two 256-bit halves, so that 256-bit kernels reach the
// same FMA peak: AMD's Zen 4 (family 25 with AVX-512F; `softsync bench
// peak` gives the avx512 and avx2 levels the same figure there). Intel's
// AVX-512 cores and AMD's Zen 5 (family 26) are taken as full rate.
func (c CPU) HalfRate512() bool {
	return c.Vendor == "AMD" && c.Family == 25 && c.Has("AVX512F")
}

// coreNeeds lists, best first, the OpenBLAS x86-64 cores softsync chooses
// between and the CPU features each core's kernels use.
var coreNeeds = []struct {
	core  string
	needs []string
	amd   bool // only for AMD processors
}{
	{"SAPPHIRERAPIDS", []string{"AVX512F", "AVX512BW", "AVX512DQ", "AVX512VL", "AVX512BF16", "AMXTILE", "AMXBF16"}, false},
	{"COOPERLAKE", []string{"AVX512F", "AVX512BW", "AVX512DQ", "AVX512VL", "AVX512BF16"}, false},
	{"SKYLAKEX", []string{"AVX512F", "AVX512BW", "AVX512DQ", "AVX512VL"}, false},
	{"ZEN", []string{"AVX2", "FMA3"}, true},
	{"HASWELL", []string{"AVX2", "FMA3"}, false},
	{"SANDYBRIDGE", []string{"AVX"}, false},
}

// classicCores are the cores every OpenBLAS since 0.3.10 provides: the
// choice when the library's own list cannot be read.
var classicCores = []string{"COOPERLAKE", "SKYLAKEX", "ZEN", "HASWELL", "SANDYBRIDGE"}

// ChooseCore returns the best OpenBLAS core for cpu among available (core
// names as in OPENBLAS_CORETYPE, upper case; nil means the classic cores),
// and why. It decides from the CPU's features alone, never by trying a
// kernel: AVX-512 F/BW/DQ/VL → SKYLAKEX (COOPERLAKE with AVX512-BF16,
// SAPPHIRERAPIDS with AMX as well), AVX2+FMA → ZEN on AMD or HASWELL,
// AVX → SANDYBRIDGE. For older CPUs it returns "" so that OpenBLAS
// detects the core itself.
func ChooseCore(cpu CPU, available []string) (core, reason string) {
	if available == nil {
		available = classicCores
	}
	avail := map[string]bool{}
	for _, a := range available {
		avail[strings.ToUpper(a)] = true
	}
	for _, c := range coreNeeds {
		if c.amd && cpu.Vendor != "AMD" {
			continue
		}
		if !cpu.Has(c.needs...) || !avail[c.core] {
			continue
		}
		v := ""
		if c.amd {
			v = "AMD, "
		}
		return c.core, fmt.Sprintf("chosen from CPU features (%s%s)", v, strings.Join(c.needs, ", "))
	}
	return "", "no AVX: OpenBLAS detects the core itself"
}

// MissingFeatures returns the features core's kernels need that cpu lacks
// (nil for cores softsync does not know).
func MissingFeatures(cpu CPU, core string) []string {
	var missing []string
	for _, c := range coreNeeds {
		if strings.EqualFold(c.core, core) {
			for _, f := range c.needs {
				if !cpu.Has(f) {
					missing = append(missing, f)
				}
			}
		}
	}
	return missing
}

// LowerCore returns the core to try after core failed its start-up check,
// one step down the list ChooseCore picks from, or "" when there is none
// (leave the choice to OpenBLAS, or use the reference engine).
func LowerCore(core string) string { return lowerCore[strings.ToUpper(core)] }

var lowerCore = map[string]string{
	"SAPPHIRERAPIDS": "COOPERLAKE",
	"COOPERLAKE":     "SKYLAKEX",
	"SKYLAKEX":       "HASWELL",
	"ZEN":            "HASWELL",
	"HASWELL":        "SANDYBRIDGE",
}

// LibraryCores lists the cores a DYNAMIC_ARCH OpenBLAS library file
// provides, from its exported gotoblas_<CORE> symbols.
func LibraryCores(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var cores []string
	for _, s := range syms {
		if c, ok := strings.CutPrefix(s.Name, "gotoblas_"); ok && c == strings.ToUpper(c) && s.Section != elf.SHN_UNDEF {
			cores = append(cores, c)
		}
	}
	return cores, nil
}
