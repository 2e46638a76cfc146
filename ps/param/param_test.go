package param

import (
	"errors"
	"math"
	"testing"
)

var layout = []Segment{
	{Name: "a.weight", Offset: 0, Len: 6, LRMult: 1, DecayMult: 1},
	{Name: "a.bias", Offset: 6, Len: 2, LRMult: 2, DecayMult: 0},
	{Name: "b.weight", Offset: 8, Len: 4, LRMult: 1, DecayMult: 1},
}

const total = 12

func TestValidateLayout(t *testing.T) {
	if err := ValidateLayout(layout, total); err != nil {
		t.Fatal(err)
	}
	if err := ValidateLayout(nil, 5); err != nil {
		t.Fatalf("nil layout: %v", err)
	}
	bad := func(mut func(l []Segment)) []Segment {
		l := append([]Segment(nil), layout...)
		mut(l)
		return l
	}
	for _, tc := range []struct {
		field  string
		layout []Segment
		total  int
	}{
		{"Layout[1].Offset", bad(func(l []Segment) { l[1].Offset++ }), total},
		{"Layout[2].Len", bad(func(l []Segment) { l[2].Len = 0 }), 42},
		{"Layout[0].LRMult", bad(func(l []Segment) { l[0].LRMult = -1 }), total},
		{"Layout[1].DecayMult", bad(func(l []Segment) { l[1].DecayMult = float32(math.NaN()) }), total},
		{"Layout[2].LRMult", bad(func(l []Segment) { l[2].LRMult = float32(math.Inf(1)) }), total},
		{"Layout", layout, total + 1},
		{"total", nil, 0},
	} {
		err := ValidateLayout(tc.layout, tc.total)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("want error on %s, got %v", tc.field, err)
		}
	}
}
