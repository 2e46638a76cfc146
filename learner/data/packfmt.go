package data

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// The pack format (docs/data.md, "Packed records"). A pack is a folder:
//
//	pack.json          the manifest, written last: a pack without one is
//	                   unfinished (PackFolder resumes it)
//	SPLIT-NNNNN.rec    record files, up to PackConfig.FileBytes each
//	SPLIT.idx          the split's index
//	SPLIT.txt          the split's sources, "PATH LABEL" a line (a Caffe
//	                   list file of the source folder), in record order
//	SPLIT.journal      while SPLIT is being packed
//
// All integers are little-endian; checksums are CRC-32C (Castagnoli).
const (
	packVersion   = 1
	packManifest  = "pack.json"
	packFormat    = "softsync-pack"
	recMagic      = "SSYNCREC" // record file header: magic, version u32, 0 u32
	idxMagic      = "SSYNCIDX" // index header: magic, version u32, files u32, records u64
	journalMagic  = "SSYNCJNL" // journal header: magic, version u32, 0 u32, fingerprint u64
	recHeaderLen  = 16         // record: "SSR1", label i32, length u32, crc u32, then the bytes
	fileHeaderLen = 16
	idxHeaderLen  = 24
	idxEntryLen   = 24 // file u32, label i32, offset u64 (of the record header), length u32, crc u32
	jnlHeaderLen  = 24
	jnlEntryLen   = 32 // source u32, file u32 (skipped: all ones), label i32, length u32, offset u64, crc u32, entry crc u32
)

var (
	recTag    = [4]byte{'S', 'S', 'R', '1'}
	castagnol = crc32.MakeTable(crc32.Castagnoli)
)

// skippedFile marks a journal entry of a source that could not be packed.
const skippedFile = ^uint32(0)

// PackManifest is pack.json: what a pack holds and how it was made.
type PackManifest struct {
	Format  string      `json:"format"`  // "softsync-pack"
	Version int         `json:"version"` // 1
	Resize  int         `json:"resize"`  // shorter side of the stored images (larger ones were resized)
	Quality int         `json:"quality"` // JPEG quality of re-encoded images
	Chroma  string      `json:"chroma"`  // their chroma subsampling: "4:4:4" or "4:2:0"
	Source  string      `json:"source"`  // the folder or list files packed
	Classes []string    `json:"classes"` // in label order
	Splits  []PackSplit `json:"splits"`  // train, then val if packed
	// Fingerprint identifies the sources and options (an FNV-1a hash),
	// so that resuming with others is refused.
	Fingerprint string `json:"fingerprint"`
}

// PackSplit is one split of a pack.
type PackSplit struct {
	Name    string   `json:"name"`    // "train" or "val"
	Root    string   `json:"root"`    // the folder the sources' paths are relative to
	Images  int      `json:"images"`  // records
	Kept    int      `json:"kept"`    // records holding the source file's bytes as they were
	Skipped []string `json:"skipped"` // sources that could not be decoded, each with why
	Files   []string `json:"files"`   // record files, in order
	Index   string   `json:"index"`
	List    string   `json:"list"`
}

// packEntry is an index entry: where a record lies.
type packEntry struct {
	file   uint32
	label  int32
	offset uint64
	length uint32
	crc    uint32
}

func (e packEntry) put(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], e.file)
	binary.LittleEndian.PutUint32(b[4:], uint32(e.label))
	binary.LittleEndian.PutUint64(b[8:], e.offset)
	binary.LittleEndian.PutUint32(b[16:], e.length)
	binary.LittleEndian.PutUint32(b[20:], e.crc)
}

func getEntry(b []byte) packEntry {
	return packEntry{file: binary.LittleEndian.Uint32(b[0:]), label: int32(binary.LittleEndian.Uint32(b[4:])),
		offset: binary.LittleEndian.Uint64(b[8:]), length: binary.LittleEndian.Uint32(b[16:]), crc: binary.LittleEndian.Uint32(b[20:])}
}

// recordFileName is the name of record file n of a split.
func recordFileName(split string, n int) string { return fmt.Sprintf("%s-%05d.rec", split, n) }

func fileHeader() []byte {
	h := make([]byte, fileHeaderLen)
	copy(h, recMagic)
	binary.LittleEndian.PutUint32(h[8:], packVersion)
	return h
}

// recordHeader is the header of a record of data with label.
func recordHeader(label int32, data []byte) []byte {
	h := make([]byte, recHeaderLen)
	copy(h, recTag[:])
	binary.LittleEndian.PutUint32(h[4:], uint32(label))
	binary.LittleEndian.PutUint32(h[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(h[12:], crc32.Checksum(data, castagnol))
	return h
}

// writeIndex writes a split's index atomically (a temporary file renamed).
func writeIndex(path string, files int, ents []packEntry) error {
	b := make([]byte, idxHeaderLen+idxEntryLen*len(ents)+4)
	copy(b, idxMagic)
	binary.LittleEndian.PutUint32(b[8:], packVersion)
	binary.LittleEndian.PutUint32(b[12:], uint32(files))
	binary.LittleEndian.PutUint64(b[16:], uint64(len(ents)))
	for i, e := range ents {
		e.put(b[idxHeaderLen+idxEntryLen*i:])
	}
	n := len(b) - 4
	binary.LittleEndian.PutUint32(b[n:], crc32.Checksum(b[:n], castagnol))
	return writeAtomic(path, b)
}

// readIndex reads a split's index, checking its header and checksum.
func readIndex(path string) (files int, ents []packEntry, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w: %w", path, ErrMissing, err)
	}
	if len(b) < idxHeaderLen+4 || string(b[:8]) != idxMagic {
		return 0, nil, fmt.Errorf("%s: %w: not a pack index", path, ErrFormat)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != packVersion {
		return 0, nil, fmt.Errorf("%s: %w: index version %d, this softsync reads %d", path, ErrFormat, v, packVersion)
	}
	n := binary.LittleEndian.Uint64(b[16:])
	if uint64(len(b)) != idxHeaderLen+idxEntryLen*n+4 {
		return 0, nil, fmt.Errorf("%s: %w: %d bytes for %d records", path, ErrTruncated, len(b), n)
	}
	if crc32.Checksum(b[:len(b)-4], castagnol) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return 0, nil, fmt.Errorf("%s: %w: index checksum mismatch", path, ErrFormat)
	}
	ents = make([]packEntry, n)
	for i := range ents {
		ents[i] = getEntry(b[idxHeaderLen+idxEntryLen*i:])
	}
	return int(binary.LittleEndian.Uint32(b[12:])), ents, nil
}

// writeAtomic writes b to path through a temporary file in its folder.
func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadPackManifest reads the manifest (pack.json) of the pack in dir;
// errors wrap ErrMissing or ErrFormat and name the file.
func ReadPackManifest(dir string) (*PackManifest, error) {
	path := filepath.Join(dir, packManifest)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrMissing, err)
	}
	var m PackManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrFormat, err)
	}
	if m.Format != packFormat || m.Version != packVersion {
		return nil, fmt.Errorf("%s: %w: format %q version %d, want %q version %d", path, ErrFormat, m.Format, m.Version, packFormat, packVersion)
	}
	return &m, nil
}

// IsPack reports whether dir holds a finished pack (its pack.json).
func IsPack(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, packManifest))
	return err == nil
}
