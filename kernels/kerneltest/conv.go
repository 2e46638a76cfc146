package kerneltest

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/softsync/softsync/kernels"
)

// convShapes covers stride, padding (also wider than the kernel),
// non-square kernels and images, 1×1 kernels (also strided and padded), output rows of whole and
// partial 8-pixel vectors, output planes of whole and partial 16-pixel
// vectors, channel counts off the kernels' blocks of 4 and 8, batches
// large enough for an engine to split into chunks, and channel groups.
var convShapes = []kernels.ConvShape{
	{N: 2, C: 3, H: 7, W: 6, OC: 4, KH: 3, KW: 2, PadH: 1, PadW: 0, StrideH: 2, StrideW: 1},
	{N: 3, C: 1, H: 8, W: 8, OC: 5, KH: 5, KW: 5, StrideH: 1, StrideW: 1},
	{N: 2, C: 4, H: 6, W: 5, OC: 3, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1},
	{N: 1, C: 2, H: 5, W: 5, OC: 2, KH: 1, KW: 1, StrideH: 1, StrideW: 1},
	{N: 3, C: 9, H: 9, W: 10, OC: 6, KH: 1, KW: 1, PadH: 1, PadW: 1, StrideH: 2, StrideW: 3},
	{N: 2, C: 10, H: 12, W: 11, OC: 5, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 2, StrideW: 2},
	{N: 4, C: 3, H: 9, W: 9, OC: 6, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 3, StrideW: 3},
	{N: 1, C: 1, H: 3, W: 3, OC: 1, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
	{N: 9, C: 8, H: 12, W: 12, OC: 10, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1},
	{N: 17, C: 3, H: 10, W: 10, OC: 7, KH: 3, KW: 3, StrideH: 1, StrideW: 1},
	{N: 3, C: 5, H: 10, W: 16, OC: 9, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
	{N: 2, C: 2, H: 5, W: 19, OC: 6, KH: 2, KW: 4, PadH: 3, StrideH: 1, StrideW: 1},
	{N: 2, C: 5, H: 14, W: 13, OC: 9, KH: 5, KW: 4, StrideH: 1, StrideW: 1},
	{N: 3, C: 6, H: 11, W: 37, OC: 13, KH: 3, KW: 5, PadH: 1, PadW: 2, StrideH: 1, StrideW: 1},
	// At least 1024 taps on a plane narrower than 16 pixels (the native
	// engine's AVX-512 level runs the input gradient on the GEMMs, the
	// forward pass and the weight gradient direct), 1025 taps of a 5 x 5
	// kernel on 17-pixel rows and 32-pixel rows (where 512-bit FMAs run at
	// half rate, the forward pass on the AVX2 direct kernels).
	{N: 2, C: 116, H: 9, W: 9, OC: 6, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
	{N: 2, C: 41, H: 6, W: 17, OC: 5, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1},
	{N: 1, C: 2, H: 4, W: 32, OC: 3, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
	// 3×3, stride 1, at least 64 channels each way (the native engine's
	// AVX2 level runs them on Winograd's F(2×2, 3×3), on planes of 16
	// pixels or more wide F(4×4, 3×3)): odd planes (the last row and
	// column of output tiles cropped) and even ones, padding 1 and 0, a
	// non-square plane, and a 30×30 plane of one image
	// (TestNativeConvPlans runs blocks that end inside images); 5×5 of
	// 48 to 64 channels (F(2×2, 5×5)) padded by 2 and by 0, on odd planes.
	{N: 2, C: 64, H: 7, W: 7, OC: 64, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
	{N: 2, C: 64, H: 13, W: 13, OC: 72, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
	{N: 2, C: 72, H: 14, W: 14, OC: 64, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
	{N: 2, C: 64, H: 16, W: 15, OC: 65, KH: 3, KW: 3, StrideH: 1, StrideW: 1},
	{N: 1, C: 64, H: 30, W: 30, OC: 64, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
	// Strided kernels over few channels (the native engine's AVX2 level
	// rewrites them to stride 1 by space to depth): ResNet-18's conv1 in
	// miniature (7×7, stride 2, padding 3, odd planes), AlexNet's (11×11,
	// stride 4, planes of 19 and 23 pixels; 64 output channels, whose
	// rewritten 3×3 kernel runs on Winograd in every pass), and a
	// rectangular kernel of strides 4 and 2, padded on one axis only,
	// whose last input row no output reads.
	{N: 2, C: 3, H: 15, W: 13, OC: 5, KH: 7, KW: 7, PadH: 3, PadW: 3, StrideH: 2, StrideW: 2},
	{N: 2, C: 3, H: 19, W: 23, OC: 64, KH: 11, KW: 11, StrideH: 4, StrideW: 4},
	{N: 2, C: 2, H: 13, W: 11, OC: 4, KH: 8, KW: 6, PadW: 1, StrideH: 4, StrideW: 2},
	{N: 1, C: 48, H: 9, W: 11, OC: 64, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1},
	{N: 2, C: 48, H: 10, W: 9, OC: 64, KH: 5, KW: 5, StrideH: 1, StrideW: 1},
	// Grouped: AlexNet's conv2 in miniature, strided, and one group per
	// channel (depthwise).
	{N: 3, C: 8, H: 9, W: 9, OC: 10, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1, Group: 2},
	{N: 3, C: 6, H: 9, W: 8, OC: 9, KH: 3, KW: 2, PadH: 1, StrideH: 2, StrideW: 1, Group: 3},
	{N: 2, C: 4, H: 6, W: 7, OC: 4, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1, Group: 4},
}

func testConv(t *testing.T, e kernels.Engine) {
	for _, layout := range []kernels.Layout{kernels.NCHW, kernels.CNHW} {
		for i, s := range convShapes {
			s.Layout = layout
			t.Run(fmt.Sprintf("%d:%+v", i, s), func(t *testing.T) { testConvShape(t, e, s, uint64(100+i)) })
		}
	}
}

// convWant holds the naive results of one shape and seed: forward with
// and without bias, and the gradients.
type convWant struct {
	y, mag [2][]float64
	g      naiveGrads
}

// convWants caches convWant by shape (layout cleared: the naive loops
// work in NCHW) and seed: the same shapes run on every engine, level and
// plan, and the naive loops dominate the suite's time.
var convWants sync.Map

func naiveConv(s kernels.ConvShape, seed uint64, x, w, b, dy []float32) *convWant {
	s.Layout = kernels.NCHW
	key := fmt.Sprint(s, seed)
	if c, ok := convWants.Load(key); ok {
		return c.(*convWant)
	}
	c := &convWant{g: naiveConvBackward(s, x, w, dy)}
	c.y[0], c.mag[0] = naiveConvForward(s, x, w, b)
	c.y[1], c.mag[1] = naiveConvForward(s, x, w, nil)
	convWants.Store(key, c)
	return c
}

// testConvShape checks one shape against the naive loops, which work in
// NCHW: inputs are drawn in NCHW, converted to the shape's layout for the
// engine, and its outputs converted back.
func testConvShape(t *testing.T, e kernels.Engine, s kernels.ConvShape, seed uint64) {
	nativeOnly(t, s.N*s.OC*s.OutH()*s.OutW()*s.C/s.Groups()*s.KH*s.KW)
	r := newRand(seed)
	x, w, b := uniform(r, s.InputLen()), uniform(r, s.WeightLen()), uniform(r, s.OC)
	dy := uniform(r, s.OutputLen())
	naive := naiveConv(s, seed, x, w, b, dy)
	oh, ow := s.OutH(), s.OutW()
	in := func(v []float32) []float32 { return toLayout(s.Layout, s.N, s.C, s.H*s.W, v) }
	out := func(v []float32) []float32 { return toLayout(s.Layout, s.N, s.OC, oh*ow, v) }
	xl := in(x)
	ws := dirtyWorkspace()
	for i, bias := range [][]float32{b, nil} {
		want, mag := naive.y[i], naive.mag[i]
		y := output(s.OutputLen())
		frz := freeze("x", xl, "w", w, "b", bias)
		e.ConvForward(s, xl, w, bias, y, ws)
		frz.check(t, "ConvForward")
		checkTail(t, "y", y, s.OutputLen())
		approx(t, fmt.Sprintf("y (bias %v)", bias != nil), fromLayout(s.Layout, s.N, s.OC, oh*ow, y), want, mag, sumTol(s.C*s.KH*s.KW))
	}

	g := naive.g
	dyl := out(dy)
	dx, dw, db := output(s.InputLen()), output(s.WeightLen()), output(s.OC)
	frz := freeze("x", xl, "w", w, "dy", dyl)
	e.ConvBackward(s, xl, w, dyl, dx, dw, db, ws)
	frz.check(t, "ConvBackward")
	checkTail(t, "dx", dx, s.InputLen())
	checkTail(t, "dw", dw, s.WeightLen())
	checkTail(t, "db", db, s.OC)
	p := oh * ow
	approx(t, "dx", fromLayout(s.Layout, s.N, s.C, s.H*s.W, dx), g.dx, g.dxMag, sumTol(s.OC*s.KH*s.KW))
	approx(t, "dw", dw, g.dw, g.dwMag, sumTol(s.N*p))
	approx(t, "db", db, g.db, g.dbMag, sumTol(s.N*p))

	// dx and db are optional: dw alone, and dw and db without dx (a
	// first layer's), must still be right.
	dw2, db2 := output(s.WeightLen()), output(s.OC)
	e.ConvBackward(s, xl, w, dyl, nil, dw2, nil, ws)
	approx(t, "dw (dx, db nil)", dw2, g.dw, g.dwMag, sumTol(s.N*p))
	e.ConvBackward(s, xl, w, dyl, nil, dw2, db2, ws)
	approx(t, "dw (dx nil)", dw2, g.dw, g.dwMag, sumTol(s.N*p))
	approx(t, "db (dx nil)", db2, g.db, g.dbMag, sumTol(s.N*p))
}

// toLayout returns a copy of v, n images of c planes of hw floats in NCHW
// order, in layout l.
func toLayout(l kernels.Layout, n, c, hw int, v []float32) []float32 {
	if l == kernels.NCHW {
		return append([]float32(nil), v[:n*c*hw]...)
	}
	d := make([]float32, n*c*hw)
	for i := range n {
		for j := range c {
			copy(d[(j*n+i)*hw:(j*n+i+1)*hw], v[(i*c+j)*hw:])
		}
	}
	return d
}

// fromLayout is the inverse of toLayout.
func fromLayout(l kernels.Layout, n, c, hw int, v []float32) []float32 {
	if l == kernels.NCHW {
		return v[:n*c*hw]
	}
	return toLayout(kernels.CNHW, c, n, hw, v) // swapping the outer axes twice is the identity
}

// dirtyWorkspace returns a workspace whose memory is full of NaNs, so that
// an engine relying on zeroed scratch memory fails.
func dirtyWorkspace() *kernels.Workspace {
	ws := &kernels.Workspace{}
	buf := ws.Floats(1 << 16)
	for i := range buf {
		buf[i] = float32(math.NaN())
	}
	return ws
}

func testConvGradient(t *testing.T, e kernels.Engine) {
	for i, s := range []kernels.ConvShape{
		{N: 2, C: 2, H: 5, W: 6, OC: 3, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 2, StrideW: 1},
		{N: 3, C: 3, H: 6, W: 6, OC: 2, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1},
		{N: 3, C: 2, H: 6, W: 9, OC: 5, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1, Layout: kernels.CNHW},
		{N: 2, C: 4, H: 5, W: 6, OC: 6, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1, Group: 2},
		{N: 2, C: 6, H: 6, W: 5, OC: 3, KH: 3, KW: 3, PadH: 1, StrideH: 2, StrideW: 1, Layout: kernels.CNHW, Group: 3},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRand(uint64(200 + i))
			x, w, b := uniform(r, s.InputLen()), uniform(r, s.WeightLen()), uniform(r, s.OC)
			g := uniform(r, s.OutputLen())
			ws := &kernels.Workspace{}
			y := make([]float32, s.OutputLen())
			loss := func() float64 {
				e.ConvForward(s, x, w, b, y, ws)
				return dot64(g, y)
			}
			dx, dw, db := make([]float32, s.InputLen()), make([]float32, s.WeightLen()), make([]float32, s.OC)
			e.ConvBackward(s, x, w, g, dx, dw, db, ws)
			gradCheck(t, "dx", r, x, dx, loss, 1e-2, 30, 1e-2, 0.1)
			gradCheck(t, "dw", r, w, dw, loss, 1e-2, 30, 1e-2, 0.1)
			gradCheck(t, "db", r, b, db, loss, 1e-2, 30, 1e-2, 0.1)
		})
	}
}
