package verbs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Errors of Host.
var (
	// ErrNotBuilt: the binary was built without the verbs binding.
	ErrNotBuilt = errors.New("this build has no verbs support (it needs cgo and the verbs build tag; make sets the tag when pkg-config finds libibverbs)")
	// ErrNoLibrary: libibverbs.so.1 could not be loaded.
	ErrNoLibrary = errors.New("libibverbs.so.1 cannot be loaded (Debian: apt-get install libibverbs1 ibverbs-providers)")
)

// HostMemlock reads this process's locked-memory limit (RLIMIT_MEMLOCK)
// and whether it holds CAP_IPC_LOCK, which lets it register memory beyond
// the limit. If the limit cannot be read it reports it as unlimited.
func HostMemlock() Memlock {
	var r unix.Rlimit
	m := Memlock{Limit: Unlimited}
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r) == nil {
		m.Limit = r.Cur
	}
	m.Exempt = capIPCLock()
	return m
}

// SysfsDir is where the kernel lists RDMA devices; it exists only when
// the kernel has RDMA support (the ib_core module).
const SysfsDir = "/sys/class/infiniband"

// KernelSupport reports whether SysfsDir exists.
func KernelSupport() bool {
	_, err := os.Stat(SysfsDir)
	return err == nil
}
