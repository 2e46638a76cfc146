//go:build !amd64 || purego

package rdma

import "github.com/softsync/softsync/kernels/isa"

// asmFor returns no assembly: every pass runs the Go loops.
func asmFor(isa.Level) asm { return asm{level: isa.Generic} }
