package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"hash"
	"hash/crc32"
	"testing"

	"github.com/softsync/softsync/ps"
)

// BenchmarkChecksum compares the manifest's checksum, CRC32C, with
// SHA-256 over the same 4 MiB buffer; run both side by side and quote the
// ratio of their MB/s.
func BenchmarkChecksum(b *testing.B) {
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for _, h := range []struct {
		name string
		new  func() hash.Hash
	}{{"crc32c", func() hash.Hash { return crc32.New(castagnoli) }}, {"sha256", sha256.New}} {
		b.Run(h.name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				d := h.new()
				d.Write(buf)
				d.Sum(nil)
			}
		})
	}
}

// benchShard returns a shard of 1M floats with pending gradients.
func benchShard() *Shard {
	const n = 1 << 20
	s := &Shard{Checkpoint: ps.Checkpoint{Total: n, Weights: make([]float32, n)}, Shards: 1}
	s.Solver.Momentum, s.Solver.Acc, s.Solver.Pending = make([]float32, n), make([]float32, n), 1
	for i := range n {
		s.Weights[i], s.Solver.Momentum[i], s.Solver.Acc[i] = float32(i), -float32(i), 0.5
	}
	return s
}

// BenchmarkEncodeShard measures EncodeShard of 1M floats (three arrays)
// into memory.
func BenchmarkEncodeShard(b *testing.B) {
	s := benchShard()
	var out bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		out.Reset()
		if err := EncodeShard(&out, s); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(out.Len()))
	}
}

// BenchmarkDecodeShard measures DecodeShard of the same file from memory.
func BenchmarkDecodeShard(b *testing.B) {
	var in bytes.Buffer
	if err := EncodeShard(&in, benchShard()); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(in.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeShard(bytes.NewReader(in.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
}
