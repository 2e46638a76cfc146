package clustertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// echoMain listens on args[0], prints "listening", and echoes one line of
// one connection back, prefixed with its own address as the peer saw it.
func echoMain(args []string) int {
	l, err := net.Listen("tcp", args[0])
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("listening")
	c, err := l.Accept()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Fprintf(c, "%s from %s: %s", c.LocalAddr(), c.RemoteAddr(), line)
	return 0
}

// dialMain connects to args[0], sends a line and prints the answer.
func dialMain(args []string) int {
	c, err := net.DialTimeout("tcp", args[0], 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer c.Close()
	fmt.Fprintln(c, "hello")
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Print(answer)
	return 0
}

// TestTwoHosts connects a process in one namespace to a process in the
// other through the veth pair, and checks that the namespaces do not see
// the machine's own network.
func TestTwoHosts(t *testing.T) {
	a, b := TwoHosts(t, Link{})
	if a.Addr != netip.MustParseAddr("198.18.0.1") || b.Addr != netip.MustParseAddr("198.18.0.2") {
		t.Fatalf("addresses %v %v", a, b)
	}
	server := b.In(Exec()).Start(t, Spec{Argv: Self("echo", b.Addr.String()+":7000"), Timeout: 30 * time.Second})
	for !strings.Contains(server.Output(), "listening") {
		select {
		case <-server.done:
			t.Fatalf("server ended: %s", server.Wait())
		case <-time.After(10 * time.Millisecond):
		}
	}
	out := a.In(Exec()).MustRun(t, Spec{Argv: Self("dial", b.Addr.String()+":7000"), Timeout: 30 * time.Second})
	if want := "198.18.0.2:7000 from 198.18.0.1:"; !strings.HasPrefix(out, want) || !strings.HasSuffix(out, ": hello\n") {
		t.Fatalf("answer %q, want %q…: hello", out, want)
	}
	if r := server.Wait(); r.Err != nil {
		t.Fatalf("server: %s", r)
	}
	// The namespaces have no route to anything else: a host cannot reach
	// an address outside Subnet.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := a.DialContext(ctx, "tcp", "192.0.2.1:9"); err == nil {
		c.Close()
		t.Fatal("a host reached an address outside the test network")
	}
}

// TestNetworkBridge checks that three hosts reach each other through the
// bridge, using the in-process Listen and DialContext.
func TestNetworkBridge(t *testing.T) {
	n := NewNetwork(t, 3, Link{})
	for _, from := range n.Hosts {
		for _, to := range n.Hosts {
			if from == to {
				continue
			}
			checkConnect(t, from, to)
		}
	}
}

func checkConnect(t *testing.T, from, to *Host) {
	t.Helper()
	l, err := to.Listen("tcp", to.Addr.String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := from.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("%v → %v: %v", from, to, err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.RemoteAddr().(*net.TCPAddr).AddrPort().Addr(); got != from.Addr {
		t.Fatalf("%v → %v: peer address %v", from, to, got)
	}
}

// transfer sends data from a to b over TCP and returns the rate in bits
// per second, measured at the receiver from the first to the last byte.
func transfer(tb testing.TB, a, b *Host, data []byte) float64 {
	size := len(data)
	tb.Helper()
	l, err := b.Listen("tcp", b.Addr.String()+":0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	type result struct {
		bits float64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		first := make([]byte, 1)
		if _, err := io.ReadFull(c, first); err != nil {
			done <- result{err: err}
			return
		}
		start := time.Now()
		n, err := io.Copy(io.Discard, c)
		if err == nil && n != int64(size-1) {
			err = fmt.Errorf("received %d bytes, want %d", n+1, size)
		}
		done <- result{float64(n*8) / time.Since(start).Seconds(), err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := a.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(data); err != nil {
		tb.Fatal(err)
	}
	c.Close()
	r := <-done
	if r.err != nil {
		tb.Fatal(r.err)
	}
	return r.bits
}

// TestShapedLink sends data over a link limited to 40 Mbit/s. The rate is
// measured and logged, not asserted beyond a loose upper bound: a shaped
// link never delivers much more than its rate, however noisy the machine,
// while a busy machine may well deliver less.
func TestShapedLink(t *testing.T) {
	const rate = 40e6
	a, b := TwoHosts(t, Link{Rate: rate})
	got := transfer(t, a, b, make([]byte, 4<<20))
	t.Logf("tbf rate %.0f Mbit/s: measured %.1f Mbit/s", rate/1e6, got/1e6)
	if got > 2*rate {
		t.Fatalf("measured %.1f Mbit/s through a link limited to %.0f Mbit/s", got/1e6, rate/1e6)
	}
	out := mustRun(t, nil, "tc", "-n", a.Name, "qdisc", "show", "dev", a.Dev)
	if !strings.Contains(out, "tbf") || !strings.Contains(out, "rate 40Mbit") {
		t.Fatalf("qdisc on %s: %s", a, out)
	}
}

// BenchmarkLink reports the TCP throughput between two hosts, unlimited
// and through a 1 Gbit/s tbf, side by side, as measured by the receiver
// (Mbit/s); ns/op also counts connection set-up and teardown.
func BenchmarkLink(b *testing.B) {
	for _, tc := range []struct {
		name string
		link Link
	}{{"unlimited", Link{}}, {"tbf-1gbit", Link{Rate: 1e9}}} {
		b.Run(tc.name, func(b *testing.B) {
			x, y := TwoHosts(b, tc.link)
			data := make([]byte, 64<<20)
			var bits float64
			for i := 0; i < b.N; i++ {
				bits += transfer(b, x, y, data)
			}
			b.ReportMetric(bits/float64(b.N)/1e6, "Mbit/s")
		})
	}
}

// TestNoStaleNamespaces checks that the tests before it left no namespace
// of this process behind (cleanup ran) and that removeStaleNamespaces
// removes one whose creator is gone.
func TestNoStaleNamespaces(t *testing.T) {
	needRoot(t, "network namespaces")
	lookPath(t, "network namespaces", "ip")
	stale := fmt.Sprintf("%s%d-0-h0", netnsPrefix, deadPID(t))
	mustRun(t, nil, "ip", "netns", "add", stale)
	removeStaleNamespaces()
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if e.Name() == stale {
			_, _ = run(context.Background(), nil, "ip", "netns", "del", stale)
			t.Errorf("stale namespace %s was not removed", stale)
		}
		if strings.HasPrefix(e.Name(), fmt.Sprintf("%s%d-", netnsPrefix, os.Getpid())) {
			t.Errorf("namespace %s left behind by an earlier test", e.Name())
		}
	}
}

// deadPID returns the pid of a process that has ended.
func deadPID(t *testing.T) int {
	r := Exec().Start(t, Spec{Argv: []string{"true"}})
	r.Wait()
	return r.cmd.Process.Pid
}
