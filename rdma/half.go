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
