//go:build amd64 && !purego

package rdma

import "golang.org/x/sys/cpu"

// useAsm selects the AVX2+F16C kernels of kernels_amd64.s at run time.
var useAsm = cpu.X86.HasAVX2 && cpu.X86.HasF16C

// The conversion kernels process n elements, n a positive multiple of 16:
// dst[i] = f32ToF16(src[i]) and so on, for i < n.

//go:noescape
func f32ToF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func f16ToF32AVX2(dst *float32, src *uint16, n int)

//go:noescape
func f32ToBF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func bf16ToF32AVX2(dst *float32, src *uint16, n int)

// The byte-plane kernels process elements 0..n-1, n a positive multiple of
// 32, of a payload whose planes are stride bytes apart (stride ≥ n):
// planes[p·stride + i] = raw[4i + p] for p < 4, i < n.

//go:noescape
func shuffleAVX2(planes, raw *byte, stride, n int)

//go:noescape
func unshuffleAVX2(raw, planes *byte, stride, n int)
