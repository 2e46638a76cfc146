package rdma

import (
	"bytes"
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/softsync/softsync/rdma/internal/synth"
)

// halfFormat describes a 16-bit float format by an independent decoder
// of its positive codes; codes 0..inf are increasing in value, inf being
// the code of +Inf.
type halfFormat struct {
	name   string
	inf    uint16
	decode func(h uint16) float64 // positive finite codes
	round  func(float32) uint16   // implementation under test
	widen  func(uint16) float32   // implementation under test
}

var halfFormats = []halfFormat{
	{"fp16", 0x7c00, func(h uint16) float64 {
		e, m := int(h>>10), float64(h&0x3ff)
		if e == 0 {
			return math.Ldexp(m, -24)
		}
		return math.Ldexp(1024+m, e-25)
	}, f32ToF16, f16ToF32},
	{"bf16", 0x7f80, func(h uint16) float64 {
		e, m := int(h>>7), float64(h&0x7f)
		if e == 0 {
			return math.Ldexp(m, -133)
		}
		return math.Ldexp(128+m, e-134)
	}, f32ToBF16, bf16ToF32},
}

// refRound rounds x to the nearest code, ties to the even code, values at
// or beyond half-way to the next power past the largest finite to Inf.
func (f *halfFormat) refRound(x float32, values []float64) uint16 {
	var sign uint16
	if math.Signbit(float64(x)) {
		sign = 0x8000
	}
	a := math.Abs(float64(x))
	i := sort.SearchFloat64s(values, a) // first value ≥ a
	switch {
	case i == len(values):
		return sign | f.inf
	case values[i] == a || i == 0:
		return sign | uint16(i)
	}
	lo, hi := values[i-1], values[i]
	if a-lo < hi-a || a-lo == hi-a && (i-1)%2 == 0 {
		return sign | uint16(i-1)
	}
	return sign | uint16(i)
}

func TestHalfConversions(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, f := range halfFormats {
		t.Run(f.name, func(t *testing.T) {
			values := make([]float64, f.inf+1) // values[inf] is the virtual next power of two
			for h := range f.inf {
				values[h] = f.decode(h)
			}
			values[f.inf] = 2*values[f.inf-1] - values[f.inf-2]
			// Widening is exact for every finite code, and Inf and NaN survive.
			for h := range f.inf {
				for _, s := range []uint16{0, 0x8000} {
					got, want := f.widen(h|s), values[h]
					if s != 0 {
						want = -want
					}
					if float64(got) != want || math.Signbit(float64(got)) != (s != 0) {
						t.Fatalf("widen(%#04x) = %v, want %v", h|s, got, want)
					}
					if back := f.round(got); back != h|s {
						t.Fatalf("round(widen(%#04x)) = %#04x", h|s, back)
					}
				}
			}
			if !math.IsInf(float64(f.widen(f.inf)), 1) || !math.IsInf(float64(f.widen(f.inf|0x8000)), -1) {
				t.Fatal("Inf does not widen to Inf")
			}
			// Rounding: every midpoint and its neighbours, then random bit patterns.
			var xs []float32
			for h := 1; h <= int(f.inf); h++ {
				mid := float32((values[h-1] + values[h]) / 2)
				xs = append(xs, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, math.MaxFloat32), -mid)
			}
			for range 200_000 {
				xs = append(xs, math.Float32frombits(r.Uint32()), float32(r.NormFloat64()*1e-3))
			}
			xs = append(xs, 0, float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32,
				float32(math.Inf(1)), float32(math.Inf(-1)), math.SmallestNonzeroFloat32)
			for _, x := range xs {
				got := f.round(x)
				if x != x {
					if g := f.widen(got); g == g || math.Signbit(float64(g)) != math.Signbit(float64(x)) {
						t.Fatalf("round(NaN %#08x) = %#04x, not a NaN of the same sign", math.Float32bits(x), got)
					}
					continue
				}
				if want := f.refRound(x, values); got != want {
					t.Fatalf("round(%v = %#08x) = %#04x, want %#04x", x, math.Float32bits(x), got, want)
				}
			}
		})
	}
}

func TestParseCodec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Codec
		err  error
	}{
		{"none", Codec{}, nil},
		{"S2", Codec{ID: CodecS2}, nil},
		{"zstd", Codec{ID: CodecZstd}, nil},
		{"shuffle+s2", Codec{ID: CodecShuffleS2}, nil},
		{"shuffle+zstd", Codec{ID: CodecShuffleZstd}, nil},
		{"fp16", Codec{ID: CodecFP16}, nil},
		{"bf16", Codec{ID: CodecBF16}, nil},
		{"topk:0.01", Codec{ID: CodecTopK, Fraction: 0.01}, nil},
		{"topk:1", Codec{ID: CodecTopK, Fraction: 1}, nil},
		{"topk", Codec{}, ErrBadCodecParam},
		{"topk:0", Codec{}, ErrBadCodecParam},
		{"topk:1.5", Codec{}, ErrBadCodecParam},
		{"topk:NaN", Codec{}, ErrBadCodecParam},
		{"topk:x", Codec{}, ErrBadCodecParam},
		{"zstd:3", Codec{}, ErrBadCodecParam},
		{"gzip", Codec{}, ErrUnknownCodec},
		{"", Codec{}, ErrUnknownCodec},
	} {
		got, err := ParseCodec(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("ParseCodec(%q) = %v, %v; want %v, %v", tc.in, got, err, tc.want, tc.err)
		}
		if err == nil {
			if back, err := ParseCodec(got.String()); err != nil || back != got {
				t.Errorf("ParseCodec(%q.String() = %q) = %v, %v", tc.in, got.String(), back, err)
			}
		}
	}
}

// refTopK returns the indices of the k largest |a| (NaN largest; ties by
// lower index), ascending.
func refTopK(a []float32, k int) []int {
	idx := make([]int, len(a))
	for i := range idx {
		idx[i] = i
	}
	mag := func(v float32) float64 {
		if v != v {
			return math.Inf(1) + 1 // NaN sorts first
		}
		return math.Abs(float64(v))
	}
	slices.SortStableFunc(idx, func(i, j int) int {
		mi, mj := mag(a[i]), mag(a[j])
		if a[i] != a[i] && a[j] != a[j] {
			return 0
		}
		if a[i] != a[i] {
			return -1
		}
		if a[j] != a[j] {
			return 1
		}
		return cmp.Compare(mj, mi)
	})
	idx = idx[:k]
	slices.Sort(idx)
	return idx
}

func TestTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	enc, dec := NewEncoder(), NewDecoder()
	defer enc.Close()
	defer dec.Close()
	for trial := range 316 {
		n := 1 + r.IntN(3000)
		if trial >= 300 { // large enough for the sampled threshold
			n = 16384 + r.IntN(40000)
		}
		g := make([]float32, n)
		for i := range g {
			switch trial % 3 {
			case 0:
				g[i] = float32(r.NormFloat64())
			case 1: // many ties
				g[i] = float32(r.IntN(7) - 3)
			default:
				g[i] = float32(r.IntN(3)) * 0.5
			}
		}
		if trial%10 == 9 {
			g[r.IntN(n)] = float32(math.NaN())
		}
		c := Codec{ID: CodecTopK, Fraction: r.Float64()}
		if trial >= 300 {
			c.Fraction = []float64{0.001, 0.01, 0.1, 0.3}[trial%4]
		}
		// Without feedback the selection is the same and g stays as it is.
		orig := slices.Clone(g)
		plain, err := enc.Encode(nil, c, nil, g)
		if err != nil {
			t.Fatal(err)
		}
		var fb Feedback
		wire, err := enc.Encode(nil, c, &fb, g)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(plain, wire) || !slices.Equal(u32sOf(g), u32sOf(orig)) {
			t.Fatalf("trial %d: encoding without feedback differs from the first message with it, or changed the payload", trial)
		}
		k := c.topK(n)
		if len(wire) != 8*k {
			t.Fatalf("n %d fraction %v: %d bytes, want %d", n, c.Fraction, len(wire), 8*k)
		}
		got := make([]float32, n)
		if err := dec.Decode(got, CodecTopK, wire); err != nil {
			t.Fatal(err)
		}
		res := fb.Residual()
		isSent := make([]bool, n)
		for j, i := range refTopK(g, k) {
			isSent[i] = true
			if gi, wi := math.Float32bits(got[i]), math.Float32bits(g[i]); gi != wi {
				t.Fatalf("trial %d: selected #%d index %d = %v, want %v", trial, j, i, got[i], g[i])
			}
			if res[i] != 0 {
				t.Fatalf("trial %d: residual of sent index %d is %v", trial, i, res[i])
			}
			got[i] = 0
		}
		for i, v := range got {
			if v != 0 {
				t.Fatalf("trial %d: index %d not among the top %d but sent %v", trial, i, k, v)
			}
			if !isSent[i] && res[i] != g[i] {
				t.Fatalf("trial %d: residual[%d] = %v, want %v", trial, i, res[i], g[i])
			}
		}
	}
}

// TestTopKSampleMisjudged: values that are large exactly where the
// threshold sample looks make the sampled threshold admit too few
// candidates; the result must still be exact.
func TestTopKSampleMisjudged(t *testing.T) {
	const n = 1 << 16
	g := make([]float32, n)
	for i := range g {
		g[i] = float32(i%7) * 1e-3
	}
	for j := range 4096 {
		g[j*(n/4096)] = 1 + float32(j)
	}
	enc, dec := NewEncoder(), NewDecoder()
	c := Codec{ID: CodecTopK, Fraction: 0.2}
	wire, err := enc.Encode(nil, c, nil, g)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := dec.Decode(got, CodecTopK, wire); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n)
	for _, i := range refTopK(g, c.topK(n)) {
		want[i] = g[i]
	}
	if !slices.Equal(got, want) {
		t.Fatal("top-k differs from the reference")
	}
}

// TestTopKConservation: over many rounds, what was sent plus what is held
// back equals what was given (integer values keep float sums exact).
func TestTopKConservation(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	enc, dec := NewEncoder(), NewDecoder()
	const n, rounds = 500, 40
	given, sent := make([]float64, n), make([]float64, n)
	g, out := make([]float32, n), make([]float32, n)
	var wire []byte
	var fb Feedback
	for range rounds {
		for i := range g {
			g[i] = float32(r.IntN(101) - 50)
			given[i] += float64(g[i])
		}
		var err error
		if wire, err = enc.Encode(wire, Codec{ID: CodecTopK, Fraction: 0.05}, &fb, g); err != nil {
			t.Fatal(err)
		}
		if err := dec.Decode(out, CodecTopK, wire); err != nil {
			t.Fatal(err)
		}
		for i, v := range out {
			sent[i] += float64(v)
		}
	}
	for i, v := range fb.Residual() {
		if sent[i]+float64(v) != given[i] {
			t.Fatalf("element %d: sent %v + held %v != given %v", i, sent[i], v, given[i])
		}
	}
	// A different length starts the stream over, and so does Reset.
	if _, err := enc.Encode(wire, Codec{ID: CodecTopK, Fraction: 0.5}, &fb, g[:10]); err != nil {
		t.Fatal(err)
	}
	if res := fb.Residual(); len(res) != 10 {
		t.Fatalf("residual has %d elements after a length change", len(res))
	}
	fb.Reset()
	if res := fb.Residual(); res != nil {
		t.Fatalf("residual %v after Reset", res)
	}
}

// TestTopKOfSelection: a payload that is a TopK selection (its elements,
// zero elsewhere) encodes, without error feedback, to that selection,
// byte for byte, through the candidate pass (n large enough to sample);
// so a message sent again as what it carried carries the same.
func TestTopKOfSelection(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const n = 1 << 16
	g := make([]float32, n)
	for i := range g {
		g[i] = float32(r.NormFloat64())
	}
	enc, dec := NewEncoder(), NewDecoder()
	c := Codec{ID: CodecTopK, Fraction: 0.01}
	var fb Feedback
	sel, err := enc.Encode(nil, c, &fb, g)
	if err != nil {
		t.Fatal(err)
	}
	dense := make([]float32, n)
	if err := dec.Decode(dense, CodecTopK, sel); err != nil {
		t.Fatal(err)
	}
	again, err := enc.Encode(nil, c, nil, dense)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, sel) {
		t.Fatal("the selection encoded again differs")
	}
	if enc.candidates(dense, c.topK(n)) == nil {
		t.Fatal("a selection fell back to a selection over every element")
	}
}

// TestFeedbackGiveBack: a message that was not delivered hands what it
// took back, so that the residual is as if it had never been encoded,
// plus what it carried; a restarted stream ignores it.
func TestFeedbackGiveBack(t *testing.T) {
	enc := NewEncoder()
	c := Codec{ID: CodecTopK, Fraction: 0.25}
	g := []float32{1, -8, 3, 0, 5, -2, 7, 4}
	var fb Feedback
	first, err := enc.Encode(nil, c, &fb, g)
	if err != nil {
		t.Fatal(err)
	}
	if res := fb.Residual(); res[1] != 0 || res[6] != 0 || res[4] != 5 {
		t.Fatalf("residual after the first message: %v", res)
	}
	wire, err := enc.Encode(nil, c, &fb, g) // residual 2g minus what the first sent
	if err != nil {
		t.Fatal(err)
	}
	fb.giveBack(wire, len(g))
	want := make([]float32, len(g))
	for i, v := range g {
		want[i] = 2 * v
	}
	want[1], want[6] = g[1], g[6] // the first message was delivered
	if res := fb.Residual(); !slices.Equal(res, want) {
		t.Fatalf("residual after giving the second message back: %v, want %v", res, want)
	}
	enc.Encode(nil, c, &fb, g[:4])
	before := fb.Residual()
	fb.giveBack(first, len(g))
	if res := fb.Residual(); !slices.Equal(res, before) {
		t.Fatalf("giving back a message of the previous stream changed the residual: %v, want %v", res, before)
	}
}

// TestFeedbackAllocs: encoding with a warm Feedback allocates nothing.
func TestFeedbackAllocs(t *testing.T) {
	enc := NewEncoder()
	g := synth.Gradient(make([]float32, 100_000), 1e-3, 1)
	var fb Feedback
	c := Codec{ID: CodecTopK, Fraction: 0.01}
	wire, _ := enc.Encode(nil, c, &fb, g)
	if a := testing.AllocsPerRun(20, func() { wire, _ = enc.Encode(wire, c, &fb, g) }); a > 0 {
		t.Fatalf("%v allocations per TopK encode with feedback", a)
	}
}

func u32sOf(f []float32) []uint32 {
	u := make([]uint32, len(f))
	for i, v := range f {
		u[i] = math.Float32bits(v)
	}
	return u
}

func TestLosslessRoundTrip(t *testing.T) {
	enc, dec := NewEncoder(), NewDecoder()
	defer enc.Close()
	defer dec.Close()
	for _, id := range []CodecID{CodecNone, CodecS2, CodecZstd, CodecShuffleS2, CodecShuffleZstd} {
		for _, n := range []int{0, 1, 2, 255, 64 << 10, 300_001} {
			src := synth.Gradient(make([]float32, n), 1e-3, uint64(n))
			if n > 100 { // runs and special values
				clear(src[10:60])
				src[70], src[71], src[72] = float32(math.Inf(1)), float32(math.NaN()), -0.0
			}
			wire, err := enc.Encode(nil, Codec{ID: id}, nil, src)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkWireLen(id, uint64(n), uint64(len(wire))); err != nil {
				t.Fatalf("%s n=%d: encoder output fails the receiver's length check: %v", id, n, err)
			}
			got := make([]float32, n)
			if err := dec.Decode(got, id, wire); err != nil {
				t.Fatalf("%s n=%d: %v", id, n, err)
			}
			for i := range src {
				if math.Float32bits(got[i]) != math.Float32bits(src[i]) {
					t.Fatalf("%s n=%d: element %d = %v, want %v", id, n, i, got[i], src[i])
				}
			}
			// Every decoder rejects a payload announcing one element more or less.
			for _, m := range []int{n - 1, n + 1} {
				if m < 0 || n == 0 {
					continue
				}
				if err := dec.Decode(make([]float32, m), id, wire); err == nil {
					t.Fatalf("%s: %d-element payload decoded as %d elements", id, n, m)
				}
			}
		}
	}
}

// TestDecompressionBomb: a small payload that would expand far beyond the
// announced element count is rejected without growing the output.
func TestDecompressionBomb(t *testing.T) {
	enc, dec := NewEncoder(), NewDecoder()
	big := make([]float32, 1<<20) // 4 MiB of zeros compresses to almost nothing
	for _, id := range []CodecID{CodecS2, CodecZstd, CodecShuffleS2, CodecShuffleZstd} {
		wire, err := enc.Encode(nil, Codec{ID: id}, nil, big)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]float32, 1000)
		err = dec.Decode(dst, id, wire)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %d-byte bomb: %v", id, len(wire), err)
		}
	}
}

func TestCodecMetadata(t *testing.T) {
	if len(CodecNames()) != NumCodecs {
		t.Fatal("CodecNames incomplete")
	}
	for id := range CodecID(NumCodecs) {
		if id.Lossless() != (id <= CodecShuffleZstd) || !id.Valid() {
			t.Errorf("%s: lossless %v", id, id.Lossless())
		}
	}
	if CodecID(NumCodecs).Valid() || CodecID(200).String() != "codec(200)" {
		t.Error("invalid codec id accepted")
	}
}
