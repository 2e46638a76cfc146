//go:build !amd64 || purego

package sgd

import "github.com/softsync/softsync/kernels/isa"

// asmFor returns no assembly: every pass runs the Go loops of kernels.go.
func asmFor(isa.Level) asm { return asm{level: isa.Generic} }
