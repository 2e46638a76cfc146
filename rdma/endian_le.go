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

// u16s views an even-length byte slice as little-endian uint16 values.
func u16s(b []byte) []uint16 {
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}

// u32s views a byte slice whose length is a multiple of 4 as
// little-endian uint32 values.
func u32s(b []byte) []uint32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
