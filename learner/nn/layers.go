package nn

import "github.com/softsync/softsync/kernels"

// layer is one step of a Net for a fixed batch size. x is the layer's
// input, y its output (both for the whole batch), dy the gradient of the
// loss with respect to y, dx the gradient with respect to x, to be
// overwritten (nil when no earlier layer needs it). Parameter gradients
// are overwritten, never accumulated.
type layer interface {
	forward(x, y []float32)
	backward(x, y, dy, dx []float32)
}

// convLayer: kernels.Engine ConvForward/ConvBackward on channel-major
// (CNHW) activations, so that a stack of convolutions, pooling, ReLU and
// LRN passes each output on as the next input. swap is set when the input
// arrives image-major (NCHW), as the caller's images do.
type convLayer struct {
	e            kernels.Engine
	ws           *kernels.Workspace
	s            kernels.ConvShape
	w, b, dw, db []float32
	swap         *swap
}

func (l *convLayer) forward(x, y []float32) {
	if l.swap != nil {
		x = l.swap.in(x)
	}
	l.e.ConvForward(l.s, x, l.w, l.b, y, l.ws)
}

func (l *convLayer) backward(x, _, dy, dx []float32) {
	if l.swap == nil {
		l.e.ConvBackward(l.s, x, l.w, dy, dx, l.dw, l.db, l.ws)
		return
	}
	l.e.ConvBackward(l.s, l.swap.x, l.w, dy, l.swap.grad(dx), l.dw, l.db, l.ws)
	l.swap.back(dx)
}

// fcLayer: a fully connected layer over the flattened C×H×W input, which
// it needs image-major; swap is set when the input arrives channel-major.
type fcLayer struct {
	e            kernels.Engine
	n, in, out   int
	w, b, dw, db []float32
	swap         *swap
}

func (l *fcLayer) forward(x, y []float32) {
	if l.swap != nil {
		x = l.swap.in(x)
	}
	l.e.FCForward(l.n, l.in, l.out, x, l.w, l.b, y)
}

func (l *fcLayer) backward(x, _, dy, dx []float32) {
	if l.swap == nil {
		l.e.FCBackward(l.n, l.in, l.out, x, l.w, dy, dx, l.dw, l.db)
		return
	}
	l.e.FCBackward(l.n, l.in, l.out, l.swap.x, l.w, dy, l.swap.grad(dx), l.dw, l.db)
	l.swap.back(dx)
}

// swap converts a layer's input between NCHW and CNHW: in copies the
// input, a×b planes of p floats, into x as b×a planes, where the layer
// reads it in both passes; the layer writes its input gradient into dx
// (in x's order), and back copies it into the caller's order.
type swap struct {
	a, b, p int
	x, dx   []float32
}

// newSwap makes a swap for a input, shape a×in.C planes of in.H×in.W; with
// grad false the layer computes no input gradient.
func newSwap(a int, in Shape, grad bool) *swap {
	s := &swap{a: a, b: in.C, p: in.H * in.W, x: make([]float32, a*in.Len())}
	if grad {
		s.dx = make([]float32, len(s.x))
	}
	return s
}

func (s *swap) in(x []float32) []float32 {
	swapPlanes(s.x, x, s.a, s.b, s.p)
	return s.x
}

// grad is where the layer writes its input gradient: nil when the caller
// wants none.
func (s *swap) grad(dx []float32) []float32 {
	if dx == nil {
		return nil
	}
	return s.dx
}

func (s *swap) back(dx []float32) {
	if dx != nil {
		swapPlanes(dx, s.dx, s.b, s.a, s.p)
	}
}

// swapPlanes writes src, a×b planes of p floats, into dst as b×a planes:
// plane (i, j) of src becomes plane (j, i) of dst.
func swapPlanes(dst, src []float32, a, b, p int) {
	for i := range a {
		for j := range b {
			copy(dst[(j*a+i)*p:(j*a+i+1)*p], src[(i*b+j)*p:(i*b+j+1)*p])
		}
	}
}

// poolLayer keeps the arg-max mask of max pooling for the backward pass.
type poolLayer struct {
	e    kernels.Engine
	s    kernels.PoolShape
	mask []int32
}

func (l *poolLayer) forward(x, y []float32)          { l.e.PoolForward(l.s, x, y, l.mask) }
func (l *poolLayer) backward(_, _, dy, dx []float32) { l.e.PoolBackward(l.s, dy, l.mask, dx) }

// reluLayer may run in place (y aliasing x, dx aliasing dy); its backward
// pass reads only its output y.
type reluLayer struct{ e kernels.Engine }

func (l *reluLayer) forward(x, y []float32)          { l.e.ReLUForward(x, y) }
func (l *reluLayer) backward(_, y, dy, dx []float32) { l.e.ReLUBackward(y, dy, dx) }

// lrnLayer keeps the scale of the forward pass; its backward pass reads
// x and y, so the layer after it must not overwrite y in place.
type lrnLayer struct {
	e     kernels.Engine
	ws    *kernels.Workspace
	s     kernels.LRNShape
	scale []float32
}

func (l *lrnLayer) forward(x, y []float32) { l.e.LRNForward(l.s, x, y, l.scale, l.ws) }
func (l *lrnLayer) backward(x, y, dy, dx []float32) {
	l.e.LRNBackward(l.s, x, y, l.scale, dy, dx, l.ws)
}
