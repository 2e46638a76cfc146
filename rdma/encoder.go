package rdma

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Feedback is the error-feedback state of one stream of TopK messages:
// the residual of what earlier messages of the stream did not send. It
// belongs to the sender, not to a connection: the sender attaches it to
// every message of the stream (Msg.Feedback), so that a stream continues
// with its residual on a new connection after the old one broke. The
// parameter-server client keeps one per shard, for its gradients.
//
// Encoding a payload g with codec topk:F computes a = r + g (r is zero at
// first), sends the k = ⌈F·n⌉ elements of largest |a| (NaN counts as
// larger than Inf; ties go to the lower index) and keeps r = a with the
// sent elements zeroed. Nothing is lost, only delayed: Σ sent = Σ g − r.
// A Send that fails hands the elements it took back to the residual (the
// peer never got them); a Send that succeeded counts as delivered. A
// payload whose length differs from the stream's previous one starts a
// fresh residual.
//
// The zero value is an empty residual. A Feedback is safe for concurrent
// use (Sends of one stream on several connections are serialized on it)
// and must not be copied after first use.
type Feedback struct {
	mu       sync.Mutex
	residual []float32
}

// Residual returns a copy of the residual (nil before the stream's first
// TopK message).
func (f *Feedback) Residual() []float32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.residual)
}

// Reset drops the residual: the stream starts over.
func (f *Feedback) Reset() {
	f.mu.Lock()
	f.residual = nil
	f.mu.Unlock()
}

// accumulate adds src to the residual, starting a fresh one if the
// length changed, and returns it; it runs under f.mu.
func (f *Feedback) accumulate(src []float32) []float32 {
	r := f.residual
	if len(r) != len(src) {
		r = make([]float32, len(src))
		f.residual = r
	}
	for i, v := range src {
		r[i] += v
	}
	return r
}

// giveBack returns to the residual the elements of wire, a TopK payload of
// n elements this Feedback produced, that were not delivered.
func (f *Feedback) giveBack(wire []byte, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.residual
	if len(r) != n { // the stream restarted meanwhile
		return
	}
	k := len(wire) / 8
	idx, val := u32s(wire[:4*k]), u32s(wire[4*k:8*k])
	for j, i := range idx {
		r[i] += math.Float32frombits(val[j])
	}
}

// Encoder encodes float32 payloads into their wire form (docs/wire.md). It
// keeps everything that is reused from message to message (the zstd
// encoder, shuffle and selection scratch) but no state of the payloads it
// encodes: TopK's error feedback lives in a Feedback the caller passes.
// Each connection owns one for its send direction. After warm-up,
// encoding allocates nothing when dst has room. Not safe for concurrent
// use.
type Encoder struct {
	zstd    *zstd.Encoder
	scratch []byte
	keys    []uint32
	cand    []uint32
}

// NewEncoder returns an Encoder; the zstd state is created on first use.
func NewEncoder() *Encoder { return &Encoder{} }

// Close releases the compressor state. The Encoder must not be used after.
func (e *Encoder) Close() {
	if e.zstd != nil {
		e.zstd.Close()
		e.zstd = nil
	}
}

// Encode writes the wire form of src under codec c into dst's storage
// (grown if too small) and returns it. src is not modified. For TopK, fb
// is the stream's error feedback (see Feedback); with fb nil, TopK sends
// the k largest magnitudes of src alone and drops the rest (no error
// feedback). Other codecs ignore fb. An empty src encodes to nothing.
func (e *Encoder) Encode(dst []byte, c Codec, fb *Feedback, src []float32) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return dst[:0], err
	}
	n := len(src)
	if n == 0 {
		return dst[:0], nil
	}
	if uint64(n) > MaxElems {
		return dst[:0], fmt.Errorf("%w: %d elements > %d", ErrFrameTooLarge, n, uint64(MaxElems))
	}
	raw := f32bytes(src)
	limit, _ := maxWireLen(c.ID, uint64(n))
	switch c.ID {
	case CodecNone:
		return append(dst[:0], raw...), nil
	case CodecS2:
		return s2.Encode(grow(dst, int(limit)), raw), nil
	case CodecShuffleS2:
		e.scratch = shuffle(grow(e.scratch, len(raw)), raw)
		return s2.Encode(grow(dst, int(limit)), e.scratch), nil
	case CodecZstd, CodecShuffleZstd:
		if c.ID == CodecShuffleZstd {
			e.scratch = shuffle(grow(e.scratch, len(raw)), raw)
			raw = e.scratch
		}
		z, err := e.zstdEncoder()
		if err != nil {
			return dst[:0], err
		}
		return z.EncodeAll(raw, grow(dst, int(limit))[:0]), nil
	case CodecFP16:
		dst = grow(dst, 2*n)
		f32sToF16(u16s(dst)[:n], src)
		return dst, nil
	case CodecBF16:
		dst = grow(dst, 2*n)
		f32sToBF16(u16s(dst)[:n], src)
		return dst, nil
	default: // CodecTopK
		if fb == nil {
			return e.topK(dst, c.topK(n), src, false), nil
		}
		fb.mu.Lock()
		defer fb.mu.Unlock()
		return e.topK(dst, c.topK(n), fb.accumulate(src), true), nil
	}
}

func (e *Encoder) zstdEncoder() (*zstd.Encoder, error) {
	if e.zstd == nil {
		z, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
		if err != nil {
			return nil, fmt.Errorf("rdma: zstd encoder: %w", err)
		}
		e.zstd = z
	}
	return e.zstd, nil
}

// topK writes the k largest magnitudes of r (indices ascending, then
// values) and, if keep (r is a Feedback's residual), zeroes them in r.
//
// The k-th largest magnitude t is found among candidates: a strided
// sample of r gives a threshold t0 that about 2k elements reach, one pass
// collects the indices of those (in index order), and a selection among
// them finds t exactly, since every element at least as large as t is a
// candidate. When the sample misjudges (fewer than k or more than
// 4k+1024 candidates) the selection runs over all elements.
func (e *Encoder) topK(dst []byte, k int, r []float32, keep bool) []byte {
	n := len(r)
	cand := e.candidates(r, k)
	if cand == nil { // fall back to every index
		e.cand = grow32(e.cand, n)
		for i := range e.cand {
			e.cand[i] = uint32(i)
		}
		cand = e.cand
	}
	e.keys = grow32(e.keys, len(cand))
	for j, i := range cand {
		e.keys[j] = mag(r[i])
	}
	// keys[m-k] becomes the k-th largest t: send everything above t plus,
	// in index order, enough equal to t to make k.
	m := len(cand)
	t := selectKth(e.keys, m-k)
	above := 0
	for _, x := range e.keys[m-k+1:] {
		if x > t {
			above++
		}
	}
	ties := k - above
	dst = grow(dst, 8*k)
	idx, val := u32s(dst[:4*k]), u32s(dst[4*k:])
	j := 0
	for _, i := range cand {
		v := r[i]
		x := mag(v)
		if x < t || x == t && ties == 0 {
			continue
		}
		if x == t {
			ties--
		}
		idx[j], val[j] = i, math.Float32bits(v)
		if keep {
			r[i] = 0
		}
		j++
	}
	return dst
}

// mag orders magnitudes: the bits of |v|, so NaN is above Inf.
func mag(v float32) uint32 { return math.Float32bits(v) &^ (1 << 31) }

// candidates returns, in index order, the indices of a whose magnitude
// reaches a threshold estimated from a sample to admit about 2k of them,
// or nil if that estimate admits fewer than k or too many. The threshold
// is never below the smallest nonzero magnitude, so that a payload that
// is already a selection (k nonzero elements among zeros: a message sent
// again as the elements it carried) costs one pass, not a selection over
// every element.
func (e *Encoder) candidates(a []float32, k int) []uint32 {
	const samples = 4096
	n := len(a)
	if n < 4*samples || 4*k > n {
		return nil
	}
	stride := n / samples
	e.keys = grow32(e.keys, samples)
	for j := range e.keys {
		e.keys[j] = mag(a[j*stride])
	}
	// The sample element that about 2k/n of the sample exceed.
	rank := samples - 1 - min(samples-1, 2*k*samples/n)
	t0 := max(selectKth(e.keys, rank), 1)
	limit := 4*k + 1024
	c := e.cand[:0]
	if cap(c) < limit {
		c = make([]uint32, 0, limit)
	}
	for i, v := range a {
		if mag(v) >= t0 {
			if len(c) == limit {
				return nil
			}
			c = append(c, uint32(i))
		}
	}
	e.cand = c
	if len(c) < k {
		return nil
	}
	return c
}

// selectKth reorders a so that a[k] holds the value it would have if a
// were sorted ascending, with smaller or equal values before it and larger
// or equal after (quickselect, median-of-three pivots, falling back to a
// sort on degenerate inputs), and returns a[k].
func selectKth(a []uint32, k int) uint32 {
	lo, hi := 0, len(a)-1
	for budget := 64; lo < hi; budget-- {
		if budget == 0 {
			slices.Sort(a[lo : hi+1])
			break
		}
		mid := lo + (hi-lo)/2
		if a[mid] < a[lo] {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if a[hi] < a[lo] {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if a[hi] < a[mid] {
			a[hi], a[mid] = a[mid], a[hi]
		}
		p := a[mid]
		i, j := lo, hi
		for i <= j {
			for a[i] < p {
				i++
			}
			for a[j] > p {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	return a[k]
}

// Decoder decodes wire payloads back into float32 values, validating them:
// a payload that is malformed or would decode to anything but exactly the
// announced element count fails with ErrCorrupt (or ErrBadLength) before
// anything beyond dst is written, so decompression bombs cannot allocate.
// It keeps the zstd decoder and scratch for reuse; it is stateless between
// messages otherwise. Not safe for concurrent use.
type Decoder struct {
	zstd    *zstd.Decoder
	scratch []byte
}

// NewDecoder returns a Decoder; the zstd state is created on first use.
func NewDecoder() *Decoder { return &Decoder{} }

// Close releases the decompressor state. The Decoder must not be used after.
func (d *Decoder) Close() {
	if d.zstd != nil {
		d.zstd.Close()
		d.zstd = nil
	}
}

// Decode fills dst (its length is the element count from the frame
// header) from src, the wire payload of codec id. For TopK, the elements
// not sent are set to zero.
func (d *Decoder) Decode(dst []float32, id CodecID, src []byte) error {
	n := len(dst)
	if err := checkWireLen(id, uint64(n), uint64(len(src))); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	raw := f32bytes(dst)
	switch id {
	case CodecNone:
		copy(raw, src)
	case CodecS2:
		return decodeS2(raw, src)
	case CodecShuffleS2, CodecShuffleZstd:
		d.scratch = grow(d.scratch, len(raw))
		var err error
		if id == CodecShuffleS2 {
			err = decodeS2(d.scratch, src)
		} else {
			err = d.decodeZstd(d.scratch, src)
		}
		if err != nil {
			return err
		}
		unshuffle(raw, d.scratch)
	case CodecZstd:
		return d.decodeZstd(raw, src)
	case CodecFP16:
		f16sToF32(dst, u16s(src))
	case CodecBF16:
		bf16sToF32(dst, u16s(src))
	case CodecTopK:
		k := len(src) / 8
		idx, val := src[:4*k], src[4*k:]
		clear(dst)
		next := uint32(0) // indices strictly ascending
		for j := range k {
			i := binary.LittleEndian.Uint32(idx[4*j:])
			if i < next || uint64(i) >= uint64(n) {
				return fmt.Errorf("%w: topk index %d at position %d (n %d)", ErrCorrupt, i, j, n)
			}
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(val[4*j:]))
			next = i + 1
		}
	}
	return nil
}

func decodeS2(dst, src []byte) error {
	if l, err := s2.DecodedLen(src); err != nil || l != len(dst) {
		return fmt.Errorf("%w: s2 block does not decode to %d bytes", ErrCorrupt, len(dst))
	}
	if out, err := s2.Decode(dst, src); err != nil || len(out) != len(dst) {
		return fmt.Errorf("%w: s2: %v", ErrCorrupt, err)
	}
	return nil
}

func (d *Decoder) decodeZstd(dst, src []byte) error {
	var h zstd.Header
	if err := h.Decode(src); err != nil || h.HasFCS && h.FrameContentSize != uint64(len(dst)) {
		return fmt.Errorf("%w: zstd frame does not announce %d bytes", ErrCorrupt, len(dst))
	}
	if d.zstd == nil {
		z, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(4*MaxElems),
			zstd.WithDecodeAllCapLimit(true), zstd.IgnoreChecksum(true))
		if err != nil {
			return fmt.Errorf("rdma: zstd decoder: %w", err)
		}
		d.zstd = z
	}
	// The cap limit makes DecodeAll fail rather than grow past dst.
	out, err := d.zstd.DecodeAll(src, dst[:0:len(dst)])
	if err != nil || len(out) != len(dst) {
		return fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
	}
	return nil
}

// shuffle writes the 4 byte planes of raw (every element's byte 0, then
// every byte 1, ...) to dst, len(dst) == len(raw), and returns dst. The
// assembly takes a multiple of kern.planes elements where it runs
// (kernels_amd64.s); in Go, eight elements (four 8-byte loads) at a time
// become one 8-byte store per plane.
func shuffle(dst, raw []byte) []byte {
	n := len(raw) / 4
	p0, p1, p2, p3 := dst[:n], dst[n:2*n], dst[2*n:3*n], dst[3*n:4*n]
	le := binary.LittleEndian
	i := bulk(n, kern.planes)
	if i > 0 {
		kern.shuffle(&dst[0], &raw[0], n, i)
	}
	for ; i+8 <= n; i += 8 {
		r := raw[4*i : 4*i+32 : 4*i+32]
		w0, w1, w2, w3 := le.Uint64(r[0:8]), le.Uint64(r[8:16]), le.Uint64(r[16:24]), le.Uint64(r[24:32])
		plane := func(k uint) uint64 { // byte k of elements i..i+7
			lo, hi := 8*k, 32+8*k
			return w0>>lo&0xff | (w0>>hi&0xff)<<8 | (w1>>lo&0xff)<<16 | (w1>>hi&0xff)<<24 |
				(w2>>lo&0xff)<<32 | (w2>>hi&0xff)<<40 | (w3>>lo&0xff)<<48 | (w3>>hi&0xff)<<56
		}
		le.PutUint64(p0[i:i+8], plane(0))
		le.PutUint64(p1[i:i+8], plane(1))
		le.PutUint64(p2[i:i+8], plane(2))
		le.PutUint64(p3[i:i+8], plane(3))
	}
	for ; i < n; i++ {
		p0[i], p1[i], p2[i], p3[i] = raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3]
	}
	return dst
}

// unshuffle inverts shuffle.
func unshuffle(raw, planes []byte) {
	n := len(raw) / 4
	p0, p1, p2, p3 := planes[:n], planes[n:2*n], planes[2*n:3*n], planes[3*n:4*n]
	le := binary.LittleEndian
	i := bulk(n, kern.planes)
	if i > 0 {
		kern.unshuffle(&raw[0], &planes[0], n, i)
	}
	for ; i+8 <= n; i += 8 {
		b0, b1, b2, b3 := le.Uint64(p0[i:i+8]), le.Uint64(p1[i:i+8]), le.Uint64(p2[i:i+8]), le.Uint64(p3[i:i+8])
		pair := func(m uint) uint64 { // elements i+2m and i+2m+1
			lo, hi := 16*m, 16*m+8
			return b0>>lo&0xff | (b1>>lo&0xff)<<8 | (b2>>lo&0xff)<<16 | (b3>>lo&0xff)<<24 |
				(b0>>hi&0xff)<<32 | (b1>>hi&0xff)<<40 | (b2>>hi&0xff)<<48 | (b3>>hi&0xff)<<56
		}
		r := raw[4*i : 4*i+32 : 4*i+32]
		le.PutUint64(r[0:8], pair(0))
		le.PutUint64(r[8:16], pair(1))
		le.PutUint64(r[16:24], pair(2))
		le.PutUint64(r[24:32], pair(3))
	}
	for ; i < n; i++ {
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = p0[i], p1[i], p2[i], p3[i]
	}
}

// grow returns b resliced to length n, reallocated only if its capacity is
// too small (the contents are not kept).
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

func grow32(b []uint32, n int) []uint32 {
	if cap(b) < n {
		return make([]uint32, n)
	}
	return b[:n]
}
