//go:build linux

package rdma_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// A test binary started with SOFTSYNC_SHM_CHILD set is a peer process of
// the shm tests (rdma.ShmChild).
func TestMain(m *testing.M) {
	if mode := os.Getenv("SOFTSYNC_SHM_CHILD"); mode != "" {
		os.Exit(rdma.ShmChild(mode, os.Getenv("SOFTSYNC_SHM_ADDR")))
	}
	os.Exit(m.Run())
}

func newShm(t *testing.T, opts rdma.Options) *rdma.Shm {
	t.Helper()
	n, err := rdma.NewShm(opts)
	if err != nil {
		t.Skipf("no shared-memory transport: %v", err)
	}
	return n
}

// acceptOne accepts one connection on ln within 20 s, closed at cleanup.
func acceptOne(t *testing.T, ln rdma.Listener) rdma.Conn {
	t.Helper()
	c, err := ln.Accept(recvCtx(t))
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// child starts a peer process in mode (rdma.ShmChild) dialing ln,
// accepts its connection and waits for it to be ready. The process is
// killed at cleanup if it still runs.
func child(t *testing.T, ln rdma.Listener, mode string) (*exec.Cmd, rdma.Conn) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SOFTSYNC_SHM_CHILD="+mode, "SOFTSYNC_SHM_ADDR="+ln.Addr())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	c := acceptOne(t, ln)
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
	}()
	if line := transporttest.Receive(t, lines, 20*time.Second, "the child's ready line"); line != "ready\n" {
		t.Fatalf("child %s: %q", mode, line)
	}
	return cmd, c
}

// kill kills the child with SIGKILL and waits until it is gone.
func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
}

// TestShmPeerKilled: a peer process killed with SIGKILL, at any point,
// ends the connection cleanly. Killed between frames, the frames it sent
// arrive, then the end of the stream (ErrClosed and io.EOF); killed in
// the middle of a frame (its header and part of the payload published,
// more written and not published), a Recv blocked on that frame, or one
// that comes later, fails with a truncated frame; never a hang, never
// the unpublished bytes. Sends fail with ErrClosed.
func TestShmPeerKilled(t *testing.T) {
	n := newShm(t, rdma.Options{})
	ln, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Run("between frames", func(t *testing.T) {
		cmd, c := child(t, ln, "frames")
		kill(t, cmd)
		for i := range 3 {
			m, err := c.Recv(recvCtx(t))
			if err != nil {
				t.Fatalf("frame %d sent before the kill: %v", i, err)
			}
			if m.Seq != uint64(i) || len(m.Payload) != rdma.ShmChildElems(i) || m.Payload[len(m.Payload)-1] != float32(i+1) {
				t.Fatalf("frame %d: seq %d, %d elements", i, m.Seq, len(m.Payload))
			}
			m.Release()
		}
		for range 2 {
			if _, err := c.Recv(recvCtx(t)); !errors.Is(err, rdma.ErrClosed) || !errors.Is(err, io.EOF) || rdma.Recoverable(err) {
				t.Fatalf("recv after the peer was killed: %v", err)
			}
		}
		if err := c.Send(recvCtx(t), rdma.NewMsg(10)); !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("send to a killed peer: %v", err)
		}
	})
	t.Run("blocked on a torn frame", func(t *testing.T) {
		cmd, c := child(t, ln, "torn")
		done := transporttest.WhenBlocked(t, "Recv", func() error {
			_, err := c.Recv(context.Background())
			return err
		})
		kill(t, cmd)
		checkTruncated(t, transporttest.Receive(t, done, time.Minute, "the Recv blocked on the torn frame"), c)
	})
	t.Run("ring full", func(t *testing.T) {
		cmd, c := child(t, ln, "full")
		transporttest.Eventually(t, 20*time.Second, "the child to fill half the ring", func() bool {
			unread, ring := rdma.ShmUnread(c)
			return unread >= uint64(ring/2)
		})
		kill(t, cmd)
		_, err := c.Recv(recvCtx(t))
		checkTruncated(t, err, c)
	})
}

// checkTruncated checks that err, and the next Recv's, is a truncated
// frame, and that c then refuses to send.
func checkTruncated(t *testing.T, err error, c rdma.Conn) {
	t.Helper()
	if !errors.Is(err, rdma.ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || rdma.Recoverable(err) {
		t.Fatalf("recv of a frame whose sender was killed: %v", err)
	}
	if _, err := c.Recv(recvCtx(t)); !errors.Is(err, rdma.ErrTruncated) {
		t.Fatalf("recv after a truncated frame: %v", err)
	}
	if err := c.Send(recvCtx(t), rdma.NewMsg(10)); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("send to a killed peer: %v", err)
	}
}

// shmPair connects two ends of n.
func shmPair(t *testing.T, n rdma.Network) (client, server rdma.Conn) {
	t.Helper()
	ln, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan rdma.Conn, 1)
	go func() {
		c, _ := ln.Accept(recvCtx(t))
		accepted <- c
	}()
	client, err = n.Dial(recvCtx(t), ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server = transporttest.Receive(t, accepted, 20*time.Second, "the accepted connection")
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

// TestShmCloseMidFrame: a Send blocked in the middle of a frame (the ring
// is full) returns ErrClosed when its connection is closed, and the peer
// reads the part of the frame that was published, then a truncated frame.
func TestShmCloseMidFrame(t *testing.T) {
	noLeak(t)
	c, s := shmPair(t, newShm(t, rdma.Options{}))
	done := transporttest.WhenBlocked(t, "Send", func() error {
		return c.Send(context.Background(), rdma.NewMsg(4<<20)) // 16 MiB: eight rings
	})
	c.Close()
	if err := transporttest.Receive(t, done, time.Minute, "the Send blocked mid-frame"); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("send blocked mid-frame, then closed: %v", err)
	}
	if _, err := s.Recv(recvCtx(t)); !errors.Is(err, rdma.ErrTruncated) || rdma.Recoverable(err) {
		t.Fatalf("recv of the torn frame: %v", err)
	}
}

// TestShmStreams: with rings of one page, frames many times the ring
// (up to 16 MiB) stream through both ways at once, across the ring's end
// at every offset, bit for bit.
func TestShmStreams(t *testing.T) {
	n, err := rdma.NewShmRing(rdma.Options{}, 4096)
	if err != nil {
		t.Skipf("no shared-memory transport: %v", err)
	}
	c, s := shmPair(t, n)
	go func() {
		for {
			m, err := s.Recv(context.Background())
			if err != nil {
				return
			}
			if s.Send(context.Background(), m) != nil {
				return
			}
		}
	}()
	for i, elems := range []int{0, 1, 1000, 1023, 1025, 4 << 20, 7777, 3} {
		m := rdma.NewMsg(elems)
		for j := range m.Payload {
			m.Payload[j] = float32(i*1_000_003 + j)
		}
		m.Seq = uint64(i)
		m.Data = append(m.Data, strings.Repeat("d", i*37)...)
		if err := c.Send(recvCtx(t), m); err != nil {
			t.Fatal(err)
		}
		got, err := c.Recv(recvCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != uint64(i) || len(got.Payload) != elems || len(got.Data) != i*37 {
			t.Fatalf("message %d: seq %d, %d elements, %d data bytes", i, got.Seq, len(got.Payload), len(got.Data))
		}
		for j, v := range got.Payload {
			if v != float32(i*1_000_003+j) {
				t.Fatalf("message %d: element %d = %v", i, j, v)
			}
		}
		got.Release()
	}
}

// TestShmAddresses: names, HOST:PORT addresses standing for names, and
// what Listen refuses.
func TestShmAddresses(t *testing.T) {
	n := newShm(t, rdma.Options{})
	for _, tc := range []struct{ listen, addr, dial string }{
		{"@softsync-test/a", "@softsync-test/a", "@softsync-test/a"},
		{"127.0.0.1:7431", "@softsync-shm/127.0.0.1:7431", "127.0.0.1:7431"},
	} {
		ln, err := n.Listen(tc.listen)
		if err != nil {
			t.Fatal(err)
		}
		if ln.Addr() != tc.addr {
			t.Errorf("Listen(%q).Addr() = %q, want %q", tc.listen, ln.Addr(), tc.addr)
		}
		if _, err := n.Listen(tc.listen); err == nil {
			t.Errorf("a second Listen(%q) succeeded", tc.listen)
		}
		go func() {
			if c, err := ln.Accept(recvCtx(t)); err == nil {
				c.Close()
			}
		}()
		c, err := n.Dial(recvCtx(t), tc.dial)
		if err != nil {
			t.Fatalf("Dial(%q): %v", tc.dial, err)
		}
		if c.Transport().Name != "shm" || c.RemoteAddr() != tc.addr {
			t.Errorf("Dial(%q): transport %v, remote %q", tc.dial, c.Transport(), c.RemoteAddr())
		}
		c.Close()
		ln.Close()
	}
	for _, addr := range []string{"", "localhost:0"} {
		ln, err := n.Listen(addr)
		if err != nil || !strings.HasPrefix(ln.Addr(), "@softsync-shm/") {
			t.Fatalf("Listen(%q): %v, %v", addr, ln, err)
		}
		ln.Close()
	}
	for _, addr := range []string{"/tmp/sock", "@"} {
		if _, err := n.Listen(addr); err == nil {
			t.Errorf("Listen(%q) succeeded", addr)
		}
	}
	if _, err := n.Dial(recvCtx(t), "@softsync-test/nobody"); !errors.Is(err, rdma.ErrRefused) {
		t.Errorf("dial to a name nobody listens on: %v", err)
	}
}

// shmAuthServer is a shm listener whose failures go to reports, with an
// accept loop (acceptAll).
func shmAuthServer(t *testing.T, opts rdma.Options) (rdma.Listener, chan report, <-chan rdma.Conn) {
	t.Helper()
	reports := make(chan report, 100)
	opts.OnAuthFailure = func(peer string, err error) { reports <- report{peer, err} }
	ln, err := newShm(t, opts).Listen("")
	if err != nil {
		t.Fatal(err)
	}
	return ln, reports, acceptAll(t, ln)
}

// nextShmReport waits for a failure report naming a process and matching
// every error of want.
func nextShmReport(t *testing.T, reports chan report, want ...error) report {
	t.Helper()
	r := transporttest.Receive(t, reports, 20*time.Second, "a failure report")
	for _, w := range append(want, rdma.ErrAuth) {
		if !errors.Is(r.err, w) || !strings.HasPrefix(r.peer, "pid ") {
			t.Fatalf("failure report from %q: %v; want %v", r.peer, r.err, w)
		}
	}
	return r
}

// TestShmAuth: with a secret, a shm connection authenticates over its
// unix socket as TCP does, before the segment is set up: another secret,
// another job or no secret fails on both ends, is reported and counted,
// and never reaches Accept; connections that hold handshake slots
// without a word are shed for a peer that holds the secret.
func TestShmAuth(t *testing.T) {
	noLeak(t)
	opts := rdma.Options{Job: 5, Secret: secret}
	ln, reports, conns := shmAuthServer(t, opts)
	dial := func(o rdma.Options) (rdma.Conn, error) {
		c, err := newShm(t, o).Dial(recvCtx(t), ln.Addr())
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	c, err := dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	s := transporttest.Receive(t, conns, 20*time.Second, "the authenticated connection")
	if err := c.Send(recvCtx(t), rdma.NewMsg(3)); err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv(recvCtx(t))
	if err != nil || m.Job != 5 {
		t.Fatalf("recv over an authenticated connection: %v", err)
	}
	m.Release()
	s.Close()
	for _, tc := range []struct {
		name string
		o    rdma.Options
		want string
	}{
		{"another secret", rdma.Options{Job: 5, Secret: otherSecret}, "proof does not match"},
		{"another job", rdma.Options{Job: 6, Secret: secret}, "job"},
		{"no secret", rdma.Options{Job: 5}, "not a softsync handshake"},
	} {
		if _, err := dial(tc.o); !errors.Is(err, rdma.ErrAuth) {
			t.Errorf("%s: dial: %v, want ErrAuth", tc.name, err)
		}
		if r := nextShmReport(t, reports); !strings.Contains(r.err.Error(), tc.want) && tc.name != "another secret" {
			t.Errorf("%s: report %v, want it to say %q", tc.name, r.err, tc.want)
		}
	}
	if st := ln.Stats(); st.AuthFailures != 3 || st.Accepted != 1 {
		t.Errorf("stats %+v, want 3 failures and 1 accepted", st)
	}
	// A listener without a secret refuses a dialer that authenticates.
	plain, _, _ := shmAuthServer(t, rdma.Options{Job: 5})
	if c, err := newShm(t, opts).Dial(recvCtx(t), plain.Addr()); !errors.Is(err, rdma.ErrAuth) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial with a secret to a listener without: %v", err)
	}

	// Shedding: idle connections in every slot do not keep a peer out.
	sopts := opts
	sopts.MaxHandshakes, sopts.HandshakeTimeout = 2, time.Hour
	ln, reports, conns = shmAuthServer(t, sopts)
	for range 2 {
		idle, err := net.Dial("unix", ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { idle.Close() })
	}
	transporttest.Eventually(t, 20*time.Second, "two handshakes in progress", func() bool { return ln.Stats().Handshakes == 2 })
	if _, err := dial(opts); err != nil {
		t.Fatalf("dial amid idle connections: %v", err)
	}
	transporttest.Receive(t, conns, 20*time.Second, "the connection amid idle ones").Close()
	nextShmReport(t, reports)
	if st := ln.Stats(); st.Rejected != 1 {
		t.Errorf("stats %+v, want 1 rejected", st)
	}
}

// setupMsg builds a shm set-up message (docs/wire.md).
func setupMsg(magic string, ring uint64) []byte {
	b := append([]byte(magic), rdma.ShmVersion, 0, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, ring)
	return append(b, make([]byte, 32)...)
}

// memfd makes a memfd of size bytes with seals, closed at cleanup.
func memfd(t *testing.T, size int, seals int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestShmHostileSetup: set-up messages and descriptors that are not what
// the protocol requires (a segment that can shrink, of the wrong size,
// not in shared memory, a wake-up descriptor that is no socket pair, the
// wrong count, a bad ring size or magic) are refused, reported and
// counted, leak no descriptor, and leave the listener accepting.
func TestShmHostileSetup(t *testing.T) {
	const ring = 4096
	size := 4096 + 2*ring
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	wake := func(t *testing.T) int {
		p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
		return p[1]
	}
	pipe := func(t *testing.T) int {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
		return p[0]
	}
	file := func(t *testing.T) int {
		f, err := os.CreateTemp(t.TempDir(), "seg")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		f.Truncate(int64(size))
		return int(f.Fd())
	}
	segment := func(t *testing.T) int { // a proper segment
		fd := memfd(t, size, 0)
		hdr := append([]byte("SSYM"), rdma.ShmVersion, 0, 0, 0)
		if _, err := unix.Pwrite(fd, binary.LittleEndian.AppendUint64(hdr, ring), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	cases := []struct {
		name string
		msg  []byte
		fds  func(t *testing.T) []int
		want string
	}{
		{"unsealed", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{memfd(t, size, 0), wake(t)} }, "not sealed"},
		{"shrinkable", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{memfd(t, size, unix.F_SEAL_GROW), wake(t)} }, "not sealed"},
		{"short", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{memfd(t, size-4096, seals), wake(t)} }, "bytes"},
		{"file", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{file(t), wake(t)} }, ""},
		{"pipe", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{pipe(t), wake(t)} }, "not a file"},
		{"wake pipe", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{memfd(t, size, seals), pipe(t)} }, "not a unix seqpacket"},
		{"one fd", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{memfd(t, size, seals)} }, "descriptors"},
		{"no fd", setupMsg("SSYM", ring), func(t *testing.T) []int { return nil }, "descriptors"},
		{"ring size", setupMsg("SSYM", ring+1), func(t *testing.T) []int { return []int{memfd(t, size, seals), wake(t)} }, "ring size"},
		{"tiny ring", setupMsg("SSYM", 1024), func(t *testing.T) []int { return []int{memfd(t, 4096+2048, seals), wake(t)} }, "ring size"},
		{"magic", setupMsg("SSYX", ring), func(t *testing.T) []int { return []int{memfd(t, size, seals), wake(t)} }, "set-up starts"},
		{"header", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{memfd(t, size, seals), wake(t)} }, "segment starts"},
		{"lend unsealed", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{segment(t), wake(t), memfd(t, 4096, 0)} }, "lend segment is not sealed"},
		{"lend sealed without shrink", setupMsg("SSYM", ring), func(t *testing.T) []int {
			return []int{segment(t), wake(t), memfd(t, 4096, unix.F_SEAL_GROW|unix.F_SEAL_SEAL)}
		}, "lend segment is not sealed"},
		{"lend pipe", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{segment(t), wake(t), pipe(t)} }, "lend segment is not a file"},
		{"lend file", setupMsg("SSYM", ring), func(t *testing.T) []int { return []int{segment(t), wake(t), file(t)} }, "lend segment is not"}, // in shared memory, or sealed where /tmp is tmpfs
		{"four fds", setupMsg("SSYM", ring), func(t *testing.T) []int {
			return []int{segment(t), wake(t), memfd(t, 4096, unix.F_SEAL_SHRINK), wake(t)}
		}, "descriptors"},
	}
	ln, reports, conns := shmAuthServer(t, rdma.Options{})
	before := openFDs(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("unix", ln.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			var oob []byte
			if fds := tc.fds(t); len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			if _, _, err := nc.(*net.UnixConn).WriteMsgUnix(tc.msg, oob, nil); err != nil {
				t.Fatal(err)
			}
			r := nextShmReport(t, reports, rdma.ErrProtocol)
			if !strings.Contains(r.err.Error(), tc.want) {
				t.Fatalf("report %v, want it to say %q", r.err, tc.want)
			}
			nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			if n, err := nc.Read(make([]byte, 16)); n != 0 || !(errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET)) {
				t.Fatalf("after a refused set-up: read %d bytes, %v; want the connection closed", n, err)
			}
		})
	}
	if st := ln.Stats(); st.AuthFailures != uint64(len(cases)) || st.Accepted != 0 {
		t.Errorf("stats %+v, want %d failures", st, len(cases))
	}
	// A proper dialer still gets in.
	c, err := newShm(t, rdma.Options{}).Dial(recvCtx(t), ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Receive(t, conns, 20*time.Second, "the connection after the hostile ones").Close()
	c.Close()
	transporttest.Eventually(t, 20*time.Second, "the listener to close what the hostile set-ups sent", func() bool {
		return openFDs(t) <= before
	})
}

// TestShmSmallRingConformance: rings of 512 KiB, the least that holds
// what the suite sends before it reads (a 280 KiB message), so that large
// frames stream through in many pieces and wrap often.
func TestShmSmallRingConformance(t *testing.T) {
	transporttest.Run(t, factory(func(o rdma.Options) (rdma.Network, error) { return rdma.NewShmRing(o, 512<<10) }, "", func(*rdma.Options) {}))
}
