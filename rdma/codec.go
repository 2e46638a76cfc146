package rdma

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/klauspost/compress/s2"
)

// CodecID identifies how a message's float32 payload is encoded on the
// wire; it is the codec byte of the frame header (docs/wire.md). The ids
// are part of the wire format and never change meaning.
type CodecID uint8

// Codec ids. Lossless: None, S2, Zstd and their byte-shuffled variants.
// Lossy: FP16, BF16 (half the bytes) and TopK (sparse, with error feedback
// on the sender when the message carries a Feedback).
const (
	CodecNone        CodecID = 0 // raw little-endian float32
	CodecS2          CodecID = 1 // S2 block of the raw bytes
	CodecZstd        CodecID = 2 // one zstd frame of the raw bytes
	CodecShuffleS2   CodecID = 3 // byte planes, then S2
	CodecShuffleZstd CodecID = 4 // byte planes, then zstd
	CodecFP16        CodecID = 5 // IEEE 754 binary16, round to nearest even
	CodecBF16        CodecID = 6 // bfloat16, round to nearest even
	CodecTopK        CodecID = 7 // k uint32 indices, then k float32 values

	numCodecs = 8
)

var codecNames = [numCodecs]string{"none", "s2", "zstd", "shuffle+s2", "shuffle+zstd", "fp16", "bf16", "topk"}

// String returns the codec's flag name ("none", "shuffle+zstd", "topk", ...).
func (id CodecID) String() string {
	if id < numCodecs {
		return codecNames[id]
	}
	return "codec(" + strconv.Itoa(int(id)) + ")"
}

// Valid reports whether id is a known codec.
func (id CodecID) Valid() bool { return id < numCodecs }

// Lossless reports whether decoding restores the payload bit for bit.
func (id CodecID) Lossless() bool { return id <= CodecShuffleZstd }

// Codec is a codec choice as given by a user: the id plus, for TopK, the
// fraction of elements sent. The zero value is CodecNone.
type Codec struct {
	ID       CodecID
	Fraction float64 // TopK only: share of elements sent, in (0, 1]
}

// String returns the flag form accepted by ParseCodec.
func (c Codec) String() string {
	if c.ID == CodecTopK {
		return "topk:" + strconv.FormatFloat(c.Fraction, 'g', -1, 64)
	}
	return c.ID.String()
}

// Validate checks the id and, for TopK, the fraction.
func (c Codec) Validate() error {
	switch {
	case !c.ID.Valid():
		return fmt.Errorf("%w: id %d", ErrUnknownCodec, c.ID)
	case c.ID == CodecTopK && !(c.Fraction > 0 && c.Fraction <= 1):
		return fmt.Errorf("%w: topk fraction %v not in (0, 1]", ErrBadCodecParam, c.Fraction)
	case c.ID != CodecTopK && c.Fraction != 0:
		return fmt.Errorf("%w: codec %s takes no parameter", ErrBadCodecParam, c.ID)
	}
	return nil
}

// topK returns how many of n elements a TopK codec sends: ⌈Fraction·n⌉,
// at least 1 when n > 0.
func (c Codec) topK(n int) int {
	k := int(math.Ceil(c.Fraction * float64(n)))
	return max(min(k, n), min(n, 1))
}

// CodecNames lists the names ParseCodec accepts ("topk" needs ":FRACTION").
func CodecNames() []string { return append([]string(nil), codecNames[:]...) }

// ParseCodec parses a --compress value: one of CodecNames, with topk
// written "topk:FRACTION" (0 < FRACTION ≤ 1, e.g. "topk:0.01").
func ParseCodec(s string) (Codec, error) {
	name, param, hasParam := strings.Cut(strings.TrimSpace(s), ":")
	for id, n := range codecNames {
		if !strings.EqualFold(name, n) {
			continue
		}
		c := Codec{ID: CodecID(id)}
		if c.ID != CodecTopK {
			if hasParam {
				return Codec{}, fmt.Errorf("%w: codec %q takes no parameter", ErrBadCodecParam, s)
			}
			return c, nil
		}
		if !hasParam {
			return Codec{}, fmt.Errorf("%w: %q needs a fraction, e.g. topk:0.01", ErrBadCodecParam, s)
		}
		f, err := strconv.ParseFloat(param, 64)
		if err != nil {
			return Codec{}, fmt.Errorf("%w: topk fraction %q is not a number", ErrBadCodecParam, param)
		}
		c.Fraction = f
		if err := c.Validate(); err != nil {
			return Codec{}, err
		}
		return c, nil
	}
	return Codec{}, fmt.Errorf("%w: %q (known: %s, topk:FRACTION)", ErrUnknownCodec, s,
		strings.Join(codecNames[:numCodecs-1], ", "))
}

// maxWireLen returns the largest encoded payload a well-formed frame of
// codec id with n elements can carry, and whether the length must be exact.
// It bounds what a receiver reads before decoding.
func maxWireLen(id CodecID, n uint64) (limit uint64, exact bool) {
	raw := 4 * n
	switch id {
	case CodecNone:
		return raw, true
	case CodecFP16, CodecBF16:
		return 2 * n, true
	case CodecTopK:
		return 8 * n, false
	case CodecS2, CodecShuffleS2:
		if m := s2.MaxEncodedLen(int(raw)); m >= 0 {
			return uint64(m), false
		}
		return 0, false
	default: // zstd's compress bound: a 3-byte header per block, frame header and checksum
		return raw + raw>>8 + 64, false
	}
}

// checkWireLen validates an encoded payload length against the codec and
// element count (a frame with n == 0 carries no payload bytes).
func checkWireLen(id CodecID, n, w uint64) error {
	if !id.Valid() {
		return ErrUnknownCodec
	}
	limit, exact := maxWireLen(id, n)
	switch {
	case n == 0 && w != 0,
		exact && w != limit,
		w > limit,
		id == CodecTopK && w%8 != 0,
		n > 0 && w == 0 && id != CodecTopK:
		return fmt.Errorf("%w: codec %s, %d elements, %d payload bytes", ErrBadLength, id, n, w)
	}
	return nil
}
