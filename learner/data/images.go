package data

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
)

// records reads the encoded bytes of a data set's images: files of a
// folder or list, or records of a pack. Safe for concurrent use.
type records interface {
	// read returns image i's bytes, in buf when it is large enough.
	read(i int, buf []byte) ([]byte, error)
	close() error
}

// ImageSet is a labelled set of encoded images read from disk as they
// are needed, never held whole in memory: the files of an ImageList
// (NewFolderSet) or the records of a pack (OpenPack). It is safe for
// concurrent use; it counts the images that could not be decoded
// (Skipped).
type ImageSet struct {
	List *ImageList // names, labels and classes (a pack's paths name its source files)
	rec  records

	mu    sync.Mutex
	bad   map[int]bool
	skips []Skip // the bad files, in the order they were found
}

// Skip is an image that could not be read or decoded: its file and why.
type Skip struct {
	File string `json:"file"`
	Err  string `json:"err"` // names the file
}

// NewFolderSet returns the image set of l's files.
func NewFolderSet(l *ImageList) *ImageSet { return &ImageSet{List: l, rec: files{l}} }

// Len is the number of images.
func (s *ImageSet) Len() int { return s.List.Len() }

// Source names the set's folder, list file or pack, for messages.
func (s *ImageSet) Source() string { return s.List.Source }

// Classes is the number of classes.
func (s *ImageSet) Classes() int { return len(s.List.Classes) }

// Close releases the set's files (a pack's).
func (s *ImageSet) Close() error { return s.rec.close() }

// MaxNamedSkips is how many bad files Skipped names; the rest are counted.
const MaxNamedSkips = 5

// Skipped returns how many distinct images could not be decoded so far
// (each replaced in its batch, see Pipeline) and the messages of the
// first MaxNamedSkips, each naming its file and what is wrong.
func (s *ImageSet) Skipped() (n int, first []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.skips[:min(len(s.skips), MaxNamedSkips)] {
		first = append(first, k.Err)
	}
	return len(s.skips), first
}

// Skips returns the bad files found so far from the k-th on (0: all),
// in the order they were found; each file is there once.
func (s *ImageSet) Skips(k int) []Skip {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k >= len(s.skips) {
		return nil
	}
	return slices.Clone(s.skips[k:])
}

func (s *ImageSet) skip(i int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bad == nil {
		s.bad = map[int]bool{}
	}
	if !s.bad[i] {
		s.bad[i] = true
		s.skips = append(s.skips, Skip{File: s.List.File(i), Err: err.Error()})
	}
}

// Scan decodes every image of s with threads decoders (header and
// pixels, as training would) and returns an error for each one that
// fails, naming its file, in the set's order; nil when all decode.
func (s *ImageSet) Scan(threads int) []error {
	threads = max(threads, 1)
	errs := make([]error, s.Len())
	var wg sync.WaitGroup
	next := make(chan int)
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := newDecoder(false)
			defer d.close()
			var buf []byte
			for i := range next {
				b, err := s.rec.read(i, buf)
				if err == nil {
					buf = b
					_, err = d.decode(b, 0)
				}
				if err != nil {
					errs[i] = fmt.Errorf("%s: %w", s.List.File(i), err)
				}
			}
		}()
	}
	for i := range s.Len() {
		next <- i
	}
	close(next)
	wg.Wait()
	var bad []error
	for _, err := range errs {
		if err != nil {
			bad = append(bad, err)
		}
	}
	return bad
}

// files reads an ImageList's files.
type files struct{ l *ImageList }

func (f files) read(i int, buf []byte) ([]byte, error) {
	name := f.l.File(i)
	fh, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMissing, err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMissing, err)
	}
	n := int(st.Size())
	if cap(buf) < n {
		buf = make([]byte, n+n/4)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(fh, buf); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTruncated, err)
	}
	return buf, nil
}

func (files) close() error { return nil }

// Spread returns a set of n of s's images spread evenly through it
// (image ⌊i·Len/n⌋ for i < n; all of them when n ≤ 0 or n ≥ Len), so
// that a folder's subset, whose list is in class order, keeps every
// class. It reads the same files (or records) as s; its bad images are
// counted apart.
func (s *ImageSet) Spread(n int) *ImageSet {
	if n <= 0 || n >= s.Len() {
		return s
	}
	l := &ImageList{Source: s.List.Source, Root: s.List.Root, Classes: s.List.Classes}
	idx := make([]int, n)
	for i := range idx {
		k := int(int64(i) * int64(s.Len()) / int64(n))
		idx[i] = k
		l.Paths, l.Labels = append(l.Paths, s.List.Paths[k]), append(l.Labels, s.List.Labels[k])
	}
	return &ImageSet{List: l, rec: picked{s.rec, idx}}
}

// picked reads the records idx of rec.
type picked struct {
	rec records
	idx []int
}

func (p picked) read(i int, buf []byte) ([]byte, error) { return p.rec.read(p.idx[i], buf) }
func (p picked) close() error                           { return nil }
