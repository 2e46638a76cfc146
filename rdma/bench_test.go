package rdma

import (
	"fmt"
	"testing"

	"github.com/softsync/softsync/rdma/internal/synth"
)

// benchSizes: a LeNet gradient (431,080 values, the anchors' reference)
// and 4 Mi values (16 MiB).
var benchSizes = []struct {
	name string
	n    int
}{{"lenet", 431_080}, {"16MiB", 4 << 20}}

var benchCodecs = []string{"none", "s2", "zstd", "shuffle+s2", "shuffle+zstd", "fp16", "bf16", "topk:0.01"}

// BenchmarkEncode reports MB/s of raw payload encoded and the wire/raw
// ratio on gradient-like data (Gaussian, σ = 1e-3); topk encodes with a
// Feedback.
func BenchmarkEncode(b *testing.B) {
	for _, size := range benchSizes {
		src := synth.Gradient(make([]float32, size.n), 1e-3, 1)
		for _, name := range benchCodecs {
			c, _ := ParseCodec(name)
			b.Run(fmt.Sprintf("%s/%s", name, size.name), func(b *testing.B) {
				enc := NewEncoder()
				defer enc.Close()
				var fb Feedback // topk with error feedback, as gradients are pushed
				wire, _ := enc.Encode(nil, c, &fb, src)
				b.ReportAllocs()
				b.SetBytes(int64(4 * size.n))
				for b.Loop() {
					wire, _ = enc.Encode(wire, c, &fb, src)
				}
				b.ReportMetric(float64(len(wire))/float64(4*size.n), "ratio")
			})
		}
	}
}

// BenchmarkDecode reports MB/s of raw payload decoded.
func BenchmarkDecode(b *testing.B) {
	for _, size := range benchSizes {
		src := synth.Gradient(make([]float32, size.n), 1e-3, 1)
		for _, name := range benchCodecs {
			c, _ := ParseCodec(name)
			b.Run(fmt.Sprintf("%s/%s", name, size.name), func(b *testing.B) {
				enc, dec := NewEncoder(), NewDecoder()
				defer enc.Close()
				defer dec.Close()
				wire, _ := enc.Encode(nil, c, nil, src)
				dst := make([]float32, size.n)
				if err := dec.Decode(dst, c.ID, wire); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(4 * size.n))
				for b.Loop() {
					dec.Decode(dst, c.ID, wire)
				}
			})
		}
	}
}

func BenchmarkFirstNonFinite(b *testing.B) {
	x := synth.Gradient(make([]float32, 4<<20), 1e-3, 1)
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		if FirstNonFinite(x) != -1 {
			b.Fatal("non-finite value in a Gaussian")
		}
	}
}

func BenchmarkParseFrame(b *testing.B) {
	frame := AppendFrame(nil, Header{Elems: 1 << 16, Job: 1}, nil, make([]byte, 4<<16))
	lim := Limits{MaxElems: 1 << 20, MaxData: 1 << 10, Job: 1}
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, _, _, _, err := ParseFrame(frame, &lim); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkShuffle reports MB/s of raw payload through the byte-plane
// passes alone (the rest of shuffle+s2 and shuffle+zstd is the
// compressor), with the assembly kernels where available and with the Go
// loops.
func BenchmarkShuffle(b *testing.B) {
	raw := f32bytes(synth.Gradient(make([]float32, 4<<20), 1e-3, 1))
	planes := shuffle(make([]byte, len(raw)), raw)
	asm := useAsm
	defer func() { useAsm = asm }()
	for _, path := range []struct {
		name string
		on   bool
	}{{"asm", true}, {"go", false}} {
		if path.on && !asm {
			continue
		}
		useAsm = path.on
		b.Run("shuffle/"+path.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				shuffle(planes, raw)
			}
		})
		b.Run("unshuffle/"+path.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				unshuffle(raw, planes)
			}
		})
	}
}
