package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
)

// Errors of the shard file codec and of the store, wrapped with the file
// they concern where it is known; test with errors.Is.
var (
	// ErrFormat: not a shard file or manifest, an unknown format version,
	// a header that contradicts itself or the file's length, a truncated
	// file, or a field out of range.
	ErrFormat = errors.New("not a valid softsync checkpoint file")
	// ErrChecksum: the contents do not match their checksum (a shard
	// file's CRC32C, or the size and CRC32C the manifest lists).
	ErrChecksum = errors.New("checkpoint file checksum mismatch (corrupt file)")
	// ErrMismatch: the state does not fit together: a shard whose lengths
	// disagree with its layout, shard files of one version that do not
	// cover the vector once, or a version of another job.
	ErrMismatch = errors.New("checkpoint does not match")
	// ErrPartial: a version folder without a manifest (its writers were
	// interrupted, or are still writing).
	ErrPartial = errors.New("checkpoint version is partial (no manifest)")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Shard is what a shard file holds: a shard's ps.Checkpoint, the number of
// shards of the layout it belongs to, and the server's identity state of
// each learner id (the latest incarnation it saw, and whether that
// incarnation was evicted), which a restarted server needs to keep
// refusing messages of incarnations that are over.
type Shard struct {
	ps.Checkpoint
	Shards       int      // shards of the layout (ps.Config.Shards); the range is ps.RangeOf(Total, Shards, Shard)
	Incarnations []uint32 // per learner id: the latest incarnation seen
	Evicted      []bool   // per learner id: that incarnation was evicted
	// dropped: the arrays (weights, momentum, accumulation, rule state,
	// pulled copies) were let go after decoding (Snapshot.ShardsOf); the
	// rest is the file's.
	dropped bool
}

// Dropped reports whether the shard's arrays were let go after it was
// decoded (Snapshot.ShardsOf): only its counters, per-learner state and
// consumed mini-batches are there.
func (s *Shard) Dropped() bool { return s.dropped }

// Drop lets the shard's arrays go (Dropped): what a process that does not run
// the shard keeps of it.
func (s *Shard) Drop() {
	s.Weights, s.Pulled, s.dropped = nil, nil, true
	st := &s.Solver
	st.Momentum, st.Acc, st.MeanSquare, st.StepSquare = nil, nil, nil, nil
}

// Range returns the part of the flat vector the shard owns.
func (s *Shard) Range() (ps.Range, error) {
	r, err := ps.RangeOf(s.Total, s.Shards, s.Shard)
	if err != nil {
		return ps.Range{}, fmt.Errorf("%w: shard %d of %d of a %d-vector: %w", ErrMismatch, s.Shard, s.Shards, s.Total, err)
	}
	return r, nil
}

// Learners returns the number of learner ids of the shard's state.
func (s *Shard) Learners() int { return len(s.Active) }

// check returns an ErrMismatch error if the lengths of s disagree with its
// layout and learner count, and the range it owns.
func (s *Shard) check() (ps.Range, error) {
	r, err := s.Range()
	if err != nil {
		return r, err
	}
	n, l := r.Len(), len(s.Active)
	st := &s.Solver
	bad := func(format string, args ...any) (ps.Range, error) {
		return r, fmt.Errorf("%w: shard %d of %d: %s", ErrMismatch, s.Shard, s.Shards, fmt.Sprintf(format, args...))
	}
	if s.dropped { // checked when decoded; the rest is checked below
		n = 0
	}
	switch {
	case len(s.Weights) != n || len(st.Momentum) != n:
		return bad("%d weights and %d momentum values, the range [%d, %d) has %d", len(s.Weights), len(st.Momentum), r.Lo, r.Hi, n)
	case st.Pending < 0 || (!s.dropped && ((st.Pending > 0) != (len(st.Acc) > 0) || (st.Pending > 0 && len(st.Acc) != n))):
		return bad("%d accumulated values with %d pending gradients (want %d, or none with 0 pending)", len(st.Acc), st.Pending, n)
	case len(s.LastSeq) != l || len(s.RoundPushed) != l || len(s.Incarnations) != l || len(s.Evicted) != l ||
		len(s.Stats.RefusedGradients) != l || (s.Pending != nil && len(s.Pending) != l):
		return bad("per-learner state of %d/%d/%d/%d/%d/%d/%d learners (Active, LastSeq, RoundPushed, Incarnations, Evicted, Stats.RefusedGradients, Pending)",
			l, len(s.LastSeq), len(s.RoundPushed), len(s.Incarnations), len(s.Evicted), len(s.Stats.RefusedGradients), len(s.Pending))
	case s.Pending != nil && sumOf(s.Pending) != uint64(st.Pending):
		return bad("the pending gradients of each learner sum to %d, %d are pending", sumOf(s.Pending), st.Pending)
	case uint64(l) > math.MaxUint32 || uint64(st.Pending) > math.MaxUint32 || uint64(s.Shards) > math.MaxUint32 || s.Total > maxVectorSize:
		return bad("%d learners, %d pending gradients, %d shards, a %d-vector: too many for the format", l, st.Pending, s.Shards, s.Total)
	case len(s.Stats.Histogram) > ps.HistogramLen:
		return bad("staleness histogram of %d buckets, at most %d", len(s.Stats.Histogram), ps.HistogramLen)
	case uint64(len(s.Consumed)) > math.MaxUint32:
		return bad("%d intervals of consumed mini-batches: too many for the format", len(s.Consumed))
	case st.MaxTau < 0 || st.SumTau < 0 || s.Stats.Shard < 0 || s.Stats.Epoch < 0 || s.Stats.MaxStaleness < 0:
		return bad("negative count")
	case (len(st.MeanSquare) != 0 && len(st.MeanSquare) != n) || (len(st.StepSquare) != 0 && len(st.StepSquare) != n):
		return bad("%d mean squares and %d step squares, want 0 or %d", len(st.MeanSquare), len(st.StepSquare), n)
	case len(st.RecentTau) > sgd.MomentumWindow || len(s.Pulled) > 2*l:
		return bad("%d recent τ (at most %d), %d pulled copies (at most 2 per learner)", len(st.RecentTau), sgd.MomentumWindow, len(s.Pulled))
	}
	for k, p := range s.Pulled {
		if int64(p.Learner) >= int64(l) || len(p.Weights) != n {
			return bad("pulled copy %d: learner %d with %d weights, want a learner < %d and %d weights", k, p.Learner, len(p.Weights), l, n)
		}
	}
	if _, err := ps.MakeBatchSet(s.Consumed); err != nil {
		return bad("consumed mini-batches: %v", err)
	}
	return r, nil
}

// Shard file layout, version 4 (docs/checkpoint.md has the table). All
// integers little-endian; signed ones two's complement.
//
//	offset      size  field
//	0           8     magic "SSCKSHRD"
//	8           4     format version, 4
//	12          4     C, intervals of consumed mini-batches
//	16          4     shard index k
//	20          4     shards S
//	24          8     total T (flat vector length)
//	32          8     lo, the range's start (ps.RangeOf(T, S, k))
//	40          8     hi, its end; n = hi − lo
//	48          4     learners L
//	52          4     H, histogram buckets (≤ ps.HistogramLen)
//	56          8     clock
//	64          8     samples
//	72          8     pending gradients p (sgd.State.Pending)
//	80          8     Σ s_l of the pending gradients, float64
//	88          8     Σ τ_l of the pending gradients
//	96          8     max τ_l of the pending gradients
//	104         152   19 counters of ps.Stats, 8 bytes each (statsFields)
//	256         4     CRC32C of bytes 0–255
//	260         4     reserved, 0
//	264         8L    last sequence per learner
//	…           8H    staleness histogram
//	…           4L    incarnation per learner
//	…           8     refused updates (ps.Stats.Refused)
//	…           8     pushes rejected as diverged (ps.Stats.Rejected.Diverged)
//	…           8L    gradients discarded with refused updates, per learner
//	…           4L    pending gradients per learner (all 0: unknown)
//	…           8     redone pushes (ps.Stats.Redone)
//	…           8     pushes given up for another life (ps.Stats.StaleLife)
//	…           8     empty hardsync rounds (ps.Stats.EmptyRounds)
//	…           16C   consumed mini-batches: first, last of each interval
//	…           4n    weights, float32
//	…           4n    momentum, float32
//	…           4n    pending accumulation, float32, only if p > 0
//	…           L     flags per learner: bit 0 active, 1 pushed this round, 2 evicted
//	…           4     M, mean squares (sgd.State.MeanSquare): 0 or n
//	…           4     G, step squares (sgd.State.StepSquare): 0 or n
//	…           8     gap steps (sgd.State.Steps)
//	…           4     R, recent τ (sgd.State.RecentTau), ≤ sgd.MomentumWindow
//	…           4     P, pulled copies (ps.Checkpoint.Pulled), ≤ 2L
//	…           4M    mean squares, float32
//	…           4G    step squares, float32
//	…           8R    recent τ, int64, oldest first
//	…           P×(16+4n)  pulled copies: learner uint32, flags uint32 (bit 0
//	                  used), stamp uint64, n float32 weights
//	size−4      4     CRC32C of every byte before it
//
// Version 3 has no rule state (the lines from "M" to "pulled copies").
// Version 2 has bytes 12–15 reserved (0) and no consumed mini-batches
// (the lines from "redone pushes" to "consumed mini-batches"). Version 1
// has neither those nor the refusal counts and pending gradients per
// learner (the lines from "refused updates" to "pending gradients per
// learner"), and holds the next sequence per learner (the last + 1, 0 for
// none) in place of the last one. DecodeShard reads all four;
// EncodeShard writes version 4.
const (
	shardMagic    = "SSCKSHRD"
	shardVersion  = 4
	headerSize    = 264
	headerSumAt   = 256
	trailerSize   = 4
	flagActive    = 1 << 0
	flagPushed    = 1 << 1
	flagEvicted   = 1 << 2
	flagsKnown    = flagActive | flagPushed | flagEvicted
	chunkBytes    = 64 << 10 // arrays move through a buffer of this size
	maxVectorSize = math.MaxInt64 / 16
)

// statsFields lists the counters of ps.Stats in the header, in file order.
func statsFields(s *ps.Stats) []*uint64 {
	r := &s.Rejected
	return []*uint64{nil, &s.Clock, &s.Updates, &s.Partial, &s.Gradients, &s.Dropped, &s.Duplicates,
		&r.WrongJob, &r.WrongShard, &r.UnknownLearner, &r.BadType, &r.BadLength, &r.FutureClock, &r.NonFinite, &r.AlreadyPush,
		&s.Samples, nil, &s.StalenessSum, nil}
}

func sumOf(v []uint32) uint64 {
	var t uint64
	for _, x := range v {
		t += uint64(x)
	}
	return t
}

// fileSize returns the length of a shard file of format version with
// these counts (intervals: of consumed mini-batches).
func fileSize(version uint32, learners, hist, n uint64, pending bool, intervals uint64) uint64 {
	arrays := uint64(2)
	if pending {
		arrays = 3
	}
	size := headerSize + 13*learners + 8*hist + 4*arrays*n + trailerSize
	if version >= 2 {
		size += 16 + 12*learners
	}
	if version >= 3 {
		size += 24 + 16*intervals
	}
	if version >= 4 {
		size += ruleCounts // the arrays of the rule state follow their counts
	}
	return size
}

// ruleCounts is the size of the counts of a version-4 file's rule state.
const ruleCounts = 24

// EncodeShard writes s to w in the shard file format. It returns an error
// wrapping ErrMismatch, without writing, if the lengths of s disagree with
// its layout; otherwise the first error of w.
func EncodeShard(w io.Writer, s *Shard) error {
	if s.dropped {
		return fmt.Errorf("%w: shard %d of %d: its arrays were let go after it was read", ErrMismatch, s.Shard, s.Shards)
	}
	r, err := s.check()
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	st := &s.Solver
	h := make([]byte, headerSize, chunkBytes)
	copy(h, shardMagic)
	le.PutUint32(h[8:], shardVersion)
	le.PutUint32(h[12:], uint32(len(s.Consumed)))
	le.PutUint32(h[16:], uint32(s.Shard))
	le.PutUint32(h[20:], uint32(s.Shards))
	le.PutUint64(h[24:], uint64(s.Total))
	le.PutUint64(h[32:], uint64(r.Lo))
	le.PutUint64(h[40:], uint64(r.Hi))
	le.PutUint32(h[48:], uint32(len(s.Active)))
	le.PutUint32(h[52:], uint32(len(s.Stats.Histogram)))
	le.PutUint64(h[56:], s.Clock)
	le.PutUint64(h[64:], s.Samples)
	le.PutUint64(h[72:], uint64(st.Pending))
	le.PutUint64(h[80:], math.Float64bits(st.SumS))
	le.PutUint64(h[88:], uint64(st.SumTau))
	le.PutUint64(h[96:], uint64(st.MaxTau))
	stats := s.Stats
	for i, f := range statsFields(&stats) {
		var v uint64
		switch {
		case f != nil:
			v = *f
		case i == 0:
			v = uint64(stats.Shard)
		case i == 16:
			v = uint64(stats.Epoch)
		default:
			v = uint64(stats.MaxStaleness)
		}
		le.PutUint64(h[104+8*i:], v)
	}
	le.PutUint32(h[headerSumAt:], crc32.Checksum(h[:headerSumAt], castagnoli))
	e := &encoder{w: w, buf: h}
	for _, v := range s.LastSeq {
		e.put(le.AppendUint64(e.room(8), v))
	}
	for _, v := range s.Stats.Histogram {
		e.put(le.AppendUint64(e.room(8), v))
	}
	for _, v := range s.Incarnations {
		e.put(le.AppendUint32(e.room(4), v))
	}
	e.put(le.AppendUint64(le.AppendUint64(e.room(16), s.Stats.Refused), s.Stats.Rejected.Diverged))
	for _, v := range s.Stats.RefusedGradients {
		e.put(le.AppendUint64(e.room(8), v))
	}
	for l := range s.Active {
		var v uint32
		if s.Pending != nil {
			v = s.Pending[l]
		}
		e.put(le.AppendUint32(e.room(4), v))
	}
	for _, v := range []uint64{s.Stats.Redone, s.Stats.StaleLife, s.Stats.EmptyRounds} {
		e.put(le.AppendUint64(e.room(8), v))
	}
	for _, v := range s.Consumed {
		e.put(le.AppendUint64(le.AppendUint64(e.room(16), v.First), v.Last))
	}
	for _, a := range [][]float32{s.Weights, st.Momentum, st.Acc} {
		e.floats(a)
	}
	for i, a := range s.Active {
		var f byte
		if a {
			f |= flagActive
		}
		if s.RoundPushed[i] {
			f |= flagPushed
		}
		if s.Evicted[i] {
			f |= flagEvicted
		}
		e.put(append(e.room(1), f))
	}
	e.ruleState(s)
	e.flush()
	if e.err != nil {
		return e.err
	}
	_, err = w.Write(le.AppendUint32(nil, e.crc))
	return err
}

// ruleState writes the rules' state of s: its counts, then its arrays.
func (e *encoder) ruleState(s *Shard) {
	le := binary.LittleEndian
	st := &s.Solver
	b := le.AppendUint32(le.AppendUint32(e.room(ruleCounts), uint32(len(st.MeanSquare))), uint32(len(st.StepSquare)))
	b = le.AppendUint64(b, st.Steps)
	e.put(le.AppendUint32(le.AppendUint32(b, uint32(len(st.RecentTau))), uint32(len(s.Pulled))))
	e.floats(st.MeanSquare)
	e.floats(st.StepSquare)
	for _, v := range st.RecentTau {
		e.put(le.AppendUint64(e.room(8), uint64(v)))
	}
	for _, p := range s.Pulled {
		var f uint32
		if p.Used {
			f = 1
		}
		e.put(le.AppendUint64(le.AppendUint32(le.AppendUint32(e.room(16), p.Learner), f), p.Stamp))
		e.floats(p.Weights)
	}
}

// encoder batches small appends into writes of up to chunkBytes, keeping a
// running CRC32C of what it wrote.
type encoder struct {
	w   io.Writer
	buf []byte
	crc uint32
	err error
}

// room returns buf, flushed first if fewer than k bytes are free.
func (e *encoder) room(k int) []byte {
	if cap(e.buf)-len(e.buf) < k {
		e.flush()
	}
	return e.buf
}

func (e *encoder) put(b []byte) { e.buf = b }

// floats appends v, little-endian, a buffer at a time.
func (e *encoder) floats(v []float32) {
	for len(v) > 0 {
		k := min(len(v), (cap(e.buf)-len(e.buf))/4)
		if k == 0 {
			e.flush()
			continue
		}
		b := e.buf[len(e.buf) : len(e.buf)+4*k]
		for i, x := range v[:k] {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		e.buf, v = e.buf[:len(e.buf)+4*k], v[k:]
	}
}

func (e *encoder) flush() {
	if e.err == nil && len(e.buf) > 0 {
		e.crc = crc32.Update(e.crc, castagnoli, e.buf)
		_, e.err = e.w.Write(e.buf)
	}
	e.buf = e.buf[:0]
}

// DecodeShard reads one shard file (format version 1, 2 or 3) from r, up to
// its end: bytes after the trailer are an error. It checks the header
// (magic, version, its own CRC32C, counts consistent with each other and
// with the layout), reads the arrays, checks the trailer, and refuses a
// NaN or an infinity in the weights, the momentum or the accumulation,
// naming the array and the first bad index. It allocates in proportion to the
// bytes it has read, never to what a header claims, and if r reports its
// remaining length (a Len() int method, as bytes.Reader has, or an
// *os.File) it checks the length the header implies against it before
// reading on. Errors wrap ErrFormat (including a truncated file) or
// ErrChecksum, or are r's own.
func DecodeShard(r io.Reader) (*Shard, error) {
	d := &decoder{r: r, remain: -1}
	switch f := r.(type) {
	case interface{ Len() int }:
		d.remain = int64(f.Len())
	case *os.File:
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			if off, err := f.Seek(0, io.SeekCurrent); err == nil {
				d.remain = fi.Size() - off
			}
		}
	}
	s, err := d.decode()
	if err != nil {
		return nil, fmt.Errorf("shard file: %w", err)
	}
	return s, nil
}

// ReadShardFile decodes the shard file at path; errors name the file.
func ReadShardFile(path string) (*Shard, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *fs.PathError names the file
	}
	defer f.Close()
	s, err := DecodeShard(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

type decoder struct {
	r      io.Reader
	remain int64 // bytes left in r when known, else −1
	off    uint64
	size   uint64 // the file length the header implies
	crc    uint32
	buf    []byte
}

func (d *decoder) formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// read reads the next n ≤ chunkBytes bytes into d.buf and returns them.
func (d *decoder) read(n int) ([]byte, error) {
	if cap(d.buf) < n {
		d.buf = make([]byte, n, max(n, min(chunkBytes, 2*cap(d.buf))))
	}
	b := d.buf[:n]
	if _, err := io.ReadFull(d.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if d.size > 0 {
				return nil, d.formatErr("truncated: the file ends before byte %d of %d", d.off+uint64(n), d.size)
			}
			return nil, d.formatErr("truncated: the file ends within the %d-byte header", headerSize)
		}
		return nil, err
	}
	d.crc = crc32.Update(d.crc, castagnoli, b)
	d.off += uint64(n)
	return b, nil
}

// words reads count little-endian values of width bytes each, decoding
// each with put, in chunks: memory grows with what was read.
func (d *decoder) words(count uint64, width int, put func(b []byte)) error {
	per := uint64(chunkBytes / width)
	for count > 0 {
		k := min(count, per)
		b, err := d.read(int(k) * width)
		if err != nil {
			return err
		}
		for i := 0; i < len(b); i += width {
			put(b[i : i+width])
		}
		count -= k
	}
	return nil
}

// floats reads n little-endian float32 values, a chunk at a time.
func (d *decoder) floats(n uint64) ([]float32, error) {
	v := grow[float32](d, n, 4)
	for left := n; left > 0; {
		k := min(left, chunkBytes/4)
		b, err := d.read(int(k) * 4)
		if err != nil {
			return nil, err
		}
		for i := range int(k) {
			v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
		left -= k
	}
	return v, nil
}

// grow returns a slice of length 0 with room for n elements when the file
// length was checked (so n is backed by bytes present), else for at most
// one chunk's worth, to grow by append as data arrives; nil for n = 0.
func grow[T any](d *decoder, n uint64, width int) []T {
	switch {
	case n == 0:
		return nil
	case d.remain >= 0:
		return make([]T, 0, n)
	}
	return make([]T, 0, min(n, uint64(chunkBytes/width)))
}

func (d *decoder) decode() (*Shard, error) {
	le := binary.LittleEndian
	h := make([]byte, headerSize)
	b, err := d.read(16)
	if err != nil {
		return nil, err
	}
	copy(h, b)
	if string(h[:8]) != shardMagic {
		return nil, d.formatErr("no %q magic at the start", shardMagic)
	}
	version := le.Uint32(h[8:])
	if version < 1 || version > shardVersion {
		return nil, d.formatErr("format version %d, this softsync reads versions 1 to %d", version, shardVersion)
	}
	if b, err = d.read(headerSize - 16); err != nil {
		return nil, err
	}
	copy(h[16:], b)
	if got, want := crc32.Checksum(h[:headerSumAt], castagnoli), le.Uint32(h[headerSumAt:]); got != want {
		return nil, fmt.Errorf("%w: header CRC32C %08x, its bytes give %08x", ErrChecksum, want, got)
	}
	intervals := uint64(le.Uint32(h[12:]))
	if (version < 3 && intervals != 0) || le.Uint32(h[260:]) != 0 {
		return nil, d.formatErr("reserved header bytes are not 0")
	}
	k, shards, total := uint64(le.Uint32(h[16:])), uint64(le.Uint32(h[20:])), le.Uint64(h[24:])
	lo, hi := le.Uint64(h[32:]), le.Uint64(h[40:])
	learners, hist, pending := uint64(le.Uint32(h[48:])), uint64(le.Uint32(h[52:])), le.Uint64(h[72:])
	if total > maxVectorSize {
		return nil, d.formatErr("vector length %d", total)
	}
	rng, err := ps.RangeOf(int(total), int(shards), int(k))
	if err != nil {
		return nil, d.formatErr("shard %d of %d of a %d-vector: %v", k, shards, total, err)
	}
	if uint64(rng.Lo) != lo || uint64(rng.Hi) != hi {
		return nil, d.formatErr("shard %d of %d of a %d-vector owns [%d, %d), the header says [%d, %d)", k, shards, total, rng.Lo, rng.Hi, lo, hi)
	}
	if hist > ps.HistogramLen {
		return nil, d.formatErr("staleness histogram of %d buckets, at most %d", hist, ps.HistogramLen)
	}
	if pending > math.MaxUint32 {
		return nil, d.formatErr("%d pending gradients", pending)
	}
	n := hi - lo
	d.size = fileSize(version, learners, hist, n, pending > 0, intervals)
	if d.remain >= 0 && (uint64(d.remain) < d.size || (version < 4 && uint64(d.remain) != d.size)) {
		return nil, d.formatErr("the header implies %d bytes (%d learners, %d histogram buckets, %d floats per array, %d consumed intervals), the file has %d",
			d.size, learners, hist, n, intervals, d.remain)
	}
	s := &Shard{Shards: int(shards)}
	s.Shard, s.Total, s.Clock, s.Samples = int(k), int(total), le.Uint64(h[56:]), le.Uint64(h[64:])
	st := &s.Solver
	st.Pending, st.SumS, st.SumTau, st.MaxTau = int(pending), math.Float64frombits(le.Uint64(h[80:])), int64(le.Uint64(h[88:])), int(int64(le.Uint64(h[96:])))
	ints := make([]int64, 0, 3)
	for i, f := range statsFields(&s.Stats) {
		v := le.Uint64(h[104+8*i:])
		if f != nil {
			*f = v
		} else {
			ints = append(ints, int64(v))
		}
	}
	s.Stats.Shard, s.Stats.Epoch, s.Stats.MaxStaleness = int(ints[0]), int(ints[1]), int(ints[2])

	s.LastSeq = grow[uint64](d, learners, 8)
	if err := d.words(learners, 8, func(b []byte) { s.LastSeq = append(s.LastSeq, le.Uint64(b)) }); err != nil {
		return nil, err
	}
	if hist > 0 {
		s.Stats.Histogram = grow[uint64](d, hist, 8)
		if err := d.words(hist, 8, func(b []byte) { s.Stats.Histogram = append(s.Stats.Histogram, le.Uint64(b)) }); err != nil {
			return nil, err
		}
	}
	s.Incarnations = grow[uint32](d, learners, 4)
	if err := d.words(learners, 4, func(b []byte) { s.Incarnations = append(s.Incarnations, le.Uint32(b)) }); err != nil {
		return nil, err
	}
	if err := d.refusals(s, version, learners); err != nil {
		return nil, err
	}
	if err := d.consumed(s, version, intervals); err != nil {
		return nil, err
	}
	arrays := []*[]float32{&s.Weights, &st.Momentum}
	if pending > 0 {
		arrays = append(arrays, &st.Acc)
	}
	for _, a := range arrays {
		if *a, err = d.floats(n); err != nil {
			return nil, err
		}
	}
	s.Active, s.RoundPushed, s.Evicted = grow[bool](d, learners, 1), grow[bool](d, learners, 1), grow[bool](d, learners, 1)
	var flags byte
	if err := d.words(learners, 1, func(b []byte) {
		flags |= b[0]
		s.Active = append(s.Active, b[0]&flagActive != 0)
		s.RoundPushed = append(s.RoundPushed, b[0]&flagPushed != 0)
		s.Evicted = append(s.Evicted, b[0]&flagEvicted != 0)
	}); err != nil {
		return nil, err
	}
	if version >= 4 {
		if err := d.ruleState(s, n, learners); err != nil {
			return nil, err
		}
	}
	sum := d.crc
	t, err := d.read(trailerSize)
	if err != nil {
		return nil, err
	}
	if want := le.Uint32(t); want != sum {
		return nil, fmt.Errorf("%w: stored CRC32C %08x, contents give %08x", ErrChecksum, want, sum)
	}
	if m, err := io.ReadFull(d.r, make([]byte, 1)); m > 0 {
		return nil, d.formatErr("bytes after the %d the header implies", d.size)
	} else if err != io.EOF {
		return nil, err
	}
	switch {
	case flags&^flagsKnown != 0:
		return nil, d.formatErr("unknown learner flags %#x", flags&^flagsKnown)
	case st.SumTau < 0 || st.MaxTau < 0 || s.Stats.Shard < 0 || s.Stats.Epoch < 0 || s.Stats.MaxStaleness < 0:
		return nil, d.formatErr("negative count")
	case s.Pending != nil && sumOf(s.Pending) != pending:
		return nil, d.formatErr("the pending gradients of each learner sum to %d, the header says %d", sumOf(s.Pending), pending)
	case math.IsNaN(st.SumS) || math.IsInf(st.SumS, 0):
		return nil, d.formatErr("Σ s of the pending gradients is %g", st.SumS)
	}
	if _, err := ps.MakeBatchSet(s.Consumed); err != nil {
		return nil, d.formatErr("consumed mini-batches: %v", err)
	}
	for _, a := range []struct {
		name string
		v    []float32
	}{{"weights", s.Weights}, {"momentum", st.Momentum}} { // the pending accumulation may have overflowed: its update is refused
		if k := sgd.FirstNonFinite(a.v); k >= 0 {
			return nil, d.formatErr("%s element %d (flat index %d) is %g: a shard holds finite values only", a.name, k, lo+uint64(k), a.v[k])
		}
	}
	for i, p := range s.Pulled {
		if k := sgd.FirstNonFinite(p.Weights); k >= 0 {
			return nil, d.formatErr("pulled copy %d element %d (flat index %d) is %g: a shard holds finite values only", i, k, lo+uint64(k), p.Weights[k])
		}
		if p.Learner >= uint32(learners) {
			return nil, d.formatErr("pulled copy %d of learner %d, the file has %d learners", i, p.Learner, learners)
		}
	}
	return s, nil
}

// ruleState reads the rules' state of a version-4 file: the counts,
// checked against n and the learners, then the arrays; it checks the
// length the counts imply against what the reader has left, when known.
func (d *decoder) ruleState(s *Shard, n, learners uint64) error {
	le := binary.LittleEndian
	b, err := d.read(ruleCounts)
	if err != nil {
		return err
	}
	ms, ss, steps := uint64(le.Uint32(b)), uint64(le.Uint32(b[4:])), le.Uint64(b[8:])
	taus, copies := uint64(le.Uint32(b[16:])), uint64(le.Uint32(b[20:]))
	switch {
	case (ms != 0 && ms != n) || (ss != 0 && ss != n):
		return d.formatErr("%d mean squares and %d step squares, want 0 or %d", ms, ss, n)
	case taus > sgd.MomentumWindow || copies > 2*learners:
		return d.formatErr("%d recent τ (at most %d), %d pulled copies (at most 2 per learner of %d)", taus, sgd.MomentumWindow, copies, learners)
	}
	d.size += 4*ms + 4*ss + 8*taus + copies*(16+4*n)
	if d.remain >= 0 && uint64(d.remain) != d.size {
		return d.formatErr("the header and the rule state imply %d bytes, the file has %d", d.size, d.remain)
	}
	st := &s.Solver
	st.Steps = steps
	if st.MeanSquare, err = d.floats(ms); err != nil {
		return err
	}
	if st.StepSquare, err = d.floats(ss); err != nil {
		return err
	}
	st.RecentTau = grow[int64](d, taus, 8)
	if err := d.words(taus, 8, func(b []byte) { st.RecentTau = append(st.RecentTau, int64(le.Uint64(b))) }); err != nil {
		return err
	}
	for range copies {
		b, err := d.read(16)
		if err != nil {
			return err
		}
		if b[4]&^1 != 0 || b[5] != 0 || b[6] != 0 || b[7] != 0 {
			return d.formatErr("unknown pulled-copy flags %#x", le.Uint32(b[4:]))
		}
		p := ps.PulledWeights{Learner: le.Uint32(b), Used: b[4] == 1, Stamp: le.Uint64(b[8:])}
		if p.Weights, err = d.floats(n); err != nil {
			return err
		}
		s.Pulled = append(s.Pulled, p)
	}
	return nil
}

// consumed reads the counters of redone, given up and empty rounds and
// the consumed mini-batches of a version-3 file (none for the earlier
// versions); decode checks the intervals once the trailer matched.
func (d *decoder) consumed(s *Shard, version uint32, intervals uint64) error {
	if version < 3 {
		return nil
	}
	le := binary.LittleEndian
	b, err := d.read(24)
	if err != nil {
		return err
	}
	s.Stats.Redone, s.Stats.StaleLife, s.Stats.EmptyRounds = le.Uint64(b), le.Uint64(b[8:]), le.Uint64(b[16:])
	s.Consumed = grow[ps.Interval](d, intervals, 16)
	return d.words(intervals, 16, func(b []byte) {
		s.Consumed = append(s.Consumed, ps.Interval{First: le.Uint64(b), Last: le.Uint64(b[8:])})
	})
}

// refusals reads the refusal counts and the pending gradients per learner
// of a version-2 file; for version 1 it sets them to none and unknown,
// and turns the next sequences it read into last ones.
func (d *decoder) refusals(s *Shard, version uint32, learners uint64) error {
	le := binary.LittleEndian
	if version == 1 {
		for l, next := range s.LastSeq {
			s.LastSeq[l] = next - min(next, 1)
		}
		s.Stats.RefusedGradients = make([]uint64, learners)
		if s.Solver.Pending == 0 {
			s.Pending = make([]uint32, learners)
		}
		return nil
	}
	b, err := d.read(16)
	if err != nil {
		return err
	}
	s.Stats.Refused, s.Stats.Rejected.Diverged = le.Uint64(b), le.Uint64(b[8:])
	s.Stats.RefusedGradients = grow[uint64](d, learners, 8)
	if err := d.words(learners, 8, func(b []byte) { s.Stats.RefusedGradients = append(s.Stats.RefusedGradients, le.Uint64(b)) }); err != nil {
		return err
	}
	s.Pending = grow[uint32](d, learners, 4)
	if err := d.words(learners, 4, func(b []byte) { s.Pending = append(s.Pending, le.Uint32(b)) }); err != nil {
		return err
	}
	if s.Solver.Pending > 0 && sumOf(s.Pending) == 0 {
		s.Pending = nil // unknown
	}
	return nil
}
