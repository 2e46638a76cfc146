//go:build amd64

package isa

import "golang.org/x/sys/cpu"

// cpuHas reports the running CPU's features; the AVX and AVX-512 ones only
// when the operating system saves their registers (golang.org/x/sys/cpu
// checks XCR0).
func cpuHas(f string) bool {
	x := &cpu.X86
	switch f {
	case "AVX":
		return x.HasAVX
	case "AVX2":
		return x.HasAVX2
	case "FMA3":
		return x.HasFMA
	case "F16C":
		return x.HasF16C
	case "AVX512F":
		return x.HasAVX512F
	case "AVX512CD":
		return x.HasAVX512CD
	case "AVX512BW":
		return x.HasAVX512BW
	case "AVX512DQ":
		return x.HasAVX512DQ
	case "AVX512VL":
		return x.HasAVX512VL
	}
	return false
}
