package kernels

// Layout is the memory order of a convolution's activations (x, dx, y
// and dy alike).
type Layout int

const (
	// NCHW is image-major: element (n, c, h, w) of a tensor with N images
	// of C channels of H×W pixels is at ((n·C+c)·H+h)·W+w. The zero value.
	NCHW Layout = iota
	// CNHW is channel-major: element (n, c, h, w) is at ((c·N+n)·H+h)·W+w.
	// Each H×W plane is still contiguous and a CNHW tensor is laid out as
	// an NCHW one with N and C swapped, so per-plane kernels (pooling,
	// ReLU, within-channel LRN) run on it with their shape's N and C
	// swapped. A stack of convolutions in CNHW passes each layer's output
	// to the next with no reordering. With C = 1 or N = 1 both layouts are
	// the same memory.
	CNHW
)

// ConvShape describes a batched 2-D convolution. Output size follows Caffe:
// OH = (H + 2·PadH − KH)/StrideH + 1 (floor), likewise OW.
type ConvShape struct {
	N, C, H, W       int    // batch, input channels, input height and width
	OC, KH, KW       int    // output channels, kernel height and width
	PadH, PadW       int    // zero padding on each side
	StrideH, StrideW int    // strides, ≥ 1
	Layout           Layout // order of x, dx, y and dy (NCHW by default)
}

// planes returns the strides, in floats, between the H×W planes of
// consecutive images and of consecutive channels, of x (C channels) and
// of y (OC channels) in the shape's layout.
func (s ConvShape) planes() (xn, xc, yn, yc int) {
	hw, p := s.H*s.W, s.OutH()*s.OutW()
	if s.Layout == CNHW {
		return hw, s.N * hw, p, s.N * p
	}
	return s.C * hw, hw, s.OC * p, p
}

// OutH is the output height.
func (s ConvShape) OutH() int { return (s.H+2*s.PadH-s.KH)/s.StrideH + 1 }

// OutW is the output width.
func (s ConvShape) OutW() int { return (s.W+2*s.PadW-s.KW)/s.StrideW + 1 }

// InputLen is the number of elements of x (N×C×H×W, either layout).
func (s ConvShape) InputLen() int { return s.N * s.C * s.H * s.W }

// WeightLen is the number of elements of w (OC×C×KH×KW).
func (s ConvShape) WeightLen() int { return s.OC * s.C * s.KH * s.KW }

// OutputLen is the number of elements of y (N×OC×OH×OW).
func (s ConvShape) OutputLen() int { return s.N * s.OC * s.OutH() * s.OutW() }

// PoolMode selects max or average pooling.
type PoolMode int

const (
	// MaxPool takes each window's largest input (the first in row-major
	// order on ties) and records its position for the backward pass.
	MaxPool PoolMode = iota
	// AvgPool averages each window over its size clipped to the padded
	// input, as Caffe does.
	AvgPool
)

// PoolShape describes batched 2-D pooling. Output size follows Caffe's
// ceil rounding: OH = ceil((H + 2·PadH − KH)/StrideH) + 1, reduced by one if
// the last window would start inside the bottom padding; likewise OW.
// Average pooling divides by the window size clipped to the padded input,
// as Caffe does.
type PoolShape struct {
	Mode             PoolMode
	N, C, H, W       int
	KH, KW           int
	PadH, PadW       int
	StrideH, StrideW int
}

// OutH is the output height (Caffe's ceil rounding).
func (s PoolShape) OutH() int { return poolOut(s.H, s.KH, s.PadH, s.StrideH) }

// OutW is the output width (Caffe's ceil rounding).
func (s PoolShape) OutW() int { return poolOut(s.W, s.KW, s.PadW, s.StrideW) }

func poolOut(in, k, pad, stride int) int {
	o := (in+2*pad-k+stride-1)/stride + 1
	if pad > 0 && (o-1)*stride >= in+pad {
		o--
	}
	return o
}

// InputLen is the number of elements of x (N×C×H×W).
func (s PoolShape) InputLen() int { return s.N * s.C * s.H * s.W }

// OutputLen is the number of elements of y (N×C×OH×OW).
func (s PoolShape) OutputLen() int { return s.N * s.C * s.OutH() * s.OutW() }

// LRNShape describes Caffe's LRN in WITHIN_CHANNEL mode over an N×C×H×W
// tensor: a Size×Size window (Size odd), scale = K + Alpha/Size²·Σx²,
// y = x·scale^(−Beta). Caffe's layer uses K = 1.
type LRNShape struct {
	N, C, H, W int
	Size       int
	Alpha      float32
	Beta       float32
	K          float32
}

// Len is the number of elements of x, y and scale.
func (s LRNShape) Len() int { return s.N * s.C * s.H * s.W }

// Workspace is scratch memory owned by one caller (one goroutine) and
// reused across calls, so that a training step allocates nothing once the
// workspace has grown to the largest layer. The zero value is ready to use.
type Workspace struct {
	buf []float32
}

// Floats returns a scratch slice of n elements, valid until the next call
// on the same Workspace. Its contents are unspecified.
func (w *Workspace) Floats(n int) []float32 {
	if cap(w.buf) < n {
		w.buf = make([]float32, n)
	}
	return w.buf[:n]
}
