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

// f32ToBF16 rounds f to bfloat16.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: truncating could make it Inf
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// bf16ToF32 widens a bfloat16 exactly.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToF16 rounds f to IEEE binary16.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b & 0x7fffffff
	switch {
	case abs > 0x7f800000: // NaN
		return sign | 0x7e00 | uint16(abs>>13)&0x1ff
	case abs >= 0x477ff000: // ≥ 65520: rounds to Inf (Inf included)
		return sign | 0x7c00
	case abs >= 0x38800000: // ≥ 2⁻¹⁴: normal; rebias the exponent by 127−15
		abs -= 112 << 23
		abs += 0xfff + (abs>>13)&1
		return sign | uint16(abs>>13)
	case abs >= 0x33000000: // ≥ 2⁻²⁵: subnormal, in units of 2⁻²⁴
		shift := 126 - abs>>23 // 14..24
		m := abs&0x7fffff | 0x800000
		r, rem, half := m>>shift, m&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || rem == half && r&1 == 1 {
			r++
		}
		return sign | uint16(r)
	default:
		return sign
	}
}

// f16ToF32 widens an IEEE binary16 exactly.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1f
	m := uint32(h & 0x3ff)
	switch e {
	case 0: // zero or subnormal: m·2⁻²⁴
		f := float32(m) * (1.0 / (1 << 24))
		return math.Float32frombits(math.Float32bits(f) | sign)
	case 31:
		return math.Float32frombits(sign | 0x7f800000 | m<<13)
	}
	return math.Float32frombits(sign | (e+112)<<23 | m<<13)
}
