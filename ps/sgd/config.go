package sgd

import (
	"fmt"
	"math"

	"github.com/softsync/softsync/ps/param"
)

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
	// LRPoly scales the rate of each gradient by (1+τ)^(−A), A =
	// Config.PolyA (FedAsync's polynomial staleness function).
	LRPoly
	// LRHinge keeps α0 for τ ≤ B and scales the rate by 1/(A(τ−B)+1)
	// beyond, B = Config.HingeB, A = Config.HingeA (FedAsync's hinge).
	LRHinge
)

var lrModeNames = [...]string{LRConstant: "constant", LRStaleness: "staleness", LRAverage: "average", LRPoly: "poly", LRHinge: "hinge"}

// String returns the name of m: "constant", "staleness", "average",
// "poly" or "hinge" (Config.RuleString adds the parameters).
func (m LRMode) String() string {
	if int(m) < len(lrModeNames) {
		return lrModeNames[m]
	}
	return fmt.Sprintf("LRMode(%d)", uint8(m))
}

// ParseLRMode parses the name of a mode that takes no parameter:
// constant, staleness or average. Config.ParseRule parses every rule.
func ParseLRMode(s string) (LRMode, error) {
	for _, m := range []LRMode{LRConstant, LRStaleness, LRAverage} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, param.Fieldf("LRMode", "unknown mode %q (want constant, staleness or average)", s)
}

// Correction selects the elementwise correction each gradient gets, from
// the weights it was computed on and the current ones, before its rate.
type Correction uint8

const (
	// CorrNone leaves the gradients as they are.
	CorrNone Correction = iota
	// CorrDC is delay compensation with a constant λ (DC-ASGD-c, Zheng et
	// al. 2017): g + λ·g⊙g⊙(w − w_pulled), λ = Config.DCLambda.
	CorrDC
	// CorrDCAdaptive is delay compensation with λ divided by the root of
	// a running mean square of the gradients (DC-ASGD-a).
	CorrDCAdaptive
	// CorrGap divides each element of a gradient by its gap, 1 +
	// |w − w_pulled|/C with C that parameter's typical step (Gap-Aware,
	// Barkai, Hakimi and Schuster 2020).
	CorrGap
)

var correctionNames = [...]string{CorrNone: "none", CorrDC: "dc", CorrDCAdaptive: "dc-adaptive", CorrGap: "gap"}

// String returns the name of c: "none", "dc", "dc-adaptive" or "gap".
func (c Correction) String() string {
	if int(c) < len(correctionNames) {
		return correctionNames[c]
	}
	return fmt.Sprintf("Correction(%d)", uint8(c))
}

// Config holds the solver hyper-parameters. The zero value is not valid (LR
// must be set); Validate reports the first bad field. The rule fields
// (LRMode to DCLambda) are what one --lr-mode value sets: see ParseRule.
type Config struct {
	LR          float64 // base learning rate α0, > 0
	Momentum    float64 // momentum in [0, 1); 0.9 in the paper
	WeightDecay float64 // L2 weight decay ≥ 0, scaled per segment by DecayMult
	LRSteps     []int   // epochs, strictly increasing and ≥ 1, at which the rate is multiplied by LRGamma
	LRGamma     float64 // schedule factor, > 0 when LRSteps is not empty (0.1 in the paper)
	LRMode      LRMode  // how staleness modulates the rate
	PolyA       float64 // LRPoly: the exponent A of (1+τ)^(−A), finite and > 0; 0 with other modes
	HingeB      int     // LRHinge: the staleness B up to which a gradient keeps the base rate, ≥ 0; 0 with other modes
	HingeA      float64 // LRHinge: the slope A of 1/(A(τ−B)+1), finite and > 0; 0 with other modes
	// Correction is the elementwise correction of each gradient; every
	// value but CorrNone needs the weights the gradient was computed on
	// (Grad.Pulled).
	Correction Correction
	DCLambda   float64 // CorrDC, CorrDCAdaptive: λ, finite and > 0; 0 with other corrections
	// MomentumComp lowers the momentum of each update by the implicit
	// momentum of asynchrony, 1 − 1/(⟨τ⟩+1), ⟨τ⟩ the mean staleness of
	// the last MomentumWindow gradients, never below 0 (see the package
	// doc).
	MomentumComp bool
	// Quorum is c₀, the number of gradients a full update combines; the
	// parameter server sets it from its protocol (⌊λ/n⌋ for softsync, λ
	// for hardsync, with λ the configured learners). An update of c <
	// Quorum gradients is divided by Quorum instead of c, which scales
	// its rate by c/c₀ (see the package doc). 0 means 1: every update is
	// full.
	Quorum int
}

// NeedsPulled reports whether the rule compares each gradient's weights
// with the current ones, so that Grad.Pulled must be given: every
// Correction but CorrNone.
func (c *Config) NeedsPulled() bool { return c.Correction != CorrNone }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate returns a *param.FieldError for the first invalid field, or nil.
func (c *Config) Validate() error {
	switch {
	case !finite(c.LR) || c.LR <= 0:
		return param.Fieldf("LR", "must be a finite number > 0, got %g", c.LR)
	case !finite(c.Momentum) || c.Momentum < 0 || c.Momentum >= 1:
		return param.Fieldf("Momentum", "must be in [0, 1), got %g", c.Momentum)
	case !finite(c.WeightDecay) || c.WeightDecay < 0:
		return param.Fieldf("WeightDecay", "must be a finite number ≥ 0, got %g", c.WeightDecay)
	case c.Quorum < 0:
		return param.Fieldf("Quorum", "must be ≥ 0, got %d", c.Quorum)
	}
	if err := c.validateRule(); err != nil {
		return err
	}
	for k, e := range c.LRSteps {
		if e < 1 || (k > 0 && e <= c.LRSteps[k-1]) {
			return param.Fieldf(fmt.Sprintf("LRSteps[%d]", k), "epochs must be ≥ 1 and strictly increasing, got %v", c.LRSteps)
		}
	}
	if len(c.LRSteps) > 0 && (!finite(c.LRGamma) || c.LRGamma <= 0) {
		return param.Fieldf("LRGamma", "must be a finite number > 0 when LRSteps is set, got %g", c.LRGamma)
	}
	return nil
}

// validateRule checks the rule fields: the mode and the correction known,
// each parameter set exactly when its mode or correction uses it.
func (c *Config) validateRule() error {
	poly, hinge := c.LRMode == LRPoly, c.LRMode == LRHinge
	dc := c.Correction == CorrDC || c.Correction == CorrDCAdaptive
	positive := func(x float64) bool { return finite(x) && x > 0 }
	switch {
	case int(c.LRMode) >= len(lrModeNames):
		return param.Fieldf("LRMode", "unknown mode %d", c.LRMode)
	case poly != positive(c.PolyA) || (!poly && c.PolyA != 0):
		return param.Fieldf("PolyA", "must be a finite number > 0 with LRPoly and 0 otherwise, got %g with %v", c.PolyA, c.LRMode)
	case c.HingeB < 0 || (!hinge && c.HingeB != 0):
		return param.Fieldf("HingeB", "must be ≥ 0 with LRHinge and 0 otherwise, got %d with %v", c.HingeB, c.LRMode)
	case hinge != positive(c.HingeA) || (!hinge && c.HingeA != 0):
		return param.Fieldf("HingeA", "must be a finite number > 0 with LRHinge and 0 otherwise, got %g with %v", c.HingeA, c.LRMode)
	case int(c.Correction) >= len(correctionNames):
		return param.Fieldf("Correction", "unknown correction %d", c.Correction)
	case dc != positive(c.DCLambda) || (!dc && c.DCLambda != 0):
		return param.Fieldf("DCLambda", "must be a finite number > 0 with CorrDC or CorrDCAdaptive and 0 otherwise, got %g with %v", c.DCLambda, c.Correction)
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

// factor returns s_l, the rate factor of a gradient of staleness tau
// under the per-gradient modes (1 under the others).
func (c *Config) factor(tau int) float64 {
	switch c.LRMode {
	case LRStaleness:
		if tau > 1 {
			return 1 / float64(tau)
		}
	case LRPoly:
		if tau > 0 {
			return math.Pow(1+float64(tau), -c.PolyA)
		}
	case LRHinge:
		if tau > c.HingeB {
			return 1 / (c.HingeA*float64(tau-c.HingeB) + 1)
		}
	}
	return 1
}
