package checkpoint

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Snapshot is a complete version whose files were all verified against
// its manifest when it was loaded. Reading a file verifies it again.
type Snapshot struct {
	Manifest Manifest
	fs       FS
	dir      string
}

// Version returns the version number.
func (s *Snapshot) Version() uint64 { return s.Manifest.Version }

// Dir returns the version's folder.
func (s *Snapshot) Dir() string { return s.dir }

// Path returns the path of the version's file name.
func (s *Snapshot) Path(name string) string { return filepath.Join(s.dir, name) }

// Latest returns the newest complete version that check accepts (nil
// accepts any): versions are tried newest first, and one is used if its
// manifest parses and names the version, every file it lists exists with
// the listed size and SHA-256, and check returns nil. check may read the
// version's files (and keep what it decoded, saving a second read). The
// versions passed over are returned too, newest first, each as an error
// naming the version and the file at fault: ErrPartial (no manifest),
// ErrFormat (a manifest that does not parse), fs.ErrNotExist (a listed
// file is missing), ErrChecksum (a file of the wrong size or SHA-256),
// ErrMismatch or check's own error. If no version is usable, the error
// wraps ErrNone.
func (s *Store) Latest(check func(*Snapshot) error) (*Snapshot, []error, error) {
	vs, err := s.versions()
	if err != nil {
		return nil, nil, err
	}
	var skipped []error
	for _, v := range slices.Backward(vs) {
		snap, err := s.Load(v)
		if err == nil && check != nil {
			if err = check(snap); err != nil {
				err = fmt.Errorf("checkpoint version %d: %w", v, err)
			}
		}
		if err == nil {
			return snap, skipped, nil
		}
		skipped = append(skipped, err)
	}
	return nil, skipped, fmt.Errorf("%s: %w (%d versions skipped)", s.dir, ErrNone, len(skipped))
}

// Load returns version v after checking its manifest and every file it
// lists (see Latest for the errors).
func (s *Store) Load(v uint64) (*Snapshot, error) {
	m, err := s.readManifest(v)
	if err != nil {
		return nil, fmt.Errorf("checkpoint version %d: %w", v, err)
	}
	snap := &Snapshot{Manifest: *m, fs: s.fs, dir: s.VersionDir(v)}
	buf := make([]byte, 1<<20)
	for _, f := range m.Files {
		r, err := snap.open(f)
		if err == nil {
			_, err = io.CopyBuffer(struct{ io.Writer }{io.Discard}, r, buf) // the struct hides Discard's ReadFrom and its small buffers
			r.Close()
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint version %d: %s: %w", v, snap.Path(f.Name), err)
		}
	}
	return snap, nil
}

// CheckJob returns an error wrapping ErrMismatch and naming the manifest
// if the version's job settings differ from want in any key of either.
func (s *Snapshot) CheckJob(want map[string]string) error {
	var diffs []string
	for k, w := range want {
		if got, ok := s.Manifest.Job[k]; !ok || got != w {
			diffs = append(diffs, fmt.Sprintf("%s is %s, this job has %q", k, quoteOr(got, ok), w))
		}
	}
	for k, got := range s.Manifest.Job {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s is %q, this job has none", k, got))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	slices.Sort(diffs)
	return fmt.Errorf("%s: %w: a checkpoint of another job: %s", s.Path(ManifestName), ErrMismatch, strings.Join(diffs, "; "))
}

func quoteOr(s string, ok bool) string {
	if !ok {
		return "not set"
	}
	return strconv.Quote(s)
}

// file returns the manifest's entry for name.
func (s *Snapshot) file(name string) (FileSum, error) {
	for _, f := range s.Manifest.Files {
		if f.Name == name {
			return f, nil
		}
	}
	return FileSum{}, fmt.Errorf("%s: %w: not listed in %s", s.Path(name), ErrMismatch, ManifestName)
}

// Open opens the version's file name for reading. The reader checks the
// file against the manifest as it goes: at the end, if the size or SHA-256
// differ, Read returns an error wrapping ErrChecksum instead of io.EOF.
// Errors name the file.
func (s *Snapshot) Open(name string) (io.ReadCloser, error) {
	f, err := s.file(name)
	if err != nil {
		return nil, err
	}
	r, err := s.open(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Path(name), err)
	}
	r.path = s.Path(name)
	return r, nil
}

// ReadFile returns the contents of the version's file name, verified.
func (s *Snapshot) ReadFile(name string) ([]byte, error) {
	r, err := s.Open(name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// ReadShard decodes the version's shard file name, verified against the
// manifest; errors name the file.
func (s *Snapshot) ReadShard(name string) (*Shard, error) {
	f, err := s.file(name)
	if err != nil {
		return nil, err
	}
	r, err := s.open(f)
	if err == nil {
		defer r.Close()
		var sh *Shard
		if sh, err = DecodeShard(r); err == nil {
			return sh, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", s.Path(name), err)
}

// ShardFile returns the name of the file of shard index: shard-00003.ckpt.
func ShardFile(index int) string { return fmt.Sprintf("shard-%05d.ckpt", index) }

// isShardFile reports whether name is a ShardFile name.
func isShardFile(name string) bool {
	digits, ok := strings.CutPrefix(name, "shard-")
	digits, ok2 := strings.CutSuffix(digits, ".ckpt")
	k, err := strconv.Atoi(digits)
	return ok && ok2 && err == nil && ShardFile(k) == name
}

// Shards decodes every shard file of the version (the files named by
// ShardFile), in shard order, and checks that they are the shards of one
// layout: the same vector length, shard count and learners, each shard
// once (ErrMismatch, naming the files).
func (s *Snapshot) Shards() ([]*Shard, error) { return s.ShardsOf(nil) }

// ShardsOf is Shards keeping the arrays (weights, momentum, accumulation,
// rule state, pulled copies) of the shards keep accepts only (nil: all):
// every file is decoded and checked, one at a time, and the others keep
// their counters, per-learner state and consumed mini-batches (Dropped),
// so that reading a version holds the arrays of the shards kept and of
// one more, not of all. Resplit needs every shard's arrays.
func (s *Snapshot) ShardsOf(keep func(shard int) bool) ([]*Shard, error) {
	var shards []*Shard
	var names []string
	for _, f := range s.Manifest.Files {
		if !isShardFile(f.Name) {
			continue
		}
		sh, err := s.ReadShard(f.Name)
		if err != nil {
			return nil, err
		}
		if keep != nil && !keep(sh.Shard) {
			if _, err := sh.check(); err != nil {
				return nil, fmt.Errorf("%s: %w", s.Path(f.Name), err)
			}
			sh.Drop()
		}
		shards, names = append(shards, sh), append(names, s.Path(f.Name))
	}
	if len(shards) == 0 {
		return nil, fmt.Errorf("%s: %w: no shard file listed", s.Path(ManifestName), ErrMismatch)
	}
	if err := checkLayout(shards, names); err != nil {
		return nil, fmt.Errorf("%s: the shard files listed are not one layout: %w", s.Path(ManifestName), err)
	}
	slices.SortFunc(shards, func(a, b *Shard) int { return a.Shard - b.Shard })
	return shards, nil
}

// ShardFiles returns how many shard files the version lists: the shards
// of the layout it was written with.
func (s *Snapshot) ShardFiles() int {
	n := 0
	for _, f := range s.Manifest.Files {
		if isShardFile(f.Name) {
			n++
		}
	}
	return n
}

// verifier reads a version's file, checking its size and SHA-256 against
// the manifest at the end.
type verifier struct {
	f    fs.File
	path string // prefixed to errors when set
	want FileSum
	n    int64
	h    hash.Hash
	err  error
}

// open opens a listed file and checks its size against the manifest.
func (s *Snapshot) open(want FileSum) (*verifier, error) {
	f, err := s.fs.Open(s.Path(want.Name))
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() != want.Size {
		err = sizeErr(fi.Size(), want.Size)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &verifier{f: f, want: want, h: sha256.New()}, nil
}

func sizeErr(got, want int64) error {
	what := "truncated"
	if got > want {
		what = "too long"
	}
	return fmt.Errorf("%w: %s: %d bytes, the manifest lists %d", ErrChecksum, what, got, want)
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.f.Read(p)
	v.n += int64(n)
	v.h.Write(p[:n])
	switch {
	case v.n > v.want.Size:
		err = sizeErr(v.n, v.want.Size)
	case errors.Is(err, io.EOF) && v.n != v.want.Size:
		err = sizeErr(v.n, v.want.Size)
	case errors.Is(err, io.EOF):
		var got Digest
		if v.h.Sum(got[:0]); got != v.want.SHA256 {
			err = fmt.Errorf("%w: SHA-256 %s, the manifest lists %s", ErrChecksum, got, v.want.SHA256)
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		if v.path != "" {
			err = fmt.Errorf("%s: %w", v.path, err)
		}
		v.err = err
	}
	return n, err
}

// Len returns the bytes left to read, by the manifest (DecodeShard checks
// a header against it).
func (v *verifier) Len() int { return int(v.want.Size - v.n) }

func (v *verifier) Close() error { return v.f.Close() }
