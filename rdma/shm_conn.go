//go:build linux

package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// shmConn is one end of a shm connection: frames (docs/wire.md) through
// the two rings of a shared segment (shm_ring.go), one per direction.
//
// Copies. Send writes the frame into the ring straight from the message
// (the payload of CodecNone, else the connection's encode buffer), Recv
// reads it out of the ring straight into the received message (through
// the decode buffer for codecs other than none): one copy on each side,
// each in pieces of shmPiece bytes, checksummed while they are in cache
// when the connection checksums payloads (NewShm's never do). The
// receiver checksums and parses its own copy, never the ring, which
// the peer could change meanwhile; and a received payload never lies in
// shared memory, so that no Msg is exposed to the peer's writes.
//
// Wake-ups. An end that finds nothing to read (or no room to write)
// polls the ring for a short while, then sets its sleep word in the ring,
// polls once more, and blocks in the netpoller on a socket of its own
// until the peer, which clears the sleep word whenever it makes progress,
// sends a byte there: "bytes written" wake-ups travel over the
// connection's unix socket, "room freed" ones over a socket pair whose
// receiving end the sleeper created and keeps. Both sockets report the
// peer's end closed (its Close, or its process gone) as end of file; the
// peer's closed word in the segment says the same without waiting, so
// that Send fails and Recv ends at once after an orderly Close.
type shmConn struct {
	endpoint
	info  TransportInfo
	nonce [nonceSize]byte // the set-up's (auto's offer), or zero

	seg    []byte // the segment
	mapped bool   // seg is a mapping of this end's, unmapped by Close
	// lend is this process's lend segment, which the peer maps (nil:
	// none); peerLend the peer's as this end maps it (nil: none).
	lend     *lendSegment
	peerLend *peerLend
	piece    uint64 // shmPiece, or a quarter of a smaller ring
	tx       ringWriter
	rx       ringReader
	own      *atomic.Uint32 // this end's closed word (in its producer line)
	peer     *atomic.Uint32 // the peer's
	closed   atomic.Bool
	gone     atomic.Bool   // a wake-up socket found the peer's end closed
	wakes    atomic.Uint64 // wake-ups this end has sent, both directions

	data     *net.UnixConn // bytes-written wake-ups: in from the peer, out to it
	room     *net.UnixConn // room-freed wake-ups from the peer
	peerRoom int           // the peer's room socket, where ours go (-1: none)
	dataRC   syscall.RawConn
	wakeData func(fd uintptr) // sends a bytes-written wake-up on data
	one      [1]byte

	// send side, guarded by sendMu
	hbuf  [HeaderSize]byte
	sref  [shmRefSize]byte // a lent payload's reference
	swire []byte
	trl   [TrailerSize]byte
	werr  error
	wrote bool   // a byte of the current frame is in the ring
	unpub uint64 // bytes written and not yet published
	wroom shmWaiter

	// receive side, guarded by recvMu
	lent  bool // the frame being read carries a lent payload's reference
	rref  [shmRefSize]byte
	rhdr  [HeaderSize]byte
	rwire []byte
	rtrl  [TrailerSize]byte
	rerr  error
	unrel uint64 // bytes consumed and not yet released
	rdata shmWaiter
}

// Tuning. A piece (shmPiece, at most a quarter of the ring) is what is
// copied and checksummed at a time, and the most that is written (read)
// before the tail (head) is published; an end polls the ring for shmSpin
// before it sleeps. It keeps its thread while it polls: yielding would
// hand the goroutine to another thread at every poll when the process
// has an idle P, each time a context switch, on cores the learners need.
const (
	shmPiece = 128 << 10
	shmSpin  = 10 * time.Microsecond
)

// newShmConn makes the end side (0: dialer, 1: listener) of a connection
// over seg, whose rings have r bytes. data and room are its wake-up
// sockets and peerRoom the peer's room socket; with data nil (tests) the
// peer counts as gone once the ring runs dry.
func newShmConn(seg []byte, r, side int, data, room *net.UnixConn, peerRoom int, opts Options, local, remote string) *shmConn {
	c := &shmConn{seg: seg, data: data, room: room, peerRoom: peerRoom, piece: min(shmPiece, uint64(r)/4)}
	c.init(opts, local, remote)
	c.info = requested
	c.info.Name = "shm"
	out, in := ringOf(seg, r, side), ringOf(seg, r, 1-side)
	c.tx, c.rx = ringWriter{ring: out}, ringReader{ring: in}
	c.own, c.peer = out.closed, in.closed
	c.one[0] = 1
	c.rdata = shmWaiter{c: c, sock: data, sleep: in.csleep, wakeAt: in.cwake, poll: c.rx.poll, flush: c.releaseRx,
		at: func(want uint64) uint64 { return c.rx.head + min(want, uint64(r)) }}
	c.wroom = shmWaiter{c: c, sock: room, sleep: out.psleep, wakeAt: out.pwake, poll: c.tx.room, flush: c.publishTx,
		at: func(want uint64) uint64 { return c.tx.tail + min(want, uint64(r)) - uint64(r) }}
	c.rdata.init()
	c.wroom.init()
	if data != nil {
		c.dataRC, _ = data.SyscallConn()
		c.wakeData = func(fd uintptr) { wake(int(fd), c.one[:]) }
	}
	return c
}

// wake sends one byte on a wake-up socket without ever blocking: when
// the socket is full, the peer has wake-ups to read anyway, and when the
// peer has gone, there is no one to wake.
func wake(fd int, b []byte) {
	for unix.Sendto(fd, b, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil) == unix.EINTR {
	}
}

// drain reads the wake-ups pending on fd, a socket of this end's, and
// marks the peer gone at end of file (or a reset, for a peer that closed
// with wake-ups unread).
func (c *shmConn) drain(fd int, buf []byte) {
	for {
		n, err := unix.Read(fd, buf)
		switch {
		case err == unix.EINTR:
			continue
		case err == nil && n == 0, err != nil && err != unix.EAGAIN:
			c.gone.Store(true)
			return
		case err != nil || n < len(buf):
			return
		}
	}
}

// peerEnded reports whether the peer will write nothing more: it closed
// (its closed word) or its end of a wake-up socket was closed.
func (c *shmConn) peerEnded() bool { return c.gone.Load() || c.peer.Load() != 0 }

// Transport reports shm, and why (auto's choice, or "requested").
func (c *shmConn) Transport() TransportInfo { return c.info }

// errPeerGone is shmWaiter's word that the peer's end
// has closed; Recv makes it the end of the stream or a truncated frame,
// Send a closed connection.
var errPeerGone = errors.New("rdma: shm peer gone")

// peerClosed is Send's error once the peer's end has closed.
var peerClosed = &joined{ErrClosed, errPeerGone, "rdma: closed by peer"}

// shmWaiter blocks one direction of a connection: Recv waits for bytes
// on the data socket, Send for room on the room socket. Its methods run
// under the direction's mutex.
type shmWaiter struct {
	c      *shmConn
	sock   *net.UnixConn // nil: no peer to wait for (tests)
	rc     syscall.RawConn
	w      watch
	sleep  *atomic.Uint32         // this end's sleep word for this direction
	wakeAt *atomic.Uint64         // this end's "wakes at" word for this direction
	poll   func() (uint64, error) // the bytes readable, or the room
	flush  func()                 // publishes what this direction holds back
	// at returns the peer's index (tail, head) at which want bytes, at
	// most a ring's worth, are readable (may be written), from this end's
	// own, published, index.
	at    func(want uint64) uint64
	need  uint64
	err   error              // poll's error, seen by ready
	ready func(uintptr) bool // w.readyFD, made once
	buf   [64]byte
}

func (w *shmWaiter) init() {
	w.ready = w.readyFD
	if w.sock == nil {
		return
	}
	w.rc, _ = w.sock.SyscallConn()
	w.w.interrupt = func() { w.sock.SetReadDeadline(aLongTimeAgo) }
	w.w.reset = func() { w.sock.SetReadDeadline(time.Time{}) }
}

// wait returns once need bytes are readable (or may be written), with
// how many, or fails: errPeerGone (with the bytes readable), a context
// error, ErrClosed, an ErrProtocol error. It flushes what the direction
// holds back first, for the peer may be waiting for it; polls for
// shmSpin; and then sleeps on its socket until the peer has made want
// (≥ need; at most a ring's worth counts) bytes readable (room for want
// bytes): the rest of the frame part that is being read (written), so
// that the peer does not wake it for every piece. want must come: the
// peer only wakes it earlier when it ends.
func (w *shmWaiter) wait(ctx context.Context, need, want uint64) (uint64, error) {
	w.flush()
	c := w.c
	var start time.Time
	for spin := 0; ; spin++ {
		gone := c.peerEnded() // before the poll: the peer's last bytes precede its close
		n, err := w.poll()
		switch {
		case err != nil:
			return n, err
		case n >= need:
			return n, nil
		case c.closed.Load():
			return n, ErrClosed
		case gone:
			return n, errPeerGone
		case ctx.Err() != nil:
			return n, ctx.Err()
		case w.sock == nil:
			c.gone.Store(true)
			continue
		case spin == 0:
			start = time.Now()
			continue
		case time.Since(start) < shmSpin:
			continue
		}
		w.need, w.err = need, nil
		w.wakeAt.Store(w.at(want)) // before readyFD's sleep word
		w.w.use(ctx)
		if err := w.rc.Read(w.ready); err != nil {
			// The checks above sort out a cancellation, a Close or a
			// leftover interruption (retried); anything else ends here.
			if retry, cause := w.w.interrupted(ctx, err); !retry && cause == err &&
				!errors.Is(err, net.ErrClosed) && !c.closed.Load() {
				return n, err
			}
		}
	}
}

// readyFD is the condition of a wait blocked on the socket fd; the
// netpoller calls it before every sleep. It drains the wake-ups, and
// before it lets the wait sleep, it sets the sleep word and polls once
// more: the peer, which clears the word after it makes progress, then
// either sees it set and sends a wake-up, or made progress before the
// poll.
func (w *shmWaiter) readyFD(fd uintptr) bool {
	w.c.drain(int(fd), w.buf[:])
	if w.done() {
		return true
	}
	w.sleep.Store(1)
	return w.done()
}

func (w *shmWaiter) done() bool {
	gone := w.c.peerEnded()
	n, err := w.poll()
	if err != nil {
		w.err = err
		return true
	}
	return n >= w.need || gone || w.c.closed.Load()
}

// publishTx publishes what was written and wakes a sleeping consumer.
func (c *shmConn) publishTx() {
	if c.unpub == 0 {
		return
	}
	c.unpub = 0
	if c.tx.publish() && c.data != nil {
		c.wakes.Add(1)
		c.dataRC.Control(c.wakeData)
	}
}

// releaseRx releases what was read and wakes a sleeping producer.
func (c *shmConn) releaseRx() {
	if c.unrel == 0 {
		return
	}
	c.unrel = 0
	if c.rx.release() && c.peerRoom >= 0 {
		c.wakes.Add(1)
		wake(c.peerRoom, c.one[:])
	}
}

func (c *shmConn) Send(ctx context.Context, m *Msg) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	err := c.send(ctx, m)
	m.Release()
	return err
}

func (c *shmConn) send(ctx context.Context, m *Msg) error {
	switch {
	case c.werr != nil:
		return c.werr
	case c.closed.Load():
		return c.opError("send", ErrClosed, false)
	case c.peerEnded():
		return c.opError("send", peerClosed, false)
	case ctx.Err() != nil:
		return c.opError("send", ctx.Err(), true)
	}
	h, payload, d, err := c.frame(m, &c.swire)
	if err != nil {
		return err
	}
	sum := !c.opts.NoPayloadChecksum
	off, lent := uint64(0), false
	if h.Codec == CodecNone {
		off, lent = c.lend.offset(payload)
	}
	if lent {
		h.Flags |= flagLent
	}
	PutHeader(c.hbuf[:], &h)
	c.wrote = false
	var crc uint32
	err = c.write(ctx, c.hbuf[:], false, &crc)
	if err == nil {
		err = c.write(ctx, m.Data, sum, &crc)
	}
	switch {
	case err != nil:
	case lent:
		if sum {
			crc = crc32.Update(crc, castagnoli, payload)
		}
		binary.LittleEndian.PutUint64(c.sref[:], off)
		binary.LittleEndian.PutUint64(c.sref[8:], uint64(len(payload)))
		err = c.write(ctx, c.sref[:], false, &crc)
	default:
		err = c.write(ctx, payload, sum, &crc)
	}
	if err == nil {
		binary.LittleEndian.PutUint32(c.trl[:], crc)
		err = c.write(ctx, c.trl[:], false, &crc)
	}
	if err == nil && lent && !m.held {
		err = c.awaitLent(ctx)
	}
	if err != nil {
		unsent(m, c.swire)
		if errors.Is(err, errPeerGone) {
			err = peerClosed
		}
		fatal := c.wrote || !isAny(err, context.Canceled, context.DeadlineExceeded)
		err = c.opError("send", err, !fatal)
		if fatal && !errors.Is(err, ErrClosed) {
			c.werr = err
		}
		return err
	}
	c.publishTx()
	c.countSent(h.Codec, len(m.Payload), len(m.Data), int(h.PayloadLen), d)
	return nil
}

// awaitLent publishes a frame whose payload is lent and waits until the
// peer has read all of it, which it does once it has copied the payload
// out of the lend segment: the ring is then empty, as nothing else is
// written meanwhile. A wait that ends otherwise (cancelled, the peer
// gone, Close) leaves the peer perhaps copying still: it marks this end
// closed first, and a receiver that finds the sender's end closed once
// it has copied a lent payload drops the frame as truncated, so that it
// never delivers one the lender changed in the middle of its copy.
func (c *shmConn) awaitLent(ctx context.Context) error {
	r := uint64(len(c.tx.ring.data))
	_, err := c.wroom.wait(ctx, r, r)
	if err != nil {
		c.own.Store(1)
	}
	return err
}

// write copies p into the ring in pieces, updating crc (if sum) over each
// piece before it is copied, and publishes every piece.
func (c *shmConn) write(ctx context.Context, p []byte, sum bool, crc *uint32) error {
	for len(p) > 0 {
		want := min(uint64(len(p)), c.piece)
		free := c.tx.writable()
		if free < want {
			var err error
			if free, err = c.wroom.wait(ctx, want, uint64(len(p))); err != nil {
				return err
			}
		}
		piece := p[:min(uint64(len(p)), free, c.piece)]
		if sum {
			*crc = crc32.Update(*crc, castagnoli, piece)
		}
		c.tx.copyIn(piece)
		c.wrote = true
		p = p[len(piece):]
		if c.unpub += uint64(len(piece)); c.unpub >= c.piece {
			c.publishTx()
		}
	}
	return nil
}

func (c *shmConn) Recv(ctx context.Context) (*Msg, error) {
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	switch {
	case c.rerr != nil:
		return nil, c.rerr
	case c.closed.Load():
		return nil, c.opError("recv", ErrClosed, false)
	case ctx.Err() != nil:
		return nil, c.opError("recv", ctx.Err(), true)
	}
	// Wait for a whole header before consuming anything: a cancellation
	// here leaves the ring in frame sync.
	n, err := c.rdata.wait(ctx, HeaderSize, HeaderSize)
	if err != nil {
		switch {
		case errors.Is(err, errPeerGone) && n == 0:
			return nil, c.fatal(peerGone)
		case errors.Is(err, errPeerGone):
			return nil, c.fatal(truncated)
		case isAny(err, context.Canceled, context.DeadlineExceeded):
			return nil, c.opError("recv", err, true)
		case errors.Is(err, ErrClosed):
			return nil, c.opError("recv", err, false)
		}
		return nil, c.fatal(err)
	}
	c.rx.copyOut(c.rhdr[:])
	c.unrel += HeaderSize
	h, err := parseHeader(c.rhdr[:], &c.lim, FlagNoPayloadCRC|flagLent)
	if err != nil && !skippable(err) {
		return nil, c.fatal(err)
	}
	c.lent = h.Flags&flagLent != 0
	if c.lent && c.peerLend == nil {
		return nil, c.fatal(fmt.Errorf("%w: a lent payload from a peer that gave no lend segment", ErrProtocol))
	}
	if err != nil {
		if serr := c.skip(ctx, uint64(shmFrameLen(&h)-HeaderSize)); serr != nil {
			return nil, c.fatal(serr)
		}
		c.releaseRx()
		c.countDropped()
		return nil, c.opError("recv", err, true)
	}
	return c.readMsg(ctx, c, &h, &c.rwire, c.rtrl[:])
}

// readFull fills p from the ring in pieces and returns crc updated (if
// sum) over each piece once it is copied; it releases every piece, and
// at the end.
func (c *shmConn) readFull(ctx context.Context, p []byte, sum bool, crc uint32) (uint32, error) {
	for len(p) > 0 {
		avail := c.rx.readable()
		if avail == 0 {
			var err error
			if avail, err = c.rdata.wait(ctx, 1, uint64(len(p))); err != nil {
				return crc, midFrame(err)
			}
		}
		piece := p[:min(uint64(len(p)), avail, c.piece)]
		c.rx.copyOut(piece)
		if sum {
			crc = crc32.Update(crc, castagnoli, piece)
		}
		p = p[len(piece):]
		if c.unrel += uint64(len(piece)); c.unrel >= c.piece {
			c.releaseRx()
		}
	}
	c.releaseRx()
	return crc, nil
}

// readPayload reads a frame's payload into p: out of the ring, or for a
// lent payload, out of the peer's lend segment at the reference the ring
// carries. A lent payload is dropped, and the stream ends as truncated,
// when the sender's end is found closed after the copy: its Send gave up
// waiting and may have changed the payload meanwhile (awaitLent).
func (c *shmConn) readPayload(ctx context.Context, p []byte, sum bool, crc uint32) (uint32, error) {
	if !c.lent {
		return c.readFull(ctx, p, sum, crc)
	}
	if _, err := c.readFull(ctx, c.rref[:], false, 0); err != nil {
		return crc, err
	}
	off, n := binary.LittleEndian.Uint64(c.rref[:]), binary.LittleEndian.Uint64(c.rref[8:])
	if n != uint64(len(p)) {
		return crc, fmt.Errorf("%w: lent payload of %d bytes, the header says %d", ErrProtocol, n, len(p))
	}
	src, err := c.peerLend.extent(off, n)
	if err != nil {
		return crc, err
	}
	if !sum { // in one copy, spread over a few cores if large
		p = p[copyPar(p, src):]
	}
	for len(p) > 0 {
		k := copy(p[:min(uint64(len(p)), c.piece)], src)
		if sum {
			crc = crc32.Update(crc, castagnoli, p[:k])
		}
		p, src = p[k:], src[k:]
	}
	switch {
	case c.peer.Load() != 0:
		return crc, truncated
	case c.closed.Load():
		return crc, ErrClosed
	}
	return crc, nil
}

// shmFrameLen is the number of bytes the frame h describes takes in the
// ring: a lent payload's reference instead of the payload.
func shmFrameLen(h *Header) int {
	if h.Flags&flagLent != 0 {
		return HeaderSize + int(h.DataLen) + shmRefSize + TrailerSize
	}
	return h.FrameLen()
}

// skip consumes the n bytes of a rejected frame.
func (c *shmConn) skip(ctx context.Context, n uint64) error {
	for n > 0 {
		avail := c.rx.readable()
		if avail == 0 {
			var err error
			if avail, err = c.rdata.wait(ctx, 1, n); err != nil {
				return midFrame(err)
			}
		}
		k := min(n, avail)
		c.rx.discard(k)
		n -= k
		if c.unrel += k; c.unrel >= c.piece {
			c.releaseRx()
		}
	}
	return nil
}

// midFrame is the error of a wait in the middle of a frame: the peer's
// end closed there is a truncated frame.
func midFrame(err error) error {
	if errors.Is(err, errPeerGone) {
		return truncated
	}
	return err
}

// fatal records a receive error that cost the ring its frame sync.
func (c *shmConn) fatal(err error) error { return c.lostSync(&c.rerr, err) }

// Close ends both directions: it marks this end closed in the segment
// (the peer's Recv ends after the frames already written, its Send
// fails), closes the wake-up sockets (which unblocks this end's waits
// and wakes the peer's), waits for Send and Recv to leave the segment,
// and unmaps it.
func (c *shmConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.own.Store(1)
	var err error
	if c.data != nil {
		err = c.data.Close()
		c.room.Close()
	}
	c.sendMu.Lock()
	c.wroom.w.release()
	c.sendMu.Unlock()
	c.recvMu.Lock()
	c.rdata.w.release()
	if c.peerRoom >= 0 {
		unix.Close(c.peerRoom)
		c.peerRoom = -1
	}
	if c.peerLend != nil {
		c.peerLend.close()
		c.peerLend = nil
	}
	c.recvMu.Unlock()
	c.closeCodecs()
	if c.mapped {
		if uerr := unix.Munmap(c.seg); err == nil {
			err = uerr
		}
	}
	if err != nil {
		return &OpError{Op: "close", Peer: c.remote, Err: err}
	}
	return nil
}
