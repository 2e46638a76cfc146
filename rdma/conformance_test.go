package rdma_test

import (
	"testing"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

func TestInmemConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, opts rdma.Options) (rdma.Network, string) {
		n, err := rdma.NewInmem(opts)
		if err != nil {
			t.Fatal(err)
		}
		return n, ""
	})
}

// tcpFactory makes loopback TCP networks with the options each test sets,
// changed by with.
func tcpFactory(with func(*rdma.Options)) transporttest.Factory {
	return func(t *testing.T, opts rdma.Options) (rdma.Network, string) {
		with(&opts)
		n, err := rdma.NewTCP(opts)
		if err != nil {
			t.Fatal(err)
		}
		return n, "127.0.0.1:0"
	}
}

func TestTCPConformance(t *testing.T) {
	transporttest.Run(t, tcpFactory(func(*rdma.Options) {}))
}

func TestTCPNoPayloadChecksumConformance(t *testing.T) {
	transporttest.Run(t, tcpFactory(func(o *rdma.Options) { o.NoPayloadChecksum = true }))
}

// TestTCPAuthConformance: the suite over connections that authenticate
// (Options.Secret), with the job ids each test sets.
func TestTCPAuthConformance(t *testing.T) {
	transporttest.Run(t, tcpFactory(func(o *rdma.Options) { o.Secret = secret }))
}

// The verbs transport over the in-process emulation of the verbs
// operations: everything but the device.
func TestVerbsEmulatedConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, opts rdma.Options) (rdma.Network, string) {
		opts.Verbs.Emulation = rdma.NewEmulation()
		n, err := rdma.NewVerbs(opts)
		if err != nil {
			t.Fatal(err)
		}
		return n, "127.0.0.1:0"
	})
}

// Auto networks: connections on verbs (emulated device on both ends) and
// on TCP (no RDMA support in the kernel).
func TestAutoConformance(t *testing.T) {
	for name, emu := range map[string]func() *rdma.Emulation{
		"verbs": rdma.NewEmulation, "fallback": rdma.NewEmulationWithoutKernelSupport,
	} {
		t.Run(name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, opts rdma.Options) (rdma.Network, string) {
				opts.Verbs.Emulation = emu()
				n, err := rdma.NewAuto(opts)
				if err != nil {
					t.Fatal(err)
				}
				return n, "127.0.0.1:0"
			})
		})
	}
}

// The verbs transport over the host's RDMA device, when it has a usable
// one (docs/rdma.md says how to get one with Soft-RoCE).
func TestHostVerbsConformance(t *testing.T) {
	if _, err := rdma.NewVerbs(rdma.Options{}); err != nil {
		t.Skipf("no usable RDMA device: %v", err)
	}
	transporttest.Run(t, func(t *testing.T, opts rdma.Options) (rdma.Network, string) {
		n, err := rdma.NewVerbs(opts)
		if err != nil {
			t.Fatal(err)
		}
		return n, "127.0.0.1:0"
	})
}
