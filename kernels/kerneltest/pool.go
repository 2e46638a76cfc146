package kerneltest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/kernels"
)

// testPoolShape checks output sizes against values worked out by hand from
// Caffe's rule OH = ceil((H + 2P − K)/S) + 1, minus one if the last window
// starts inside the bottom padding.
func testPoolShape(t *testing.T) {
	for _, c := range []struct{ h, k, s, p, want int }{
		{24, 2, 2, 0, 12}, // LeNet pool1
		{8, 2, 2, 0, 4},   // LeNet pool2
		{32, 3, 2, 0, 16}, // cifar10_full pool1: ceil(29/2)+1
		{16, 3, 2, 0, 8},  // pool2: ceil(13/2)+1
		{8, 3, 2, 0, 4},   // pool3: ceil(5/2)+1
		{7, 3, 2, 0, 3},
		{5, 2, 2, 0, 3}, // last window hangs over the edge
		{8, 3, 2, 1, 5},
		{5, 3, 2, 1, 3},
		{3, 3, 3, 2, 2}, // last window would start in the padding
		{1, 1, 1, 0, 1},
	} {
		s := kernels.PoolShape{H: c.h, W: c.h, KH: c.k, KW: c.k, StrideH: c.s, StrideW: c.s, PadH: c.p, PadW: c.p}
		if s.OutH() != c.want || s.OutW() != c.want {
			t.Errorf("H=%d K=%d S=%d P=%d: output %d×%d, want %d", c.h, c.k, c.s, c.p, s.OutH(), s.OutW(), c.want)
		}
	}
}

var poolShapes = []kernels.PoolShape{
	{N: 2, C: 3, H: 7, W: 7, KH: 3, KW: 3, StrideH: 2, StrideW: 2},
	{N: 1, C: 2, H: 6, W: 5, KH: 2, KW: 2, StrideH: 2, StrideW: 2},
	{N: 2, C: 2, H: 8, W: 8, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 2, StrideW: 2},
	{N: 1, C: 3, H: 5, W: 6, KH: 3, KW: 2, PadH: 1, PadW: 1, StrideH: 2, StrideW: 1},
	{N: 2, C: 1, H: 3, W: 3, KH: 3, KW: 3, PadH: 2, PadW: 2, StrideH: 3, StrideW: 3},
	{N: 3, C: 4, H: 16, W: 16, KH: 3, KW: 3, StrideH: 2, StrideW: 2},
	{N: 2, C: 5, H: 24, W: 24, KH: 2, KW: 2, StrideH: 2, StrideW: 2},
	{N: 1, C: 1, H: 4, W: 4, KH: 1, KW: 1, StrideH: 1, StrideW: 1},
	{N: 2, C: 2, H: 9, W: 12, KH: 5, KW: 5, StrideH: 3, StrideW: 3}, // two taps past the right edge
	{N: 1, C: 2, H: 5, W: 8, KH: 3, KW: 3, PadH: 1, StrideH: 2, StrideW: 2},
	// Horizontal padding (the native engine's padded flat path): ResNet's
	// 3×3/2 pooling with padding 1 on a smaller plane, odd sizes, padding
	// 2, stride 1, and planes of several bands of rows.
	{N: 2, C: 3, H: 28, W: 28, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 2, StrideW: 2},
	{N: 1, C: 2, H: 13, W: 11, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 2, StrideW: 2},
	{N: 1, C: 2, H: 9, W: 10, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
	{N: 2, C: 2, H: 11, W: 9, KH: 4, KW: 5, PadH: 2, PadW: 2, StrideH: 2, StrideW: 2},
	{N: 1, C: 2, H: 7, W: 13, KH: 3, KW: 3, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1},
	{N: 1, C: 1, H: 150, W: 40, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 2, StrideW: 2},
	{N: 1, C: 1, H: 70, W: 61, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
	{N: 1, C: 2, H: 9, W: 7, KH: 2, KW: 3, PadW: 1, StrideH: 2, StrideW: 3},
}

// tied returns n values drawn from {−∞, −1, 0, 1}, so that most windows
// of max pooling hold ties and some are −∞ throughout.
func tied(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		if k := r.IntN(6); k == 0 {
			x[i] = float32(math.Inf(-1))
		} else {
			x[i] = float32(min(k, 3) - 2)
		}
	}
	return x
}

func withMode(s kernels.PoolShape, m kernels.PoolMode) kernels.PoolShape { s.Mode = m; return s }

func modeName(m kernels.PoolMode) string {
	if m == kernels.MaxPool {
		return "max"
	}
	return "avg"
}

// naivePoolBackward scatters dy through the windows of naivePoolForward:
// to the arg-max for max pooling, spread evenly (1/window size) for average
// pooling.
func naivePoolBackward(s kernels.PoolShape, dy []float32, arg []int) []float64 {
	dx := make([]float64, s.InputLen())
	oh, ow := s.OutH(), s.OutW()
	for q := 0; q < s.N*s.C; q++ {
		for py := 0; py < oh; py++ {
			for px := 0; px < ow; px++ {
				o := (q*oh+py)*ow + px
				if s.Mode == kernels.MaxPool {
					dx[q*s.H*s.W+arg[o]] += float64(dy[o])
					continue
				}
				hs, ws := py*s.StrideH-s.PadH, px*s.StrideW-s.PadW
				he, we := min(hs+s.KH, s.H+s.PadH), min(ws+s.KW, s.W+s.PadW)
				g := float64(dy[o]) / float64((he-hs)*(we-ws))
				for h := max(hs, 0); h < min(he, s.H); h++ {
					for w := max(ws, 0); w < min(we, s.W); w++ {
						dx[(q*s.H+h)*s.W+w] += g
					}
				}
			}
		}
	}
	return dx
}

func abs32(x []float32) []float32 {
	a := make([]float32, len(x))
	for i, v := range x {
		a[i] = float32(math.Abs(float64(v)))
	}
	return a
}

func abs64(x []float64) []float64 {
	a := make([]float64, len(x))
	for i, v := range x {
		a[i] = math.Abs(v)
	}
	return a
}

func testPool(t *testing.T, e kernels.Engine) {
	for i, s0 := range poolShapes {
		for _, mode := range []kernels.PoolMode{kernels.MaxPool, kernels.AvgPool} {
			s := withMode(s0, mode)
			t.Run(fmt.Sprintf("%d/%s", i, modeName(mode)), func(t *testing.T) {
				r := newRand(uint64(300 + i))
				x := uniform(r, s.InputLen())
				want, arg := naivePoolForward(s, x)
				y := output(s.OutputLen())
				mask := make([]int32, s.OutputLen()+tail)
				for i := range mask {
					mask[i] = -7
				}
				in := freeze("x", x)
				e.PoolForward(s, x, y, mask)
				in.check(t, "PoolForward")
				checkTail(t, "y", y, s.OutputLen())
				dy := uniform(r, s.OutputLen())
				wantDx := naivePoolBackward(s, dy, arg)
				if mode == kernels.MaxPool {
					approx(t, "y", y, want, nil, 0) // a copy: exact
					for o := range arg {
						if int(mask[o]) != arg[o] {
							t.Fatalf("mask[%d] = %d, want %d", o, mask[o], arg[o])
						}
					}
					for o := s.OutputLen(); o < len(mask); o++ {
						if mask[o] != -7 {
							t.Fatalf("mask[%d] past the required length was written", o)
						}
					}
				} else {
					mag, _ := naivePoolForward(s, abs32(x))
					approx(t, "y", y, want, mag, 1e-6)
				}
				dx := output(s.InputLen())
				in = freeze("dy", dy)
				e.PoolBackward(s, dy, mask, dx)
				in.check(t, "PoolBackward")
				checkTail(t, "dx", dx, s.InputLen())
				approx(t, "dx", dx, wantDx, naivePoolBackward(s, abs32(dy), arg), 1e-6)
			})
		}
		// Max pooling over ties and −∞: the first arg-max in row-major
		// order, never one in the padding.
		s := withMode(s0, kernels.MaxPool)
		t.Run(fmt.Sprintf("%d/max-ties", i), func(t *testing.T) {
			r := newRand(uint64(350 + i))
			x, dy := tied(r, s.InputLen()), uniform(r, s.OutputLen())
			want, arg := naivePoolForward(s, x)
			y, mask, dx := make([]float32, s.OutputLen()), make([]int32, s.OutputLen()), output(s.InputLen())
			e.PoolForward(s, x, y, mask)
			for o := range arg {
				if y[o] != float32(want[o]) || int(mask[o]) != arg[o] {
					t.Fatalf("y[%d] = %g (arg %d), want %g (arg %d)", o, y[o], mask[o], want[o], arg[o])
				}
			}
			e.PoolBackward(s, dy, mask, dx)
			checkTail(t, "dx", dx, s.InputLen())
			approx(t, "dx", dx, naivePoolBackward(s, dy, arg), naivePoolBackward(s, abs32(dy), arg), 1e-6)
		})
	}
}

func testPoolGradient(t *testing.T, e kernels.Engine) {
	for i, s0 := range []kernels.PoolShape{poolShapes[0], poolShapes[3], poolShapes[4]} {
		for _, mode := range []kernels.PoolMode{kernels.MaxPool, kernels.AvgPool} {
			s := withMode(s0, mode)
			t.Run(fmt.Sprintf("%d/%s", i, modeName(mode)), func(t *testing.T) {
				r := newRand(uint64(400 + i))
				// Distinct inputs 0.03 apart: no arg-max changes within a step of 0.01.
				x := distinct(r, s.InputLen(), 0.03)
				g := uniform(r, s.OutputLen())
				y, mask := make([]float32, s.OutputLen()), make([]int32, s.OutputLen())
				loss := func() float64 {
					e.PoolForward(s, x, y, mask)
					return dot64(g, y)
				}
				loss()
				dx := make([]float32, s.InputLen())
				e.PoolBackward(s, g, mask, dx)
				gradCheck(t, "dx", r, x, dx, loss, 1e-2, 40, 1e-2, 0.1)
			})
		}
	}
}
