//go:build amd64 && !purego

package rdma

import "github.com/softsync/softsync/kernels/isa"

// asmFor returns the assembly of the highest level at most l: AVX-512
// (F, BW), or AVX2 with F16C, or none.
func asmFor(l isa.Level) asm {
	switch {
	case l >= isa.AVX512:
		// fp16 rounding keeps the 256-bit VCVTPS2PH: the 512-bit one
		// is slower on AMD's Zen 4 and Zen 5 (BenchmarkHalf), and the
		// 256-bit one already outruns memory.
		return asm{level: isa.AVX512, conv: 32, planes: 64,
			f32ToF16: f32ToF16AVX2, f16ToF32: f16ToF32AVX512, f32ToBF16: f32ToBF16AVX512, bf16ToF32: bf16ToF32AVX512,
			shuffle: shuffleAVX512, unshuffle: unshuffleAVX512}
	case l >= isa.AVX2:
		return asm{level: isa.AVX2, conv: 16, planes: 32,
			f32ToF16: f32ToF16AVX2, f16ToF32: f16ToF32AVX2, f32ToBF16: f32ToBF16AVX2, bf16ToF32: bf16ToF32AVX2,
			shuffle: shuffleAVX2, unshuffle: unshuffleAVX2}
	}
	return asm{level: isa.Generic}
}

// The conversion kernels process n elements, n a positive multiple of 16
// (AVX2) or 32 (AVX-512): dst[i] = f32ToF16(src[i]) and so on, for i < n.

//go:noescape
func f32ToF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func f16ToF32AVX2(dst *float32, src *uint16, n int)

//go:noescape
func f32ToBF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func bf16ToF32AVX2(dst *float32, src *uint16, n int)

//go:noescape
func f16ToF32AVX512(dst *float32, src *uint16, n int)

//go:noescape
func f32ToBF16AVX512(dst *uint16, src *float32, n int)

//go:noescape
func bf16ToF32AVX512(dst *float32, src *uint16, n int)

// The byte-plane kernels process elements 0..n-1, n a positive multiple of
// 32 (AVX2) or 64 (AVX-512), of a payload whose planes are stride bytes
// apart (stride ≥ n): planes[p·stride + i] = raw[4i + p] for p < 4, i < n.

//go:noescape
func shuffleAVX2(planes, raw *byte, stride, n int)

//go:noescape
func unshuffleAVX2(raw, planes *byte, stride, n int)

//go:noescape
func shuffleAVX512(planes, raw *byte, stride, n int)

//go:noescape
func unshuffleAVX512(raw, planes *byte, stride, n int)
