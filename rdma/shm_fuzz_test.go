//go:build linux

package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/softsync/softsync/rdma/internal/synth"
)

// shmFuzzLimits are the limits of the connections the fuzz target reads
// with: frames beyond them must be refused before anything is allocated.
var shmFuzzLimits = Options{MaxElems: 1 << 12, MaxData: 1 << 10, Job: 1}

// shmFuzzInput is what FuzzShmRing's bytes stand for. Layout: ring size
// (4 KiB << b[0]%3), the reader's start index (8 bytes), the tail the
// peer wrote, as an offset from the start (8), the writer's start index
// (8), the head the peer wrote, as an offset from that start (8), flags
// (bit 0: the peer closed, bit 1: no payload checksums), the size of the
// message sent (2 bytes, elements, modulo the limit + 1), then the ring's
// bytes from the reader's start on.
type shmFuzzInput struct {
	ring                    int
	rbase, tailOff          uint64
	wbase, headOff          uint64
	peerClosed, noChecksums bool
	sendElems               int
	data                    []byte
}

const shmFuzzHeader = 36

func parseShmFuzz(b []byte) (shmFuzzInput, bool) {
	if len(b) < shmFuzzHeader {
		return shmFuzzInput{}, false
	}
	le := binary.LittleEndian
	return shmFuzzInput{ring: shmMinRing << (b[0] % 3), rbase: le.Uint64(b[1:]), tailOff: le.Uint64(b[9:]),
		wbase: le.Uint64(b[17:]), headOff: le.Uint64(b[25:]), peerClosed: b[33]&1 != 0, noChecksums: b[33]&2 != 0,
		sendElems: int(le.Uint16(b[34:])) % int(shmFuzzLimits.MaxElems+1), data: b[shmFuzzHeader:]}, true
}

// shmFuzzSeed builds an input: ring size index k, start indices, the
// peer's tail and head offsets, flags, the elements to send and the
// ring's bytes.
func shmFuzzSeed(k byte, rbase, tailOff, wbase, headOff uint64, flags byte, send uint16, data []byte) []byte {
	b := []byte{k}
	b = binary.LittleEndian.AppendUint64(b, rbase)
	b = binary.LittleEndian.AppendUint64(b, tailOff)
	b = binary.LittleEndian.AppendUint64(b, wbase)
	b = binary.LittleEndian.AppendUint64(b, headOff)
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint16(b, send)
	return append(b, data...)
}

// FuzzShmRing runs a connection's receive and send sides over a segment
// in ordinary memory whose peer-written words (the tail of the ring read,
// the head of the ring written, the closed word) and ring bytes are the
// fuzzer's, from any start index (wrap-around of the ring and of the
// 64-bit indices included): no index, frame or closed word may cause a
// panic, an access outside the ring, a message beyond the limits, or an
// error that is not an *OpError; a tail or head out of range is an
// ErrProtocol error. go test -fuzz=FuzzShmRing ./rdma.
func FuzzShmRing(f *testing.F) {
	enc := NewEncoder()
	var frames []byte
	for i, c := range []Codec{{}, {ID: CodecS2}, {ID: CodecFP16}, {ID: CodecTopK, Fraction: 0.1}} {
		wire, _ := enc.Encode(nil, c, nil, synth.Gradient(make([]float32, 100), 1e-3, uint64(i)))
		frames = AppendFrame(frames, Header{Type: 1, Codec: c.ID, Job: 1, Elems: 100, Seq: uint64(i)}, []byte("d"), wire)
	}
	n := uint64(len(frames))
	f.Add(shmFuzzSeed(0, 0, n, 0, 0, 0, 10, frames))                            // whole frames, then the peer is gone
	f.Add(shmFuzzSeed(0, 0, n, 0, 0, 1, 10, frames))                            // and closed
	f.Add(shmFuzzSeed(0, 4000, n, 0, 0, 1, 2000, frames))                       // frames across the end of the ring; a send that wraps
	f.Add(shmFuzzSeed(1, ^uint64(0)-100, n, ^uint64(0)-50, 0, 1, 3000, frames)) // indices across 2⁶⁴
	f.Add(shmFuzzSeed(0, 0, n-7, 0, 0, 1, 0, frames))                           // a torn frame
	f.Add(shmFuzzSeed(0, 0, 4097, 0, 0, 0, 0, frames))                          // a tail past the ring
	f.Add(shmFuzzSeed(0, 100, ^uint64(0), 0, 0, 0, 0, frames))                  // a tail before the head
	f.Add(shmFuzzSeed(0, 0, 0, 0, 1, 0, 10, nil))                               // a head past the tail
	f.Add(shmFuzzSeed(0, 0, 0, 50, ^uint64(0), 0, 10, nil))                     // a head that went back
	big := AppendFrame(nil, Header{Job: 1, Elems: 1 << 20, PayloadLen: 4 << 20}, nil, nil)
	f.Add(shmFuzzSeed(0, 0, uint64(len(big)), 0, 0, 1, 0, big[:HeaderSize])) // a frame over the limits
	f.Fuzz(func(t *testing.T, b []byte) {
		in, ok := parseShmFuzz(b)
		if !ok {
			return
		}
		opts := shmFuzzLimits
		opts.NoPayloadChecksum = in.noChecksums
		o, _ := opts.withDefaults()
		seg := make([]byte, shmSegSize(in.ring))
		c := newShmConn(seg, in.ring, 1, nil, nil, -1, o, "fuzz", "peer")
		defer c.Close()
		// The reader starts at rbase; the peer wrote data there and
		// published tailOff bytes.
		c.rx.head, c.rx.tail = in.rbase, in.rbase
		c.rx.ring.head.Store(in.rbase)
		c.rx.ring.tail.Store(in.rbase + in.tailOff)
		for i, x := range in.data[:min(len(in.data), in.ring)] {
			c.rx.ring.data[(in.rbase+uint64(i))&c.rx.ring.mask] = x
		}
		if in.peerClosed {
			c.peer.Store(1)
		}
		recvAll(t, c, in)
		// The writer starts at wbase with the ring empty; the peer's
		// head is headOff past it. (The receive side ran the ring dry:
		// with no peer to wait for, the connection took it for gone.)
		c.gone.Store(false)
		c.tx.tail, c.tx.head = in.wbase, in.wbase
		c.tx.ring.tail.Store(in.wbase)
		c.tx.ring.head.Store(in.wbase + in.headOff)
		m := NewMsg(in.sendElems)
		synth.Gradient(m.Payload, 1e-3, 1)
		frameLen := HeaderSize + 4*in.sendElems + TrailerSize
		err := c.Send(context.Background(), m)
		var oe *OpError
		switch {
		case in.headOff > uint64(frameLen) && !in.peerClosed && frameLen > in.ring && !errors.Is(err, ErrProtocol):
			// A frame larger than the ring waits for room, reading the
			// head, which is then past anything written (or went back).
			t.Fatalf("send of %d bytes with the peer's head %d past the start %d: %v, want ErrProtocol", frameLen, in.headOff, in.wbase, err)
		case err != nil && !errors.As(err, &oe):
			t.Fatalf("send: %T %v, not an *OpError", err, err)
		case err != nil && !isAny(err, ErrProtocol, ErrClosed):
			t.Fatalf("send: %v", err)
		}
		if used := c.tx.tail - c.tx.head; used > uint64(in.ring) {
			t.Fatalf("writer's tail %d and head %d are %d apart, more than the ring's %d", c.tx.tail, c.tx.head, used, in.ring)
		}
	})
}

// recvAll receives from c until a fatal error, checking every message
// and error.
func recvAll(t *testing.T, c *shmConn, in shmFuzzInput) {
	t.Helper()
	lim := c.lim
	size := uint64(in.ring)
	for range 64 {
		m, err := c.Recv(context.Background())
		if r := c.rx.tail - c.rx.head; r > size {
			t.Fatalf("reader's tail %d and head %d are %d apart, more than the ring's %d", c.rx.tail, c.rx.head, r, size)
		}
		if err == nil {
			if len(m.Payload) > int(lim.MaxElems) || len(m.Data) > int(lim.MaxData) {
				t.Fatalf("message of %d elements and %d data bytes beyond the limits", len(m.Payload), len(m.Data))
			}
			m.Release()
			continue
		}
		var oe *OpError
		if !errors.As(err, &oe) {
			t.Fatalf("recv: %T %v, not an *OpError", err, err)
		}
		if in.tailOff > size && !errors.Is(err, ErrProtocol) && c.rx.head == in.rbase {
			t.Fatalf("recv with the peer's tail %d past the ring: %v, want ErrProtocol", in.tailOff, err)
		}
		if !Recoverable(err) {
			return
		}
	}
}
