package kernels

// ConvPass names a call of a convolution, for ConvWorkspace.
type ConvPass int

const (
	// ConvForwardPass is ConvForward.
	ConvForwardPass ConvPass = iota
	// ConvBackwardPass is ConvBackward with dx: the weight (and bias)
	// and the input gradients.
	ConvBackwardPass
	// ConvWeightsPass is ConvBackward with dx nil (a network's first
	// layer): the weight (and bias) gradient only.
	ConvWeightsPass
)

// WorkspaceSizer is implemented by engines that say how much scratch
// memory their methods ask of a Workspace, so that callers can plan their
// memory before they run them. Both engines of this package implement
// it. The figures depend on the shape and the engine (its methods,
// instruction-set level and threads), never on the data; a Workspace
// passed only to calls of the shapes asked about grows to the largest
// figure and no further.
type WorkspaceSizer interface {
	// ConvWorkspace returns the floats that one call of pass on the
	// convolution s (its groups included) asks of its Workspace.
	ConvWorkspace(s ConvShape, pass ConvPass) int
	// LRNWorkspace returns the floats that LRNForward and LRNBackward
	// of s each ask of their Workspace.
	LRNWorkspace(s LRNShape) int
}

var (
	_ WorkspaceSizer = reference{}
)

// defaultConvBudget bounds, in floats, the column matrix of one
// convolution GEMM of the native engine, which decides how many images
// it covers; ConvWorkspace's estimate assumes it.
const defaultConvBudget = 1 << 21

// ConvWorkspace returns the floats a call of pass on the convolution s
// asks of its Workspace on e: e's own figure when e is a WorkspaceSizer;
// for any other engine (or nil) an estimate, the column matrices of a
// convolution by GEMMs over groups of images of at most 8 MiB of columns
// (defaultConvBudget), with a group's output and, backward, the
// columns of the gradient.
func ConvWorkspace(e Engine, s ConvShape, pass ConvPass) int {
	if z, ok := e.(WorkspaceSizer); ok {
		return z.ConvWorkspace(s, pass)
	}
	sub := s.groupShape()
	k, px := sub.C*s.KH*s.KW, s.OutH()*s.OutW()
	g := min(s.N, max(1, defaultConvBudget/max(k*px, 1)))
	if pass == ConvForwardPass {
		return g * px * (k + sub.OC)
	}
	return g * px * (2*k + sub.OC)
}

// LRNWorkspace returns the floats LRNForward and LRNBackward of s ask of
// their Workspace on e: e's own figure when e is a WorkspaceSizer; for
// any other engine (or nil) s.Len(), a tensor's worth.
func LRNWorkspace(e Engine, s LRNShape) int {
	if z, ok := e.(WorkspaceSizer); ok {
		return z.LRNWorkspace(s)
	}
	return s.Len()
}

// ConvWorkspace returns the column matrix of one image (and group),
// forward, and that and its gradient's, backward (see ConvForward and
// ConvBackward).
func (reference) ConvWorkspace(s ConvShape, pass ConvPass) int {
	sub := s.groupShape()
	n := sub.C * s.KH * s.KW * s.OutH() * s.OutW()
	if pass == ConvForwardPass {
		return n
	}
	return 2 * n
}

// LRNWorkspace returns s.Len(): the squares of x forward, dy·y/scale
// backward.
func (reference) LRNWorkspace(s LRNShape) int { return s.Len() }
