//go:build linux

package rdma

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The lend segment. Every process that uses shm keeps one memfd, its lend
// segment, from which Shm.NewMsg takes the payloads of large messages (a
// learner's gradient): each connection's set-up hands the segment to the
// peer, which maps it read-only, so that a Send of such a payload writes
// only a 16-byte reference into the ring and the receiver copies the
// payload straight out of the sender's memory (docs/wire.md, "Lent
// payloads").
//
// The segment is a tmpfs memfd sealed against shrinking (and against
// further seals): it only grows, with ftruncate, as NewMsg needs, so that
// a byte below a size once seen stays mapped for good and a receiver that
// checks an extent against the size never faults. Each end maps
// shmLendSpan bytes of it, of which only the first size are used; pages
// are allocated as they are first written.
type lendSegment struct {
	fd   int
	mem  []byte // the mapping, shmLendSpan bytes, read-write
	base uintptr

	mu   sync.Mutex
	size uint64              // the file's size
	top  uint64              // bytes handed out or freed, from 0
	free map[uint64][]uint64 // freed extents by size: their offsets
}

const (
	// shmLendSpan bounds a lend segment: a payload that does not fit
	// travels through the ring as any other.
	shmLendSpan = 1 << 34
	// shmLendMin is the smallest payload, in bytes, NewMsg takes from the
	// lend segment; smaller ones cost less to copy than to wait for.
	shmLendMin = 64 << 10
	// shmLendGrain is the unit of the segment's extents and growth.
	shmLendGrain = 64 << 10
	// shmLendSeals are the seals a lend segment carries.
	shmLendSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
)

// theLendSegment is the process's lend segment, or nil when it cannot be
// made (then every payload goes through the rings).
var theLendSegment = sync.OnceValue(func() *lendSegment {
	fd, err := unix.MemfdCreate("softsync-lend", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, shmLendSeals); err != nil {
		unix.Close(fd)
		return nil
	}
	mem, err := unix.Mmap(fd, 0, shmLendSpan, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		unix.Close(fd)
		return nil
	}
	return &lendSegment{fd: fd, mem: mem, base: uintptr(unsafe.Pointer(unsafe.SliceData(mem))), free: map[uint64][]uint64{}}
})

// newMsg returns a message whose payload of n elements lies in the
// segment, or nil when the segment is full or cannot grow.
func (s *lendSegment) newMsg(n int) *Msg {
	size := (uint64(4*n) + shmLendGrain - 1) &^ (shmLendGrain - 1)
	off, ok := s.alloc(size)
	if !ok {
		return nil
	}
	m, _ := lshells.Get().(*Msg)
	if m == nil {
		m = &Msg{}
	}
	m.Payload = unsafe.Slice((*float32)(unsafe.Pointer(&s.mem[off])), n)
	m.lend, m.lendOff, m.lendSize, m.released = s, off, size, false
	return m
}

// alloc returns the offset of an extent of size bytes: a freed one of
// that size, else the next after top, growing the file to hold it.
func (s *lendSegment) alloc(size uint64) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.free[size]; len(l) > 0 {
		off := l[len(l)-1]
		s.free[size] = l[:len(l)-1]
		return off, true
	}
	end := s.top + size
	if end > shmLendSpan {
		return 0, false
	}
	if end > s.size {
		grow := max(end, min(2*s.size, shmLendSpan))
		if unix.Ftruncate(s.fd, int64(grow)) != nil {
			return 0, false
		}
		s.size = grow
	}
	off := s.top
	s.top = end
	return off, true
}

// lshells recycles the Msg structs of lend-segment messages.
var lshells sync.Pool

// releaseMsg returns m's extent to the segment.
func (s *lendSegment) releaseMsg(m *Msg) {
	off, size := m.lendOff, m.lendSize
	data, wire := m.Data[:0], m.wire[:0]
	*m = Msg{Data: data, wire: wire, released: true}
	lshells.Put(m)
	s.mu.Lock()
	s.free[size] = append(s.free[size], off)
	s.mu.Unlock()
}

// offset returns where b lies in the segment, if it does.
func (s *lendSegment) offset(b []byte) (uint64, bool) {
	if s == nil || len(b) == 0 {
		return 0, false
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return uint64(a - s.base), s.holds(a, uint64(len(b)))
}

// holds reports whether the n bytes at address a lie in the segment's
// mapping.
func (s *lendSegment) holds(a uintptr, n uint64) bool {
	return a >= s.base && uint64(a-s.base) < shmLendSpan && uint64(a-s.base)+n <= shmLendSpan
}

// withFD appends the segment's descriptor, if there is a segment, to fds:
// the descriptors of a set-up message.
func (s *lendSegment) withFD(fds ...int) []int {
	if s == nil {
		return fds
	}
	return append(fds, s.fd)
}

// lendContains reports whether p lies in the process's lend segment.
func lendContains(p unsafe.Pointer) bool {
	s := theLendSegment()
	return s != nil && s.holds(uintptr(p), 1)
}

// peerLend is a peer's lend segment as this end maps it: read-only, and
// read only within the size the file had when last checked.
type peerLend struct {
	fd   int
	mem  []byte
	size uint64 // the file's size when last checked; it never shrinks
}

// checkLendSegment verifies that fd is a lend segment: a tmpfs memfd at
// most shmLendSpan bytes long, sealed against shrinking.
func checkLendSegment(fd int) error {
	size, err := checkMemfd(fd, "shm lend segment", shmLendSeals)
	if err == nil && size > shmLendSpan {
		err = fmt.Errorf("%w: shm lend segment of %d bytes, more than %d", ErrProtocol, size, int64(shmLendSpan))
	}
	return err
}

// mapPeerLend checks and maps a peer's lend segment, taking fd over.
func mapPeerLend(fd int) (*peerLend, error) {
	if err := checkLendSegment(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, shmLendSpan, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		unix.Close(fd)
		return nil, localError{fmt.Errorf("mapping the peer's shm lend segment: %w", err)}
	}
	return &peerLend{fd: fd, mem: mem}, nil
}

// extent returns the n bytes at off of the segment, if the segment holds
// them: off+n at most the file's size, which is read again when the last
// size seen is too small (it only grows).
func (p *peerLend) extent(off, n uint64) ([]byte, error) {
	end := off + n
	if end < off || end > shmLendSpan {
		return nil, fmt.Errorf("%w: lent payload at %d, %d bytes, outside the peer's lend segment", ErrProtocol, off, n)
	}
	if end > p.size {
		var st unix.Stat_t
		if err := unix.Fstat(p.fd, &st); err != nil {
			return nil, fmt.Errorf("%w: shm lend segment: %w", ErrProtocol, err)
		}
		p.size = uint64(st.Size)
		if end > p.size {
			return nil, fmt.Errorf("%w: lent payload at %d, %d bytes, beyond the peer's lend segment of %d", ErrProtocol, off, n, p.size)
		}
	}
	return p.mem[off:end:end], nil
}

func (p *peerLend) close() {
	unix.Munmap(p.mem)
	unix.Close(p.fd)
}
