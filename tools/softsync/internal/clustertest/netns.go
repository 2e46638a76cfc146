package clustertest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Subnet is the address range of every test network: a part of
// 198.18.0.0/15, the range RFC 2544 sets aside for benchmarking, which no
// real network routes. Host i (from 0) has address 198.18.0.(i+1). Each
// network lives in namespaces of its own, so networks of concurrent tests
// reuse the same addresses without meeting.
var Subnet = netip.MustParsePrefix("198.18.0.0/24")

// netnsPrefix starts the name of every namespace this package creates;
// the creating process's id follows, so that a later run can remove the
// namespaces of a test process that was killed before its cleanup.
const netnsPrefix = "softsync-"

// netnsDir is where ip netns keeps its named namespaces.
const netnsDir = "/run/netns"

// Link shapes the link between each host and the rest of the network.
type Link struct {
	// Rate limits each direction of the link to Rate bits per second
	// with a token bucket filter (tc qdisc tbf) on both ends; 0 leaves
	// the link unlimited.
	Rate int64
	// Burst is the bucket size in bytes; 0 means 10 ms at Rate, at least
	// 64 KiB.
	Burst int
	// Latency bounds the time a packet may wait in the queue before it is
	// dropped (tbf latency); 0 means 50 ms.
	Latency time.Duration
}

// tbfArgs returns the tbf parameters of l, or nil when l is unlimited.
func (l Link) tbfArgs() []string {
	if l.Rate <= 0 {
		return nil
	}
	burst := l.Burst
	if burst <= 0 {
		burst = max(64<<10, int(l.Rate/8/100))
	}
	latency := l.Latency
	if latency <= 0 {
		latency = 50 * time.Millisecond
	}
	return []string{"tbf", "rate", strconv.FormatInt(l.Rate, 10) + "bit",
		"burst", strconv.Itoa(burst), "latency", strconv.FormatInt(latency.Microseconds(), 10) + "us"}
}

// Network is a set of hosts, each a network namespace with loopback and
// one interface, Dev, in Subnet. Two hosts are joined by one veth pair;
// more are joined through a bridge in a namespace of its own. Nothing is
// routed outside the network.
type Network struct {
	Hosts []*Host
}

// Host is one network namespace of a Network.
type Host struct {
	// Name is the namespace's name, for ip netns and tc -n.
	Name string
	// Addr is the host's address in Subnet.
	Addr netip.Addr
	// Dev is the host's interface ("veth0").
	Dev string
}

func (h *Host) String() string { return h.Name + "(" + h.Addr.String() + ")" }

var netSeq atomic.Int64

// NewNetwork creates a network of hosts (at least 2) whose links are
// shaped by link, or skips the test (fails with EnvRequire=1) without root
// or without ip (and tc when link limits the rate). Everything is removed
// when the test ends, whether it passed or failed; namespaces left by test
// processes that were killed are removed first.
func NewNetwork(t testing.TB, hosts int, link Link) *Network {
	t.Helper()
	if hosts < 2 || hosts > 250 {
		t.Fatalf("clustertest: NewNetwork: %d hosts, want 2 to 250", hosts)
	}
	needRoot(t, "network namespaces")
	lookPath(t, "network namespaces", "ip")
	tbf := link.tbfArgs()
	if tbf != nil {
		lookPath(t, "traffic shaping", "tc")
	}
	removeStaleNamespaces()
	base := fmt.Sprintf("%s%d-%d-", netnsPrefix, os.Getpid(), netSeq.Add(1))
	addNS := func(name string) {
		mustRun(t, nil, "ip", "netns", "add", name)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := run(ctx, nil, "ip", "netns", "del", name); err != nil {
				t.Errorf("clustertest: %v", err)
			}
		})
		mustRun(t, nil, "ip", "-n", name, "link", "set", "lo", "up")
	}
	shape := func(ns, dev string) {
		if tbf != nil {
			mustRun(t, nil, append([]string{"tc", "-n", ns, "qdisc", "add", "dev", dev, "root"}, tbf...)...)
		}
	}
	n := &Network{}
	for i := 0; i < hosts; i++ {
		h := &Host{Name: base + "h" + strconv.Itoa(i), Addr: hostAddr(i), Dev: "veth0"}
		addNS(h.Name)
		n.Hosts = append(n.Hosts, h)
	}
	prefix := "/" + strconv.Itoa(Subnet.Bits())
	if hosts == 2 {
		a, b := n.Hosts[0], n.Hosts[1]
		mustRun(t, nil, "ip", "-n", a.Name, "link", "add", a.Dev, "type", "veth", "peer", "name", b.Dev, "netns", b.Name)
	} else {
		sw := base + "sw"
		addNS(sw)
		mustRun(t, nil, "ip", "-n", sw, "link", "add", "br0", "type", "bridge")
		mustRun(t, nil, "ip", "-n", sw, "link", "set", "br0", "up")
		for i, h := range n.Hosts {
			port := "p" + strconv.Itoa(i)
			mustRun(t, nil, "ip", "-n", h.Name, "link", "add", h.Dev, "type", "veth", "peer", "name", port, "netns", sw)
			mustRun(t, nil, "ip", "-n", sw, "link", "set", port, "master", "br0")
			mustRun(t, nil, "ip", "-n", sw, "link", "set", port, "up")
			shape(sw, port)
		}
	}
	for _, h := range n.Hosts {
		mustRun(t, nil, "ip", "-n", h.Name, "addr", "add", h.Addr.String()+prefix, "dev", h.Dev)
		mustRun(t, nil, "ip", "-n", h.Name, "link", "set", h.Dev, "up")
		shape(h.Name, h.Dev)
	}
	return n
}

// TwoHosts is NewNetwork with two hosts joined by one veth pair.
func TwoHosts(t testing.TB, link Link) (a, b *Host) {
	t.Helper()
	n := NewNetwork(t, 2, link)
	return n.Hosts[0], n.Hosts[1]
}

// hostAddr is the address of host i.
func hostAddr(i int) netip.Addr {
	a := Subnet.Addr().As4()
	a[3] = byte(i + 1)
	return netip.AddrFrom4(a)
}

// removeStaleNamespaces deletes the namespaces of this package whose
// creating process no longer exists.
func removeStaleNamespaces() {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), netnsPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = run(ctx, nil, "ip", "netns", "del", e.Name())
		cancel()
	}
}

// In returns a launcher that runs l's command line inside h's namespace
// (ip netns exec): Exec for one process, or OpenMPI or MPICH for several,
// all on host h.
func (h *Host) In(l *Launcher) *Launcher {
	return &Launcher{Name: h.Name + "/" + l.Name, env: l.env, argv: func(s Spec) []string {
		return append([]string{"ip", "netns", "exec", h.Name}, l.argv(s)...)
	}}
}

// Do runs fn on an OS thread that has entered h's namespace, and returns
// its error. Sockets that fn creates belong to h's network and stay there
// when used from other goroutines afterwards; goroutines that fn starts
// do not run in h's namespace. The thread ends with fn and never serves
// another goroutine.
func (h *Host) Do(fn func() error) error {
	f, err := os.Open(filepath.Join(netnsDir, h.Name))
	if err != nil {
		return fmt.Errorf("clustertest: host %s: %w", h, err)
	}
	defer f.Close()
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread exits with this goroutine instead
		// of returning to the scheduler in the wrong namespace.
		runtime.LockOSThread()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("clustertest: host %s: setns: %w", h, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Listen listens on address (as net.Listen) in h's network.
func (h *Host) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := h.Do(func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// DialContext connects to address (as net.Dialer.DialContext) from h's
// network.
func (h *Host) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}
