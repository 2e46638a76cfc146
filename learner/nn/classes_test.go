package nn

import (
	"errors"
	"strings"
	"testing"
)

func TestWithClasses(t *testing.T) {
	s, err := Builtin("lenet")
	if err != nil {
		t.Fatal(err)
	}
	if same, err := s.WithClasses(10); err != nil || same != s {
		t.Fatalf("10 classes: %v, %p ≠ %p", err, same, s)
	}
	c, err := s.WithClasses(7)
	if err != nil {
		t.Fatal(err)
	}
	// ip2 is 500 → 10: 3 outputs fewer take 3·500 weights and 3 biases.
	if c.Classes() != 7 || c.NumParams() != s.NumParams()-3*501 || c.Name != s.Name || s.Classes() != 10 {
		t.Fatalf("%s: %d classes, %d parameters (was %d); the original has %d", c.Name, c.Classes(), c.NumParams(), s.NumParams(), s.Classes())
	}
	last := c.Layers[len(c.Layers)-2]
	if last.Kind != FC || last.Out != 7 || last.Weight != s.Layers[len(s.Layers)-2].Weight {
		t.Fatalf("last layer %+v", last)
	}
	if _, err := s.WithClasses(0); !errors.Is(err, ErrSpec) {
		t.Fatalf("0 classes: %v", err)
	}
	conv, err := Parse("allconv.net", []byte("input channels=1 height=4 width=4\nconv c out=3 kernel=4\nsoftmax loss\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conv.WithClasses(5); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "allconv has 3 outputs") {
		t.Fatalf("no fc layer: %v", err)
	}
}
