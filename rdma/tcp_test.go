package rdma_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transporttest"
)

// The magics are constants and DefaultLimits a function: no importer can
// change them for the rest of the process.
const _, _ = rdma.Magic, rdma.AuthMagic

var _ func() rdma.Limits = rdma.DefaultLimits

// TestConstants: the frame and handshake magics are the bytes docs/wire.md
// gives, and each DefaultLimits is a value of its own.
func TestConstants(t *testing.T) {
	if rdma.Magic != "SSYF" || rdma.AuthMagic != "SSYA" {
		t.Errorf("magics %q and %q, docs/wire.md says SSYF and SSYA", rdma.Magic, rdma.AuthMagic)
	}
	lim := rdma.DefaultLimits()
	lim.MaxData = 1
	if got := rdma.DefaultLimits(); got.MaxElems != 1<<26 || got.MaxData != 1<<20 || got.Job != 0 {
		t.Errorf("DefaultLimits() = %+v after a caller changed its copy", got)
	}
}

// rawPeer connects a plain socket to a TCP listener and returns it with
// the accepted rdma connection.
func rawPeer(t *testing.T, opts rdma.Options) (net.Conn, rdma.Conn) {
	t.Helper()
	n, err := rdma.NewTCP(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := n.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raw, err := net.Dial("tcp", ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close(); c.Close() })
	return raw, c
}

func frame(h rdma.Header, payload []byte) []byte {
	return rdma.AppendFrame(nil, h, nil, payload)
}

func f32le(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func recvCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestTCPRecoverable: frames that are well framed but bad are skipped with
// a recoverable error, counted, and the next frame arrives intact.
func TestTCPRecoverable(t *testing.T) {
	raw, c := rawPeer(t, rdma.Options{Job: 4})
	good := frame(rdma.Header{Job: 4, Elems: 2, Seq: 77}, f32le(1.5, -2))
	badCRC := frame(rdma.Header{Job: 4, Elems: 2}, f32le(1, 2))
	badCRC[len(badCRC)-6] ^= 1
	noCRC := frame(rdma.Header{Job: 4, Elems: 2, Flags: rdma.FlagNoPayloadCRC}, f32le(1, 2))
	noCRC[len(noCRC)-1] = 1 // a frame without checksum must have a zero trailer
	enc := rdma.NewEncoder()
	bomb, _ := enc.Encode(nil, rdma.Codec{ID: rdma.CodecZstd}, nil, make([]float32, 1<<20))
	topkBad := append(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 5), 5), f32le(1, 2)...)
	cases := []struct {
		name  string
		frame []byte
		err   error
	}{
		{"checksum", badCRC, rdma.ErrChecksum},
		{"trailer without checksum", noCRC, rdma.ErrChecksum},
		{"unknown codec", frame(rdma.Header{Job: 4, Elems: 2, Codec: 42}, f32le(1, 2)), rdma.ErrUnknownCodec},
		{"wrong job", frame(rdma.Header{Job: 5, Elems: 2}, f32le(1, 2)), rdma.ErrWrongJob},
		{"length", frame(rdma.Header{Job: 4, Elems: 3}, f32le(1, 2)), rdma.ErrBadLength},
		{"zstd bomb", frame(rdma.Header{Job: 4, Elems: 1000, Codec: rdma.CodecZstd}, bomb), rdma.ErrCorrupt},
		{"topk indices", frame(rdma.Header{Job: 4, Elems: 10, Codec: rdma.CodecTopK}, topkBad), rdma.ErrCorrupt},
	}
	for i, tc := range cases {
		if _, err := raw.Write(append(tc.frame, good...)); err != nil {
			t.Fatal(err)
		}
		_, err := c.Recv(recvCtx(t))
		if !errors.Is(err, tc.err) || !rdma.Recoverable(err) {
			t.Fatalf("%s: %v, want recoverable %v", tc.name, err, tc.err)
		}
		m, err := c.Recv(recvCtx(t))
		if err != nil || m.Seq != 77 || m.Payload[0] != 1.5 || m.Payload[1] != -2 {
			t.Fatalf("%s: next frame: %v %+v", tc.name, err, m)
		}
		m.Release()
		if d := c.Stats().Dropped; d != uint64(i+1) {
			t.Fatalf("%s: %d frames counted as dropped, want %d", tc.name, d, i+1)
		}
	}
}

// TestTCPFatal: frames whose extent cannot be trusted end the receive
// side of that connection; the server can still report the error.
func TestTCPFatal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes func() []byte
		err   error
	}{
		{"magic", func() []byte { b := frame(rdma.Header{}, nil); b[0] = 'X'; return b }, rdma.ErrBadMagic},
		{"version", func() []byte { b := frame(rdma.Header{}, nil); b[4] = 2; return b }, rdma.ErrBadVersion},
		{"header checksum", func() []byte { b := frame(rdma.Header{}, nil); b[9] ^= 1; return b }, rdma.ErrHeaderChecksum},
		{"too large", func() []byte { return frame(rdma.Header{Elems: 1 << 27, PayloadLen: 1 << 29}, nil)[:rdma.HeaderSize] }, rdma.ErrFrameTooLarge},
		{"truncated", func() []byte { return frame(rdma.Header{Elems: 100}, make([]byte, 400))[:300] }, rdma.ErrTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, c := rawPeer(t, rdma.Options{MaxElems: 1 << 20})
			raw.Write(tc.bytes())
			if tc.err == rdma.ErrTruncated {
				raw.(*net.TCPConn).CloseWrite()
			}
			for range 2 { // sticky
				_, err := c.Recv(recvCtx(t))
				if !errors.Is(err, tc.err) || rdma.Recoverable(err) {
					t.Fatalf("%v, want fatal %v", err, tc.err)
				}
				if tc.err == rdma.ErrTruncated && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("%v does not match io.ErrUnexpectedEOF", err)
				}
			}
			// The send side still works: report the error to the peer,
			// which can parse what the transport wrote.
			_, err := c.Recv(recvCtx(t))
			if err := c.Send(recvCtx(t), rdma.NewErrorMsg(err)); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			raw.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := io.ReadAtLeast(raw, buf, rdma.HeaderSize+rdma.TrailerSize)
			for err == nil {
				lim := rdma.DefaultLimits()
				h, data, _, _, perr := rdma.ParseFrame(buf[:n], &lim)
				if errors.Is(perr, rdma.ErrTruncated) {
					var k int
					k, err = raw.Read(buf[n:])
					n += k
					continue
				}
				if perr != nil || h.Type != rdma.TypeError || !strings.Contains(string(data), tc.err.Error()) {
					t.Fatalf("error report: %+v %q %v", h, data, perr)
				}
				return
			}
			t.Fatal(err)
		})
	}
}

// TestTCPCancelMidFrame: a receive cancelled in the middle of a frame is
// fatal for that direction (the stream lost sync), unlike one cancelled
// between frames.
func TestTCPCancelMidFrame(t *testing.T) {
	raw, c := rawPeer(t, rdma.Options{})
	b := frame(rdma.Header{Elems: 1000}, make([]byte, 4000))
	raw.Write(b[:2000])
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := c.Recv(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || rdma.Recoverable(err) {
		t.Fatalf("mid-frame cancel: %v", err)
	}
	if _, err := c.Recv(recvCtx(t)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after a mid-frame cancel: %v", err)
	}
}

// TestConnectError: a connect that finds nothing listening, or a listener
// that went away with the connection pending (reset), is ErrRefused, which
// dialers try again; other failures are not.
func TestConnectError(t *testing.T) {
	for _, c := range []struct {
		errno   syscall.Errno
		refused bool
	}{{syscall.ECONNREFUSED, true}, {syscall.ECONNRESET, true}, {syscall.ENOENT, true},
		{syscall.EHOSTUNREACH, false}, {syscall.EACCES, false}} {
		err := rdma.ConnectError(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", c.errno)})
		if errors.Is(err, rdma.ErrRefused) != c.refused || !errors.Is(err, c.errno) {
			t.Errorf("%v: %v matches ErrRefused: %v, want %v (and the errno)", c.errno, err, errors.Is(err, rdma.ErrRefused), c.refused)
		}
	}
}

func TestDialRefused(t *testing.T) {
	n, _ := rdma.NewTCP(rdma.Options{})
	ln, _ := n.Listen("127.0.0.1:0")
	addr := ln.Addr()
	ln.Close()
	if _, err := n.Dial(context.Background(), addr); !errors.Is(err, rdma.ErrRefused) {
		t.Fatalf("dial to a closed port: %v", err)
	}
}

func TestOpen(t *testing.T) {
	for kind, want := range map[string]string{"inmem": "inmem", "tcp": "tcp", "auto": "auto"} {
		n, err := rdma.Open(kind, rdma.Options{})
		if err != nil || n.Name() != want {
			t.Errorf("Open(%q) = %v, %v", kind, n, err)
		}
	}
	if _, err := rdma.Open("verbs", rdma.Options{}); !errors.Is(err, rdma.ErrUnsupported) {
		t.Errorf("Open(verbs): %v", err)
	}
	if _, err := rdma.Open("udp", rdma.Options{}); err == nil {
		t.Error("Open(udp) succeeded")
	}
	if _, err := rdma.Open("tcp", rdma.Options{MaxElems: rdma.MaxElems + 1}); err == nil {
		t.Error("MaxElems above the ceiling accepted")
	}
}

// TestTCPSendCancelMidFrame: a send cancelled after part of its frame
// went out is fatal for the send side (the peer would see a torn frame).
func TestTCPSendCancelMidFrame(t *testing.T) {
	raw, c := rawPeer(t, rdma.Options{MaxElems: 1 << 24})
	// Cancel only once the peer has seen the first byte of the frame, so
	// that the cancellation surely tears it, however slow the machine.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		var b [1]byte
		io.ReadFull(raw, b[:])
		cancel()
	}()
	err := c.Send(ctx, rdma.NewMsg(1<<24)) // 64 MiB: more than the socket buffers hold
	if !errors.Is(err, context.Canceled) || rdma.Recoverable(err) {
		t.Fatalf("send cancelled mid-frame: %v", err)
	}
	// The send side stays broken: later sends report the tear.
	if err := c.Send(recvCtx(t), rdma.NewMsg(1)); !errors.Is(err, context.Canceled) || rdma.Recoverable(err) {
		t.Fatalf("send after a torn frame: %v", err)
	}
}

// noLeak fails the test if, once its cleanups have run, more goroutines
// are left than when it was called. Call it before anything that
// registers cleanups.
func noLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() { transporttest.WaitGoroutines(t, before, 20*time.Second) })
}

// readFrames reads n whole frames from raw and returns their headers.
func readFrames(t *testing.T, raw net.Conn, n int) []rdma.Header {
	t.Helper()
	raw.SetReadDeadline(time.Now().Add(20 * time.Second))
	var hs []rdma.Header
	var buf []byte
	chunk := make([]byte, 64<<10)
	lim := rdma.DefaultLimits()
	for len(hs) < n {
		h, _, _, k, err := rdma.ParseFrame(buf, &lim)
		if errors.Is(err, rdma.ErrTruncated) {
			m, err := raw.Read(chunk)
			if err != nil {
				t.Fatalf("after %d frames: %v", len(hs), err)
			}
			buf = append(buf, chunk[:m]...)
			continue
		}
		if err != nil {
			t.Fatalf("frame %d: %v", len(hs), err)
		}
		hs = append(hs, h)
		buf = buf[k:]
	}
	if len(buf) > 0 {
		t.Fatalf("%d bytes after %d frames", len(buf), n)
	}
	return hs
}

// TestTCPSendCancelBeforeFirstByte: a Send cancelled while no byte of its
// frame has left (the socket buffers are full) is recoverable; the
// message is not counted, the stream stays in frame sync and the next
// Send goes through. Small socket buffers make the blocked write take no
// byte of the frame; should the kernel take part of it anyway, the
// cancellation is fatal (TestTCPSendCancelMidFrame), and the test tries
// again on a fresh connection.
func TestTCPSendCancelBeforeFirstByte(t *testing.T) {
	noLeak(t)
	for attempt := 1; ; attempt++ {
		raw, c := rawPeer(t, rdma.Options{SocketBuffer: 4096})
		raw.(*net.TCPConn).SetReadBuffer(4096)
		ctx, cancel := context.WithCancel(context.Background())
		sent := 0
		done := transporttest.WhenBlocked(t, "Send", func() error {
			for {
				m := rdma.NewMsg(0)
				m.Seq = uint64(sent)
				if err := c.Send(ctx, m); err != nil {
					return err
				}
				sent++
			}
		})
		cancel()
		err := transporttest.Receive(t, done, time.Minute, "the cancelled Send to return")
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled send: %v", err)
		}
		if !rdma.Recoverable(err) {
			if attempt == 20 {
				t.Fatalf("20 cancelled sends all tore their frame; the last: %v", err)
			}
			t.Logf("attempt %d: the kernel took part of the frame (%v); again", attempt, err)
			continue
		}
		st := c.Stats()
		if st.Sent[rdma.CodecNone].Msgs != uint64(sent) || st.FrameBytesSent != uint64(sent*(rdma.HeaderSize+rdma.TrailerSize)) {
			t.Fatalf("stats %+v after %d sends and a cancelled one", st, sent)
		}
		// The next Send goes through once the peer reads, after the
		// frames before it and nothing else.
		next := make(chan error, 1)
		go func() {
			m := rdma.NewMsg(0)
			m.Seq = uint64(sent)
			next <- c.Send(recvCtx(t), m)
		}()
		for i, h := range readFrames(t, raw, sent+1) {
			if h.Seq != uint64(i) {
				t.Fatalf("frame %d has sequence %d", i, h.Seq)
			}
		}
		if err := transporttest.Receive(t, next, time.Minute, "the Send after the cancelled one to return"); err != nil {
			t.Fatal(err)
		}
		if n := c.Stats().Sent[rdma.CodecNone].Msgs; n != uint64(sent+1) {
			t.Fatalf("%d messages counted as sent, want %d", n, sent+1)
		}
		return
	}
}

// TestTCPRecvInterrupted: a Recv cancelled while it skips the body of a
// rejected frame, or while it waits for a frame's trailer, has lost frame
// sync: the error is fatal and sticky, and nothing is counted as received
// or dropped. A stream that ends before the trailer is a truncated frame.
func TestTCPRecvInterrupted(t *testing.T) {
	body := f32le(make([]float32, 1000)...)
	wrongJob := frame(rdma.Header{Job: 5, Elems: 1000}, body) // recoverable: skipped
	good := frame(rdma.Header{Job: 4, Elems: 1000}, body)     // read into a message
	for _, tc := range []struct {
		name  string
		bytes []byte
		close bool
		err   error
	}{
		{"skip cancelled", wrongJob[:rdma.HeaderSize+100], false, context.Canceled},
		{"trailer cancelled", good[:len(good)-2], false, context.Canceled},
		{"trailer truncated", good[:len(good)-2], true, rdma.ErrTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			raw, c := rawPeer(t, rdma.Options{Job: 4})
			if _, err := raw.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := transporttest.WhenBlocked(t, "Recv", func() error {
				_, err := c.Recv(ctx)
				return err
			})
			if tc.close {
				raw.(*net.TCPConn).CloseWrite()
			} else {
				cancel()
			}
			err := transporttest.Receive(t, done, time.Minute, "the interrupted Recv to return")
			if !errors.Is(err, tc.err) || rdma.Recoverable(err) {
				t.Fatalf("%v, want fatal %v", err, tc.err)
			}
			if tc.err == rdma.ErrTruncated && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%v does not match io.ErrUnexpectedEOF", err)
			}
			if _, again := c.Recv(recvCtx(t)); again != err {
				t.Fatalf("next recv: %v, want the same error %v", again, err)
			}
			if st := c.Stats(); st.Dropped != 0 || st.TotalRecv().Msgs != 0 || st.FrameBytesRecv != 0 {
				t.Fatalf("stats %+v after an interrupted frame", st)
			}
		})
	}
}
