// Package param holds what the solver, the parameter server and the
// networks share without depending on each other: the layout of the flat
// parameter vector (Segment, ValidateLayout) and the configuration error
// that names the offending field (FieldError, ErrInvalidConfig).
//
// It imports nothing of softsync but the registry of error codes
// (rdma/errcode, a leaf), so that a network (package nn) can describe its
// parameters without importing the solver or the server.
package param

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidConfig is wrapped by every configuration or layout error of
// softsync's libraries; test with errors.Is.
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

// Segment is one contiguous range of the flat parameter vector that shares
// its solver multipliers, typically one layer's weights or one layer's
// biases. A network publishes its layout as an ordered []Segment covering
// [0, total) without gaps or overlap, so that a parameter server can shard
// the vector by range and still apply per-layer multipliers.
type Segment struct {
	Name      string  // e.g. "conv1.weight", "conv1.bias"
	Offset    int     // first element in the flat vector
	Len       int     // number of elements
	LRMult    float32 // learning-rate multiplier (Caffe's lr_mult)
	DecayMult float32 // weight-decay multiplier (Caffe's decay_mult)
	Kind      Kind    // learnable parameters (the zero value) or state
}

// Kind says how a segment of the parameter vector is updated.
type Kind uint8

const (
	// Learnable values are updated by the solver's step from their
	// gradients: learning rate, momentum, weight decay and the rules for
	// stale gradients.
	Learnable Kind = iota
	// State values are running statistics a network measures, such as
	// batch norm's running mean and variance: the gradient vector's
	// slots of a state segment carry a learner's measurement (not a
	// gradient), which the solver folds into a moving average (see
	// package sgd). They are not counted as parameters.
	State
)

// StateMomentum is the weight of an update's measurements in a state
// segment's moving average: θ' = (1 − m)·θ + m·(the mean of the
// measurements), PyTorch's batch norm momentum, 0.1.
const StateMomentum = 0.1

// String is "learnable" or "state".
func (k Kind) String() string {
	switch k {
	case Learnable:
		return "learnable"
	case State:
		return "state"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
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
		case s.Kind > State:
			return Fieldf(f("Kind"), "segment %q: unknown kind %d", s.Name, s.Kind)
		}
		next += s.Len
	}
	if next != total {
		return Fieldf("Layout", "segments cover [0, %d), want [0, %d)", next, total)
	}
	return nil
}
