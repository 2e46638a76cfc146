//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package rdma

import "unsafe"

// f32bytes views a float32 slice as its bytes without copying. The wire
// format is little-endian, so on the little-endian hosts this file builds
// for, raw payloads go to and from the wire as they are in memory. The
// package does not build on big-endian hosts.
func f32bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}
