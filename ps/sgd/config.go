package sgd

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidConfig is wrapped by every configuration or layout error of
// this package (and of package ps); test with errors.Is.
var ErrInvalidConfig = errors.New("invalid config")

// FieldError names the configuration field that failed validation. It
// unwraps to ErrInvalidConfig.
type FieldError struct {
	Field  string // e.g. "Momentum", "Layout[3].Offset"
	Reason string // what is wrong, with the offending value
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidConfig.
func (e *FieldError) Unwrap() error { return ErrInvalidConfig }

// Fieldf returns a *FieldError for field with a formatted reason.
func Fieldf(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// LRMode selects how a gradient's staleness τ modulates the learning rate.
type LRMode uint8

const (
	// LRConstant uses the base rate for every gradient, whatever its
	// staleness (Downpour-style asynchronous SGD when c = 1).
	LRConstant LRMode = iota
	// LRStaleness divides the rate of each gradient by its own staleness:
	// α(τ) = α0/τ, α0 when τ = 0 (the paper's rule).
	LRStaleness
	// LRAverage divides the rate of all gradients of an update by their
	// mean staleness ⟨τ⟩ (α0 when ⟨τ⟩ ≤ 1; the companion study's rule).
	LRAverage
)

var lrModeNames = [...]string{LRConstant: "constant", LRStaleness: "staleness", LRAverage: "average"}

// String returns the flag spelling of m: "constant", "staleness" or "average".
func (m LRMode) String() string {
	if int(m) < len(lrModeNames) {
		return lrModeNames[m]
	}
	return fmt.Sprintf("LRMode(%d)", uint8(m))
}

// ParseLRMode parses the flag spelling of a mode (see LRMode.String).
func ParseLRMode(s string) (LRMode, error) {
	for m, name := range lrModeNames {
		if s == name {
			return LRMode(m), nil
		}
	}
	return 0, Fieldf("LRMode", "unknown mode %q (want constant, staleness or average)", s)
}

// Config holds the solver hyper-parameters. The zero value is not valid (LR
// must be set); Validate reports the first bad field.
type Config struct {
	LR          float64 // base learning rate α0, > 0
	Momentum    float64 // momentum in [0, 1); 0.9 in the paper
	WeightDecay float64 // L2 weight decay ≥ 0, scaled per segment by DecayMult
	LRSteps     []int   // epochs, strictly increasing and ≥ 1, at which the rate is multiplied by LRGamma
	LRGamma     float64 // schedule factor, > 0 when LRSteps is not empty (0.1 in the paper)
	LRMode      LRMode  // how staleness modulates the rate
	// Quorum is c₀, the number of gradients a full update combines; the
	// parameter server sets it from its protocol (⌊λ/n⌋ for softsync, λ
	// for hardsync, with λ the configured learners). An update of c <
	// Quorum gradients is divided by Quorum instead of c, which scales
	// its rate by c/c₀ (see the package doc). 0 means 1: every update is
	// full.
	Quorum int
}

// Validate returns a *FieldError for the first invalid field, or nil.
func (c *Config) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !finite(c.LR) || c.LR <= 0:
		return Fieldf("LR", "must be a finite number > 0, got %g", c.LR)
	case !finite(c.Momentum) || c.Momentum < 0 || c.Momentum >= 1:
		return Fieldf("Momentum", "must be in [0, 1), got %g", c.Momentum)
	case !finite(c.WeightDecay) || c.WeightDecay < 0:
		return Fieldf("WeightDecay", "must be a finite number ≥ 0, got %g", c.WeightDecay)
	case int(c.LRMode) >= len(lrModeNames):
		return Fieldf("LRMode", "unknown mode %d", c.LRMode)
	case c.Quorum < 0:
		return Fieldf("Quorum", "must be ≥ 0, got %d", c.Quorum)
	}
	for k, e := range c.LRSteps {
		if e < 1 || (k > 0 && e <= c.LRSteps[k-1]) {
			return Fieldf(fmt.Sprintf("LRSteps[%d]", k), "epochs must be ≥ 1 and strictly increasing, got %v", c.LRSteps)
		}
	}
	if len(c.LRSteps) > 0 && (!finite(c.LRGamma) || c.LRGamma <= 0) {
		return Fieldf("LRGamma", "must be a finite number > 0 when LRSteps is set, got %g", c.LRGamma)
	}
	return nil
}

// Rate returns the scheduled base rate η for an update in epoch (complete
// passes over the data before the update): LR·LRGamma^k with k the number of
// LRSteps ≤ epoch.
func (c *Config) Rate(epoch int) float64 {
	r := c.LR
	for _, e := range c.LRSteps {
		if epoch >= e {
			r *= c.LRGamma
		}
	}
	return r
}

// ValidateLayout checks that layout covers [0, total) in order, without
// gaps or overlap, with finite non-negative multipliers. A nil layout is
// valid and means one segment with both multipliers 1.
func ValidateLayout(layout []Segment, total int) error {
	if total < 1 {
		return Fieldf("total", "parameter vector must have ≥ 1 element, got %d", total)
	}
	if layout == nil {
		return nil
	}
	next := 0
	for k, s := range layout {
		f := func(name string) string { return fmt.Sprintf("Layout[%d].%s", k, name) }
		switch {
		case s.Offset != next:
			return Fieldf(f("Offset"), "segment %q starts at %d, want %d (segments must be contiguous and in order)", s.Name, s.Offset, next)
		case s.Len < 1:
			return Fieldf(f("Len"), "segment %q has length %d, want ≥ 1", s.Name, s.Len)
		case !(s.LRMult >= 0) || math.IsInf(float64(s.LRMult), 0):
			return Fieldf(f("LRMult"), "segment %q: must be finite and ≥ 0, got %g", s.Name, s.LRMult)
		case !(s.DecayMult >= 0) || math.IsInf(float64(s.DecayMult), 0):
			return Fieldf(f("DecayMult"), "segment %q: must be finite and ≥ 0, got %g", s.Name, s.DecayMult)
		}
		next += s.Len
	}
	if next != total {
		return Fieldf("Layout", "segments cover [0, %d), want [0, %d)", next, total)
	}
	return nil
}
