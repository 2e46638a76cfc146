package kernels

import (
	"fmt"
	"math"
)

// ImageBits is the number of fraction bits of a ResizeAxis's fixed-point
// coefficients (csrc's SS_IMG_BITS).
const ImageBits = 22

// ResizeAxis is the filter of one axis of a separable image resize from
// In source pixels to Out, restricted to the Out pixels Lo … Lo+N−1 (a
// crop of the resized axis). Output pixel i of the crop is the sum over
// t < Len[i] of Coef[i·Taps+t] · source pixel Start[i]+t, in fixed point
// with ImageBits fraction bits, rounded to nearest and clamped to 0…255.
//
// The filter is PIL's (and so torchvision's) bilinear resize: a triangle
// of half-width max(In/Out, 1) source pixels centred on (i+0.5)·In/Out,
// normalised to sum 1; when shrinking it averages over every source pixel
// it covers (antialiased), and In = Out copies the pixels.
type ResizeAxis struct {
	In, Out, Lo, N int
	Taps           int
	Start, Len     []int32
	Coef           []int32
}

// NewResizeAxis returns the filter of outputs lo … lo+n−1 of a resize
// from in to out pixels. It panics unless 1 ≤ n and 0 ≤ lo, lo+n ≤ out.
func NewResizeAxis(in, out, lo, n int) *ResizeAxis {
	if in < 1 || out < 1 || n < 1 || lo < 0 || lo+n > out {
		panic(fmt.Sprintf("kernels.NewResizeAxis: outputs %d…%d of a resize %d → %d", lo, lo+n-1, in, out))
	}
	scale := float64(in) / float64(out)
	fs := max(scale, 1)
	support := fs // bilinear's support is 1, widened by the scale
	type span struct {
		x0 int
		k  []float64
	}
	spans := make([]span, n)
	maxTaps := int(math.Ceil(support))*2 + 1
	weights := make([]float64, n*maxTaps) // one backing array for every span
	taps := 1
	for i := range n {
		center := (float64(lo+i) + 0.5) * scale
		x0 := max(int(center-support+0.5), 0)
		x1 := min(int(center+support+0.5), in)
		k := weights[i*maxTaps : i*maxTaps+x1-x0]
		var sum float64
		for t := range k {
			v := math.Abs((float64(x0+t) - center + 0.5) / fs)
			k[t] = max(1-v, 0)
			sum += k[t]
		}
		for t := range k {
			k[t] /= sum
		}
		// Trim zero weights at both ends.
		for len(k) > 1 && k[len(k)-1] == 0 {
			k = k[:len(k)-1]
		}
		for len(k) > 1 && k[0] == 0 {
			k, x0 = k[1:], x0+1
		}
		spans[i] = span{x0, k}
		taps = max(taps, len(k))
	}
	// Every output gets exactly taps taps (zeros added after its own,
	// or before them at the far edge), so that the kernels run loops of
	// one fixed length.
	a := &ResizeAxis{In: in, Out: out, Lo: lo, N: n, Taps: taps,
		Start: make([]int32, n), Len: make([]int32, n), Coef: make([]int32, n*taps)}
	for i, sp := range spans {
		x0, pad := sp.x0, 0
		if x0+taps > in {
			pad = x0 + taps - in
			x0 = in - taps
		}
		a.Start[i], a.Len[i] = int32(x0), int32(taps)
		for t, v := range sp.k {
			a.Coef[i*taps+pad+t] = int32(math.Round(v * (1 << ImageBits)))
		}
	}
	return a
}

// rows returns the source pixels the axis reads: lo … hi−1.
func (a *ResizeAxis) rows() (lo, hi int) {
	return int(a.Start[0]), int(a.Start[a.N-1] + a.Len[a.N-1])
}

// ImageTmpLen is the scratch, in bytes, the image kernels need for the
// axes x (columns) and y (rows).
func ImageTmpLen(x, y *ResizeAxis) int {
	lo, hi := y.rows()
	return (hi-lo)*3*x.N + 3*x.N*5 + 4
}

// Images are the image kernels of the data pipeline, over packed RGB
// bytes (3 bytes a pixel, row-major, no padding). The native (C) and the
// reference (Go) implementation compute the same integers, so their
// results agree to the bit.
type Images interface {
	// Resize resizes the sw×sh image src along x (columns) and y (rows)
	// into dst, y.N rows of x.N RGB pixels.
	Resize(src []byte, sw, sh int, x, y *ResizeAxis, dst, tmp []byte)
	// ResizeCHW resizes likewise into 3 float planes (red, green, blue)
	// of y.N×x.N values: at output (j, i) of channel c it writes
	// scale·p − mean[(c·y.N+j)·x.N+i], p being the resized pixel (j, i),
	// or (j, x.N−1−i) with mirror; mean may be nil (no subtraction).
	ResizeCHW(src []byte, sw, sh int, x, y *ResizeAxis, mirror bool, scale float32, mean, dst []float32, tmp []byte)
}

// checkImage panics unless the buffers fit the axes.
func checkImage(src []byte, sw, sh int, x, y *ResizeAxis, dst int, mean []float32, tmp []byte) {
	switch {
	case x.In != sw || y.In != sh:
		panic(fmt.Sprintf("kernels: image is %d×%d, the resize is from %d×%d", sw, sh, x.In, y.In))
	case len(src) < 3*sw*sh:
		panic(fmt.Sprintf("kernels: image has %d bytes, %d×%d RGB needs %d", len(src), sw, sh, 3*sw*sh))
	case dst < 3*x.N*y.N:
		panic(fmt.Sprintf("kernels: output has %d values, need %d", dst, 3*x.N*y.N))
	case mean != nil && len(mean) < 3*x.N*y.N:
		panic(fmt.Sprintf("kernels: mean has %d values, need %d", len(mean), 3*x.N*y.N))
	case len(tmp) < ImageTmpLen(x, y):
		panic(fmt.Sprintf("kernels: image scratch has %d bytes, need %d", len(tmp), ImageTmpLen(x, y)))
	}
}

// ReferenceImages returns the pure-Go image kernels.
func ReferenceImages() Images { return refImages{} }

// NewImages returns the native image kernels when this build has them,
// else the reference ones.
func NewImages() Images {
	if im, err := NativeImages(); err == nil {
		return im
	}
	return refImages{}
}

type refImages struct{}

func clampU8(v int32) byte { return byte(min(max(v>>ImageBits, 0), 255)) }

// passH filters source rows lo … hi−1 along x into tmp.
func passH(src []byte, sw, lo, hi int, x *ResizeAxis, tmp []byte) {
	n := x.N
	for r := lo; r < hi; r++ {
		row, out := src[r*3*sw:(r+1)*3*sw], tmp[(r-lo)*3*n:(r-lo+1)*3*n]
		for i := range n {
			p := row[3*x.Start[i]:]
			k := x.Coef[i*x.Taps : i*x.Taps+int(x.Len[i])]
			a, b, c := int32(1<<(ImageBits-1)), int32(1<<(ImageBits-1)), int32(1<<(ImageBits-1))
			for t, w := range k {
				a += w * int32(p[3*t])
				b += w * int32(p[3*t+1])
				c += w * int32(p[3*t+2])
			}
			out[3*i], out[3*i+1], out[3*i+2] = clampU8(a), clampU8(b), clampU8(c)
		}
	}
}

// passV sums output row j of the vertical filter over tmp into acc.
func passV(tmp []byte, n, lo int, y *ResizeAxis, j int, acc []int32) {
	for i := range acc {
		acc[i] = 1 << (ImageBits - 1)
	}
	for t, w := range y.Coef[j*y.Taps : j*y.Taps+int(y.Len[j])] {
		r := int(y.Start[j]) + t - lo
		for i, p := range tmp[r*3*n : (r+1)*3*n] {
			acc[i] += w * int32(p)
		}
	}
}

func (refImages) Resize(src []byte, sw, sh int, x, y *ResizeAxis, dst, tmp []byte) {
	checkImage(src, sw, sh, x, y, len(dst), nil, tmp)
	lo, hi := y.rows()
	passH(src, sw, lo, hi, x, tmp)
	acc := make([]int32, 3*x.N)
	for j := range y.N {
		passV(tmp, x.N, lo, y, j, acc)
		for i, v := range acc {
			dst[j*3*x.N+i] = clampU8(v)
		}
	}
}

func (refImages) ResizeCHW(src []byte, sw, sh int, x, y *ResizeAxis, mirror bool, scale float32, mean, dst []float32, tmp []byte) {
	checkImage(src, sw, sh, x, y, len(dst), mean, tmp)
	n, m := x.N, y.N
	lo, hi := y.rows()
	passH(src, sw, lo, hi, x, tmp)
	acc := make([]int32, 3*n)
	for j := range m {
		passV(tmp, n, lo, y, j, acc)
		for c := range 3 {
			off := (c*m + j) * n
			for i := range n {
				xi := i
				if mirror {
					xi = n - 1 - i
				}
				v := scale * float32(clampU8(acc[3*xi+c]))
				if mean != nil {
					v -= mean[off+i]
				}
				dst[off+i] = v
			}
		}
	}
}
