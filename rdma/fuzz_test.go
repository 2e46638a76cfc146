package rdma

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/softsync/softsync/rdma/internal/synth"
)

// Fuzz targets: go test -fuzz=FuzzParseFrame -fuzztime=10s ./rdma (one
// target per run). A plain go test runs the seeds below and those in
// testdata/fuzz.

func FuzzParseFrame(f *testing.F) {
	lim := Limits{MaxElems: 1 << 16, MaxData: 1 << 10, Job: 1}
	enc := NewEncoder()
	for i, c := range []Codec{{}, {ID: CodecS2}, {ID: CodecZstd}, {ID: CodecFP16}, {ID: CodecTopK, Fraction: 0.1}} {
		wire, _ := enc.Encode(nil, c, nil, synth.Gradient(make([]float32, 50), 1e-3, uint64(i)))
		f.Add(AppendFrame(nil, Header{Type: 1, Codec: c.ID, Job: 1, Elems: 50, Seq: uint64(i)}, []byte("d"), wire))
	}
	f.Add(AppendFrame(nil, Header{Job: 1}, nil, nil))
	dec := NewDecoder()
	f.Fuzz(func(t *testing.T, b []byte) {
		h, data, payload, n, err := ParseFrame(b, &lim)
		if err != nil {
			if skippable(err) && (n != h.FrameLen() || n > len(b)) {
				t.Fatalf("skippable error %v with frame length %d of %d bytes", err, n, len(b))
			}
			return
		}
		// A frame that parses is canonical: rebuilding it gives its bytes.
		if again := AppendFrame(nil, h, data, payload); !bytes.Equal(again, b[:n]) {
			t.Fatalf("frame does not rebuild:\n% x\n% x", b[:n], again)
		}
		dst := make([]float32, h.Elems)
		_ = dec.Decode(dst, h.Codec, payload)
	})
}

// fuzzDecoder fuzzes the decoder of one codec: it must never panic,
// never accept a payload that is not exactly n elements' worth, and for
// lossless codecs a payload it accepts must decode the same way twice.
func fuzzDecoder(f *testing.F, c Codec) {
	enc := NewEncoder()
	for i, n := range []int{0, 1, 7, 300, 5000} {
		src := synth.Gradient(make([]float32, n), 1e-3, uint64(i))
		if n > 10 {
			src[3], src[4] = float32(math.NaN()), float32(math.Inf(-1))
		}
		wire, err := enc.Encode(nil, c, nil, src)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint32(n), wire)
		f.Add(uint32(n+1), wire)
	}
	dec := NewDecoder()
	f.Fuzz(func(t *testing.T, n uint32, wire []byte) {
		n %= 1 << 16
		dst := make([]float32, n)
		if err := dec.Decode(dst, c.ID, wire); err != nil {
			return
		}
		if err := checkWireLen(c.ID, uint64(n), uint64(len(wire))); err != nil {
			t.Fatalf("decoded a payload that fails the length check: %v", err)
		}
		again := make([]float32, n)
		if err := dec.Decode(again, c.ID, wire); err != nil {
			t.Fatalf("second decode failed: %v", err)
		}
		for i := range dst {
			if math.Float32bits(dst[i]) != math.Float32bits(again[i]) {
				t.Fatalf("element %d decodes to %v then %v", i, dst[i], again[i])
			}
		}
	})
}

func FuzzDecodeNone(f *testing.F)        { fuzzDecoder(f, Codec{}) }
func FuzzDecodeS2(f *testing.F)          { fuzzDecoder(f, Codec{ID: CodecS2}) }
func FuzzDecodeZstd(f *testing.F)        { fuzzDecoder(f, Codec{ID: CodecZstd}) }
func FuzzDecodeShuffleS2(f *testing.F)   { fuzzDecoder(f, Codec{ID: CodecShuffleS2}) }
func FuzzDecodeShuffleZstd(f *testing.F) { fuzzDecoder(f, Codec{ID: CodecShuffleZstd}) }
func FuzzDecodeFP16(f *testing.F)        { fuzzDecoder(f, Codec{ID: CodecFP16}) }
func FuzzDecodeBF16(f *testing.F)        { fuzzDecoder(f, Codec{ID: CodecBF16}) }
func FuzzDecodeTopK(f *testing.F)        { fuzzDecoder(f, Codec{ID: CodecTopK, Fraction: 0.2}) }

// FuzzLosslessRoundTrip: any float32 data survives every lossless codec
// bit for bit.
func FuzzLosslessRoundTrip(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f, 1, 2, 3, 4, 0, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{0x12, 0x34, 0x56, 0x78}, 1000))
	enc, dec := NewEncoder(), NewDecoder()
	f.Fuzz(func(t *testing.T, b []byte) {
		src := make([]float32, len(b)/4)
		copy(f32bytes(src), b)
		for id := CodecNone; id <= CodecShuffleZstd; id++ {
			wire, err := enc.Encode(nil, Codec{ID: id}, nil, src)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float32, len(src))
			if err := dec.Decode(got, id, wire); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if !bytes.Equal(f32bytes(got), f32bytes(src)) {
				t.Fatalf("%s: round trip differs", id)
			}
		}
	})
}

// FuzzHalfKernels: the slice conversions (assembly where available) agree
// bit for bit with the scalar functions on any float32 and 16-bit data.
func FuzzHalfKernels(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f, 1, 0, 0x80, 0x7f, 0, 0xf0, 0x7f, 0x47, 0, 0x80, 0x7f, 0x7f})
	f.Add(bytes.Repeat([]byte{0x01, 0x7c, 0xff, 0xff}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		src := make([]float32, len(b)/4)
		copy(f32bytes(src), b)
		codes := u16s(b[:len(b)&^1])
		half, wide := make([]uint16, len(src)), make([]float32, len(codes))
		for _, k := range halfKernels {
			k.round(half, src)
			for i, x := range src {
				if want := k.round1(x); half[i] != want {
					t.Fatalf("%s: round(%#08x) = %#04x, want %#04x", k.name, math.Float32bits(x), half[i], want)
				}
			}
			k.widen(wide, codes)
			for i, h := range codes {
				if got, want := math.Float32bits(wide[i]), math.Float32bits(k.widen1(h)); got != want {
					t.Fatalf("%s: widen(%#04x) = %#08x, want %#08x", k.name, h, got, want)
				}
			}
		}
	})
}

// handshakePeer is one end of a handshake whose other end is scripted: it
// reads from in and collects what is written.
type handshakePeer struct {
	in  *bytes.Reader
	out []byte
}

func (p *handshakePeer) Read(b []byte) (int, error)  { return p.in.Read(b) }
func (p *handshakePeer) Write(b []byte) (int, error) { p.out = append(p.out, b...); return len(b), nil }

// FuzzHandshake feeds any bytes to both sides of the handshake. Neither
// panics or authenticates a peer that lacks the secret; the server reads
// at most a hello and a proof and answers only a well-formed hello of its
// job; the client sends its proof only to a server that proved itself
// (never, here); parseHello accepts only hellos that putHello writes back
// byte for byte.
func FuzzHandshake(f *testing.F) {
	const job = 3
	secret := []byte("0123456789abcdef")
	hb := make([]byte, helloSize)
	putHello(hb, &hello{role: roleClient, job: job, nonce: [nonceSize]byte{1, 2, 3}})
	f.Add(append(hb, make([]byte, macSize)...))
	f.Add(hb[:20])
	sb := make([]byte, helloSize)
	putHello(sb, &hello{role: roleServer, job: job})
	f.Add(append(sb, authMAC(nil, secret, labelServer, append(bytes.Clone(hb), sb...))...))
	f.Add(AppendFrame(nil, Header{Job: job}, nil, nil))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: softsync\r\nUser-Agent: probe\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, role := range []uint8{roleClient, roleServer} {
			h, err := parseHello(b, role, job)
			if err == nil {
				again := make([]byte, helloSize)
				putHello(again, &h)
				if !bytes.Equal(again, b[:helloSize]) {
					t.Fatalf("hello % x parses but writes back as % x", b[:helloSize], again)
				}
			} else if !errors.Is(err, ErrAuth) {
				t.Fatalf("parse error %v does not match ErrAuth", err)
			}
		}
		server := &handshakePeer{in: bytes.NewReader(b)}
		err := serverHandshake(server, secret, job, nil)
		if err == nil || !errors.Is(err, ErrAuth) {
			t.Fatalf("server handshake on % x: %v", b, err)
		}
		if read := len(b) - server.in.Len(); read > helloSize+macSize {
			t.Fatalf("server read %d bytes", read)
		}
		if _, herr := parseHello(b, roleClient, job); herr != nil && len(server.out) > 0 {
			t.Fatalf("server answered a bad hello (%v) with % x", herr, server.out)
		}
		client := &handshakePeer{in: bytes.NewReader(b)}
		if err := clientHandshake(client, secret, job); err == nil || !errors.Is(err, ErrAuth) {
			t.Fatalf("client handshake on % x: %v", b, err)
		}
		if len(client.out) != helloSize {
			t.Fatalf("client wrote %d bytes, its hello alone is %d", len(client.out), helloSize)
		}
	})
}
