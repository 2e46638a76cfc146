package cluster

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/softsync/softsync/ps/checkpoint"
)

// simDisk is the job's shared folder in the chaos simulator: an
// in-memory file system (checkpoint.FS) that the job's checkpoint store
// writes its real files into, and whose disk is full while full says so:
// a write then fails with ENOSPC, as a real one would.
type simDisk struct {
	files map[string][]byte
	dirs  map[string]bool
	full  func() bool
	temps int
	// writes counts the bytes written, failures the writes refused.
	writes, failures int
}

func newSimDisk(full func() bool) *simDisk {
	return &simDisk{files: map[string][]byte{}, dirs: map[string]bool{"/": true}, full: full}
}

var _ checkpoint.FS = (*simDisk)(nil)

func (d *simDisk) MkdirAll(dir string) error {
	for dir = path.Clean(dir); ; dir = path.Dir(dir) {
		if _, ok := d.files[dir]; ok {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		d.dirs[dir] = true
		if dir == "/" || dir == "." {
			return nil
		}
	}
}

func (d *simDisk) ReadDir(dir string) ([]fs.DirEntry, error) {
	dir = path.Clean(dir)
	if !d.dirs[dir] {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	var out []fs.DirEntry
	for name := range d.dirs {
		if name != dir && path.Dir(name) == dir {
			out = append(out, simEntry{name: path.Base(name), dir: true})
		}
	}
	for name, b := range d.files {
		if path.Dir(name) == dir {
			out = append(out, simEntry{name: path.Base(name), size: int64(len(b))})
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

func (d *simDisk) Stat(name string) (fs.FileInfo, error) {
	name = path.Clean(name)
	if b, ok := d.files[name]; ok {
		return simEntry{name: path.Base(name), size: int64(len(b))}, nil
	}
	if d.dirs[name] {
		return simEntry{name: path.Base(name), dir: true}, nil
	}
	return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

func (d *simDisk) Open(name string) (fs.File, error) {
	name = path.Clean(name)
	b, ok := d.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &simReader{Reader: bytes.NewReader(b), info: simEntry{name: path.Base(name), size: int64(len(b))}}, nil
}

func (d *simDisk) CreateTemp(dir, pattern string) (checkpoint.TempFile, error) {
	dir = path.Clean(dir)
	if !d.dirs[dir] {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	d.temps++
	i := strings.LastIndex(pattern, "*")
	name := path.Join(dir, pattern[:i]+fmt.Sprint(d.temps)+pattern[i+1:])
	d.files[name] = nil
	return &simTemp{d: d, name: name}, nil
}

func (d *simDisk) Rename(oldpath, newpath string) error {
	oldpath, newpath = path.Clean(oldpath), path.Clean(newpath)
	b, ok := d.files[oldpath]
	if !ok {
		return &fs.PathError{Op: "rename", Path: oldpath, Err: fs.ErrNotExist}
	}
	delete(d.files, oldpath)
	d.files[newpath] = b
	return nil
}

func (d *simDisk) Remove(name string) error {
	name = path.Clean(name)
	if _, ok := d.files[name]; ok {
		delete(d.files, name)
		return nil
	}
	if d.dirs[name] {
		for other := range d.files {
			if path.Dir(other) == name {
				return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
			}
		}
		delete(d.dirs, name)
		return nil
	}
	return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
}

func (d *simDisk) RemoveAll(name string) error {
	name = path.Clean(name)
	for other := range d.files {
		if other == name || strings.HasPrefix(other, name+"/") {
			delete(d.files, other)
		}
	}
	for other := range d.dirs {
		if other == name || strings.HasPrefix(other, name+"/") {
			delete(d.dirs, other)
		}
	}
	return nil
}

func (d *simDisk) SyncDir(string) error { return nil }

// simTemp is a file being written.
type simTemp struct {
	d    *simDisk
	name string
}

func (t *simTemp) Name() string            { return t.name }
func (t *simTemp) Chmod(fs.FileMode) error { return nil }
func (t *simTemp) Sync() error             { return nil }
func (t *simTemp) Close() error            { return nil }
func (t *simTemp) Write(p []byte) (int, error) {
	if t.d.full() {
		t.d.failures++
		return 0, &fs.PathError{Op: "write", Path: t.name, Err: syscall.ENOSPC}
	}
	t.d.files[t.name] = append(t.d.files[t.name], p...)
	t.d.writes += len(p)
	return len(p), nil
}

type simReader struct {
	*bytes.Reader
	info simEntry
}

func (r *simReader) Stat() (fs.FileInfo, error) { return r.info, nil }
func (r *simReader) Close() error               { return nil }

var _ io.Reader = (*simReader)(nil)

// simEntry is a file's or a folder's description.
type simEntry struct {
	name string
	size int64
	dir  bool
}

func (e simEntry) Name() string               { return e.name }
func (e simEntry) IsDir() bool                { return e.dir }
func (e simEntry) Size() int64                { return e.size }
func (e simEntry) ModTime() time.Time         { return time.Time{} }
func (e simEntry) Sys() any                   { return nil }
func (e simEntry) Type() fs.FileMode          { return e.Mode().Type() }
func (e simEntry) Info() (fs.FileInfo, error) { return e, nil }
func (e simEntry) Mode() fs.FileMode {
	if e.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
