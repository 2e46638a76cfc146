package nn

import (
	"fmt"
	"slices"
)

// WithClasses returns s with n outputs: its last fully connected layer
// given n outputs (its weights and bias resized, their fillers kept), for
// a network whose classes come from the data, as the built-in ImageNet
// networks' do. It returns s itself when it has n outputs already, and an
// error wrapping ErrSpec, naming the network and both numbers, when it
// has no fully connected layer or the layers after it do not pass its
// outputs on to the loss unchanged.
func (s *Spec) WithClasses(n int) (*Spec, error) {
	if n == s.Classes() {
		return s, nil
	}
	last := -1
	for i := range s.Layers {
		if s.Layers[i].Kind == FC {
			last = i
		}
	}
	if n < 1 || last < 0 {
		return nil, fmt.Errorf("%w: %s has %d outputs and no fully connected layer to give %d", ErrSpec, s.Name, s.Classes(), n)
	}
	c := *s
	c.Layers = slices.Clone(s.Layers)
	c.Layers[last].Out = n
	out, err := Parse(s.File, c.Format())
	if err != nil {
		return nil, fmt.Errorf("%s with %d classes: %w", s.Name, n, err)
	}
	if out.Classes() != n {
		return nil, fmt.Errorf("%w: %s with %d outputs of layer %s has %d outputs, not %d", ErrSpec, s.Name, n, s.Layers[last].Name, out.Classes(), n)
	}
	out.Name, out.File = s.Name, s.File
	return out, nil
}
