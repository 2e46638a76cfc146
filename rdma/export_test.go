package rdma

import "github.com/softsync/softsync/rdma/internal/verbs"

// NewEmulationWithoutKernelSupport returns an emulated host whose kernel
// has no RDMA support, for the conformance suite over auto's fallback.
func NewEmulationWithoutKernelSupport() *Emulation {
	return emulation(verbs.EmuConfig{NoKernelSupport: true})
}
