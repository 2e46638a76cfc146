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
//
// Grouped convolution (Caffe's group, PyTorch's groups): with Group = G >
// 1, C and OC must be divisible by G, and output channels [g·OC/G,
// (g+1)·OC/G) read only input channels [g·C/G, (g+1)·C/G), through
// weights [OC][C/G][KH][KW] (group g's weights are the g-th block of
// OC/G·C/G·KH·KW floats). Each group is an ungrouped convolution over a
// block of channels: contiguous in CNHW, a block of planes per image in
// NCHW; engines run the groups one after the other.
type ConvShape struct {
	N, C, H, W       int    // batch, input channels, input height and width
	OC, KH, KW       int    // output channels, kernel height and width
	PadH, PadW       int    // zero padding on each side
	StrideH, StrideW int    // strides, ≥ 1
	Layout           Layout // order of x, dx, y and dy (NCHW by default)
	Group            int    // channel groups G; 0 or 1: ungrouped
}

// Groups returns the number of channel groups: Group, or 1 when Group is
// 0.
func (s ConvShape) Groups() int { return max(s.Group, 1) }

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

// WeightLen is the number of elements of w (OC×(C/G)×KH×KW).
func (s ConvShape) WeightLen() int { return s.OC * (s.C / s.Groups()) * s.KH * s.KW }

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

// LRNRegion selects the window of local response normalisation.
type LRNRegion int

const (
	// WithinChannel is Caffe's WITHIN_CHANNEL: a Size×Size window of
	// pixels of the same plane, scale = K + Alpha/Size²·Σx². The zero
	// value.
	WithinChannel LRNRegion = iota
	// AcrossChannels is Caffe's ACROSS_CHANNELS, which is PyTorch's
	// LocalResponseNorm(Size, Alpha, Beta, K): the same pixel of channels
	// c−⌊Size/2⌋ … c+⌊Size/2⌋ of the same image (channels outside [0, C)
	// count as zeros), scale = K + Alpha/Size·Σx².
	AcrossChannels
)

// LRNShape describes Caffe's local response normalisation over an
// N×C×H×W tensor: scale = K + Alpha/norm·Σx² over a window of Size
// elements per axis it spans (Size odd; norm = Size² within a channel,
// Size across channels, see LRNRegion), y = x·scale^(−Beta). Caffe's
// layer uses K = 1.
//
// A CNHW tensor (see Layout) is normalised within channels as an NCHW one
// with N and C swapped, and across channels as one image (N = 1) of C
// channels of N·H rows: then each channel's H×W planes of all images form
// one (N·H)×W plane, and the same pixel of neighbouring channels lies
// N·H·W floats apart, as in NCHW.
type LRNShape struct {
	N, C, H, W int
	Size       int
	Alpha      float32
	Beta       float32
	K          float32
	Region     LRNRegion
}

// Len is the number of elements of x, y and scale.
func (s LRNShape) Len() int { return s.N * s.C * s.H * s.W }

// norm is the divisor of Alpha: the number of elements of a full window.
func (s LRNShape) norm() float32 {
	if s.Region == AcrossChannels {
		return float32(s.Size)
	}
	return float32(s.Size * s.Size)
}

// Dropout describes inverted dropout over a tensor of n elements: element
// i is multiplied by its mask value, 1/(1−Ratio) if it is kept or 0 if it
// is dropped (so a dropped element becomes 0 with its sign, or NaN if it
// is infinite or NaN, as with PyTorch's x·mask), kept or dropped as a pure
// function of (Seed, Offset+i), so that backward recomputes the forward's
// mask instead of storing it, and a tensor split into parts (each with
// the Offset of its first element) gets the mask it gets whole. The mask
// is the same in every engine, at every instruction-set level and for
// every thread count:
//
//	c     = Offset + i                                  (mod 2^64)
//	key   = uint32(fmix64(fmix64(Seed) + c>>32))
//	h     = triple32(uint32(c) XOR key)
//	kept  = h ≥ uint32(Ratio·2^32)
//
// where fmix64 is SplitMix64's finaliser (z ^= z>>30; z *= 0xbf58476d1ce4e5b9;
// z ^= z>>27; z *= 0x94d049bb133111eb; z ^= z>>31) and triple32 is Chris
// Wellons's 32-bit hash (x ^= x>>17; x *= 0xed5ad4bb; x ^= x>>11;
// x *= 0xac4c1b51; x ^= x>>15; x *= 0x31848bab; x ^= x>>14), all in
// unsigned wrap-around arithmetic. The scale 1/(1−Ratio) is computed in
// float32.
// Each element is kept with probability 1 − Ratio (within 2^−32),
// independently of its neighbours as far as statistical tests tell.
type Dropout struct {
	Ratio  float32 // probability of dropping, in [0, 1)
	Seed   uint64
	Offset uint64 // index of x[0] in the stream of (Seed, index) pairs
}

// threshold returns the smallest 32-bit hash that keeps an element.
func (d Dropout) threshold() uint32 { return uint32(float64(d.Ratio) * (1 << 32)) }

// scale returns the factor kept elements are multiplied by.
func (d Dropout) scale() float32 { return 1 / (1 - d.Ratio) }

// BNShape describes batch normalisation per channel over N×HW values: x
// is N×C×HW, channel c's values the N planes x[(n·C+c)·HW : (n·C+c+1)·HW].
// A CNHW tensor is passed as N = 1, HW = N·H·W (each channel's planes are
// then one contiguous run); after a fully connected layer, features are
// channels: N rows, HW = 1. Eps is added to the variance before its
// square root (PyTorch's default is 1e-5).
type BNShape struct {
	N, C, HW int
	Eps      float32
}

// Len is the number of elements of x, y, dy and dx.
func (s BNShape) Len() int { return s.N * s.C * s.HW }

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

// Size returns the floats w holds: the most any Floats call on it has
// asked for (0 for a new Workspace). Memory plans (WorkspaceSizer) are
// checked against it.
func (w *Workspace) Size() int { return cap(w.buf) }
