package rdma

import (
	"math"

	"github.com/softsync/softsync/kernels/isa"
)

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
// the bulk of each runs in assembly (kernels_amd64.s) at the level
// isa.Best() reports, lowered by LimitISA: AVX-512 (32 elements at a time)
// or AVX2 with F16C (16), and the tail in the Go functions above;
// elsewhere, or built with the purego tag, the Go functions do
// everything. Every path gives the same bits for every input.

// asm is the assembly of one level: the conversions on a multiple of conv
// elements, the byte planes of shuffle and unshuffle on a multiple of
// planes elements.
type asm struct {
	level               isa.Level
	conv, planes        int
	f32ToF16, f32ToBF16 func(dst *uint16, src *float32, n int)
	f16ToF32, bf16ToF32 func(dst *float32, src *uint16, n int)
	shuffle             func(planes, raw *byte, stride, n int)
	unshuffle           func(raw, planes *byte, stride, n int)
}

// kern is the assembly in use (level isa.Generic: none).
var kern = asmFor(isa.Best())

// LimitISA caps the instruction-set level of the codecs' element-wise
// passes, for the whole process, at l (isa.Auto: the best this CPU and
// build run), and returns the level they now run at. It is for tests and
// for comparing levels on one machine (softsync's --isa): call it before
// the codecs run, not while they do.
func LimitISA(l isa.Level) isa.Level {
	kern = asmFor(isa.Cap(l))
	return kern.level
}

// ISA returns the instruction-set level the codecs' passes run at.
func ISA() isa.Level { return kern.level }

// bulk returns the prefix of n elements the assembly handles in blocks
// of block elements (0: no assembly).
func bulk(n, block int) int {
	if block == 0 {
		return 0
	}
	return n - n%block
}

// head runs the conversion kernel asm on the first bulk(len(dst),
// kern.conv) elements and returns their number; the caller converts the
// rest in Go.
func head[D, S any](dst []D, src []S, asm func(*D, *S, int)) int {
	k := bulk(len(dst), kern.conv)
	if k > 0 {
		asm(&dst[0], &src[:k][0], k)
	}
	return k
}

// f32sToF16 sets dst[i] = f32ToF16(src[i]) for i < len(dst).
func f32sToF16(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i := head(dst, src, kern.f32ToF16); i < len(dst); i++ {
		dst[i] = f32ToF16(src[i])
	}
}

// f16sToF32 sets dst[i] = f16ToF32(src[i]) for i < len(dst).
func f16sToF32(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i := head(dst, src, kern.f16ToF32); i < len(dst); i++ {
		dst[i] = f16ToF32(src[i])
	}
}

// f32sToBF16 sets dst[i] = f32ToBF16(src[i]) for i < len(dst).
func f32sToBF16(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i := head(dst, src, kern.f32ToBF16); i < len(dst); i++ {
		dst[i] = f32ToBF16(src[i])
	}
}

// bf16sToF32 sets dst[i] = bf16ToF32(src[i]) for i < len(dst).
func bf16sToF32(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i := head(dst, src, kern.bf16ToF32); i < len(dst); i++ {
		dst[i] = bf16ToF32(src[i])
	}
}
