package bench

import (
	"log/slog"
	"time"

	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/kernels/peak"
)

// PeakLevel is one instruction-set level of `softsync bench peak --json`.
type PeakLevel struct {
	ISA         string  `json:"isa"`
	GFlopsCore  float64 `json:"gflops_one_core"`
	GFlops      float64 `json:"gflops"` // all cores at once
	Cores       int     `json:"cores"`
	KernelLevel bool    `json:"kernels"` // the level the kernels run at (--isa, SOFTSYNC_ISA, or the best)
}

// PeakCopy is one buffer size of the copy bandwidth.
type PeakCopy struct {
	Bytes   int     `json:"bytes"` // per core, each of source and destination
	GBsCore float64 `json:"gbs_one_core"`
	GBs     float64 `json:"gbs"` // all cores at once; bytes read plus bytes written
	Cores   int     `json:"cores"`
}

// PeakResult is the output of `softsync bench peak --json`.
type PeakResult struct {
	Levels []PeakLevel `json:"levels"`
	Copy   []PeakCopy  `json:"copy"`
}

// DefaultCopySizes are the copy buffers measured by default: one that
// stays in a core's L2 cache and one far beyond the last-level cache.
const DefaultCopySizes = "256KiB,64MiB"

// PeakConfig says what Peak measures.
type PeakConfig struct {
	Cores     int // of the all-cores figures
	MinTime   time.Duration
	Rounds    int   // timed runs per figure, best kept
	CopySizes []int // copy buffers per core, in bytes
	// Kernels is the level the kernels run at, marked in the result.
	Kernels isa.Level
	Log     *slog.Logger // levels not measured (nil: not said)
}

// Peak measures the yardsticks of the other benchmarks: for each
// instruction-set level this CPU runs, the FMA peak on one core and on
// every core at once (kernels/peak), then the copy bandwidth of each
// buffer size.
func Peak(cfg PeakConfig) (*PeakResult, error) {
	pc := peak.Config{Cores: cfg.Cores, MinTime: cfg.MinTime, Rounds: cfg.Rounds}
	if err := pc.Validate(); err != nil {
		return nil, err
	}
	var res PeakResult
	for _, l := range isa.All {
		if !isa.Supported(l) {
			if cfg.Log != nil {
				cfg.Log.Info("level not measured", "isa", l, "reason", isa.Reason())
			}
			continue
		}
		r, err := peak.FMA(pc, l)
		if err != nil {
			return nil, err
		}
		res.Levels = append(res.Levels, PeakLevel{ISA: l.String(), GFlopsCore: r.One, GFlops: r.All,
			Cores: r.Cores, KernelLevel: l == cfg.Kernels})
	}
	for _, size := range cfg.CopySizes {
		r, err := peak.Copy(pc, size)
		if err != nil {
			return nil, err
		}
		res.Copy = append(res.Copy, PeakCopy{Bytes: size, GBsCore: r.One, GBs: r.All, Cores: r.Cores})
	}
	return &res, nil
}
