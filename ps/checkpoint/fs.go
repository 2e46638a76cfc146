package checkpoint

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// FS is the file system a Store keeps its versions in: the operating
// system's (Open), or another one (OpenFS), such as the in-memory file
// system of a simulation whose disk fills up. Names are slash-separated
// paths as filepath.Join makes them; errors are those of package os
// (*fs.PathError values wrapping fs.ErrNotExist, syscall.ENOSPC …).
type FS interface {
	// MkdirAll creates the folder dir and its parents if needed.
	MkdirAll(dir string) error
	// ReadDir lists the folder dir, sorted by name.
	ReadDir(dir string) ([]fs.DirEntry, error)
	// Stat describes the file or folder name.
	Stat(name string) (fs.FileInfo, error)
	// Open opens the file name for reading.
	Open(name string) (fs.File, error)
	// CreateTemp creates a new file in dir for writing, named by pattern
	// as os.CreateTemp names it (its last "*" replaced by a random
	// string), readable by its owner only until Chmod.
	CreateTemp(dir, pattern string) (TempFile, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	RemoveAll(name string) error
	// SyncDir makes the entries created, renamed or removed in the
	// folder dir durable.
	SyncDir(dir string) error
}

// TempFile is a file being written by CreateTemp's caller.
type TempFile interface {
	io.Writer
	Name() string
	Chmod(mode fs.FileMode) error
	Sync() error
	Close() error
}

// osFS is the operating system's file system.
type osFS struct{}

func (osFS) MkdirAll(dir string) error                 { return os.MkdirAll(dir, 0o755) }
func (osFS) ReadDir(dir string) ([]fs.DirEntry, error) { return os.ReadDir(dir) }
func (osFS) Stat(name string) (fs.FileInfo, error)     { return os.Stat(name) }
func (osFS) Open(name string) (fs.File, error)         { return os.Open(name) }
func (osFS) Rename(oldpath, newpath string) error      { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error                  { return os.Remove(name) }
func (osFS) RemoveAll(name string) error               { return os.RemoveAll(name) }

func (osFS) CreateTemp(dir, pattern string) (TempFile, error) { return os.CreateTemp(dir, pattern) }

// SyncDir fsyncs a folder. File systems that cannot fsync a folder
// (EINVAL, ENOTSUP: some network and FUSE file systems, which order their
// metadata themselves) are not an error.
func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		err = nil
	}
	return err
}
