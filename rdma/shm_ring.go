//go:build linux

package rdma

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// Segment layout of a shm connection (docs/wire.md, "Over shared
// memory"). All integers are little-endian; the index words are updated
// with atomic instructions. Ring 0 carries the dialer's frames to the
// listener, ring 1 the listener's to the dialer.
//
//	  off  size
//	    0     4  magic "SSYM"
//	    4     1  version (2)
//	    5     3  0
//	    8     8  ring size R: a power of two from shmMinRing to shmMaxRing
//	   16   112  0
//	  128   128  ring 0, producer line: tail (8), producer sleeps (4), producer closed (4), producer wakes at (8)
//	  256   128  ring 0, consumer line: head (8), consumer sleeps (4), 0 (4), consumer wakes at (8)
//	  384   128  ring 1, producer line
//	  512   128  ring 1, consumer line
//	  640  3456  0
//	 4096     R  ring 0 data
//	4096+R    R  ring 1 data
//
// tail counts the bytes the producer has written into the ring since
// the connection began, head the bytes the consumer has read; both only
// grow, modulo 2⁶⁴, and byte i of the stream lies at data[i mod R]. Each
// is written by one end only and read by the other, so that a frame byte
// becomes visible with the tail store that covers it, and its place is
// free again with the head store that covers it. The sleep words say
// that an end is about to block on its wake-up socket: the producer
// waiting for room, the consumer for bytes; its "wakes at" word, stored
// before the sleep word, says how far the other end's index must have
// come (the head that frees the room the producer waits for, the tail
// that covers the bytes the consumer waits for). The other end, once
// its index has reached that point, clears the sleep word and then sends
// a wake-up; before that it lets the sleeper sleep on, so that a frame
// larger than a piece wakes its reader once, not once per piece.
const (
	shmMagic    = "SSYM"
	shmVersion  = 3
	shmHeader   = 4096
	shmLine     = 128 // two cache lines: adjacent-line prefetch never shares one
	shmRingCtl  = 128 // offset of ring 0's producer line
	shmMinRing  = 4 << 10
	shmMaxRing  = 1 << 30
	shmOffTail  = 0
	shmOffSleep = 8
	shmOffClose = 12
	shmOffWake  = 16
	shmOffHead  = 0
)

// shmSegSize is the size of a segment with rings of r bytes.
func shmSegSize(r int) int { return shmHeader + 2*r }

// shmRingOK reports whether r is a valid ring size.
func shmRingOK(r uint64) bool {
	return r >= shmMinRing && r <= shmMaxRing && bits.OnesCount64(r) == 1
}

// putShmHeader writes the segment header for rings of r bytes.
func putShmHeader(seg []byte, r int) {
	copy(seg, shmMagic)
	seg[4] = shmVersion
	binary.LittleEndian.PutUint64(seg[8:], uint64(r))
}

// checkShmHeader verifies that seg, as mapped, is a segment with rings of
// r bytes, and is that long.
func checkShmHeader(seg []byte, r int) error {
	switch {
	case len(seg) != shmSegSize(r):
		return fmt.Errorf("%w: shared segment of %d bytes, want %d for rings of %d", ErrProtocol, len(seg), shmSegSize(r), r)
	case string(seg[:4]) != shmMagic || seg[4] != shmVersion:
		return fmt.Errorf("%w: shared segment starts % x, want %q version %d", ErrProtocol, seg[:5], shmMagic, shmVersion)
	case binary.LittleEndian.Uint64(seg[8:]) != uint64(r):
		return fmt.Errorf("%w: shared segment header says rings of %d bytes, the set-up %d", ErrProtocol, binary.LittleEndian.Uint64(seg[8:]), r)
	}
	return nil
}

// shmRing is one ring of a mapped segment: pointers to its words and its
// data. Nothing read through it is trusted: the peer may write anything
// at any time.
type shmRing struct {
	data   []byte
	mask   uint64
	tail   *atomic.Uint64 // producer's
	psleep *atomic.Uint32 // producer waits for room; the consumer clears it
	pwake  *atomic.Uint64 // the head at which the sleeping producer has its room
	closed *atomic.Uint32 // the producer's end is closed (its connection, both directions)
	head   *atomic.Uint64 // consumer's
	csleep *atomic.Uint32 // consumer waits for bytes; the producer clears it
	cwake  *atomic.Uint64 // the tail at which the sleeping consumer has its bytes
}

// ringOf returns ring i (0 or 1) of seg, whose rings have r bytes; seg
// must be shmSegSize(r) long and 8-byte aligned.
func ringOf(seg []byte, r, i int) shmRing {
	p := shmRingCtl + 2*i*shmLine
	c := p + shmLine
	u64 := func(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&seg[off])) }
	u32 := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&seg[off])) }
	d := shmHeader + i*r
	return shmRing{data: seg[d : d+r : d+r], mask: uint64(r - 1),
		tail: u64(p + shmOffTail), psleep: u32(p + shmOffSleep), closed: u32(p + shmOffClose), pwake: u64(p + shmOffWake),
		head: u64(c + shmOffHead), csleep: u32(c + shmOffSleep), cwake: u64(c + shmOffWake)}
}

// ringReader is the consumer's side of a ring; head and tail are its
// private copies, so that the peer's words are read once per refresh and
// validated before use.
type ringReader struct {
	ring shmRing
	head uint64 // bytes consumed; published with release
	tail uint64 // the last tail read and found valid
}

// poll reads the producer's tail and returns how many bytes are readable.
// A tail that went backwards or ahead by more than the ring holds is an
// error matching ErrProtocol, and the reader's state is left as it was.
func (r *ringReader) poll() (uint64, error) {
	t := r.ring.tail.Load()
	size := uint64(len(r.ring.data))
	// r.head ≤ r.tail ≤ r.head+size holds; a valid t moves tail forward,
	// at most to head+size.
	if t-r.tail > size-(r.tail-r.head) {
		return r.tail - r.head, fmt.Errorf("%w: the peer's ring tail %d is not in [%d, %d]", ErrProtocol, t, r.tail, r.head+size)
	}
	r.tail = t
	return t - r.head, nil
}

// readable is how many bytes the last poll found and have not been
// consumed.
func (r *ringReader) readable() uint64 { return r.tail - r.head }

// copyOut copies the next len(p) bytes, which must be readable, into p.
func (r *ringReader) copyOut(p []byte) {
	off := r.head & r.ring.mask
	n := copy(p, r.ring.data[off:])
	copy(p[n:], r.ring.data)
	r.head += uint64(len(p))
}

// discard consumes n readable bytes without reading them.
func (r *ringReader) discard(n uint64) { r.head += n }

// release publishes the head and reports whether the producer sleeps
// and must be woken: the head has reached its "wakes at".
func (r *ringReader) release() (wake bool) {
	r.ring.head.Store(r.head)
	return due(r.ring.psleep, r.ring.pwake, r.head)
}

// due reports whether an end that has stored its index at pos must wake
// the other end, which sleeps (sleep set) until the index reaches its
// wake word: if so, it clears sleep (and the caller sends the wake-up).
// The wake word is the peer's, untrusted: any value only decides when
// the peer itself is woken.
func due(sleep *atomic.Uint32, at *atomic.Uint64, pos uint64) bool {
	return sleep.Load() != 0 && int64(pos-at.Load()) >= 0 && sleep.Swap(0) != 0
}

// ringWriter is the producer's side of a ring.
type ringWriter struct {
	ring shmRing
	tail uint64 // bytes written; published with publish
	head uint64 // the last head read and found valid
}

// room reads the consumer's head and returns how many bytes may be
// written. A head that went backwards or past the tail is an error
// matching ErrProtocol, and the writer's state is left as it was.
func (w *ringWriter) room() (uint64, error) {
	h := w.ring.head.Load()
	size := uint64(len(w.ring.data))
	// w.head ≤ w.tail holds; a valid h lies in [w.head, w.tail].
	if w.tail-h > w.tail-w.head {
		return size - (w.tail - w.head), fmt.Errorf("%w: the peer's ring head %d is not in [%d, %d]", ErrProtocol, h, w.head, w.tail)
	}
	w.head = h
	return size - (w.tail - h), nil
}

// writable is how many bytes the last room call left free and have not
// been written.
func (w *ringWriter) writable() uint64 { return uint64(len(w.ring.data)) - (w.tail - w.head) }

// copyIn writes p, which must fit the writable bytes, after the tail.
func (w *ringWriter) copyIn(p []byte) {
	off := w.tail & w.ring.mask
	n := copy(w.ring.data[off:], p)
	copy(w.ring.data, p[n:])
	w.tail += uint64(len(p))
}

// publish makes the bytes written visible and reports whether the
// consumer sleeps and must be woken: the tail has reached its "wakes at".
func (w *ringWriter) publish() (wake bool) {
	w.ring.tail.Store(w.tail)
	return due(w.ring.csleep, w.ring.cwake, w.tail)
}
