//go:build linux

package rdma

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Shm is the shared-memory transport, for peers on the same host and in
// the same network namespace: frames (docs/wire.md) through two rings in
// a shared segment, one per direction (see shmConn), set up over a unix
// socket in the abstract namespace.
//
// A connection starts as a unix stream connection. With Options.Secret,
// it runs the handshake of TCP first (the same messages, limits and
// shedding: Options.MaxHandshakes, HandshakeTimeout, OnAuthFailure).
// Then the dialer creates the segment: a memfd, sized and sealed against
// shrinking and growing, so that the listener's mapping can never fault,
// with the two rings, and sends it over the socket (SCM_RIGHTS) with one
// end of a socket pair for its wake-ups; the listener checks and maps the
// segment and answers with a socket pair end of its own (docs/wire.md,
// "Over shared memory"). Everything read from the peer is checked before
// use: the set-up, the segment's size, seals and header, the kind of
// every descriptor, and every ring index, each time it is read.
//
// Addresses are names in the abstract unix-socket namespace ("@name"),
// which belongs to the network namespace: a peer that reaches one is on
// this host and in this network namespace, nothing lingers in the file
// system after a crash, and no directory needs permissions (the
// handshake, as on loopback TCP, is what keeps others out). Listen("")
// and a "HOST:0" address pick a fresh name; another "HOST:PORT" stands
// for the name "@softsync-shm/HOST:PORT", so that the addresses of a job
// on one host work as they are.
type Shm struct {
	opts   Options
	ring   int          // ring size of the connections it dials
	lend   *lendSegment // the process's, or nil
	dialer net.Dialer
	// dialUnix connects to an abstract socket (tests: from another
	// network namespace); nil: dialer.DialContext.
	dialUnix func(ctx context.Context, name string) (net.Conn, error)
}

var _ Network = (*Shm)(nil)

// shmRingSize is the ring size of dialed connections: large enough that
// a writer rarely waits for a reader that keeps up, small enough that
// both rings of a connection stay in the last-level cache.
const shmRingSize = 2 << 20

// NewShm returns the shared-memory transport, or an error matching
// ErrUnsupported when the host lacks what it needs (memfd_create, on
// Linux since 3.17; other systems have no shm transport). Its frames
// carry no payload checksum, whatever Options.NoPayloadChecksum says
// (frames that carry one are still verified): they go from memory to
// memory on one host with no link between to corrupt them, the ring
// publishes only whole frames, and a peer that writes the segment
// could forge a checksum as easily as the payload. The header keeps
// its CRC32C, which guards the parsing of every frame.
func NewShm(opts Options) (*Shm, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	o.NoPayloadChecksum = true
	if err := shmSupported(); err != nil {
		return nil, &OpError{Op: "open", Peer: "shm", Err: err}
	}
	return &Shm{opts: o, ring: shmRingSize, lend: theLendSegment()}, nil
}

// shmSupported checks once that sealed memfds can be made.
var shmSupported = sync.OnceValue(func() error {
	fd, err := unix.MemfdCreate("softsync-probe", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("%w: no shared memory: memfd_create: %w", ErrUnsupported, err)
	}
	unix.Close(fd)
	return nil
})

// Name returns "shm".
func (s *Shm) Name() string { return "shm" }

// NewMsg returns a message whose payload lies in the process's lend
// segment when it has at least shmLendMin bytes (and the segment has
// room), so that a Send of it, or of memory lent from it (Msg.Borrow),
// puts only a reference into the ring and the receiver copies the
// payload straight out of it; other messages come from the process-wide
// pool (package NewMsg). A received message never lies in shared memory.
func (s *Shm) NewMsg(n int) *Msg {
	if s.lend != nil && 4*n >= shmLendMin {
		if m := s.lend.newMsg(n); m != nil {
			return m
		}
	}
	return NewMsg(n)
}

// shmPrefix starts the abstract names that stand for TCP-style addresses
// and the names Listen picks.
const shmPrefix = "@softsync-shm/"

// shmListenName is the abstract name Listen(addr) binds.
func shmListenName(addr string) (string, error) {
	switch {
	case strings.HasPrefix(addr, "@") && len(addr) > 1:
		return addr, nil
	case strings.HasPrefix(addr, "@"), strings.Contains(addr, "/"):
		return "", fmt.Errorf("shm addresses are abstract socket names (@name) or HOST:PORT, not %q", addr)
	case addr == "" || strings.HasSuffix(addr, ":0"):
		return shmPrefix + randomName(), nil
	}
	return shmPrefix + addr, nil
}

// shmDialName is the abstract name Dial(addr) connects to.
func shmDialName(addr string) string {
	if strings.HasPrefix(addr, "@") {
		return addr
	}
	return shmPrefix + addr
}

func randomName() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Listen listens on an abstract unix socket (see Shm for the names); its
// Addr is the name peers dial. Each connection runs its handshake and
// set-up on the listener's goroutines before Accept returns it.
func (s *Shm) Listen(addr string) (Listener, error) {
	ln, err := s.listen(addr)
	if err != nil {
		return nil, err
	}
	return newAuthListener(ln, s.opts, shmServer{s: s}), nil
}

func (s *Shm) listen(addr string) (*net.UnixListener, error) {
	name, err := shmListenName(addr)
	if err != nil {
		return nil, &OpError{Op: "listen", Peer: addr, Err: err}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, &OpError{Op: "listen", Peer: addr, Err: err}
	}
	return ln, nil
}

// Dial connects to a shm listener, runs the handshake (with
// Options.Secret) and sets the segment up, within
// Options.HandshakeTimeout and ctx.
func (s *Shm) Dial(ctx context.Context, addr string) (Conn, error) {
	name := shmDialName(addr)
	c, err := s.dial(ctx, name, [nonceSize]byte{}, "pid "+fmt.Sprint(os.Getpid()), name)
	if err != nil {
		return nil, &OpError{Op: "dial", Peer: addr, Err: err}
	}
	return c, nil
}

// dial connects to the abstract socket name and sets a connection up
// with the given nonce (auto's offer; zero otherwise) and addresses.
func (s *Shm) dial(ctx context.Context, name string, nonce [nonceSize]byte, local, remote string) (*shmConn, error) {
	var nc net.Conn
	var err error
	if s.dialUnix != nil {
		nc, err = s.dialUnix(ctx, name)
	} else {
		nc, err = s.dialer.DialContext(ctx, "unix", name)
	}
	if err != nil {
		return nil, ConnectError(err)
	}
	uc := nc.(*net.UnixConn)
	deadline := time.Now().Add(s.opts.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	uc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(aLongTimeAgo) })
	var c *shmConn
	if len(s.opts.Secret) > 0 {
		err = clientHandshake(uc, s.opts.Secret, s.opts.Job)
	}
	if err == nil {
		c, err = s.clientSetup(uc, nonce, local, remote)
	}
	stop()
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case err == nil:
		err = uc.SetDeadline(time.Time{})
	}
	if err != nil {
		if c != nil {
			c.Close()
		}
		uc.Close()
		return nil, err
	}
	return c, nil
}

// Set-up messages (docs/wire.md, "Over shared memory"), after the
// handshake if there is one, little-endian:
//
//	dialer → listener, 48 bytes, with the segment's memfd, the
//	dialer's wake-up socket and its lend segment if it has one
//	(SCM_RIGHTS, in this order):
//	  0 4 magic "SSYM"   4 1 version (2)   5 3 zero
//	  8 8 ring size R   16 32 nonce (auto's offer; zero otherwise)
//	listener → dialer, 8 bytes, with the listener's wake-up socket and
//	its lend segment if it has one:
//	  0 4 magic "SSYM"   4 1 version (2)   5 3 zero
const (
	shmSetupSize = 48
	shmReplySize = 8
)

// clientSetup creates the segment and a wake-up socket pair, sends them,
// and takes the listener's wake-up socket from its answer.
func (s *Shm) clientSetup(uc *net.UnixConn, nonce [nonceSize]byte, local, remote string) (*shmConn, error) {
	r := s.ring
	seg, memfd, err := newSegment(r)
	if err != nil {
		return nil, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		unix.Close(memfd)
		unix.Munmap(seg)
		return nil, fmt.Errorf("shm wake-up socket pair: %w", err)
	}
	var msg [shmSetupSize]byte
	copy(msg[:], shmMagic)
	msg[4] = shmVersion
	binary.LittleEndian.PutUint64(msg[8:], uint64(r))
	copy(msg[16:], nonce[:])
	_, _, err = uc.WriteMsgUnix(msg[:], unix.UnixRights(s.lend.withFD(memfd, pair[1])...), nil)
	unix.Close(memfd) // the mapping and the message in flight keep the segment
	unix.Close(pair[1])
	var fds []int
	if err == nil {
		var reply [shmReplySize]byte
		fds, err = readWithFDs(uc, reply[:])
		if err == nil && (string(reply[:4]) != shmMagic || reply[4] != shmVersion || reply[5]|reply[6]|reply[7] != 0) {
			err = fmt.Errorf("%w: shm set-up answer % x", ErrProtocol, reply)
		}
	}
	if err == nil && len(fds) != 1 && len(fds) != 2 {
		err = fmt.Errorf("%w: shm set-up answer with %d descriptors, want 1 or 2", ErrProtocol, len(fds))
	}
	if err == nil {
		err = checkWakeSocket(fds[0])
	}
	var peer *peerLend
	if err == nil && len(fds) == 2 {
		peer, err = mapPeerLend(fds[1])
		fds = fds[:1]
	}
	var room *net.UnixConn
	if err == nil {
		room, err = socketConn(pair[0])
		pair[0] = -1
	}
	if err != nil {
		if peer != nil {
			peer.close()
		}
		closeFDs(fds)
		if pair[0] >= 0 {
			unix.Close(pair[0])
		}
		unix.Munmap(seg)
		return nil, shmSetupError("reading the listener's answer", err)
	}
	c := newShmConn(seg, r, 0, uc, room, fds[0], s.opts, local, remote)
	c.mapped, c.nonce, c.lend, c.peerLend = true, nonce, s.lend, peer
	return c, nil
}

// shmServer is the listener's side of a shm connection; with nonceOK
// (auto's listener), the set-up must carry a nonce it knows.
type shmServer struct {
	s       *Shm
	nonceOK func([nonceSize]byte) bool
}

func (sv shmServer) shake(nc net.Conn, stepped func()) (Conn, error) {
	uc := nc.(*net.UnixConn)
	o := &sv.s.opts
	if len(o.Secret) > 0 {
		if err := serverHandshake(uc, o.Secret, o.Job, stepped); err != nil {
			return nil, err
		}
	}
	c, err := sv.serverSetup(uc)
	if err != nil {
		if !errors.Is(err, ErrAuth) {
			err = fmt.Errorf("%w: shm set-up: %w", ErrAuth, err)
		}
		return nil, err
	}
	if err := uc.SetDeadline(time.Time{}); err != nil {
		c.Close()
		return nil, localError{err}
	}
	return c, nil
}

// peer names the process at the other end of a unix connection.
func (shmServer) peer(nc net.Conn) string {
	pid := -1
	if rc, err := nc.(*net.UnixConn).SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				pid = int(cred.Pid)
			}
		})
	}
	return "pid " + fmt.Sprint(pid)
}

// serverSetup takes the dialer's segment and wake-up socket, checks and
// maps the segment, and answers with a wake-up socket of its own.
func (sv shmServer) serverSetup(uc *net.UnixConn) (*shmConn, error) {
	var msg [shmSetupSize]byte
	fds, err := readWithFDs(uc, msg[:])
	if err != nil {
		return nil, shmSetupError("reading the dialer's set-up", err)
	}
	seg, r, nonce, err := sv.takeSegment(msg[:], fds)
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	unix.Close(fds[0]) // mapped
	peerRoom := fds[1]
	var peer *peerLend
	fail := func(err error) (*shmConn, error) {
		if peer != nil {
			peer.close()
		}
		unix.Close(peerRoom)
		unix.Munmap(seg)
		return nil, err
	}
	if len(fds) == 3 {
		if peer, err = mapPeerLend(fds[2]); err != nil {
			return fail(err)
		}
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(localError{fmt.Errorf("shm wake-up socket pair: %w", err)})
	}
	var reply [shmReplySize]byte
	copy(reply[:], shmMagic)
	reply[4] = shmVersion
	lend := sv.s.lend
	_, _, err = uc.WriteMsgUnix(reply[:], unix.UnixRights(lend.withFD(pair[1])...), nil)
	unix.Close(pair[1])
	var room *net.UnixConn
	if err == nil {
		room, err = socketConn(pair[0])
		pair[0] = -1
	}
	if err != nil {
		if pair[0] >= 0 {
			unix.Close(pair[0])
		}
		return fail(shmSetupError("answering the dialer", err))
	}
	local := uc.LocalAddr().String()
	c := newShmConn(seg, r, 1, uc, room, peerRoom, sv.s.opts, local, sv.peer(uc))
	c.mapped, c.nonce, c.lend, c.peerLend = true, nonce, lend, peer
	return c, nil
}

// takeSegment checks the set-up message msg and its descriptors (the
// segment's memfd and the dialer's wake-up socket) and maps the segment.
func (sv shmServer) takeSegment(msg []byte, fds []int) (seg []byte, r int, nonce [nonceSize]byte, err error) {
	ring := binary.LittleEndian.Uint64(msg[8:])
	copy(nonce[:], msg[16:])
	switch {
	case string(msg[:4]) != shmMagic || msg[4] != shmVersion || msg[5]|msg[6]|msg[7] != 0:
		return nil, 0, nonce, fmt.Errorf("%w: shm set-up starts % x, want %q version %d", ErrProtocol, msg[:8], shmMagic, shmVersion)
	case !shmRingOK(ring):
		return nil, 0, nonce, fmt.Errorf("%w: shm ring size %d is not a power of two in [%d, %d]", ErrProtocol, ring, shmMinRing, shmMaxRing)
	case sv.nonceOK == nil && nonce != [nonceSize]byte{}:
		return nil, 0, nonce, fmt.Errorf("%w: shm set-up with a nonce, but this listener offered none", ErrProtocol)
	case sv.nonceOK != nil && !sv.nonceOK(nonce):
		return nil, 0, nonce, fmt.Errorf("%w: shm set-up with a nonce this listener did not offer (or offered to a connection since gone)", ErrProtocol)
	case len(fds) != 2 && len(fds) != 3:
		return nil, 0, nonce, fmt.Errorf("%w: shm set-up with %d descriptors, want 2 or 3", ErrProtocol, len(fds))
	}
	r = int(ring)
	if err := checkSegment(fds[0], shmSegSize(r)); err != nil {
		return nil, 0, nonce, err
	}
	if err := checkWakeSocket(fds[1]); err != nil {
		return nil, 0, nonce, err
	}
	seg, err = unix.Mmap(fds[0], 0, shmSegSize(r), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, nonce, fmt.Errorf("%w: mapping the shm segment: %w", ErrProtocol, err)
	}
	if err := checkShmHeader(seg, r); err != nil {
		unix.Munmap(seg)
		return nil, 0, nonce, err
	}
	return seg, r, nonce, nil
}

// newSegment creates a sealed memfd for rings of r bytes, maps it and
// writes the header.
func newSegment(r int) (seg []byte, fd int, err error) {
	fd, err = unix.MemfdCreate("softsync-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, localError{fmt.Errorf("%w: memfd_create: %w", ErrUnsupported, err)}
	}
	size := shmSegSize(r)
	if err = unix.Ftruncate(fd, int64(size)); err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, shmSeals)
	}
	if err == nil {
		seg, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err != nil {
		unix.Close(fd)
		return nil, -1, localError{fmt.Errorf("creating the shm segment: %w", err)}
	}
	putShmHeader(seg, r)
	return seg, fd, nil
}

// shmSeals are the seals a segment must carry: its size can never change,
// nor its seals, so that a mapping of it never faults.
const shmSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// checkSegment verifies that fd is a memfd of size bytes on shared
// memory (not huge pages, which may run out) with shmSeals.
func checkSegment(fd, size int) error {
	got, err := checkMemfd(fd, "shm segment", shmSeals)
	if err == nil && got != int64(size) {
		err = fmt.Errorf("%w: shm segment of %d bytes, want %d", ErrProtocol, got, size)
	}
	return err
}

// checkMemfd verifies that fd, the peer's what, is a regular file in
// shared memory (tmpfs: a memfd) with the given seals, and returns its
// size.
func checkMemfd(fd int, what string, seals int) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrProtocol, what, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("%w: %s is not a file (mode %#o)", ErrProtocol, what, st.Mode)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
		return 0, fmt.Errorf("%w: %s is not in shared memory (file system %#x)", ErrProtocol, what, fs.Type)
	}
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || got&seals != seals {
		return 0, fmt.Errorf("%w: %s is not sealed as it must be (seals %#x, want %#x): %v", ErrProtocol, what, got, seals, err)
	}
	return st.Size, nil
}

// checkWakeSocket verifies that fd is a unix socket of the kind wake-ups
// are sent on (they are sent with MSG_DONTWAIT: never blocking, whatever
// the peer does to the socket's flags).
func checkWakeSocket(fd int) error {
	dom, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err := errors.Join(err1, err2); err != nil || dom != unix.AF_UNIX || typ != unix.SOCK_SEQPACKET {
		return fmt.Errorf("%w: shm wake-up descriptor is not a unix seqpacket socket (domain %d, type %d): %v", ErrProtocol, dom, typ, err)
	}
	return nil
}

// readWithFDs fills p, a set-up message or answer, from uc and returns
// the descriptors that came with it (at most 3 are taken; more close the
// connection's set-up as a protocol error). It fails as soon as the
// magic is wrong, without waiting for the rest.
func readWithFDs(uc *net.UnixConn, p []byte) (fds []int, err error) {
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(p, oob)
	for err == nil && n < len(shmMagic) {
		var k int
		k, err = uc.Read(p[n:len(shmMagic)])
		n += k
	}
	switch {
	case err != nil:
	case string(p[:4]) == AuthMagic:
		err = fmt.Errorf("%w: the peer authenticates (Options.Secret), this end has no secret", ErrProtocol)
	case string(p[:4]) != shmMagic:
		err = fmt.Errorf("%w: shm set-up starts % x, want %q", ErrProtocol, p[:4], shmMagic)
	}
	if oobn > 0 { // the descriptors come with the first bytes
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			if rights, rerr := unix.ParseUnixRights(&m); rerr == nil {
				fds = append(fds, rights...)
			} else if perr == nil {
				perr = rerr
			}
		}
		if perr != nil && err == nil {
			err = fmt.Errorf("%w: shm set-up control message: %w", ErrProtocol, perr)
		}
	}
	if err == nil && flags&unix.MSG_CTRUNC != 0 {
		err = fmt.Errorf("%w: shm set-up with more descriptors than expected", ErrProtocol)
	}
	for err == nil && n < len(p) {
		var k int
		k, err = uc.Read(p[n:])
		n += k
	}
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// socketConn makes a *net.UnixConn of fd (taking it over), in the
// netpoller.
func socketConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "shm-wake")
	nc, err := net.FileConn(f) // a duplicate of fd
	f.Close()
	if err != nil {
		return nil, err
	}
	return nc.(*net.UnixConn), nil
}

// shmSetupError describes a failed set-up step like handshakeIOError.
func shmSetupError(step string, err error) error {
	var local localError
	switch {
	case errors.As(err, &local), errors.Is(err, ErrProtocol):
		return err
	}
	return handshakeIOError(step, "", err)
}
