package data

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Pack is a pack opened for reading (OpenPack): its manifest and its
// splits as image sets. Close releases its files.
type Pack struct {
	Dir        string
	Manifest   *PackManifest
	Train, Val *ImageSet // Val nil when the pack has no val split
}

// Close closes the splits' record files.
func (p *Pack) Close() error {
	err := p.Train.Close()
	if p.Val != nil {
		err = errors.Join(err, p.Val.Close())
	}
	return err
}

// OpenPack opens the pack in dir (written by PackFolder or PackLists).
// Its sets read records from the record files as they are needed (the
// index, about 24 bytes an image plus its source's name, is held in
// memory), in the order and with the labels and classes of the folder
// packed, and can be read by many goroutines at once. A record whose
// header or checksum is wrong fails to read (ErrFormat), and the
// pipeline treats it as a bad image. Errors name the file.
func OpenPack(dir string) (*Pack, error) {
	m, err := ReadPackManifest(dir)
	if err != nil {
		return nil, err
	}
	p := &Pack{Dir: dir, Manifest: m}
	for _, s := range m.Splits {
		set, err := openPackSplit(dir, m, s)
		if err != nil {
			if p.Train != nil {
				p.Train.Close()
			}
			return nil, err
		}
		switch s.Name {
		case "train":
			p.Train = set
		case "val":
			p.Val = set
		default:
			set.Close()
			return nil, fmt.Errorf("%s: %w: unknown split %q", filepath.Join(dir, packManifest), ErrFormat, s.Name)
		}
	}
	if p.Train == nil {
		return nil, fmt.Errorf("%s: %w: no train split", filepath.Join(dir, packManifest), ErrFormat)
	}
	return p, nil
}

func openPackSplit(dir string, m *PackManifest, s PackSplit) (*ImageSet, error) {
	files, ents, err := readIndex(filepath.Join(dir, s.Index))
	if err != nil {
		return nil, err
	}
	if files != len(s.Files) || len(ents) != s.Images {
		return nil, fmt.Errorf("%s: %w: %d records in %d files, the manifest says %d in %d", filepath.Join(dir, s.Index), ErrFormat, len(ents), files, s.Images, len(s.Files))
	}
	l, err := readPackList(filepath.Join(dir, s.List), m.Classes, ents)
	if err != nil {
		return nil, err
	}
	l.Root = s.Root
	r := &packRecords{ents: ents}
	for _, name := range s.Files {
		f, err := os.Open(filepath.Join(dir, name))
		if err == nil {
			err = checkFileHeader(f)
		}
		if err != nil {
			r.close()
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		r.files = append(r.files, f)
	}
	return &ImageSet{List: l, rec: r}, nil
}

// readPackList reads a split's list of sources, which must agree with
// its index.
func readPackList(path string, classes []string, ents []packEntry) (*ImageList, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrMissing, err)
	}
	defer f.Close()
	l := &ImageList{Source: filepath.Dir(path), Classes: classes, Paths: make([]string, 0, len(ents)), Labels: make([]int32, 0, len(ents))}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseInt(line[sp+1:], 10, 32)
		i := len(l.Paths)
		if sp <= 0 || err != nil || i >= len(ents) || int32(v) != ents[i].label {
			return nil, fmt.Errorf("%s:%d: %w: does not match the index", path, n, ErrFormat)
		}
		l.Paths, l.Labels = append(l.Paths, line[:sp]), append(l.Labels, int32(v))
	}
	if err := sc.Err(); err != nil || len(l.Paths) != len(ents) {
		return nil, fmt.Errorf("%s: %w: %d sources for %d records (%v)", path, ErrFormat, len(l.Paths), len(ents), err)
	}
	return l, nil
}

func checkFileHeader(f *os.File) error {
	h := make([]byte, fileHeaderLen)
	if _, err := f.ReadAt(h, 0); err != nil {
		return fmt.Errorf("%w: %w", ErrTruncated, err)
	}
	if !bytes.Equal(h[:8], []byte(recMagic)) {
		return fmt.Errorf("%w: not a pack record file", ErrFormat)
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != packVersion {
		return fmt.Errorf("%w: record file version %d, this softsync reads %d", ErrFormat, v, packVersion)
	}
	return nil
}

// packRecords reads a split's records (ReadAt: safe for concurrent use).
type packRecords struct {
	files []*os.File
	ents  []packEntry
}

func (r *packRecords) read(i int, buf []byte) ([]byte, error) {
	e := r.ents[i]
	n := recHeaderLen + int(e.length)
	buf = grow(buf, n)
	if int(e.file) >= len(r.files) {
		return nil, fmt.Errorf("record %d: %w: in file %d of %d", i, ErrFormat, e.file, len(r.files))
	}
	f := r.files[e.file]
	if _, err := f.ReadAt(buf, int64(e.offset)); err != nil {
		return nil, fmt.Errorf("%s: record %d at %d: %w: %w", f.Name(), i, e.offset, ErrTruncated, err)
	}
	data := buf[recHeaderLen:n]
	switch {
	case !bytes.Equal(buf[:4], recTag[:]) || int32(binary.LittleEndian.Uint32(buf[4:])) != e.label || binary.LittleEndian.Uint32(buf[8:]) != e.length:
		return nil, fmt.Errorf("%s: record %d at %d: %w: header does not match the index", f.Name(), i, e.offset, ErrFormat)
	case crc32.Checksum(data, castagnol) != e.crc || binary.LittleEndian.Uint32(buf[12:]) != e.crc:
		return nil, fmt.Errorf("%s: record %d at %d: %w: checksum mismatch", f.Name(), i, e.offset, ErrFormat)
	}
	return data, nil
}

func (r *packRecords) close() error {
	var err error
	for _, f := range r.files {
		err = errors.Join(err, f.Close())
	}
	r.files = nil
	return err
}
