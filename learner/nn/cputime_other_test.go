//go:build !linux

package nn

import "time"

// threadCPU cannot read a thread's CPU time here.
func threadCPU() time.Duration { return -1 }
