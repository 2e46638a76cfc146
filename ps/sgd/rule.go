package sgd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/softsync/softsync/ps/param"
)

// The spelling of a rule (softsync's --lr-mode): one rate term, one
// correction term, or one of each joined by "+" in either order:
//
//	rate        constant | staleness | average | poly:A | hinge:B,A
//	correction  dc[:λ] | dc-adaptive[:λ] | gap
//
// A correction alone keeps the base rate (constant). λ defaults to the
// paper's values: 0.04 for dc, 2 for dc-adaptive. Examples: "staleness",
// "poly:0.5", "hinge:4,10", "dc:0.04+staleness", "gap".

// Default λ of the delay compensations when the spelling gives none: the
// values of Zheng et al.'s experiments.
const (
	DefaultDCLambda         = 0.04
	DefaultDCAdaptiveLambda = 2
)

const ruleSyntax = "constant, staleness, average, poly:A or hinge:B,A, and/or one of dc[:λ], dc-adaptive[:λ], gap, joined by +"

// ParseRule sets the rule fields of c (LRMode, PolyA, HingeB, HingeA,
// Correction and DCLambda) from their spelling s, described above, and
// leaves the other fields as they are. On error, a *param.FieldError
// naming LRMode, c is unchanged.
func (c *Config) ParseRule(s string) error {
	var r Config // the rule fields only
	rate, corr := false, false
	terms := strings.Split(s, "+")
	if len(terms) > 2 {
		return param.Fieldf("LRMode", "%q has %d terms: want %s", s, len(terms), ruleSyntax)
	}
	for _, t := range terms {
		isCorr, err := r.parseTerm(t)
		switch {
		case err != nil:
			return param.Fieldf("LRMode", "%q: %v (want %s)", s, err, ruleSyntax)
		case isCorr && corr:
			return param.Fieldf("LRMode", "%q has two corrections: want one of dc, dc-adaptive, gap", s)
		case !isCorr && rate:
			return param.Fieldf("LRMode", "%q has two rate terms: want one of %s", s, "constant, staleness, average, poly:A, hinge:B,A")
		}
		rate, corr = rate || !isCorr, corr || isCorr
	}
	c.LRMode, c.PolyA, c.HingeB, c.HingeA, c.Correction, c.DCLambda = r.LRMode, r.PolyA, r.HingeB, r.HingeA, r.Correction, r.DCLambda
	return nil
}

// parseTerm sets the fields of one term of a rule and reports whether it
// is a correction.
func (c *Config) parseTerm(t string) (correction bool, err error) {
	name, arg, hasArg := strings.Cut(t, ":")
	noArg := func() error {
		if hasArg {
			return fmt.Errorf("%s takes no parameter, got %q", name, t)
		}
		return nil
	}
	switch name {
	case "constant", "staleness", "average":
		c.LRMode, _ = ParseLRMode(name)
		return false, noArg()
	case "poly":
		c.LRMode = LRPoly
		c.PolyA, err = parsePositive(name, "A", arg, hasArg)
		return false, err
	case "hinge":
		c.LRMode = LRHinge
		b, a, ok := strings.Cut(arg, ",")
		if !hasArg || !ok {
			return false, fmt.Errorf("hinge needs two parameters, hinge:B,A, got %q", t)
		}
		if c.HingeB, err = strconv.Atoi(b); err != nil || c.HingeB < 0 {
			return false, fmt.Errorf("hinge's B must be an integer staleness ≥ 0, got %q", b)
		}
		c.HingeA, err = parsePositive(name, "A", a, true)
		return false, err
	case "dc", "dc-adaptive":
		c.Correction, c.DCLambda = CorrDC, DefaultDCLambda
		if name == "dc-adaptive" {
			c.Correction, c.DCLambda = CorrDCAdaptive, DefaultDCAdaptiveLambda
		}
		if hasArg {
			c.DCLambda, err = parsePositive(name, "λ", arg, true)
		}
		return true, err
	case "gap":
		c.Correction = CorrGap
		return true, noArg()
	}
	return false, fmt.Errorf("unknown term %q", t)
}

// parsePositive parses the parameter what of term name: a finite number > 0.
func parsePositive(name, what, arg string, given bool) (float64, error) {
	if !given {
		return 0, fmt.Errorf("%s needs its parameter %s, %s:%s", name, what, name, what)
	}
	x, err := strconv.ParseFloat(arg, 64)
	if err != nil || !finite(x) || x <= 0 {
		return 0, fmt.Errorf("%s's %s must be a finite number > 0, got %q", name, what, arg)
	}
	return x, nil
}

// RuleString returns the spelling of c's rule, which ParseRule reads
// back to the same fields: the correction first, then the rate term
// (left out when it is constant), parameters in full.
func (c *Config) RuleString() string {
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	rate := c.LRMode.String()
	switch c.LRMode {
	case LRPoly:
		rate += ":" + num(c.PolyA)
	case LRHinge:
		rate += ":" + strconv.Itoa(c.HingeB) + "," + num(c.HingeA)
	}
	var corr string
	switch c.Correction {
	case CorrNone:
		return rate
	case CorrDC, CorrDCAdaptive:
		corr = c.Correction.String() + ":" + num(c.DCLambda)
	default:
		corr = c.Correction.String()
	}
	if c.LRMode == LRConstant {
		return corr
	}
	return corr + "+" + rate
}
