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
