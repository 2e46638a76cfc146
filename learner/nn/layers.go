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

// convLayer: kernels.Engine ConvForward/ConvBackward.
type convLayer struct {
	e            kernels.Engine
	ws           *kernels.Workspace
	s            kernels.ConvShape
	w, b, dw, db []float32
}

func (l *convLayer) forward(x, y []float32) { l.e.ConvForward(l.s, x, l.w, l.b, y, l.ws) }
func (l *convLayer) backward(x, _, dy, dx []float32) {
	l.e.ConvBackward(l.s, x, l.w, dy, dx, l.dw, l.db, l.ws)
}

// fcLayer: a fully connected layer over the flattened C×H×W input.
type fcLayer struct {
	e            kernels.Engine
	n, in, out   int
	w, b, dw, db []float32
}

func (l *fcLayer) forward(x, y []float32) { l.e.FCForward(l.n, l.in, l.out, x, l.w, l.b, y) }
func (l *fcLayer) backward(x, _, dy, dx []float32) {
	l.e.FCBackward(l.n, l.in, l.out, x, l.w, dy, dx, l.dw, l.db)
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
