package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
)

// The results of softsync bench all (bench/results.json); docs/bench.md
// documents the schema.

// Schema is the version of the results format; it changes when a
// field changes meaning or goes away.
const Schema = 1

// Results is one run of softsync bench all.
type Results struct {
	Schema  int       `json:"schema"`
	Date    time.Time `json:"date"`    // start of the run, UTC
	Seconds float64   `json:"seconds"` // length of the whole run
	Quick   bool      `json:"quick"`   // --quick: tiny sizes, figures meaningless
	Commit  Commit    `json:"commit"`
	Machine Machine   `json:"machine"`
	// Figures are the measurements, in the order they were taken.
	Figures []Figure `json:"figures"`
	// Failed lists the steps that did not run or failed, with why.
	Failed []Failure `json:"failed,omitempty"`
}

// Commit is the source tree the binary was built from, as git sees
// the working directory; empty outside a git work tree.
type Commit struct {
	Hash  string `json:"hash,omitempty"`
	Dirty bool   `json:"dirty"` // tracked files differ from Hash (bench/ and docs/performance.md aside)
}

// Machine is the host the figures were measured on.
type Machine struct {
	CPU          string   `json:"cpu"` // brand string (CPUID)
	Vendor       string   `json:"vendor"`
	Hypervisor   bool     `json:"hypervisor"` // a virtual machine (CPUID hypervisor bit)
	Cores        int      `json:"cores"`      // available to the process (its CPU affinity)
	ISAAvailable []string `json:"isa_available"`
	ISAKernels   string   `json:"isa_kernels"` // level the kernels run at unless a figure says otherwise
	BLASCore     string   `json:"openblas_core"`
	BLASReason   string   `json:"openblas_core_reason"` // why that core (softsync's choice or OPENBLAS_CORETYPE)
	BLASConfig   string   `json:"openblas_config,omitempty"`
	Engine       string   `json:"engine"`
	Go           string   `json:"go"`
	OS           string   `json:"os"`
	// LoadBefore and LoadAfter are /proc/loadavg's 1, 5 and 15-minute
	// load averages at the start and the end of the run: other work on
	// the machine while it measured.
	LoadBefore []float64 `json:"load_before,omitempty"`
	LoadAfter  []float64 `json:"load_after,omitempty"`
}

// Figure is one measured figure and, where one exists, the same
// quantity measured for a reference in the same run.
type Figure struct {
	Group  string         `json:"group"` // peak, gemm, train, train-flops, kernels, solver, transport, speedup
	Name   string         `json:"name"`
	Params map[string]any `json:"params,omitempty"`
	Value  float64        `json:"value"`
	Unit   string         `json:"unit"`
	// Stat says how Value comes from Runs: "median of N runs" (Runs holds
	// each), or the statistic the benchmark itself keeps ("best of 4
	// rounds", "median round"; Runs holds its one result).
	Stat  string             `json:"stat"`
	Runs  []float64          `json:"runs"`
	Ref   *Ref               `json:"reference,omitempty"`
	Extra map[string]float64 `json:"extra,omitempty"` // further figures of the same runs
}

// Ref is the reference a figure is compared with. Ratio is the
// figure's Value over the reference's Value. When the reference could not
// be measured, Missing says why and Value and Ratio are 0.
type Ref struct {
	Name    string             `json:"name"`
	Value   float64            `json:"value,omitempty"`
	Unit    string             `json:"unit,omitempty"`
	Ratio   float64            `json:"ratio,omitempty"`
	Runs    []float64          `json:"runs,omitempty"`
	Missing string             `json:"missing,omitempty"`
	Extra   map[string]float64 `json:"extra,omitempty"`
}

// Failure is a step of the run that produced no figures.
type Failure struct {
	Step   string `json:"step"`
	Reason string `json:"reason"`
}

// Compare sets f's reference to value in unit (measured, so the ratio is
// defined); a non-positive value records the reference as missing.
func (f *Figure) Compare(name string, value float64, unit string, runs []float64) {
	f.Ref = &Ref{Name: name, Value: value, Unit: unit, Runs: runs}
	if value > 0 {
		f.Ref.Ratio = f.Value / value
	} else {
		f.Ref.Value, f.Ref.Missing = 0, "not measured"
	}
}

// ReadResults reads a results file and checks its schema version.
func ReadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("%s: schema %d, this softsync reads %d", path, r.Schema, Schema)
	}
	return &r, nil
}

// EncodeResults returns r as indented JSON.
func EncodeResults(r *Results) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DetectMachine describes this host and the engine the benchmarks run on.
func DetectMachine(info kernels.Info) Machine {
	cpu := kernels.DetectCPU()
	m := Machine{CPU: strings.TrimSpace(cpu.Brand), Vendor: cpu.Vendor, Hypervisor: cpu.Has("HYPERVISOR"),
		Cores: kernels.DefaultThreads(), ISAKernels: info.ISA.String(), BLASCore: info.CoreName, BLASReason: info.CoreReason,
		BLASConfig: info.BLASConfig, Engine: info.Engine, Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		LoadBefore: loadAverage()}
	for _, l := range isa.All {
		if isa.Supported(l) {
			m.ISAAvailable = append(m.ISAAvailable, l.String())
		}
	}
	return m
}

// loadAverage returns /proc/loadavg's three load averages, nil if it
// cannot be read.
func loadAverage() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return nil
	}
	var l []float64
	for _, s := range f[:3] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil
		}
		l = append(l, v)
	}
	return l
}

// DetectCommit asks git for the commit of the working directory and
// whether tracked files differ from it, leaving out the files bench all
// writes; the zero value outside a work tree or without git.
func DetectCommit() Commit {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return Commit{}
	}
	c := Commit{Hash: strings.TrimSpace(string(out))}
	st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--",
		".", ":(exclude)bench", ":(exclude)docs/performance.md").Output()
	c.Dirty = err != nil || len(bytes.TrimSpace(st)) > 0
	return c
}

// median returns the median of xs (the mean of the middle two for an
// even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
