package verbs

import (
	"errors"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHost checks the host binding as far as this host allows: without
// the verbs build tag it reports ErrNotBuilt; with it, libibverbs loads,
// and on a kernel without RDMA support listing devices fails with an
// error (ibv_get_device_list returned NULL), as does opening one.
func TestHost(t *testing.T) {
	p, err := Host()
	if !Built {
		if !errors.Is(err, ErrNotBuilt) {
			t.Fatalf("Host in a build without verbs: %v", err)
		}
		t.Skip("built without the verbs tag")
	}
	if err != nil {
		t.Skipf("libibverbs: %v", err)
	}
	if p.Fabric() != 0 || p.Name() != "libibverbs.so.1" {
		t.Fatalf("provider %s, fabric %d", p.Name(), p.Fabric())
	}
	devs, err := p.Devices()
	t.Logf("devices %v, error %v, kernel support %v", devs, err, KernelSupport())
	if !KernelSupport() && (err == nil || len(devs) != 0) {
		t.Fatalf("no kernel support, yet devices %v, error %v", devs, err)
	}
	if _, err := p.Open("softsync-no-such-device"); !errors.Is(err, syscall.ENODEV) && !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("opening a device that does not exist: %v", err)
	}
}

func TestHostMemlock(t *testing.T) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r); err != nil {
		t.Skip(err)
	}
	if m := HostMemlock(); m.Limit != r.Cur {
		t.Fatalf("HostMemlock %d, getrlimit %d", m.Limit, r.Cur)
	}
	if !(Memlock{Limit: 10}).Allows(4, 6) || (Memlock{Limit: 10}).Allows(5, 6) || !(Memlock{Limit: 1, Exempt: true}).Allows(5, 6) ||
		!(Memlock{Limit: Unlimited}).Allows(1<<62, 1<<62) || (Memlock{Limit: 10}).Allows(^uint64(0), 2) {
		t.Fatal("Allows")
	}
}
