package rdma

import "math"

// Half-precision conversions used by the fp16 and bf16 codecs. Both round
// to nearest, ties to even. NaN stays NaN (made quiet, sign and the top
// payload bits kept), ±Inf stays ±Inf. fp16 (IEEE 754 binary16) has 11
// significant bits and a range of ±65504: larger magnitudes become ±Inf,
// magnitudes below 2⁻²⁴ round to a signed zero, those between 2⁻²⁴ and
// 2⁻¹⁴ keep fewer bits (subnormals). bf16 keeps float32's 8-bit exponent
// (no overflow except values within half an ulp of MaxFloat32) and 8
// significant bits.

// f32ToBF16 rounds f to bfloat16, without branches: the rounded value,
// or for NaN (which rounding could turn into Inf) the truncated one made
// quiet, selected by a mask.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	rounded := uint16((b + 0x7fff + (b>>16)&1) >> 16)
	quiet := uint16(b>>16) | 0x40
	nan := -uint16((0x7f800000 - b&0x7fffffff) >> 31) // all ones iff |b| > Inf
	return rounded&^nan | quiet&nan
}

// bf16ToF32 widens a bfloat16 exactly.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToF16 rounds f to IEEE binary16 (after F. Giesen's
// float_to_half_fast3_rtne): normal results round by adding a bias to the
// bits, subnormal ones by letting a float addition of 0.5 (whose ulp is
// 2⁻²⁴, fp16's subnormal step) round to nearest even.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b & 0x7fffffff
	switch {
	case abs >= 0x47800000: // ≥ 65536: Inf, or NaN (quiet, top payload bits kept)
		if abs > 0x7f800000 {
			return sign | 0x7e00 | uint16(abs>>13)&0x1ff
		}
		return sign | 0x7c00
	case abs < 0x38800000: // < 2⁻¹⁴: subnormal or zero
		const half = 0x3f000000 // 0.5
		return sign | uint16(math.Float32bits(math.Float32frombits(abs)+0.5)-half)
	}
	// Normal: rebias the exponent by 127−15 and round the 13 dropped bits to
	// nearest even; a carry into the exponent (up to Inf from 65520 on) is
	// the right result.
	return sign | uint16((abs-112<<23+0xfff+(abs>>13)&1)>>13)
}

// f16ToF32 widens an IEEE binary16 exactly.
func f16ToF32(h uint16) float32 {
	b := uint32(h&0x7fff) << 13
	switch exp := b & (0x7c00 << 13); exp {
	case 0x7c00 << 13: // Inf or NaN
		b += (255 - 31) << 23
	case 0: // zero or subnormal: m·2⁻²⁴, renormalised by a float subtraction
		b = math.Float32bits(math.Float32frombits(b+113<<23) - math.Float32frombits(113<<23))
	default:
		b += (127 - 15) << 23
	}
	return math.Float32frombits(b | uint32(h&0x8000)<<16)
}

// The codecs convert whole payloads with the functions below. On amd64
// with AVX2 and F16C the bulk of each (a multiple of 16 elements) runs in
// assembly (kernels_amd64.s) and the tail in the Go functions above;
// elsewhere, or built with the purego tag, the Go functions do everything.
// Both paths give the same bits for every input.

// bulk returns the prefix of n elements handled by the assembly: n rounded
// down to a multiple of block (a power of two), or 0 without it.
func bulk(n, block int) int {
	if !useAsm {
		return 0
	}
	return n &^ (block - 1)
}

// head runs the kernel asm on the first bulk(len(dst), 16) elements and
// returns their number; the caller converts the rest in Go.
func head[D, S any](dst []D, src []S, asm func(*D, *S, int)) int {
	k := bulk(len(dst), 16)
	if k > 0 {
		asm(&dst[0], &src[:k][0], k)
	}
	return k
}

// f32sToF16 sets dst[i] = f32ToF16(src[i]) for i < len(dst).
func f32sToF16(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i := head(dst, src, f32ToF16AVX2); i < len(dst); i++ {
		dst[i] = f32ToF16(src[i])
	}
}

// f16sToF32 sets dst[i] = f16ToF32(src[i]) for i < len(dst).
func f16sToF32(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i := head(dst, src, f16ToF32AVX2); i < len(dst); i++ {
		dst[i] = f16ToF32(src[i])
	}
}

// f32sToBF16 sets dst[i] = f32ToBF16(src[i]) for i < len(dst).
func f32sToBF16(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i := head(dst, src, f32ToBF16AVX2); i < len(dst); i++ {
		dst[i] = f32ToBF16(src[i])
	}
}

// bf16sToF32 sets dst[i] = bf16ToF32(src[i]) for i < len(dst).
func bf16sToF32(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i := head(dst, src, bf16ToF32AVX2); i < len(dst); i++ {
		dst[i] = bf16ToF32(src[i])
	}
}
