package rdma

import (
	"bytes"
	"flag"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/kernels/isa"
)

// forPaths runs f once per implementation of the element-wise passes:
// the assembly of each level this build and CPU have (the others are
// skipped subtests that say why) and the Go loops, selected through kern.
func forPaths(t *testing.T, f func(t *testing.T)) {
	saved := kern
	defer func() { kern = saved }()
	for _, l := range []isa.Level{isa.AVX512, isa.AVX2, isa.Generic} {
		name := l.String()
		if l == isa.Generic {
			name = "go"
		}
		t.Run(name, func(t *testing.T) {
			a := asmFor(min(l, isa.Best()))
			if a.level != l {
				t.Skipf("no %v assembly in this build or on this CPU (%s)", l, isa.Reason())
			}
			kern = a
			f(t)
		})
	}
}

// halfKernel is one format's slice conversions and the scalar functions
// they must agree with bit for bit (the scalars are checked against an
// independent reference in TestHalfConversions).
type halfKernel struct {
	name   string
	round  func([]uint16, []float32)
	widen  func([]float32, []uint16)
	round1 func(float32) uint16
	widen1 func(uint16) float32
}

var halfKernels = []halfKernel{
	{"fp16", f32sToF16, f16sToF32, f32ToF16, f16ToF32},
	{"bf16", f32sToBF16, bf16sToF32, f32ToBF16, bf16ToF32},
}

// halfInputs returns float32 bit patterns covering every rounding case of
// both formats: for every sign and exponent, all 2¹⁴ values of the low 14
// mantissa bits (fp16's 13 dropped bits and its last kept one) under a
// random top part; for the exponents where either format changes regime,
// all 2¹⁷ values of the low 17 bits (bf16's 16 dropped bits and its last
// kept one); every NaN payload's top 10 bits; the neighbourhoods of the
// special values; then random bit patterns.
func halfInputs(r *rand.Rand, random int) []uint32 {
	xs := make([]uint32, 0, 512<<14+24<<17+4<<10+19*65*4+random)
	for se := range uint32(512) {
		hi := r.Uint32() & 0x7fc000
		for m := range uint32(1 << 14) {
			xs = append(xs, se<<23|hi|m)
		}
	}
	for _, e := range []uint32{0, 1, 102, 103, 112, 113, 126, 127, 142, 143, 254, 255} {
		for _, s := range []uint32{0, 1 << 31} {
			hi := r.Uint32() & 0x7e0000
			for m := range uint32(1 << 17) {
				xs = append(xs, s|e<<23|hi|m)
			}
		}
	}
	for top := range uint32(1 << 10) { // NaN (and Inf) payloads
		for _, s := range []uint32{0, 1 << 31} {
			xs = append(xs, s|0x7f800000|top<<13, s|0x7f800000|top<<13|r.Uint32()&0x1fff)
		}
	}
	specials := []uint32{
		0, 0x7f800000, 0x7f800001, 0x7fbfffff, 0x7fc00000, 0x7fffffff, // ±0, Inf, NaNs
		0x477fe000, 0x477ff000, 0x47800000, // 65504, 65520, 65536
		0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, // MaxFloat32 and bf16's overflow threshold
		0x38800000, 0x33800000, 0x33000000, 0x00800000, 0x00000001, 0x3f800000, // 2⁻¹⁴, 2⁻²⁴, 2⁻²⁵, 2⁻¹²⁶, 2⁻¹⁴⁹, 1
	}
	for _, b := range specials {
		for d := uint32(0); d <= 64; d++ {
			for _, s := range []uint32{0, 1 << 31} {
				xs = append(xs, s|(b+d)&0x7fffffff, s|(b-d)&0x7fffffff)
			}
		}
	}
	for range random {
		xs = append(xs, r.Uint32())
	}
	return xs
}

// TestHalfKernels checks the slice conversions against the scalar
// functions: widening every one of the 65,536 codes, rounding the
// patterns of halfInputs (every 13th under the race detector), from
// unaligned starts and with tails of every length, and never writing past
// the end of dst.
func TestHalfKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	xs := halfInputs(r, 2_000_000)
	stride := 1
	if raceEnabled {
		stride = 13
	}
	in := make([]float32, 0, len(xs)/stride+1)
	for i := 0; i < len(xs); i += stride {
		in = append(in, math.Float32frombits(xs[i]))
	}
	codes := make([]uint16, 1<<16+1)
	for i := range codes {
		codes[i] = uint16(i)
	}
	for _, k := range halfKernels {
		t.Run(k.name, func(t *testing.T) {
			forPaths(t, func(t *testing.T) {
				for _, off := range []int{0, 1} {
					wide := make([]float32, len(codes)-off)
					k.widen(wide, codes[off:])
					for i, h := range codes[off:] {
						if got, want := math.Float32bits(wide[i]), math.Float32bits(k.widen1(h)); got != want {
							t.Fatalf("widen(%#04x) = %#08x, want %#08x", h, got, want)
						}
					}
					half := make([]uint16, len(in)-off)
					k.round(half, in[off:])
					for i, x := range in[off:] {
						if want := k.round1(x); half[i] != want {
							t.Fatalf("round(%#08x) = %#04x, want %#04x", math.Float32bits(x), half[i], want)
						}
					}
				}
				// Short lengths and tails, with guard elements after dst.
				const guard = 0x5a5a
				for n := range 100 {
					for off := range 3 {
						src := in[off : off+n]
						h := make([]uint16, n+4)
						for i := range h {
							h[i] = guard
						}
						k.round(h[:n], src)
						w := make([]float32, n+4)
						for i := range w {
							w[i] = math.Float32frombits(guard)
						}
						k.widen(w[:n], codes[off+1000:off+1000+n])
						for i := range n {
							if h[i] != k.round1(src[i]) || math.Float32bits(w[i]) != math.Float32bits(k.widen1(codes[off+1000+i])) {
								t.Fatalf("n=%d off=%d: element %d differs", n, off, i)
							}
						}
						for i := n; i < n+4; i++ {
							if h[i] != guard || math.Float32bits(w[i]) != guard {
								t.Fatalf("n=%d off=%d: wrote past the end", n, off)
							}
						}
					}
				}
			})
		})
	}
}

var exhaustive = flag.Bool("exhaustive", false, "TestHalfKernelsExhaustive: round every float32 bit pattern")

// TestHalfKernelsExhaustive rounds every one of the 2³² float32 bit
// patterns with the assembly kernels of every level and compares with the
// scalar functions. It takes about a minute per level, so it runs only
// with -exhaustive: make fuzz runs it (go test -run Exhaustive ./rdma/
// -exhaustive); make test runs TestHalfKernels, which covers every
// rounding case of both formats.
func TestHalfKernelsExhaustive(t *testing.T) {
	if !*exhaustive {
		t.Skip("about a minute per level: make fuzz runs it (go test -run Exhaustive ./rdma/ -exhaustive)")
	}
	forPaths(t, func(t *testing.T) {
		if kern.level == isa.Generic {
			t.Skip("the Go loops are the reference")
		}
		testHalfExhaustive(t)
	})
}

func testHalfExhaustive(t *testing.T) {
	const chunk = 1 << 20
	in, got := make([]float32, chunk), make([]uint16, chunk)
	for _, k := range halfKernels {
		for base := uint64(0); base < 1<<32; base += chunk {
			for i := range in {
				in[i] = math.Float32frombits(uint32(base) + uint32(i))
			}
			k.round(got, in)
			for i, x := range in {
				if want := k.round1(x); got[i] != want {
					t.Fatalf("%s: round(%#08x) = %#04x, want %#04x", k.name, math.Float32bits(x), got[i], want)
				}
			}
		}
	}
}

// TestShuffleKernels compares shuffle with the definition (plane p holds
// byte p of every element, in order) and unshuffle with its inverse, for
// every length to 100 and some long ones, from unaligned starts, checking
// that nothing past the end is written.
func TestShuffleKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 4*70_000+8)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	lengths := []int{1000, 1023, 1024, 4099, 65_536 + 17}
	for n := range 101 {
		lengths = append(lengths, n)
	}
	forPaths(t, func(t *testing.T) {
		for _, n := range lengths {
			for _, off := range []int{0, 1, 3} {
				raw := buf[off : off+4*n]
				planes := make([]byte, 4*n+off+4)
				shuffle(planes[off:off+4*n], raw)
				for i := range n {
					for p := range 4 {
						if got, want := planes[off+p*n+i], raw[4*i+p]; got != want {
							t.Fatalf("n=%d off=%d: plane %d element %d = %#x, want %#x", n, off, p, i, got, want)
						}
					}
				}
				if !bytes.Equal(planes[off+4*n:], make([]byte, 4)) {
					t.Fatalf("n=%d off=%d: shuffle wrote past the end", n, off)
				}
				back := bytes.Repeat([]byte{0xa5}, 4*n+off+4)
				unshuffle(back[off:off+4*n], planes[off:off+4*n])
				if !bytes.Equal(back[off:off+4*n], raw) {
					t.Fatalf("n=%d off=%d: unshuffle does not invert shuffle", n, off)
				}
				if !bytes.Equal(back[off+4*n:], []byte{0xa5, 0xa5, 0xa5, 0xa5}) {
					t.Fatalf("n=%d off=%d: unshuffle wrote past the end", n, off)
				}
			}
		}
	})
}
