//go:build !amd64 || purego

package rdma

// useAsm is false: every pass runs the Go loops.
var useAsm = false

func f32ToF16AVX2(dst *uint16, src *float32, n int)  { panic("rdma: no assembly kernels") }
func f16ToF32AVX2(dst *float32, src *uint16, n int)  { panic("rdma: no assembly kernels") }
func f32ToBF16AVX2(dst *uint16, src *float32, n int) { panic("rdma: no assembly kernels") }
func bf16ToF32AVX2(dst *float32, src *uint16, n int) { panic("rdma: no assembly kernels") }
func shuffleAVX2(planes, raw *byte, stride, n int)   { panic("rdma: no assembly kernels") }
func unshuffleAVX2(raw, planes *byte, stride, n int) { panic("rdma: no assembly kernels") }
