package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var testJob = map[string]string{"net": "mlp", "learners": "3"}

// writeVersion writes the shard files of shards and a coordinator file
// into version v and returns their sums.
func writeVersion(t *testing.T, s *Store, v uint64, shards []*Shard) []FileSum {
	t.Helper()
	ver, err := s.Begin(v)
	if err != nil {
		t.Fatal(err)
	}
	var sums []FileSum
	for _, sh := range shards {
		sum, err := ver.WriteFile(ShardFile(sh.Shard), func(w io.Writer) error { return EncodeShard(w, sh) })
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, sum)
	}
	sum, err := ver.WriteFile("coordinator.json", func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "{\"version\": %d}\n", v)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return append(sums, sum)
}

func meta() Meta { return Meta{Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Job: testJob} }

// checkJob is the check a resume makes: the same job, shard files that
// decode and form a layout.
func checkJob(s *Snapshot) error {
	if err := s.CheckJob(testJob); err != nil {
		return err
	}
	_, err := s.Shards()
	return err
}

func listVersions(t *testing.T, s *Store) []uint64 {
	t.Helper()
	vs, err := s.versions()
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// TestStoreRoundTrip writes and commits a version and reads it back.
func TestStoreRoundTrip(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Latest(nil); !errors.Is(err, ErrNone) {
		t.Fatalf("empty store: %v", err)
	}
	shards := testShards(t)
	if err := s.Commit(17, writeVersion(t, s, 17, shards), meta()); err != nil {
		t.Fatal(err)
	}
	snap, skipped, err := s.Latest(checkJob)
	if err != nil || len(skipped) != 0 || snap.Version() != 17 {
		t.Fatalf("Latest: %v, %v, %v", snap, skipped, err)
	}
	m := snap.Manifest
	if m.Format != 1 || !m.Created.Equal(meta().Created) || !reflect.DeepEqual(m.Job, testJob) || len(m.Files) != 4 || m.Files[0].Name != "coordinator.json" {
		t.Fatalf("manifest %+v", m)
	}
	got, err := snap.Shards()
	if err != nil || !reflect.DeepEqual(got, shards) {
		t.Fatalf("Shards: %v", err)
	}
	if b, err := snap.ReadFile("coordinator.json"); err != nil || string(b) != "{\"version\": 17}\n" {
		t.Fatalf("ReadFile: %q, %v", b, err)
	}
	if _, err := snap.ReadFile("other.json"); !errors.Is(err, ErrMismatch) {
		t.Fatalf("unlisted file: %v", err)
	}
	if filepath.Base(snap.Dir()) != "v00000017" {
		t.Fatalf("version folder %s", snap.Dir())
	}
	if n, err := s.Next(); n != 18 || err != nil {
		t.Fatalf("Next = %d, %v", n, err)
	}
	// A file damaged after Latest checked it fails when it is read.
	path := snap.Path(ShardFile(1))
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 1
	os.WriteFile(path, b, 0o644)
	if _, err := snap.ReadShard(ShardFile(1)); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), path) {
		t.Fatalf("re-read of a damaged file: %v", err)
	}
	if _, err := snap.ReadFile(ShardFile(1)); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), path) {
		t.Fatalf("re-read of a damaged file: %v", err)
	}
}

// TestTornVersions builds a good version and, above it, one version broken
// in each way a crash or a mistake can break one: Latest skips each with
// an error naming the file and the problem, and uses the good one.
func TestTornVersions(t *testing.T) {
	s, _ := Open(t.TempDir())
	first := testShards(t) // version 1: earlier state, files of the same sizes
	for _, sh := range first {
		sh.Clock--
	}
	if err := s.Commit(1, writeVersion(t, s, 1, first), meta()); err != nil {
		t.Fatal(err)
	}
	shards := testShards(t)
	type torn struct {
		name   string
		file   string // the file the error must name
		target error
		job    map[string]string // the job in the manifest; nil: testJob
		drop   string            // a file left out of the version
		after  func(dir string)  // damage done after the commit
	}
	cases := []torn{
		{name: "killed while writing", file: ManifestName, target: ErrPartial},
		{name: "truncated file", file: ShardFile(0), target: ErrChecksum, after: func(dir string) {
			p := filepath.Join(dir, ShardFile(0))
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()-7)
		}},
		{name: "flipped byte", file: ShardFile(2), target: ErrChecksum, after: func(dir string) {
			p := filepath.Join(dir, ShardFile(2))
			b, _ := os.ReadFile(p)
			b[300] ^= 0x40
			os.WriteFile(p, b, 0o644)
		}},
		{name: "an intact file of another version", file: ShardFile(1), target: ErrChecksum, after: func(dir string) {
			b, _ := os.ReadFile(filepath.Join(s.VersionDir(1), ShardFile(1)))
			os.WriteFile(filepath.Join(dir, ShardFile(1)), b, 0o644)
		}},
		{name: "missing file", file: "coordinator.json", target: fs.ErrNotExist, after: func(dir string) {
			os.Remove(filepath.Join(dir, "coordinator.json"))
		}},
		{name: "manifest that does not parse", file: ManifestName, target: ErrFormat, after: func(dir string) {
			os.WriteFile(filepath.Join(dir, ManifestName), []byte(`{"format": 1, "version": `), 0o644)
		}},
		{name: "another job", file: ManifestName, target: ErrMismatch, job: map[string]string{"net": "lenet", "learners": "3"}},
		{name: "a shard missing from the layout", file: ManifestName, target: ErrMismatch, drop: ShardFile(1)},
	}
	for i, tc := range cases {
		v := uint64(i + 2)
		sums := writeVersion(t, s, v, shards)
		if tc.name == "killed while writing" {
			continue
		}
		dir := s.VersionDir(v)
		if tc.drop != "" {
			os.Remove(filepath.Join(dir, tc.drop))
			sums = slices.DeleteFunc(sums, func(f FileSum) bool { return f.Name == tc.drop })
		}
		m := meta()
		if tc.job != nil {
			m.Job = tc.job
		}
		if err := s.commit(v, sums, m); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.after != nil {
			tc.after(dir)
		}
	}
	snap, skipped, err := s.Latest(checkJob)
	if err != nil || snap.Version() != 1 {
		t.Fatalf("Latest: %v, %v", snap, err)
	}
	if len(skipped) != len(cases) {
		t.Fatalf("%d versions skipped, want %d: %v", len(skipped), len(cases), skipped)
	}
	for i, tc := range cases {
		err := skipped[len(cases)-1-i] // newest first
		path := filepath.Join(s.VersionDir(uint64(i+2)), tc.file)
		if !errors.Is(err, tc.target) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v; want %v naming %s", tc.name, err, tc.target, path)
		}
	}
	// With every version broken, the error says so.
	os.Remove(filepath.Join(s.VersionDir(1), ManifestName))
	if _, skipped, err := s.Latest(checkJob); !errors.Is(err, ErrNone) || len(skipped) != len(cases)+1 {
		t.Fatalf("no usable version: %v (%d skipped)", err, len(skipped))
	}
}

// TestRetention checks which versions Commit keeps: the newest Keep
// complete ones, and partial versions newer than the newest complete one.
func TestRetention(t *testing.T) {
	s, _ := Open(t.TempDir())
	shards := testShards(t)[:1]
	commit := func(v uint64) {
		t.Helper()
		if err := s.Commit(v, writeVersion(t, s, v, shards), meta()); err != nil {
			t.Fatal(err)
		}
	}
	commit(1)
	commit(2)
	if got := listVersions(t, s); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("after 2 commits: %v", got)
	}
	writeVersion(t, s, 3, shards) // partial
	commit(4)
	if got := listVersions(t, s); !slices.Equal(got, []uint64{2, 4}) {
		t.Fatalf("after a partial version and a commit: %v", got)
	}
	writeVersion(t, s, 6, shards) // being written while 5 commits
	commit(5)
	if got := listVersions(t, s); !slices.Equal(got, []uint64{4, 5, 6}) {
		t.Fatalf("with a newer version in progress: %v", got)
	}
	if n, _ := s.Next(); n != 7 {
		t.Fatalf("Next = %d, want 7", n)
	}
	os.WriteFile(filepath.Join(s.Dir(), "notes.txt"), nil, 0o644) // not a version: left alone
	commit(7)
	if got := listVersions(t, s); !slices.Equal(got, []uint64{5, 7}) {
		t.Fatalf("after the next commit: %v", got)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "notes.txt")); err != nil {
		t.Fatal(err)
	}
}

// TestCommitErrors checks what Commit and Begin refuse.
func TestCommitErrors(t *testing.T) {
	s, _ := Open(t.TempDir())
	sums := writeVersion(t, s, 1, testShards(t)[:1])
	missing := append(slices.Clone(sums), FileSum{Name: "ghost.bin", Size: 3})
	if err := s.Commit(1, missing, meta()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	wrong := slices.Clone(sums)
	wrong[0].Size++
	if err := s.Commit(1, wrong, meta()); !errors.Is(err, ErrMismatch) {
		t.Fatalf("wrong size: %v", err)
	}
	for _, name := range []string{"", ".hidden", "a/b", "../x", ManifestName, strings.Repeat("x", 201)} {
		bad := append(slices.Clone(sums), FileSum{Name: name})
		if err := s.Commit(1, bad, meta()); !errors.Is(err, ErrFormat) {
			t.Fatalf("file name %q: %v", name, err)
		}
	}
	if err := s.Commit(1, append(slices.Clone(sums), sums[0]), meta()); !errors.Is(err, ErrFormat) {
		t.Fatalf("file listed twice: %v", err)
	}
	if err := s.Commit(1, sums, meta()); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(1, sums, meta()); !errors.Is(err, ErrCommitted) {
		t.Fatalf("second commit: %v", err)
	}
	if _, err := s.Begin(1); !errors.Is(err, ErrCommitted) {
		t.Fatalf("Begin of a committed version: %v", err)
	}
	v, _ := s.Begin(2)
	boom := errors.New("boom")
	if _, err := v.WriteFile("x.bin", func(w io.Writer) error { w.Write([]byte("partial")); return boom }); !errors.Is(err, boom) {
		t.Fatalf("failing writer: %v", err)
	}
	if ents, _ := os.ReadDir(v.Dir()); len(ents) != 0 {
		t.Fatalf("a failed write left %v", ents)
	}
	if _, err := v.WriteFile("a/b", nil); !errors.Is(err, ErrFormat) {
		t.Fatalf("bad name: %v", err)
	}
}

// TestConcurrentWriteFile writes the files of one version from several
// goroutines, each with its own Begin, as processes do; two of them write
// the same name. The committed version verifies.
func TestConcurrentWriteFile(t *testing.T) {
	s, _ := Open(t.TempDir())
	const writers, files = 6, 5
	var mu sync.Mutex
	var sums []FileSum
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			v, err := s.Begin(9)
			if err != nil {
				t.Error(err)
				return
			}
			for f := range files {
				body := bytes.Repeat([]byte{byte(w), byte(f)}, 5000*(f+1))
				name := fmt.Sprintf("w%d-f%d.bin", w, f)
				if f == 0 {
					name = "shared.bin" // the same size from every writer
				}
				sum, err := v.WriteFile(name, func(out io.Writer) error { _, err := out.Write(body); return err })
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if f > 0 || w == 0 {
					sums = append(sums, sum)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	ents, _ := os.ReadDir(s.VersionDir(9))
	if len(ents) != writers*(files-1)+1 {
		t.Fatalf("%d files in the version, want %d", len(ents), writers*(files-1)+1)
	}
	shared, _ := os.ReadFile(filepath.Join(s.VersionDir(9), "shared.bin"))
	if len(shared) != 10000 || !bytes.Equal(shared, bytes.Repeat(shared[:2], 5000)) {
		t.Fatalf("shared.bin is not one writer's file")
	}
	for i := range sums {
		if sums[i].Name == "shared.bin" {
			sums[i].SHA256 = sha256.Sum256(shared) // whichever writer renamed last
		}
	}
	if err := s.Commit(9, sums, meta()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(9); err != nil {
		t.Fatal(err)
	}
}

// TestShardsOf: reading a version for the shards one process runs decodes
// and checks every shard file but keeps the arrays of those shards only;
// the others keep their counters, per-learner state and consumed
// mini-batches. A dropped shard is neither written again nor re-split.
func TestShardsOf(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	shards := testShards(t)
	if err := s.Commit(1, writeVersion(t, s, 1, shards), meta()); err != nil {
		t.Fatal(err)
	}
	snap, _, err := s.Latest(checkJob)
	if err != nil {
		t.Fatal(err)
	}
	if n := snap.ShardFiles(); n != len(shards) {
		t.Fatalf("ShardFiles = %d, want %d", n, len(shards))
	}
	got, err := snap.ShardsOf(func(k int) bool { return k == 1 })
	if err != nil {
		t.Fatal(err)
	}
	for k, sh := range got {
		want := shards[k]
		if k == 1 {
			if sh.Dropped() || !reflect.DeepEqual(sh, want) {
				t.Errorf("shard 1, kept: dropped %t, equal to what was written: %t", sh.Dropped(), reflect.DeepEqual(sh, want))
			}
			continue
		}
		if !sh.Dropped() || sh.Weights != nil || sh.Solver.Momentum != nil || sh.Solver.Acc != nil || sh.Pulled != nil {
			t.Errorf("shard %d, not kept: dropped %t, %d weights, %d momentum, %d accumulated", k, sh.Dropped(), len(sh.Weights), len(sh.Solver.Momentum), len(sh.Solver.Acc))
		}
		if sh.Clock != want.Clock || !reflect.DeepEqual(sh.Consumed, want.Consumed) || !reflect.DeepEqual(sh.Active, want.Active) || sh.Solver.Pending != want.Solver.Pending {
			t.Errorf("shard %d, not kept: lost its counters or consumed mini-batches", k)
		}
		if err := EncodeShard(io.Discard, sh); !errors.Is(err, ErrMismatch) {
			t.Errorf("EncodeShard of a dropped shard: %v, want ErrMismatch", err)
		}
	}
	if _, _, err := Resplit(got, shards[0].Total, 2); !errors.Is(err, ErrMismatch) {
		t.Errorf("Resplit of dropped shards: %v, want ErrMismatch", err)
	}
	if same, _, err := Resplit(got, shards[0].Total, len(shards)); err != nil || len(same) != len(shards) {
		t.Errorf("Resplit onto the same layout: %v", err)
	}
}
