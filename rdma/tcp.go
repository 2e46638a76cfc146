package rdma

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// TCP is the stream transport: frames (docs/wire.md) over TCP sockets with
// TCP_NODELAY. A message is written with vectored writes (header and data,
// payload, trailer) straight from its payload (CodecNone) or from the
// connection's encode buffer, and read straight into the received Msg's
// payload; the payload checksum is computed piece by piece while each piece
// is in cache (see sendChunk). In steady state neither direction
// allocates. With Options.Secret, every connection authenticates before
// its first frame (see Listen and Dial).
type TCP struct {
	opts   Options
	dialer net.Dialer
}

var _ Network = (*TCP)(nil)

// With payload checksums, a payload is checksummed and written in pieces
// of sendChunk bytes, small enough that a piece is still in the cache when
// the socket copy reads it, and each read asks for at most recvChunk
// bytes, checksummed right after the socket copy wrote them. Without
// checksums, the payload goes to the socket in one vectored write. Pieces
// of 256 KiB, which fit a core's L2 cache, made round trips of 4 and 16
// MiB slower than 1 MiB pieces (`softsync bench transport`): each
// write that fills the socket buffer parks the writer until the reader
// has drained part of it.
const (
	sendChunk = 1 << 20
	recvChunk = 1 << 20
)

// NewTCP returns the TCP transport.
func NewTCP(opts Options) (*TCP, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &TCP{opts: o}, nil
}

// Name returns "tcp".
func (t *TCP) Name() string { return "tcp" }

// NewMsg returns a message from the process-wide pool (package NewMsg):
// TCP sends from and receives into any memory.
func (t *TCP) NewMsg(n int) *Msg { return NewMsg(n) }

var aLongTimeAgo = time.Unix(1, 0)

type tcpConn struct {
	endpoint
	nc     *net.TCPConn
	closed atomic.Bool

	// send side, guarded by sendMu
	wbuf  []byte // header and data
	swire []byte // encoded payload
	vec   net.Buffers
	iov   [3][]byte
	trl   [TrailerSize]byte
	werr  error // sticky fatal send error
	wwait watch

	// receive side, guarded by recvMu
	br    *bufio.Reader
	rwire []byte
	rtrl  [TrailerSize]byte
	rerr  error // sticky fatal receive error
	rwait watch
}

func newTCPConn(nc *net.TCPConn, opts Options) (*tcpConn, error) {
	if err := nc.SetNoDelay(true); err == nil && opts.SocketBuffer > 0 {
		err = errors.Join(nc.SetReadBuffer(opts.SocketBuffer), nc.SetWriteBuffer(opts.SocketBuffer))
		if err != nil {
			nc.Close()
			return nil, &OpError{Op: "dial", Peer: nc.RemoteAddr().String(), Err: err}
		}
	}
	c := &tcpConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), wbuf: make([]byte, 0, 64<<10)}
	c.init(opts, nc.LocalAddr().String(), nc.RemoteAddr().String())
	c.wwait.interrupt = func() { nc.SetWriteDeadline(aLongTimeAgo) }
	c.wwait.reset = func() { nc.SetWriteDeadline(time.Time{}) }
	c.rwait.interrupt = func() { nc.SetReadDeadline(aLongTimeAgo) }
	c.rwait.reset = func() { nc.SetReadDeadline(time.Time{}) }
	return c, nil
}

// watch makes a context's cancellation interrupt blocked socket calls by
// moving the deadline into the past. The registration is kept while calls
// use contexts with the same Done channel, so steady-state calls allocate
// nothing. A deadline error while the context is still live (a leftover
// interruption) is retried by the caller.
type watch struct {
	done      <-chan struct{}
	stop      func() bool
	interrupt func()
	reset     func()
}

func (w *watch) use(ctx context.Context) {
	done := ctx.Done()
	if done == w.done {
		return
	}
	w.release()
	w.done = done
	if done != nil {
		w.stop = context.AfterFunc(ctx, w.interrupt)
	}
}

func (w *watch) release() {
	if w.stop != nil && !w.stop() {
		w.reset()
	}
	w.stop, w.done = nil, nil
}

// interrupted sorts out a deadline error: retry (the context is live: reset
// the deadline and go on) or return ctx's error.
func (w *watch) interrupted(ctx context.Context, err error) (retry bool, cause error) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false, err
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	w.reset()
	return true, nil
}

// streamErr maps socket errors to the package's sentinels.
func streamErr(err error) error {
	switch {
	case errors.Is(err, net.ErrClosed):
		return ErrClosed
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return &joined{ErrClosed, err, "rdma: closed by peer: " + err.Error()}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return truncated
	}
	return err
}

var truncated = &joined{ErrTruncated, io.ErrUnexpectedEOF, ErrTruncated.Error()}

// Transport reports TCP, as requested.
func (c *tcpConn) Transport() TransportInfo {
	t := requested
	t.Name = "tcp"
	return t
}

func (c *tcpConn) Send(ctx context.Context, m *Msg) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	err := c.send(ctx, m)
	m.Release()
	return err
}

func (c *tcpConn) send(ctx context.Context, m *Msg) error {
	switch {
	case c.werr != nil:
		return c.werr
	case c.closed.Load():
		return c.opError("send", ErrClosed, false)
	case ctx.Err() != nil:
		return c.opError("send", ctx.Err(), true)
	}
	h, payload, d, err := c.frame(m, &c.swire)
	if err != nil {
		return err
	}
	sum := !c.opts.NoPayloadChecksum
	c.wbuf = c.wbuf[:HeaderSize]
	PutHeader(c.wbuf, &h)
	c.wbuf = append(c.wbuf, m.Data...)
	var crc uint32
	if sum {
		crc = crc32.Update(0, castagnoli, m.Data)
	}
	c.wwait.use(ctx)
	// Each write carries what is pending (header, data) and one chunk; the
	// last carries the trailer too.
	first := true
	step := len(payload)
	if sum {
		step = sendChunk
	}
	for {
		chunk := payload[:min(len(payload), step)]
		payload = payload[len(chunk):]
		if sum {
			crc = crc32.Update(crc, castagnoli, chunk)
		}
		bufs := append(c.iov[:0], c.wbuf, chunk)
		if len(payload) == 0 {
			binary.LittleEndian.PutUint32(c.trl[:], crc)
			bufs = append(bufs, c.trl[:])
		}
		if n, err := c.writev(ctx, bufs); err != nil {
			unsent(m, c.swire)
			if n == 0 && first && ctx.Err() != nil { // cancelled before any byte left
				return c.opError("send", err, true)
			}
			c.werr = c.opError("send", err, false)
			return c.werr
		}
		first = false
		c.wbuf = c.wbuf[:0]
		if len(payload) == 0 {
			break
		}
	}
	c.countSent(h.Codec, len(m.Payload), len(m.Data), int(h.PayloadLen), d)
	return nil
}

// writev writes bufs whole, retrying after leftover interruptions, and
// returns how many bytes went out.
func (c *tcpConn) writev(ctx context.Context, bufs [][]byte) (int64, error) {
	c.vec = bufs
	var total int64
	for len(c.vec) > 0 {
		n, err := c.vec.WriteTo(c.nc)
		total += n
		if err == nil {
			break
		}
		retry, cause := c.wwait.interrupted(ctx, err)
		if !retry {
			return total, streamErr(cause)
		}
	}
	return total, nil
}

func (c *tcpConn) Recv(ctx context.Context) (*Msg, error) {
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
	c.rwait.use(ctx)
	// Wait for a whole header without consuming it: a cancellation here
	// leaves the stream in frame sync.
	var hb []byte
	for {
		var err error
		if hb, err = c.br.Peek(HeaderSize); err == nil {
			break
		}
		retry, cause := c.rwait.interrupted(ctx, err)
		switch {
		case retry:
			continue
		case cause != err: // cancelled
			return nil, c.opError("recv", cause, true)
		case errors.Is(err, io.EOF) && len(hb) == 0:
			return nil, c.fatal(peerGone)
		case len(hb) >= len(Magic) && string(hb[:4]) != Magic:
			return nil, c.fatal(badMagic(hb)) // what came is not a frame anyway
		}
		return nil, c.fatal(streamErr(err))
	}
	h, err := ParseHeader(hb, &c.lim)
	if err != nil && !skippable(err) {
		return nil, c.fatal(err)
	}
	c.br.Discard(HeaderSize)
	if err != nil {
		if serr := c.skip(ctx, h.FrameLen()-HeaderSize); serr != nil {
			return nil, c.fatal(serr)
		}
		c.countDropped()
		return nil, c.opError("recv", err, true)
	}
	return c.readMsg(ctx, c, &h, &c.rwire, c.rtrl[:])
}

// crcResidue is CRC32C(x ‖ le32(CRC32C(x))) for any x.
var crcResidue = crc32.Update(0, castagnoli, []byte{0, 0, 0, 0})

// readFull fills p and returns crc updated (if sum) over each piece as it
// arrives, while it is still in cache. Each read asks for at most
// recvChunk bytes.
// readPayload is readFull: a TCP payload is on the stream.
func (c *tcpConn) readPayload(ctx context.Context, p []byte, sum bool, crc uint32) (uint32, error) {
	return c.readFull(ctx, p, sum, crc)
}

func (c *tcpConn) readFull(ctx context.Context, p []byte, sum bool, crc uint32) (uint32, error) {
	for len(p) > 0 {
		n, err := c.br.Read(p[:min(len(p), recvChunk)])
		if sum {
			crc = crc32.Update(crc, castagnoli, p[:n])
		}
		p = p[n:]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			retry, cause := c.rwait.interrupted(ctx, err)
			if !retry {
				return crc, streamErr(cause)
			}
		}
	}
	return crc, nil
}

// skip discards n bytes of a rejected frame.
func (c *tcpConn) skip(ctx context.Context, n int) error {
	for n > 0 {
		d, err := c.br.Discard(n)
		n -= d
		if err != nil {
			retry, cause := c.rwait.interrupted(ctx, err)
			if !retry {
				return streamErr(cause)
			}
		}
	}
	return nil
}

// fatal records a receive error that cost the stream its frame sync.
func (c *tcpConn) fatal(err error) error { return c.lostSync(&c.rerr, err) }

func (c *tcpConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	err := c.nc.Close()
	c.sendMu.Lock()
	c.wwait.release()
	c.sendMu.Unlock()
	c.recvMu.Lock()
	c.rwait.release()
	c.recvMu.Unlock()
	c.closeCodecs()
	if err != nil {
		return &OpError{Op: "close", Peer: c.remote, Err: err}
	}
	return nil
}
