package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"reflect"
	"testing"
)

// FuzzDecodeShard feeds arbitrary bytes to DecodeShard, as they are and
// with both CRC32Cs recomputed (so that mutations reach the checks behind
// them), through a reader that reports its length and one that does not.
// Decoding must never panic, must fail with ErrFormat or ErrChecksum, and
// whatever it accepts must encode back to the same bytes (a version-1
// file: to a version-2 file that decodes to the same state).
func FuzzDecodeShard(f *testing.F) {
	for _, s := range testShards(f) {
		b := encode(f, s)
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(v1(f, s))
	}
	f.Add([]byte(shardMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeCheck(t, b)
		if len(b) >= headerSize+trailerSize {
			c := bytes.Clone(b)
			le := binary.LittleEndian
			le.PutUint32(c[headerSumAt:], crc32.Checksum(c[:headerSumAt], castagnoli))
			le.PutUint32(c[len(c)-4:], crc32.Checksum(c[:len(c)-4], castagnoli))
			decodeCheck(t, c)
		}
	})
}

func decodeCheck(t *testing.T, b []byte) {
	for _, r := range []io.Reader{bytes.NewReader(b), onlyReader{bytes.NewReader(b)}} {
		s, err := DecodeShard(r)
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrChecksum) {
				t.Fatalf("error wraps neither ErrFormat nor ErrChecksum: %v", err)
			}
			continue
		}
		var out bytes.Buffer
		if err := EncodeShard(&out, s); err != nil {
			t.Fatalf("decoded state does not encode: %v", err)
		}
		if binary.LittleEndian.Uint32(b[8:]) == 1 {
			again, err := DecodeShard(bytes.NewReader(out.Bytes()))
			if err != nil || !reflect.DeepEqual(again, s) {
				t.Fatalf("a version-1 file's state, written as version 2, decodes to other state (%v)", err)
			}
			continue
		}
		if !bytes.Equal(out.Bytes(), b) {
			t.Fatalf("decoded %d bytes, they encode to %d other bytes", len(b), out.Len())
		}
	}
}
