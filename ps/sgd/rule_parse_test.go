package sgd

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/softsync/softsync/ps/param"
)

// TestParseRule parses every kind of rule into the Config fields it sets,
// reads RuleString back to the same fields, and checks that the other
// fields are left alone.
func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in, canon string
		want      Config
	}{
		{"staleness", "staleness", Config{LRMode: LRStaleness}},
		{"constant", "constant", Config{}},
		{"average", "average", Config{LRMode: LRAverage}},
		{"poly:0.5", "poly:0.5", Config{LRMode: LRPoly, PolyA: 0.5}},
		{"hinge:4,10", "hinge:4,10", Config{LRMode: LRHinge, HingeB: 4, HingeA: 10}},
		{"hinge:0,0.25", "hinge:0,0.25", Config{LRMode: LRHinge, HingeA: 0.25}},
		{"dc", "dc:0.04", Config{Correction: CorrDC, DCLambda: 0.04}},
		{"dc:0.1", "dc:0.1", Config{Correction: CorrDC, DCLambda: 0.1}},
		{"dc-adaptive", "dc-adaptive:2", Config{Correction: CorrDCAdaptive, DCLambda: 2}},
		{"dc:0.04+staleness", "dc:0.04+staleness", Config{LRMode: LRStaleness, Correction: CorrDC, DCLambda: 0.04}},
		{"staleness+dc:0.04", "dc:0.04+staleness", Config{LRMode: LRStaleness, Correction: CorrDC, DCLambda: 0.04}},
		{"gap", "gap", Config{Correction: CorrGap}},
		{"gap+constant", "gap", Config{Correction: CorrGap}},
		{"hinge:2,1e-3+dc-adaptive:1.5", "dc-adaptive:1.5+hinge:2,0.001", Config{LRMode: LRHinge, HingeB: 2, HingeA: 1e-3, Correction: CorrDCAdaptive, DCLambda: 1.5}},
	} {
		c := Config{LR: 0.1, Momentum: 0.5, PolyA: 7, Correction: CorrGap} // rule fields overwritten
		if err := c.ParseRule(tc.in); err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		want := tc.want
		want.LR, want.Momentum = 0.1, 0.5
		if !sameRule(c, want) || c.LR != 0.1 || c.Momentum != 0.5 {
			t.Errorf("%q: got %+v, want %+v", tc.in, c, want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%q parsed to an invalid config: %v", tc.in, err)
		}
		if got := c.RuleString(); got != tc.canon {
			t.Errorf("%q: RuleString %q, want %q", tc.in, got, tc.canon)
		}
		var back Config
		if err := back.ParseRule(c.RuleString()); err != nil || !sameRule(back, c) {
			t.Errorf("%q: RuleString %q reads back as %+v (%v)", tc.in, c.RuleString(), back, err)
		}
	}
}

func sameRule(a, b Config) bool {
	return a.LRMode == b.LRMode && a.PolyA == b.PolyA && a.HingeB == b.HingeB && a.HingeA == b.HingeA &&
		a.Correction == b.Correction && a.DCLambda == b.DCLambda
}

// TestParseRuleErrors checks that a bad spelling is an error naming
// LRMode and the problem, and leaves the config unchanged.
func TestParseRuleErrors(t *testing.T) {
	for _, tc := range []struct{ in, says string }{
		{"", `unknown term ""`},
		{"fast", `unknown term "fast"`},
		{"staleness+", `unknown term ""`},
		{"Staleness", "unknown term"},
		{"staleness:2", "takes no parameter"},
		{"gap:1", "takes no parameter"},
		{"poly", "needs its parameter A"},
		{"poly:", "must be a finite number > 0"},
		{"poly:0", "must be a finite number > 0"},
		{"poly:-1", "must be a finite number > 0"},
		{"poly:NaN", "must be a finite number > 0"},
		{"poly:Inf", "must be a finite number > 0"},
		{"hinge:4", "two parameters"},
		{"hinge", "two parameters"},
		{"hinge:-1,2", "integer staleness ≥ 0"},
		{"hinge:1.5,2", "integer staleness ≥ 0"},
		{"hinge:1,0", "must be a finite number > 0"},
		{"dc:0", "must be a finite number > 0"},
		{"dc-adaptive:x", "must be a finite number > 0"},
		{"staleness+average", "two rate terms"},
		{"dc+gap", "two corrections"},
		{"dc+staleness+gap", "3 terms"},
	} {
		c := Config{LR: 0.1, LRMode: LRAverage}
		err := c.ParseRule(tc.in)
		var fe *param.FieldError
		if !errors.Is(err, param.ErrInvalidConfig) || !errors.As(err, &fe) || fe.Field != "LRMode" || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: error %v, want one naming LRMode that says %q", tc.in, err, tc.says)
		}
		if !sameRule(c, Config{LRMode: LRAverage}) {
			t.Errorf("%q: a failed parse changed the config to %+v", tc.in, c)
		}
	}
}

// TestRuleConfigErrors checks the validation of the rule fields: each
// parameter set exactly when its mode or correction uses it.
func TestRuleConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		field string
		c     Config
	}{
		{"LRMode", Config{LRMode: 5}},
		{"PolyA", Config{LRMode: LRPoly}},
		{"PolyA", Config{LRMode: LRPoly, PolyA: math.Inf(1)}},
		{"PolyA", Config{LRMode: LRStaleness, PolyA: 1}},
		{"HingeB", Config{LRMode: LRHinge, HingeB: -1, HingeA: 1}},
		{"HingeB", Config{LRMode: LRPoly, PolyA: 1, HingeB: 2}},
		{"HingeA", Config{LRMode: LRHinge, HingeB: 1}},
		{"HingeA", Config{HingeA: 1}},
		{"Correction", Config{Correction: 4}},
		{"DCLambda", Config{Correction: CorrDC}},
		{"DCLambda", Config{Correction: CorrDCAdaptive, DCLambda: math.NaN()}},
		{"DCLambda", Config{Correction: CorrGap, DCLambda: 1}},
	} {
		c := tc.c
		c.LR = 0.1
		err := c.Validate()
		var fe *param.FieldError
		if !errors.Is(err, param.ErrInvalidConfig) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: want an error on %s, got %v", tc.c, tc.field, err)
		}
	}
	if m, err := ParseLRMode("poly"); err == nil {
		t.Errorf("ParseLRMode(poly) = %v: a mode with a parameter needs ParseRule", m)
	}
	if LRHinge.String() != "hinge" || CorrDCAdaptive.String() != "dc-adaptive" || Correction(9).String() != "Correction(9)" {
		t.Errorf("names: %v %v %v", LRHinge, CorrDCAdaptive, Correction(9))
	}
}
