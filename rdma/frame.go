package rdma

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Frame layout (docs/wire.md has the full description). All integers are
// little-endian.
//
//	off size field
//	  0   4  magic "SSYF"
//	  4   1  version (1)
//	  5   1  type
//	  6   1  codec id
//	  7   1  flags (bit 0: payload not checksummed; others 0)
//	  8   4  job id
//	 12   4  learner id
//	 16   4  shard
//	 20   4  element count n (float32 values after decoding)
//	 24   8  timestamp
//	 32   8  sequence number
//	 40   4  payload length w (encoded bytes)
//	 44   4  data length d (bytes)
//	 48   4  CRC32C of bytes 0..47
//	 52   d  data
//	52+d  w  payload
//	52+d+w 4 CRC32C of data and payload
const (
	// HeaderSize is the length of a frame header.
	HeaderSize = 52
	// TrailerSize is the length of the trailer checksum.
	TrailerSize = 4
	// Version is the frame format version this package reads and writes.
	Version = 1
	// MaxElems is the hard ceiling on a frame's element count (1 GiB of
	// float32), so every payload length fits the 32-bit field.
	MaxElems = 1 << 28
)

// FlagNoPayloadCRC marks a frame whose trailer is zero instead of the
// CRC32C of data and payload (Options.NoPayloadChecksum). The header is
// always checksummed.
const FlagNoPayloadCRC = 0x01

// flagLent marks a shm frame whose payload stays in the sender's lend
// segment: the ring carries its reference (shmRefSize bytes: offset and
// length) in the payload's place. Other transports reject it.
const flagLent = 0x02

// shmRefSize is the size of a lent payload's reference.
const shmRefSize = 16

// Magic is the first four bytes of every frame.
const Magic = "SSYF"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is a frame header in host form.
type Header struct {
	Type       Type
	Codec      CodecID
	Flags      uint8 // FlagNoPayloadCRC or 0
	Job        uint32
	Learner    uint32
	Shard      uint32
	Elems      uint32 // float32 values in the decoded payload
	Timestamp  uint64
	Seq        uint64
	PayloadLen uint32 // encoded payload bytes on the wire
	DataLen    uint32
}

// FrameLen is the total size of the frame h describes.
func (h *Header) FrameLen() int {
	return HeaderSize + int(h.DataLen) + int(h.PayloadLen) + TrailerSize
}

// Limits bounds what a receiver accepts; frames beyond them are rejected
// from the header alone, before anything is allocated.
type Limits struct {
	MaxElems uint32 // largest element count; at most MaxElems
	MaxData  uint32 // largest byte payload
	// Job is the only job id accepted (ErrWrongJob otherwise).
	Job uint32
}

// DefaultLimits returns the limits of Options' zero values: 64 Mi
// elements (256 MiB of float32) and 1 MiB of data, for job 0.
func DefaultLimits() Limits { return Limits{MaxElems: 1 << 26, MaxData: 1 << 20} }

// PutHeader writes h (with its header checksum) into b[:HeaderSize].
func PutHeader(b []byte, h *Header) {
	_ = b[HeaderSize-1]
	copy(b, Magic)
	b[4], b[5], b[6], b[7] = Version, byte(h.Type), byte(h.Codec), h.Flags
	le := binary.LittleEndian
	le.PutUint32(b[8:], h.Job)
	le.PutUint32(b[12:], h.Learner)
	le.PutUint32(b[16:], h.Shard)
	le.PutUint32(b[20:], h.Elems)
	le.PutUint64(b[24:], h.Timestamp)
	le.PutUint64(b[32:], h.Seq)
	le.PutUint32(b[40:], h.PayloadLen)
	le.PutUint32(b[44:], h.DataLen)
	le.PutUint32(b[48:], crc32.Checksum(b[:48], castagnoli))
}

// ParseHeader decodes and validates the header at the start of b, in this
// order: length, magic, version and flags, header checksum, size limits,
// codec id, payload length against codec and element count, job id.
//
// Errors ErrTruncated, ErrBadMagic, ErrBadVersion, ErrHeaderChecksum and
// ErrFrameTooLarge mean the frame's extent cannot be trusted (or is too
// large to skip): a stream reader has lost frame sync. After
// ErrUnknownCodec, ErrBadLength or ErrWrongJob, the returned Header is
// valid and FrameLen says how many bytes to skip to the next frame.
func ParseHeader(b []byte, lim *Limits) (Header, error) {
	return parseHeader(b, lim, FlagNoPayloadCRC)
}

// parseHeader is ParseHeader accepting the flag bits of flags.
func parseHeader(b []byte, lim *Limits, flags uint8) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrTruncated
	}
	if string(b[:4]) != Magic {
		return Header{}, badMagic(b)
	}
	if b[4] != Version || b[7]&^flags != 0 {
		return Header{}, fmt.Errorf("%w: version %d, flags %#x", ErrBadVersion, b[4], b[7])
	}
	le := binary.LittleEndian
	if got, want := crc32.Checksum(b[:48], castagnoli), le.Uint32(b[48:]); got != want {
		return Header{}, fmt.Errorf("%w: %08x, header says %08x", ErrHeaderChecksum, got, want)
	}
	h := Header{
		Type: Type(b[5]), Codec: CodecID(b[6]), Flags: b[7],
		Job: le.Uint32(b[8:]), Learner: le.Uint32(b[12:]), Shard: le.Uint32(b[16:]),
		Elems: le.Uint32(b[20:]), Timestamp: le.Uint64(b[24:]), Seq: le.Uint64(b[32:]),
		PayloadLen: le.Uint32(b[40:]), DataLen: le.Uint32(b[44:]),
	}
	maxElems := min(lim.MaxElems, MaxElems)
	if h.Elems > maxElems || h.DataLen > lim.MaxData {
		return Header{}, fmt.Errorf("%w: %d elements (limit %d), %d data bytes (limit %d)",
			ErrFrameTooLarge, h.Elems, maxElems, h.DataLen, lim.MaxData)
	}
	// No codec's payload exceeds 8 bytes per element (TopK's worst case)
	// plus a constant.
	if limit := 8*uint64(maxElems) + 1024; uint64(h.PayloadLen) > limit {
		return Header{}, fmt.Errorf("%w: %d payload bytes (limit %d)", ErrFrameTooLarge, h.PayloadLen, limit)
	}
	if !h.Codec.Valid() {
		return h, fmt.Errorf("%w: id %d", ErrUnknownCodec, h.Codec)
	}
	if err := checkWireLen(h.Codec, uint64(h.Elems), uint64(h.PayloadLen)); err != nil {
		return h, err
	}
	if h.Job != lim.Job {
		return h, fmt.Errorf("%w: job %d, expected %d", ErrWrongJob, h.Job, lim.Job)
	}
	return h, nil
}

// badMagic is the error for a frame that starts with b[:4] instead of
// Magic; a handshake hello gets a hint.
func badMagic(b []byte) error {
	if string(b[:4]) == AuthMagic {
		return fmt.Errorf("%w: % x, a handshake: the peer authenticates, this end has no Options.Secret", ErrBadMagic, b[:4])
	}
	return fmt.Errorf("%w: % x", ErrBadMagic, b[:4])
}

// skippable reports whether a ParseHeader error leaves the frame's extent
// known, so that a stream reader can skip it.
func skippable(err error) bool {
	return isAny(err, ErrUnknownCodec, ErrBadLength, ErrWrongJob)
}

// AppendFrame appends a whole frame to dst: the header h (its PayloadLen
// and DataLen are set from the slices), data, the encoded payload and the
// trailer checksum (zero if h.Flags has FlagNoPayloadCRC).
func AppendFrame(dst []byte, h Header, data, payload []byte) []byte {
	h.DataLen, h.PayloadLen = uint32(len(data)), uint32(len(payload))
	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	PutHeader(dst[start:], &h)
	dst = append(append(dst, data...), payload...)
	var crc uint32
	if h.Flags&FlagNoPayloadCRC == 0 {
		crc = crc32.Update(crc32.Update(0, castagnoli, data), castagnoli, payload)
	}
	return binary.LittleEndian.AppendUint32(dst, crc)
}

// ParseFrame validates the whole frame at the start of b and returns its
// header, data and encoded payload (sub-slices of b) and its length. Besides
// ParseHeader's errors it returns ErrTruncated if b is shorter than the
// frame and ErrChecksum if the trailer does not match; with those, as with
// ParseHeader's skippable errors, n is the frame's length.
func ParseFrame(b []byte, lim *Limits) (h Header, data, payload []byte, n int, err error) {
	h, err = ParseHeader(b, lim)
	if err != nil && !skippable(err) {
		return Header{}, nil, nil, 0, err
	}
	n = h.FrameLen()
	if len(b) < n {
		return Header{}, nil, nil, 0, fmt.Errorf("%w: have %d of %d bytes", ErrTruncated, len(b), n)
	}
	if err != nil {
		return h, nil, nil, n, err
	}
	data = b[HeaderSize : HeaderSize+int(h.DataLen)]
	payload = b[HeaderSize+int(h.DataLen) : n-TrailerSize]
	var got uint32
	if h.Flags&FlagNoPayloadCRC == 0 {
		got = crc32.Checksum(b[HeaderSize:n-TrailerSize], castagnoli)
	}
	if want := binary.LittleEndian.Uint32(b[n-TrailerSize:]); got != want {
		return h, nil, nil, n, fmt.Errorf("%w: %08x, trailer says %08x", ErrChecksum, got, want)
	}
	return h, data, payload, n, nil
}
