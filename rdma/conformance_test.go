package rdma_test

import (
	"errors"
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

// factory makes networks with open and the options each test sets,
// changed by with, listening on addr; it skips the test where open fails
// with ErrUnsupported.
func factory(open func(rdma.Options) (rdma.Network, error), addr string, with func(*rdma.Options)) transporttest.Factory {
	return func(t *testing.T, opts rdma.Options) (rdma.Network, string) {
		with(&opts)
		n, err := open(opts)
		if errors.Is(err, rdma.ErrUnsupported) {
			t.Skipf("%v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		return n, addr
	}
}

// tcpFactory makes loopback TCP networks.
func tcpFactory(with func(*rdma.Options)) transporttest.Factory {
	return factory(func(o rdma.Options) (rdma.Network, error) { return rdma.NewTCP(o) }, "127.0.0.1:0", with)
}

// shmFactory makes shared-memory networks, whose Listen picks a name.
func shmFactory(with func(*rdma.Options)) transporttest.Factory {
	return factory(func(o rdma.Options) (rdma.Network, error) { return rdma.NewShm(o) }, "", with)
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

// Auto networks: connections on verbs (emulated device on both ends), on
// TCP (no RDMA support in the kernel), and on shm (no emulation: the
// peers are on one host).
func TestAutoConformance(t *testing.T) {
	for name, emu := range map[string]func() *rdma.Emulation{
		"verbs": rdma.NewEmulation, "fallback": rdma.NewEmulationWithoutKernelSupport, "shm": nil,
	} {
		t.Run(name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, opts rdma.Options) (rdma.Network, string) {
				if emu != nil {
					opts.Verbs.Emulation = emu()
				}
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

func TestShmConformance(t *testing.T) {
	transporttest.Run(t, shmFactory(func(*rdma.Options) {}))
}

// TestShmAuthConformance: the suite over connections that authenticate
// over their unix socket first (Options.Secret).
func TestShmAuthConformance(t *testing.T) {
	transporttest.Run(t, shmFactory(func(o *rdma.Options) { o.Secret = secret }))
}
