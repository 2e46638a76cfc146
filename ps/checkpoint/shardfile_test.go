package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/softsync/softsync/ps"
)

// onlyReader hides every method of r but Read (so DecodeShard cannot learn
// the length).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func encode(t testing.TB, s *Shard) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := EncodeShard(&b, s); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// testShards returns the shard files of a small job: three shards, one
// with pending gradients, histograms, one learner that left.
func testShards(t testing.TB) []*Shard {
	j := newJob(t, testConfig(3, 3), 100, 1)
	j.run(20)
	j.member(ps.MsgLeave, 2)
	j.run(5)
	for range 20 { // until gradients are pending
		if j.shards[0].Checkpoint().Solver.Pending > 0 {
			break
		}
		j.run(1)
	}
	return j.files()
}

// TestShardRoundTrip encodes and decodes shards, with and without pending
// gradients, through readers that do and do not report their length.
func TestShardRoundTrip(t *testing.T) {
	shards := testShards(t)
	pending := 0
	for _, s := range shards {
		pending += s.Solver.Pending
	}
	if pending == 0 || len(shards[0].Stats.Histogram) < 2 || shards[0].Active[2] {
		t.Fatalf("test job lacks pending gradients, staleness or a departed learner")
	}
	one := &Shard{Checkpoint: ps.Checkpoint{Total: 1, Weights: []float32{1}}, Shards: 1} // no learners, no statistics
	one.Solver.Momentum = []float32{0.25}
	shards = append(shards, one)
	for _, s := range shards {
		b := encode(t, s)
		if want := fileSize(shardVersion, uint64(len(s.Active)), uint64(len(s.Stats.Histogram)), uint64(len(s.Weights)), s.Solver.Pending > 0, uint64(len(s.Consumed))); uint64(len(b)) != want {
			t.Fatalf("shard %d: %d bytes, fileSize says %d", s.Shard, len(b), want)
		}
		for _, r := range []io.Reader{bytes.NewReader(b), onlyReader{bytes.NewReader(b)}} {
			got, err := DecodeShard(r)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, s) {
				t.Fatalf("round trip of shard %d:\n got %+v\nwant %+v", s.Shard, got, s)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "s.ckpt")
	if err := os.WriteFile(path, encode(t, shards[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadShardFile(path); err != nil || !reflect.DeepEqual(got, shards[0]) {
		t.Fatalf("ReadShardFile: %v", err)
	}
}

// TestRestoreSteps restores shards from their files and checks that the
// restored cores step exactly as the originals do.
func TestRestoreSteps(t *testing.T) {
	a := newJob(t, testConfig(3, 2), 64, 2)
	a.run(17)
	b := newJob(t, a.cfg, a.total, 2)
	for k, s := range a.files() {
		got, err := DecodeShard(bytes.NewReader(encode(t, s)))
		if err != nil {
			t.Fatal(err)
		}
		if b.shards[k], err = ps.Restore(b.cfg, &got.Checkpoint, 1); err != nil {
			t.Fatal(err)
		}
	}
	b.follow(a)
	a.run(11)
	b.run(11)
	for k := range a.shards {
		sa, sb := a.shards[k], b.shards[k]
		if !sameBits(sa.Weights(), sb.Weights()) || sa.Clock() != sb.Clock() {
			t.Fatalf("shard %d diverged after restore: clock %d vs %d", k, sb.Clock(), sa.Clock())
		}
	}
}

// TestDecodeShardErrors truncates, extends and corrupts an encoding: every
// variant fails with ErrFormat or ErrChecksum, and never panics.
func TestDecodeShardErrors(t *testing.T) {
	b := encode(t, testShards(t)[1])
	for n := range len(b) {
		for _, r := range []io.Reader{bytes.NewReader(b[:n]), onlyReader{bytes.NewReader(b[:n])}} {
			if _, err := DecodeShard(r); !errors.Is(err, ErrFormat) {
				t.Fatalf("truncated to %d of %d bytes: %v", n, len(b), err)
			}
		}
	}
	if _, err := DecodeShard(onlyReader{bytes.NewReader(append(b, 0))}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "after") {
		t.Fatalf("trailing byte: %v", err)
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		_, err := DecodeShard(onlyReader{bytes.NewReader(c)})
		if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrChecksum) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
		if i >= 16 && i < headerSumAt+4 && !errors.Is(err, ErrChecksum) {
			t.Fatalf("header byte %d flipped: %v, want a header checksum error", i, err)
		}
	}
	c := bytes.Clone(b)
	c[8] = 5
	if _, err := DecodeShard(bytes.NewReader(c)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "version 5") {
		t.Fatalf("version 5: %v", err)
	}
	path := filepath.Join(t.TempDir(), "v5.ckpt")
	if err := os.WriteFile(path, c, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadShardFile(path); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "format version 5, this softsync reads versions 1 to 4") {
		t.Fatalf("version 5 from a file: %v, want the file named and the versions it reads", err)
	}
	path = filepath.Join(t.TempDir(), "bad.ckpt")
	os.WriteFile(path, b[:len(b)-1], 0o644)
	if _, err := ReadShardFile(path); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), path) {
		t.Fatalf("truncated file: %v", err)
	}
}

// TestDecodeNonFinite: a shard file whose weights or momentum hold a NaN
// or an infinity (intact, its checksums right) is refused, the error
// naming the file, the array and the first bad index; a pending
// accumulation that overflowed is read as it is (its update is refused).
func TestDecodeNonFinite(t *testing.T) {
	for _, tc := range []struct {
		array string
		k     int
		mut   func(*Shard)
	}{
		{"weights", 3, func(s *Shard) { s.Weights[3], s.Weights[9] = float32(math.NaN()), float32(math.Inf(1)) }},
		{"momentum", 5, func(s *Shard) { s.Solver.Momentum[5] = float32(math.Inf(-1)) }},
		{"pending accumulation", -1, func(s *Shard) { s.Solver.Acc[0] = float32(math.Inf(1)) }},
	} {
		var s *Shard
		for _, sh := range testShards(t) {
			if sh.Solver.Pending > 0 {
				s = sh
			}
		}
		tc.mut(s)
		r, _ := s.Range()
		path := filepath.Join(t.TempDir(), ShardFile(s.Shard))
		if err := os.WriteFile(path, encode(t, s), 0o644); err != nil {
			t.Fatal(err)
		}
		if tc.k < 0 {
			got, err := ReadShardFile(path)
			if err != nil || !math.IsInf(float64(got.Solver.Acc[0]), 1) {
				t.Errorf("%s: %v, want it read with +Inf at 0", tc.array, err)
			}
			continue
		}
		want := fmt.Sprintf("%s element %d (flat index %d)", tc.array, tc.k, r.Lo+tc.k)
		if _, err := ReadShardFile(path); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrFormat naming %s and %q", tc.array, err, path, want)
		}
	}
}

// v2 returns s in the shard file format version 2: no consumed
// mini-batches, no counts of redone, given up and empty rounds.
func v2(t testing.TB, s *Shard) []byte {
	t.Helper()
	le := binary.LittleEndian
	b := v3(t, s)
	l, c := len(s.Active), len(s.Consumed)
	le.PutUint32(b[8:], 2)
	le.PutUint32(b[12:], 0)
	le.PutUint32(b[headerSumAt:], crc32.Checksum(b[:headerSumAt], castagnoli))
	ext := headerSize + 24*l + 8*len(s.Stats.Histogram) + 16
	b = append(b[:ext], b[ext+24+16*c:]...)
	le.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	return b
}

// v3 returns s in the shard file format version 3: as version 4 without
// the rule state.
func v3(t testing.TB, s *Shard) []byte {
	t.Helper()
	le := binary.LittleEndian
	b := encode(t, s)
	le.PutUint32(b[8:], 3)
	le.PutUint32(b[headerSumAt:], crc32.Checksum(b[:headerSumAt], castagnoli))
	st := &s.Solver
	rule := ruleCounts + 4*len(st.MeanSquare) + 4*len(st.StepSquare) + 8*len(st.RecentTau)
	for _, p := range s.Pulled {
		rule += 16 + 4*len(p.Weights)
	}
	b = append(b[:len(b)-4-rule], b[len(b)-4:]...)
	le.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	return b
}

// v1 returns s in the shard file format version 1: as version 2 without
// refusal counts or pending gradients per learner, the next sequence per
// learner.
func v1(t testing.TB, s *Shard) []byte {
	t.Helper()
	le := binary.LittleEndian
	b := v2(t, s)
	l := len(s.Active)
	le.PutUint32(b[8:], 1)
	le.PutUint32(b[headerSumAt:], crc32.Checksum(b[:headerSumAt], castagnoli))
	for i, last := range s.LastSeq {
		if last > 0 {
			le.PutUint64(b[headerSize+8*i:], last+1)
		}
	}
	ext := headerSize + 12*l + 8*len(s.Stats.Histogram)
	b = append(b[:ext], b[ext+16+12*l:]...)
	le.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	return b
}

// TestDecodeVersion2 reads a shard file of version 2: the same state,
// with no mini-batch consumed and no redone, given up or empty rounds
// counted.
func TestDecodeVersion2(t *testing.T) {
	for _, s := range testShards(t) {
		if len(s.Consumed) < 2 || s.Stats.Redone == 0 {
			t.Fatalf("shard %d: the test job consumed %v, redid %d: want gaps and redone pushes", s.Shard, s.Consumed, s.Stats.Redone)
		}
		s.Stats.StaleLife, s.Stats.EmptyRounds = 2, 3
		b := v2(t, s)
		if want := fileSize(2, uint64(len(s.Active)), uint64(len(s.Stats.Histogram)), uint64(len(s.Weights)), s.Solver.Pending > 0, 0); uint64(len(b)) != want {
			t.Fatalf("version 2 of shard %d: %d bytes, fileSize says %d", s.Shard, len(b), want)
		}
		got, err := DecodeShard(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		s.Consumed, s.Stats.Redone, s.Stats.StaleLife, s.Stats.EmptyRounds = nil, 0, 0, 0
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("version 2 of shard %d:\n got %+v\nwant %+v", s.Shard, got, s)
		}
	}
}

// TestDecodeVersion1 reads a shard file of version 1: the same state, with
// no refusals counted and, with gradients pending, their learners unknown.
func TestDecodeVersion1(t *testing.T) {
	for _, s := range testShards(t) {
		s.Stats.Refused, s.Stats.Rejected.Diverged, s.Stats.RefusedGradients[0] = 4, 2, 3
		b := v1(t, s)
		if want := fileSize(1, uint64(len(s.Active)), uint64(len(s.Stats.Histogram)), uint64(len(s.Weights)), s.Solver.Pending > 0, 0); uint64(len(b)) != want {
			t.Fatalf("version 1 of shard %d: %d bytes, fileSize says %d", s.Shard, len(b), want)
		}
		got, err := DecodeShard(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		s.Stats.Refused, s.Stats.Rejected.Diverged, s.Stats.RefusedGradients = 0, 0, make([]uint64, len(s.Active))
		s.Consumed, s.Stats.Redone, s.Stats.StaleLife, s.Stats.EmptyRounds = nil, 0, 0, 0
		if s.Solver.Pending > 0 {
			s.Pending = nil
		}
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("version 1 of shard %d:\n got %+v\nwant %+v", s.Shard, got, s)
		}
	}
}

// TestDecodeConsumedNotASet: an intact file (its checksums right) whose
// consumed mini-batches are not a set's intervals (two that overlap) is
// refused with ErrFormat.
func TestDecodeConsumedNotASet(t *testing.T) {
	s := testShards(t)[0]
	b := encode(t, s)
	le := binary.LittleEndian
	at := headerSize + 24*len(s.Active) + 8*len(s.Stats.Histogram) + 16 + 24 // the first interval
	le.PutUint64(b[at+16:], le.Uint64(b[at+8:]))                             // the second starts where the first ends
	le.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	if _, err := DecodeShard(bytes.NewReader(b)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "consumed mini-batches") {
		t.Fatalf("overlapping intervals: %v", err)
	}
}

// header returns a valid header (with its CRC) for the given counts.
func header(shards, total, learners, hist uint32, n uint64) []byte {
	le := binary.LittleEndian
	h := make([]byte, headerSize)
	copy(h, shardMagic)
	le.PutUint32(h[8:], shardVersion)
	le.PutUint32(h[20:], shards)
	le.PutUint64(h[24:], uint64(total))
	le.PutUint64(h[40:], n)
	le.PutUint32(h[48:], learners)
	le.PutUint32(h[52:], hist)
	le.PutUint32(h[headerSumAt:], crc32.Checksum(h[:headerSumAt], castagnoli))
	return h
}

// TestDecodeShardAllocation feeds a valid header that claims 4·10⁹
// learners and arrays of 10⁹ floats, then a few bytes: the decoder fails
// as truncated having allocated little, and with a known length fails
// before reading on.
func TestDecodeShardAllocation(t *testing.T) {
	h := header(1, 1<<30, 4_000_000_000, 3, 1<<30)
	in := append(h, make([]byte, 1000)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := DecodeShard(onlyReader{bytes.NewReader(in)})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFormat) {
		t.Fatalf("huge header on a short stream: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("decoding %d bytes allocated %d bytes", len(in), got)
	}
	if _, err := DecodeShard(bytes.NewReader(in)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "the file has 1264") {
		t.Fatalf("huge header with a known length: %v", err)
	}
	if _, err := DecodeShard(bytes.NewReader(header(1<<31, 1<<31, 1, 0, 1))); !errors.Is(err, ErrFormat) {
		t.Fatalf("range that contradicts the layout: %v", err)
	}
}

// TestEncodeShardMismatch checks that inconsistent state is refused
// before anything is written.
func TestEncodeShardMismatch(t *testing.T) {
	for name, spoil := range map[string]func(s *Shard){
		"weights":      func(s *Shard) { s.Weights = s.Weights[1:] },
		"momentum":     func(s *Shard) { s.Solver.Momentum = nil },
		"acc":          func(s *Shard) { s.Solver.Pending, s.Solver.Acc = 1, nil },
		"learners":     func(s *Shard) { s.Evicted = s.Evicted[1:] },
		"layout":       func(s *Shard) { s.Shards = 0 },
		"index":        func(s *Shard) { s.Shard = 7 },
		"histogram":    func(s *Shard) { s.Stats.Histogram = make([]uint64, ps.HistogramLen+1) },
		"negative tau": func(s *Shard) { s.Solver.MaxTau = -1 },
		"consumed":     func(s *Shard) { s.Consumed = []ps.Interval{{First: 3, Last: 4}, {First: 5, Last: 9}} },
	} {
		s := testShards(t)[0]
		spoil(s)
		var b bytes.Buffer
		if err := EncodeShard(&b, s); !errors.Is(err, ErrMismatch) || b.Len() != 0 {
			t.Errorf("%s: %v, %d bytes written", name, err, b.Len())
		}
	}
}

// TestShardRoundTripRules encodes and decodes shards whose rules keep
// state (Gap-Aware's running mean and count, the window of τ of momentum
// compensation, DC-ASGD-a's mean square, copies of pulled weights), and
// reads the same state written as version 3, which has none of it.
func TestShardRoundTripRules(t *testing.T) {
	for _, rule := range []string{"gap", "dc-adaptive:2+staleness"} {
		cfg := testConfig(3, 2)
		cfg.Solver.MomentumComp = true
		if err := cfg.Solver.ParseRule(rule); err != nil {
			t.Fatal(err)
		}
		j := newJob(t, cfg, 64, 3)
		j.run(15)
		for _, s := range j.files() {
			st := &s.Solver
			if len(st.RecentTau) == 0 || len(st.MeanSquare)+len(st.StepSquare) != len(s.Weights) {
				t.Fatalf("%s: shard %d keeps %d τ, %d mean squares, %d step squares", rule, s.Shard, len(st.RecentTau), len(st.MeanSquare), len(st.StepSquare))
			}
			w := s.Weights
			s.Pulled = []ps.PulledWeights{{Learner: 0, Stamp: 3, Used: true, Weights: w}, {Learner: 2, Stamp: 5, Weights: w}, {Learner: 2, Stamp: 6, Weights: w}}
			b := encode(t, s)
			for _, r := range []io.Reader{bytes.NewReader(b), onlyReader{bytes.NewReader(b)}} {
				got, err := DecodeShard(r)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, s) {
					t.Fatalf("%s: round trip of shard %d:\n got %+v\nwant %+v", rule, s.Shard, got, s)
				}
			}
			got, err := DecodeShard(bytes.NewReader(v3(t, s)))
			if err != nil {
				t.Fatal(err)
			}
			s.Pulled, st.MeanSquare, st.StepSquare, st.Steps, st.RecentTau = nil, nil, nil, 0, nil
			if !reflect.DeepEqual(got, s) {
				t.Fatalf("%s: version 3 of shard %d:\n got %+v\nwant %+v", rule, s.Shard, got, s)
			}
		}
	}
}
