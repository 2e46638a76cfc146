package kernels

import (
	"fmt"
	"math"
)

// ResizeAxis is the filter of one axis of a separable image resize from
// In source pixels to Out, restricted to the Out pixels Lo … Lo+N−1 (a
// crop of the resized axis). Output pixel i of the crop is the sum over
// t < Taps of Coef[i·Taps+t] · source pixel Start[i]+t, in fixed point
// with Bits fraction bits, rounded to nearest and clamped to 0…255.
//
// The filter is PIL's (and so torchvision's) bilinear resize: a triangle
// of half-width max(In/Out, 1) source pixels centred on (i+0.5)·In/Out,
// normalised to sum 1; when shrinking it averages over every source pixel
// it covers (antialiased), and In = Out copies the pixels. Its weights are
// rounded to 16-bit integers, as PIL-SIMD does, with Bits = ImageBits
// fraction bits; each output's coefficients sum to exactly 2^Bits (the
// rounding's remainder goes to its largest), so a flat image stays flat.
//
// Every output has Taps coefficients (zeros added where its own are
// fewer), so that the kernels run loops of one length. Start is
// non-decreasing. Window moves the axis onto a part of the source.
type ResizeAxis struct {
	In, Out, Lo, N int
	Taps, Bits     int
	Start          []int32
	Coef           []int16

	w []float64 // weights, reused by Set
}

// ImageBits is the number of fraction bits of a ResizeAxis's
// coefficients: 14, so that a coefficient of 1 fits in 16 bits. It does
// not depend on the outputs chosen, so that a crop of a resize computes
// the same pixels as the whole resize.
const ImageBits = 14

// NewResizeAxis returns the filter of outputs lo … lo+n−1 of a resize
// from in to out pixels. It panics unless 1 ≤ n and 0 ≤ lo, lo+n ≤ out.
func NewResizeAxis(in, out, lo, n int) *ResizeAxis {
	a := new(ResizeAxis)
	a.Set(in, out, lo, n)
	return a
}

// Set makes a the filter NewResizeAxis(in, out, lo, n) returns, reusing
// a's memory (no allocation once it has held a filter as large).
func (a *ResizeAxis) Set(in, out, lo, n int) {
	if in < 1 || out < 1 || n < 1 || lo < 0 || lo+n > out {
		panic(fmt.Sprintf("kernels.NewResizeAxis: outputs %d…%d of a resize %d → %d", lo, lo+n-1, in, out))
	}
	scale := float64(in) / float64(out)
	fs := max(scale, 1)
	support := fs // bilinear's support is 1, widened by the scale
	maxTaps := min(int(math.Ceil(support))*2+1, in)
	a.w = grow(a.w, n*maxTaps)
	a.Start = grow(a.Start, n)
	// The weights of output i, trimmed of zeros at both ends, start at
	// Start[i] and fill w[i·maxTaps …]; taps counts the longest.
	taps := 1
	for i := range n {
		center := (float64(lo+i) + 0.5) * scale
		x0 := max(int(center-support+0.5), 0)
		x1 := min(int(center+support+0.5), in)
		k := a.w[i*maxTaps : i*maxTaps+maxTaps]
		clear(k)
		var sum float64
		for t := range x1 - x0 {
			v := math.Abs((float64(x0+t) - center + 0.5) / fs)
			k[t] = max(1-v, 0)
			sum += k[t]
		}
		m := x1 - x0
		for t := range m {
			k[t] /= sum
		}
		for m > 1 && k[m-1] == 0 {
			m--
		}
		skip := 0
		for skip < m-1 && k[skip] == 0 {
			skip++
		}
		copy(k, k[skip:m])
		clear(k[m-skip:])
		a.Start[i] = int32(x0 + skip)
		taps = max(taps, m-skip)
	}
	bits := ImageBits
	a.In, a.Out, a.Lo, a.N, a.Taps, a.Bits = in, out, lo, n, taps, bits
	a.Coef = grow(a.Coef, n*taps)
	for i := range n {
		k, c := a.w[i*maxTaps:i*maxTaps+taps], a.Coef[i*taps:(i+1)*taps]
		pad := 0
		if x0 := int(a.Start[i]); x0+taps > in { // near the far edge: zeros before the weights
			pad = x0 + taps - in
			a.Start[i] = int32(in - taps)
		}
		clear(c)
		sum, top := 0, pad
		for t, v := range k[:taps-pad] {
			c[pad+t] = int16(math.Round(v * float64(int(1)<<bits)))
			sum += int(c[pad+t])
			if c[pad+t] > c[top] {
				top = pad + t
			}
		}
		c[top] += int16(1<<bits - sum)
	}
}

// grow returns s resized to n elements, reallocated only when too small.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// Needs returns the source pixels the axis reads: lo … hi−1.
func (a *ResizeAxis) Needs() (lo, hi int) {
	return int(a.Start[0]), int(a.Start[a.N-1]) + a.Taps
}

// Window makes the axis read a source of in pixels that holds pixels
// off … off+in−1 of its present source (a decoded part of an image): the
// outputs stay the same. It panics unless that window holds every pixel
// the axis needs.
func (a *ResizeAxis) Window(off, in int) {
	lo, hi := a.Needs()
	if off < 0 || lo < off || hi > off+in {
		panic(fmt.Sprintf("kernels.ResizeAxis.Window: pixels %d…%d do not hold the %d…%d needed", off, off+in-1, lo, hi-1))
	}
	for i := range a.Start {
		a.Start[i] -= int32(off)
	}
	a.In = in
}

// ImageTmpLen is the scratch, in bytes, the image kernels need for the
// axes x (columns) and y (rows).
func ImageTmpLen(x, y *ResizeAxis) int {
	lo, hi := y.Needs()
	return (hi-lo)*3*x.N + 3*x.N + 16 + 3*x.In + 16 + x.N*((x.Taps+3)/4)*8 + 4
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

func clampU8(v int32, bits int) byte { return byte(min(max(v>>bits, 0), 255)) }

// passH filters source rows lo … hi−1 along x into tmp, output i of a row
// at position n−1−i when mirrored.
func passH(src []byte, sw, lo, hi int, x *ResizeAxis, mirror bool, tmp []byte) {
	n, taps := x.N, x.Taps
	for r := lo; r < hi; r++ {
		row, out := src[r*3*sw:(r+1)*3*sw], tmp[(r-lo)*3*n:(r-lo+1)*3*n]
		for i := range n {
			p := row[3*x.Start[i]:]
			a, b, c := int32(1<<(x.Bits-1)), int32(1<<(x.Bits-1)), int32(1<<(x.Bits-1))
			for t, w := range x.Coef[i*taps : (i+1)*taps] {
				a += int32(w) * int32(p[3*t])
				b += int32(w) * int32(p[3*t+1])
				c += int32(w) * int32(p[3*t+2])
			}
			o := i
			if mirror {
				o = n - 1 - i
			}
			out[3*o], out[3*o+1], out[3*o+2] = clampU8(a, x.Bits), clampU8(b, x.Bits), clampU8(c, x.Bits)
		}
	}
}

// passV writes output row j of the vertical filter over tmp into row.
func passV(tmp []byte, n, lo int, y *ResizeAxis, j int, row []byte) {
	k := y.Coef[j*y.Taps : (j+1)*y.Taps]
	first := (int(y.Start[j]) - lo) * 3 * n
	for i := range 3 * n {
		a := int32(1 << (y.Bits - 1))
		for t, w := range k {
			a += int32(w) * int32(tmp[first+t*3*n+i])
		}
		row[i] = clampU8(a, y.Bits)
	}
}

func (refImages) Resize(src []byte, sw, sh int, x, y *ResizeAxis, dst, tmp []byte) {
	checkImage(src, sw, sh, x, y, len(dst), nil, tmp)
	lo, hi := y.Needs()
	passH(src, sw, lo, hi, x, false, tmp)
	for j := range y.N {
		passV(tmp, x.N, lo, y, j, dst[j*3*x.N:(j+1)*3*x.N])
	}
}

func (refImages) ResizeCHW(src []byte, sw, sh int, x, y *ResizeAxis, mirror bool, scale float32, mean, dst []float32, tmp []byte) {
	checkImage(src, sw, sh, x, y, len(dst), mean, tmp)
	n, m := x.N, y.N
	lo, hi := y.Needs()
	passH(src, sw, lo, hi, x, mirror, tmp)
	row := tmp[(hi-lo)*3*n : (hi-lo+1)*3*n]
	for j := range m {
		passV(tmp, n, lo, y, j, row)
		for c := range 3 {
			off := (c*m + j) * n
			for i := range n {
				v := float32(scale * float32(row[3*i+c])) // rounded: no fused multiply-subtract
				if mean != nil {
					v -= mean[off+i]
				}
				dst[off+i] = v
			}
		}
	}
}
