package checkpoint

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// ManifestName is the manifest's file name in a version folder.
	ManifestName = "MANIFEST.json"
	// Keep is the number of complete versions Commit keeps.
	Keep = 2
	// manifestFormat is the Format of the manifests this package writes.
	manifestFormat = 1
	maxNameLen     = 200
)

// More errors of the store; test with errors.Is.
var (
	// ErrCommitted: Begin or Commit of a version that has a manifest.
	ErrCommitted = errors.New("checkpoint version already committed")
	// ErrNone: Latest found no version it could use.
	ErrNone = errors.New("no usable checkpoint version")
	// ErrPrune: Commit wrote the manifest (the version is committed) but
	// could not remove an old version.
	ErrPrune = errors.New("removing an old checkpoint version failed")
)

// Store is a folder of checkpoint versions, one sub-folder per version,
// named "v" and the version number in at least 8 digits (v00000017), so
// that they list in version order. Several processes, possibly on several
// hosts sharing the folder, use one Store: each writes its files into a
// version, and one (the coordinator) commits it (see the package doc). A
// Store holds no state besides its file system and path; its methods are
// safe for concurrent use (as far as its FS is).
type Store struct {
	fs  FS
	dir string
}

// Open returns the store in the folder dir of the operating system's
// file system, creating the folder if needed.
func Open(dir string) (*Store, error) { return OpenFS(osFS{}, dir) }

// OpenFS returns the store in the folder dir of fsys, creating the folder
// if needed.
func OpenFS(fsys FS, dir string) (*Store, error) {
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("checkpoint store: %w", err)
	}
	return &Store{fs: fsys, dir: dir}, nil
}

// Dir returns the store's folder.
func (s *Store) Dir() string { return s.dir }

// VersionDir returns the folder of version v.
func (s *Store) VersionDir(v uint64) string { return filepath.Join(s.dir, versionName(v)) }

func versionName(v uint64) string { return fmt.Sprintf("v%08d", v) }

// parseVersion parses a folder name written by versionName.
func parseVersion(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, "v")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(digits, 10, 64)
	return v, err == nil && versionName(v) == name
}

// versions returns the version numbers of the folders in the store,
// ascending (complete or not).
func (s *Store) versions() ([]uint64, error) {
	ents, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint store: %w", err)
	}
	var vs []uint64
	for _, e := range ents {
		if v, ok := parseVersion(e.Name()); ok && e.IsDir() {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

// Next returns a version number above every version folder in the store,
// complete or not (1 for an empty store): a job that resumed from version
// v continues with Next, never rewriting the folder of a version that a
// crash left partial.
func (s *Store) Next() (uint64, error) {
	vs, err := s.versions()
	if err != nil || len(vs) == 0 {
		return 1, err
	}
	return vs[len(vs)-1] + 1, nil
}

// Version is one version being written. Each process that writes files of
// the version calls Begin itself.
type Version struct {
	number uint64
	fs     FS
	dir    string
}

// Begin creates the folder of version v (if another process has not
// already) and makes its entry durable. It fails with ErrCommitted if the
// version has a manifest.
func (s *Store) Begin(v uint64) (*Version, error) {
	dir := s.VersionDir(v)
	if err := s.fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("checkpoint version %d: %w", v, err)
	}
	if _, err := s.fs.Stat(filepath.Join(dir, ManifestName)); err == nil {
		return nil, fmt.Errorf("%s: %w", dir, ErrCommitted)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return nil, fmt.Errorf("checkpoint version %d: %w", v, err)
	}
	return &Version{number: v, fs: s.fs, dir: dir}, nil
}

// Number returns the version number.
func (v *Version) Number() uint64 { return v.number }

// Dir returns the version's folder.
func (v *Version) Dir() string { return v.dir }

// FileSum identifies one file of a version, as the manifest lists it.
type FileSum struct {
	Name   string `json:"name"`   // file name inside the version folder
	Size   int64  `json:"size"`   // length in bytes
	SHA256 Digest `json:"sha256"` // SHA-256 of the contents
}

// Digest is a SHA-256 value; in JSON, 64 lower-case hex digits.
type Digest [sha256.Size]byte

// String returns d as 64 hex digits.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// MarshalText returns d as 64 hex digits.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses 64 hex digits.
func (d *Digest) UnmarshalText(b []byte) error {
	if len(b) != hex.EncodedLen(sha256.Size) {
		return fmt.Errorf("SHA-256 %q is not %d hex digits", b, hex.EncodedLen(sha256.Size))
	}
	if _, err := hex.Decode(d[:], b); err != nil {
		return fmt.Errorf("SHA-256 %q: %w", b, err)
	}
	return nil
}

// WriteFile writes the file name of the version: write fills it through
// the io.Writer it is given (buffered; write need not buffer). The file
// goes to a temporary name unique to this call, is fsynced and renamed to
// name, and the folder is fsynced, so name never holds a partial file and
// a crash leaves at most a temporary file behind. Several processes may
// write different files of one version concurrently; two writers of one
// name leave one of the two complete files. WriteFile returns the name,
// size and SHA-256 to list in the manifest (pass them to the committing
// process). An error of write is returned as is, with nothing renamed.
func (v *Version) WriteFile(name string, write func(io.Writer) error) (FileSum, error) {
	if err := checkName(name); err != nil {
		return FileSum{}, fmt.Errorf("%s: %w", v.dir, err)
	}
	return writeAtomic(v.fs, v.dir, name, write)
}

func checkName(name string) error {
	ok := name != "" && len(name) <= maxNameLen && name[0] != '.' && name != ManifestName
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("%w: file name %q (want 1–%d letters, digits, '.', '_' or '-', not starting with '.', not %s)", ErrFormat, name, maxNameLen, ManifestName)
	}
	return nil
}

// sumWriter counts and hashes what passes through it.
type sumWriter struct {
	w io.Writer
	n int64
	h hash.Hash
}

func (s *sumWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.n += int64(n)
	s.h.Write(p[:n])
	return n, err
}

// WriteAtomic writes the file dir/name of the operating system's file
// system as Version.WriteFile writes a file of a version: through a
// temporary file (write, flush, fsync, rename, fsync the folder).
func WriteAtomic(dir, name string, write func(io.Writer) error) (FileSum, error) {
	return writeAtomic(osFS{}, dir, name, write)
}

// writeAtomic is WriteAtomic on fsys.
func writeAtomic(fsys FS, dir, name string, write func(io.Writer) error) (FileSum, error) {
	path := filepath.Join(dir, name)
	tmp, err := fsys.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return FileSum{}, fmt.Errorf("%s: %w", path, err)
	}
	sw := &sumWriter{w: tmp, h: sha256.New()}
	bw := bufio.NewWriterSize(sw, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Chmod(0o644) // CreateTemp makes it private
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp.Name(), path)
	}
	if err != nil {
		fsys.Remove(tmp.Name())
		return FileSum{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return FileSum{}, fmt.Errorf("%s: %w", path, err)
	}
	sum := FileSum{Name: name, Size: sw.n}
	sw.h.Sum(sum.SHA256[:0])
	return sum, nil
}

// Manifest is the content of MANIFEST.json: it lists every file of a
// version with its size and SHA-256, and marks the version complete.
type Manifest struct {
	Format  int               `json:"format"`  // 1
	Version uint64            `json:"version"` // the version number, as in the folder's name
	Created time.Time         `json:"created"` // when the state was taken (Meta.Created)
	Job     map[string]string `json:"job"`     // the job's settings (Meta.Job)
	Files   []FileSum         `json:"files"`   // every file of the version except the manifest, in name order
}

// Meta is what Commit records in the manifest besides the files.
type Meta struct {
	Created time.Time         // when the state was taken; zero: the time of the Commit
	Job     map[string]string // the job's settings, for a resume to compare (network, learners, protocol …)
}

// Commit marks version v complete: it checks that every file in files
// exists in the version's folder with the listed size, writes the manifest
// as WriteFile writes a file (it is the version's last write), then
// removes older versions: all but the newest Keep complete ones, and every
// partial version older than the newest complete one (each loses its
// manifest first, so that an interrupted removal leaves a partial
// version). One process commits a version, after every writer has
// reported its FileSums. An error wrapping ErrPrune means the version is
// committed and an old one could not be removed.
func (s *Store) Commit(v uint64, files []FileSum, meta Meta) error {
	if err := s.commit(v, files, meta); err != nil {
		return err
	}
	if err := s.Prune(); err != nil {
		return fmt.Errorf("checkpoint version %d committed: %w: %w", v, ErrPrune, err)
	}
	return nil
}

// commit is Commit without the removal of old versions.
func (s *Store) commit(v uint64, files []FileSum, meta Meta) error {
	dir := s.VersionDir(v)
	m := Manifest{Format: manifestFormat, Version: v, Created: meta.Created, Job: meta.Job, Files: slices.Clone(files)}
	if m.Created.IsZero() {
		m.Created = time.Now()
	}
	m.Created = m.Created.UTC()
	if m.Job == nil {
		m.Job = map[string]string{}
	}
	slices.SortFunc(m.Files, func(a, b FileSum) int { return strings.Compare(a.Name, b.Name) })
	if err := m.check(); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if _, err := s.fs.Stat(filepath.Join(dir, ManifestName)); err == nil {
		return fmt.Errorf("%s: %w", dir, ErrCommitted)
	}
	for _, f := range m.Files {
		path := filepath.Join(dir, f.Name)
		fi, err := s.fs.Stat(path)
		if err != nil {
			return fmt.Errorf("checkpoint version %d: %w", v, err)
		}
		if fi.Size() != f.Size {
			return fmt.Errorf("%s: %w: %d bytes, its writer reported %d", path, ErrMismatch, fi.Size(), f.Size)
		}
	}
	b, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	b = append(b, '\n')
	_, err = writeAtomic(s.fs, dir, ManifestName, func(w io.Writer) error { _, err := w.Write(b); return err })
	return err
}

// check validates the manifest's own fields.
func (m *Manifest) check() error {
	if m.Format != manifestFormat {
		return fmt.Errorf("%w: manifest format %d, this softsync reads %d", ErrFormat, m.Format, manifestFormat)
	}
	seen := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		if err := checkName(f.Name); err != nil {
			return err
		}
		if seen[f.Name] || f.Size < 0 {
			return fmt.Errorf("%w: file %q listed twice or with a negative size", ErrFormat, f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}

// Prune removes old versions as Commit does: all but the newest Keep
// complete versions (those with a manifest that parses), and partial
// versions older than the newest complete one. Versions newer than the
// newest complete one are kept (they may be being written).
func (s *Store) Prune() error {
	vs, err := s.versions()
	if err != nil {
		return err
	}
	kept := 0
	var errs []error
	for i := len(vs) - 1; i >= 0; i-- {
		v := vs[i]
		_, merr := s.readManifest(v)
		switch {
		case merr == nil && kept < Keep:
			kept++
			continue
		case merr != nil && kept == 0:
			continue // newer than every complete version
		}
		if err := s.remove(v); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// remove deletes a version folder, its manifest first.
func (s *Store) remove(v uint64) error {
	dir := s.VersionDir(v)
	err := s.fs.Remove(filepath.Join(dir, ManifestName))
	switch {
	case err == nil:
		err = s.fs.SyncDir(dir)
	case errors.Is(err, fs.ErrNotExist):
		err = nil
	}
	if err == nil {
		err = s.fs.RemoveAll(dir)
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	return err
}

// readManifest reads and parses the manifest of version v. Errors name the
// file and wrap ErrPartial (no manifest), ErrFormat or ErrMismatch (the
// manifest of another version).
func (s *Store) readManifest(v uint64) (*Manifest, error) {
	path := filepath.Join(s.VersionDir(v), ManifestName)
	b, err := s.readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrPartial)
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrFormat, err)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m.Version != v {
		return nil, fmt.Errorf("%s: %w: manifest of version %d in the folder of version %d", path, ErrMismatch, m.Version, v)
	}
	return &m, nil
}

// readFile returns the contents of the file name.
func (s *Store) readFile(name string) ([]byte, error) {
	f, err := s.fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
