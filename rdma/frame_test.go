package rdma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// crc32cRef is a bitwise CRC32C (reflected polynomial 0x82F63B78, initial
// and final inversion), independent of hash/crc32.
func crc32cRef(b []byte) uint32 {
	crc := ^uint32(0)
	for _, x := range b {
		crc ^= uint32(x)
		for range 8 {
			crc = crc>>1 ^ 0x82f63b78&-(crc&1)
		}
	}
	return ^crc
}

func TestCRC32CReference(t *testing.T) {
	// The check value of CRC-32C ("123456789" → 0xE3069283).
	if got := crc32cRef([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("reference CRC32C = %08x", got)
	}
}

// TestFrameLayout builds a frame byte by byte as docs/wire.md describes it
// and compares with AppendFrame.
func TestFrameLayout(t *testing.T) {
	h := Header{Type: 3, Codec: CodecFP16, Job: 0x01020304, Learner: 5, Shard: 6, Elems: 2,
		Timestamp: 0x1122334455667788, Seq: 0x99}
	data, payload := []byte("hi"), []byte{1, 2, 3, 4}
	var want []byte
	want = append(want, 'S', 'S', 'Y', 'F', 1, 3, 5, 0)
	want = append(want, 4, 3, 2, 1, 5, 0, 0, 0, 6, 0, 0, 0, 2, 0, 0, 0)
	want = append(want, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x99, 0, 0, 0, 0, 0, 0, 0)
	want = append(want, 4, 0, 0, 0, 2, 0, 0, 0)
	want = binary.LittleEndian.AppendUint32(want, crc32cRef(want))
	want = append(want, data...)
	want = append(want, payload...)
	want = binary.LittleEndian.AppendUint32(want, crc32cRef(append(append([]byte{}, data...), payload...)))
	got := AppendFrame(nil, h, data, payload)
	if !bytes.Equal(got, want) {
		t.Fatalf("frame\n got % x\nwant % x", got, want)
	}
	lim := Limits{MaxElems: 10, MaxData: 10, Job: h.Job}
	ph, pd, pp, n, err := ParseFrame(got, &lim)
	h.PayloadLen, h.DataLen = 4, 2
	if err != nil || ph != h || !bytes.Equal(pd, data) || !bytes.Equal(pp, payload) || n != len(got) {
		t.Fatalf("ParseFrame = %+v %q %v %d %v", ph, pd, pp, n, err)
	}
	// The trailer makes the checksum over data, payload and trailer a constant.
	if crc32cRef(got[HeaderSize:]) != crcResidue || crcResidue != 0x48674bc7 {
		t.Fatalf("residue %08x, want %08x", crc32cRef(got[HeaderSize:]), crcResidue)
	}
}

func TestFrameCorruption(t *testing.T) {
	h := Header{Type: 1, Codec: CodecNone, Job: 9, Elems: 3, Seq: 1}
	frame := AppendFrame(nil, h, []byte("abc"), make([]byte, 12))
	lim := Limits{MaxElems: 100, MaxData: 100, Job: 9}
	for i := range frame {
		for _, bit := range []byte{0x01, 0x80} {
			b := bytes.Clone(frame)
			b[i] ^= bit
			_, _, _, n, err := ParseFrame(b, &lim)
			var want error
			switch {
			case i < 4:
				want = ErrBadMagic
			case i == 4 || i == 7 && bit != FlagNoPayloadCRC:
				want = ErrBadVersion
			case i < HeaderSize:
				want = ErrHeaderChecksum
			default:
				want = ErrChecksum
			}
			if !errors.Is(err, want) {
				t.Fatalf("bit %#x of byte %d flipped: %v, want %v", bit, i, err, want)
			}
			if want == ErrChecksum && n != len(frame) {
				t.Fatalf("byte %d: checksum error reports frame length %d", i, n)
			}
		}
	}
	for l := range len(frame) {
		if _, _, _, _, err := ParseFrame(frame[:l], &lim); !errors.Is(err, ErrTruncated) {
			t.Fatalf("frame cut at %d bytes: %v", l, err)
		}
	}
}

func TestFrameNoPayloadCRC(t *testing.T) {
	h := Header{Flags: FlagNoPayloadCRC, Elems: 1}
	frame := AppendFrame(nil, h, nil, []byte{1, 2, 3, 4})
	lim := Limits{MaxElems: 1}
	if got := frame[len(frame)-4:]; string(got) != "\x00\x00\x00\x00" {
		t.Fatalf("trailer % x, want zeros", got)
	}
	if _, _, p, _, err := ParseFrame(frame, &lim); err != nil || p[0] != 1 {
		t.Fatalf("ParseFrame: %v", err)
	}
	frame[len(frame)-1] = 1
	if _, _, _, _, err := ParseFrame(frame, &lim); !errors.Is(err, ErrChecksum) {
		t.Fatalf("non-zero trailer without checksum: %v", err)
	}
}

func TestParseHeaderChecks(t *testing.T) {
	lim := Limits{MaxElems: 1000, MaxData: 16, Job: 1}
	for _, tc := range []struct {
		h    Header
		err  error
		skip bool
	}{
		{Header{Job: 1, Elems: 1000, PayloadLen: 4000}, nil, false},
		{Header{Job: 1, Elems: 1001, PayloadLen: 4004}, ErrFrameTooLarge, false},
		{Header{Job: 1, DataLen: 17}, ErrFrameTooLarge, false},
		{Header{Job: 1, Elems: 1, PayloadLen: 1 << 30, Codec: CodecS2}, ErrFrameTooLarge, false},
		{Header{Job: 1, Elems: 10, PayloadLen: 40, Codec: 99}, ErrUnknownCodec, true},
		{Header{Job: 2, Elems: 10, PayloadLen: 40}, ErrWrongJob, true},
		{Header{Job: 1, Elems: 10, PayloadLen: 39}, ErrBadLength, true},
		{Header{Job: 1, Elems: 10, PayloadLen: 21, Codec: CodecFP16}, ErrBadLength, true},
		{Header{Job: 1, Elems: 10, PayloadLen: 84, Codec: CodecTopK}, ErrBadLength, true},
		{Header{Job: 1, Elems: 10, PayloadLen: 12, Codec: CodecTopK}, ErrBadLength, true},
		{Header{Job: 1, Elems: 0, PayloadLen: 1, Codec: CodecZstd}, ErrBadLength, true},
		{Header{Job: 1, Elems: 10, PayloadLen: 0, Codec: CodecZstd}, ErrBadLength, true},
		{Header{Job: 1, Elems: 10, PayloadLen: 16, Codec: CodecTopK}, nil, false},
	} {
		var b [HeaderSize]byte
		PutHeader(b[:], &tc.h)
		got, err := ParseHeader(b[:], &lim)
		if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
			t.Errorf("%+v: %v, want %v", tc.h, err, tc.err)
			continue
		}
		if err != nil && skippable(err) != tc.skip {
			t.Errorf("%+v: skippable %v, want %v", tc.h, skippable(err), tc.skip)
		}
		if (err == nil || tc.skip) && got != tc.h {
			t.Errorf("header %+v, want %+v", got, tc.h)
		}
	}
}
