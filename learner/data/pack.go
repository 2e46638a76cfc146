package data

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"image"
	"image/jpeg"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/data/internal/turbo"
)

// PackConfig configures PackFolder and PackLists.
type PackConfig struct {
	// Resize is the shorter side of the stored images (0: 256): an image
	// whose shorter side is longer is resized to it as training resizes
	// (Augment, PIL's antialiased bilinear filter) and re-encoded as a
	// JPEG; a smaller one is stored as its file's bytes. Train from the
	// pack with the same resize.
	Resize int
	// Quality is the JPEG quality (1…100, 0: 95) of re-encoded images.
	Quality int
	// Chroma420 re-encodes with chroma at half resolution each way (4:2:0,
	// as ImageNet's JPEGs and MXNet's im2rec store them) instead of full
	// (4:4:4): records a fifth smaller and faster to decode, pixels
	// further from the folder's (docs/data.md gives figures).
	Chroma420 bool
	// FileBytes bounds the size of a record file (0: 1 GiB); a record
	// larger than that gets a file of its own.
	FileBytes int64
	// Threads decode, resize and encode images in parallel (0: 1).
	Threads int
	// Progress, when set, is called about once a second while a split
	// is packed, and once at its end, from the calling goroutine.
	Progress func(PackProgress)
}

// Defaults of PackConfig.
const (
	DefaultPackResize  = 256
	DefaultPackQuality = 95
	DefaultPackFile    = 1 << 30
)

func (c *PackConfig) fill() error {
	if c.Resize == 0 {
		c.Resize = DefaultPackResize
	}
	if c.Quality == 0 {
		c.Quality = DefaultPackQuality
	}
	if c.FileBytes == 0 {
		c.FileBytes = DefaultPackFile
	}
	if c.Threads == 0 {
		c.Threads = 1
	}
	switch {
	case c.Resize < 1:
		return fmt.Errorf("%w: pack Resize %d", ErrConfig, c.Resize)
	case c.Quality < 1 || c.Quality > 100:
		return fmt.Errorf("%w: pack Quality %d (1…100)", ErrConfig, c.Quality)
	case c.FileBytes < 1<<10:
		return fmt.Errorf("%w: pack FileBytes %d (at least 1 KiB)", ErrConfig, c.FileBytes)
	case c.Threads < 1:
		return fmt.Errorf("%w: pack Threads %d", ErrConfig, c.Threads)
	}
	return nil
}

// PackProgress is the state of a split being packed.
type PackProgress struct {
	Split       string
	Done, Total int           // sources handled (packed or skipped) of the split's
	Resumed     int           // of Done, those an earlier, interrupted run handled
	Skipped     int           // sources that could not be decoded
	Bytes       int64         // record bytes of the split so far
	Elapsed     time.Duration // since this run started the split
}

// FilesPerSec is the rate of this run.
func (p PackProgress) FilesPerSec() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Done-p.Resumed) / p.Elapsed.Seconds()
}

// ETA is the time the rest of the split should take at this run's rate
// (0 when unknown).
func (p PackProgress) ETA() time.Duration {
	r := p.FilesPerSec()
	if r <= 0 {
		return 0
	}
	return time.Duration(float64(p.Total-p.Done) / r * float64(time.Second))
}

// PackFolder packs the image folder dir (ReadImageFolder: train and, if
// present, val) into the folder out: see PackLists.
func PackFolder(ctx context.Context, dir, out string, cfg PackConfig) (*PackManifest, error) {
	train, val, err := ReadImageFolder(dir)
	if err != nil {
		return nil, err
	}
	return PackLists(ctx, dir, train, val, out, cfg)
}

// PackLists writes the images of train and val (nil: none) as a pack in
// the folder out (created if needed; see docs/data.md for the format), in
// the lists' order, with train's classes; source names them in the
// manifest. Images that cannot be read or decoded (as training would
// decode them) are skipped and listed in the manifest (PackSplit.Skipped).
//
// Packing can be interrupted (ctx ended, or the process killed) and
// resumed: called again with the same lists and configuration, PackLists
// keeps the records written and packs the rest; with other lists or
// options it refuses (ErrConfig). A finished pack is left as it is. It
// returns the manifest, or ctx's error once what is done is safe to
// resume from.
func PackLists(ctx context.Context, source string, train, val *ImageList, out string, cfg PackConfig) (*PackManifest, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if val != nil {
		for i, l := range val.Labels {
			if int(l) >= len(train.Classes) {
				return nil, fmt.Errorf("%s: %w: label %d, the training set has %d classes", val.File(i), ErrLabel, l, len(train.Classes))
			}
		}
	}
	splits := []*ImageList{train}
	names := []string{"train"}
	if val != nil {
		splits, names = append(splits, val), append(names, "val")
	}
	fp := packFingerprint(cfg, train.Classes, names, splits)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", out, err)
	}
	if m, err := ReadPackManifest(out); err == nil {
		if m.Fingerprint != fp {
			return nil, fmt.Errorf("%s: %w: it holds a finished pack of other sources or options", out, ErrConfig)
		}
		return m, nil
	} else if !errors.Is(err, ErrMissing) {
		return nil, err
	}
	abs, _ := filepath.Abs(source)
	m := &PackManifest{Format: packFormat, Version: packVersion, Resize: cfg.Resize, Quality: cfg.Quality, Chroma: "4:4:4",
		Source: abs, Classes: train.Classes, Fingerprint: fp}
	if cfg.Chroma420 || !turbo.Built {
		m.Chroma = "4:2:0"
	}
	for k, l := range splits {
		s, err := packSplit(ctx, out, names[k], l, fp, &cfg)
		if err != nil {
			return nil, err
		}
		m.Splits = append(m.Splits, *s)
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := writeAtomic(filepath.Join(out, packManifest), append(b, '\n')); err != nil {
		return nil, fmt.Errorf("%s: %w", out, err)
	}
	for _, n := range names {
		os.Remove(filepath.Join(out, n+".journal"))
	}
	return m, nil
}

// packFingerprint hashes what a pack is made of.
func packFingerprint(cfg PackConfig, classes, names []string, splits []*ImageList) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "v%d %d %d %v %d\n%q\n", packVersion, cfg.Resize, cfg.Quality, cfg.Chroma420, cfg.FileBytes, classes)
	for k, l := range splits {
		fmt.Fprintf(h, "%s %d\n", names[k], l.Len())
		for i, p := range l.Paths {
			fmt.Fprintf(h, "%s\x00%d\n", p, l.Labels[i])
		}
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// jnlEntry is a journal line: source I packed into record file F at
// offset O (its record header), N bytes with checksum C, Kept when they
// are the file's own; or skipped, with Skip saying why.
type jnlEntry struct {
	I    int    `json:"i"`
	F    int    `json:"f,omitempty"`
	O    int64  `json:"o,omitempty"`
	N    int    `json:"n,omitempty"`
	C    uint32 `json:"c,omitempty"`
	Kept bool   `json:"kept,omitempty"`
	Skip string `json:"skip,omitempty"`
}

type jnlHeader struct {
	Format      string `json:"format"`
	Fingerprint string `json:"fingerprint"`
}

// splitWriter is the state of a split being packed.
type splitWriter struct {
	dir, name string
	list      *ImageList
	cfg       *PackConfig
	ents      []jnlEntry
	jnl       *os.File
	file      int      // current record file
	rec       *os.File // open for appending
	w         *bufio.Writer
	off       int64 // its length, buffered bytes included
	bytes     int64
}

// packSplit packs one split, resuming its journal if there is one.
func packSplit(ctx context.Context, dir, name string, l *ImageList, fp string, cfg *PackConfig) (*PackSplit, error) {
	s := &splitWriter{dir: dir, name: name, list: l, cfg: cfg}
	if err := s.open(fp); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name+".journal"), err)
	}
	defer s.close()
	resumed := len(s.ents)
	start, last := time.Now(), time.Now()
	progress := func() {
		if cfg.Progress != nil {
			cfg.Progress(PackProgress{Split: name, Done: len(s.ents), Total: l.Len(), Resumed: resumed,
				Skipped: s.skipped(), Bytes: s.bytes, Elapsed: time.Since(start)})
		}
	}
	workers := newPackers(l, cfg)
	defer workers.close()
	batch := 4 * cfg.Threads
	for len(s.ents) < l.Len() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		lo := len(s.ents)
		res := workers.run(lo, min(lo+batch, l.Len()))
		for k, r := range res {
			e := jnlEntry{I: lo + k}
			if r.err != nil {
				e.Skip = fmt.Sprintf("%s: %v", l.File(lo+k), r.err)
			} else if err := s.append(l.Labels[lo+k], r, &e); err != nil {
				return nil, err
			}
			s.ents = append(s.ents, e)
		}
		if err := s.commit(s.ents[lo:]); err != nil {
			return nil, err
		}
		if time.Since(last) >= time.Second {
			progress()
			last = time.Now()
		}
	}
	if err := s.finish(); err != nil {
		return nil, err
	}
	progress()
	return s.summary(), nil
}

// open reads the journal (making it when there is none), drops a torn
// last line, cuts the record files back to what it holds and opens the
// last one for appending.
func (s *splitWriter) open(fp string) error {
	path := filepath.Join(s.dir, s.name+".journal")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	s.jnl = f
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	good := 0 // bytes of whole, valid lines
	for lineNo := 0; ; lineNo++ {
		nl := bytes.IndexByte(b[good:], '\n')
		if nl < 0 {
			break
		}
		line := b[good : good+nl]
		if lineNo == 0 {
			var h jnlHeader
			if json.Unmarshal(line, &h) != nil || h.Format != packFormat+"-journal" {
				return fmt.Errorf("%w: not a pack journal", ErrFormat)
			}
			if h.Fingerprint != fp {
				return fmt.Errorf("%w: an unfinished pack of other sources or options is here (remove %s to start anew)", ErrConfig, s.dir)
			}
		} else {
			var e jnlEntry
			if json.Unmarshal(line, &e) != nil || e.I != len(s.ents) {
				break
			}
			s.ents = append(s.ents, e)
		}
		good += nl + 1
	}
	if good == 0 {
		h, _ := json.Marshal(jnlHeader{Format: packFormat + "-journal", Fingerprint: fp})
		if _, err := f.WriteAt(append(h, '\n'), 0); err != nil {
			return err
		}
		good = len(h) + 1
	}
	if err := f.Truncate(int64(good)); err != nil {
		return err
	}
	if _, err := f.Seek(int64(good), io.SeekStart); err != nil {
		return err
	}
	// The record files: the last journaled record's file, cut after it;
	// later files hold only records the journal lost.
	end := int64(fileHeaderLen)
	for _, e := range s.ents {
		if e.Skip == "" {
			s.file, end = e.F, e.O+recHeaderLen+int64(e.N)
			s.bytes += recHeaderLen + int64(e.N)
		}
	}
	for n := s.file + 1; ; n++ {
		if os.Remove(filepath.Join(s.dir, recordFileName(s.name, n))) != nil {
			break
		}
	}
	return s.openRecords(end)
}

// openRecords opens record file s.file for appending at end (making it
// with its header when end is the header's length).
func (s *splitWriter) openRecords(end int64) error {
	path := filepath.Join(s.dir, recordFileName(s.name, s.file))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err == nil && end > fileHeaderLen && st.Size() < end {
		err = fmt.Errorf("%s: %w: %d bytes, the journal has records up to %d", path, ErrTruncated, st.Size(), end)
	}
	if err == nil && end == fileHeaderLen {
		_, err = f.WriteAt(fileHeader(), 0)
	}
	if err == nil {
		err = f.Truncate(end)
	}
	if err == nil {
		_, err = f.Seek(end, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return err
	}
	s.rec, s.w, s.off = f, bufio.NewWriterSize(f, 1<<20), end
	return nil
}

// append writes a record, starting a new file when this one is full.
func (s *splitWriter) append(label int32, r packResult, e *jnlEntry) error {
	size := int64(recHeaderLen + len(r.data))
	if s.off > fileHeaderLen && s.off+size > s.cfg.FileBytes {
		if err := s.closeRecords(); err != nil {
			return err
		}
		s.file++
		if err := s.openRecords(fileHeaderLen); err != nil {
			return err
		}
	}
	e.F, e.O, e.N, e.C, e.Kept = s.file, s.off, len(r.data), crc32.Checksum(r.data, castagnol), r.kept
	if _, err := s.w.Write(recordHeader(label, r.data)); err != nil {
		return err
	}
	if _, err := s.w.Write(r.data); err != nil {
		return err
	}
	s.off += size
	s.bytes += size
	return nil
}

// commit makes the records written so far reach the file before the
// journal names them, then journals ents.
func (s *splitWriter) commit(ents []jnlEntry) error {
	if err := s.w.Flush(); err != nil {
		return err
	}
	var b []byte
	for _, e := range ents {
		j, _ := json.Marshal(e)
		b = append(append(b, j...), '\n')
	}
	_, err := s.jnl.Write(b)
	return err
}

func (s *splitWriter) closeRecords() error {
	if err := s.w.Flush(); err != nil {
		return err
	}
	if err := s.rec.Sync(); err != nil {
		return err
	}
	err := s.rec.Close()
	s.rec = nil
	return err
}

// finish writes the split's index and list.
func (s *splitWriter) finish() error {
	if err := s.closeRecords(); err != nil {
		return err
	}
	var idx []packEntry
	var list strings.Builder
	for _, e := range s.ents {
		if e.Skip != "" {
			continue
		}
		idx = append(idx, packEntry{file: uint32(e.F), label: s.list.Labels[e.I], offset: uint64(e.O), length: uint32(e.N), crc: e.C})
		fmt.Fprintf(&list, "%s %d\n", s.list.Paths[e.I], s.list.Labels[e.I])
	}
	if err := writeIndex(filepath.Join(s.dir, s.name+".idx"), s.file+1, idx); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(s.dir, s.name+".txt"), []byte(list.String())); err != nil {
		return err
	}
	return s.jnl.Sync()
}

func (s *splitWriter) close() {
	if s.rec != nil {
		s.w.Flush()
		s.rec.Close()
	}
	if s.jnl != nil {
		s.jnl.Close()
	}
}

func (s *splitWriter) skipped() int {
	n := 0
	for _, e := range s.ents {
		if e.Skip != "" {
			n++
		}
	}
	return n
}

func (s *splitWriter) summary() *PackSplit {
	root, _ := filepath.Abs(s.list.Root)
	p := &PackSplit{Name: s.name, Root: root, Index: s.name + ".idx", List: s.name + ".txt", Skipped: []string{}}
	for _, e := range s.ents {
		switch {
		case e.Skip != "":
			p.Skipped = append(p.Skipped, e.Skip)
		case e.Kept:
			p.Kept++
			p.Images++
		default:
			p.Images++
		}
	}
	for n := range s.file + 1 {
		p.Files = append(p.Files, recordFileName(s.name, n))
	}
	return p
}

// packResult is a source prepared for its record.
type packResult struct {
	data []byte
	kept bool
	err  error
}

// packers prepare sources on threads of their own.
type packers struct {
	jobs chan int
	wg   sync.WaitGroup
	res  []packResult
	lo   int
	done sync.WaitGroup
}

func newPackers(l *ImageList, cfg *PackConfig) *packers {
	p := &packers{jobs: make(chan int)}
	img := kernels.NewImages()
	for range cfg.Threads {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			w := &packer{dec: newDecoder(false), img: img, resize: cfg.Resize, quality: cfg.Quality, sub: turbo.Sub444}
			if cfg.Chroma420 {
				w.sub = turbo.Sub420
			}
			defer w.close()
			for i := range p.jobs {
				d, kept, err := w.prepare(l, i)
				p.res[i-p.lo] = packResult{data: d, kept: kept, err: err}
				p.done.Done()
			}
		}()
	}
	return p
}

// run prepares sources lo … hi−1 and returns their results in order.
func (p *packers) run(lo, hi int) []packResult {
	p.res, p.lo = make([]packResult, hi-lo), lo
	p.done.Add(hi - lo)
	for i := lo; i < hi; i++ {
		p.jobs <- i
	}
	p.done.Wait()
	return p.res
}

func (p *packers) close() {
	close(p.jobs)
	p.wg.Wait()
}

// packer prepares records: one per thread.
type packer struct {
	dec             *decoder
	enc             *turbo.Encoder
	img             kernels.Images
	resize, quality int
	sub             int // chroma subsampling (turbo.Sub444 or Sub420)
	buf, pix, tmp   []byte
	ax, ay          kernels.ResizeAxis
}

func (w *packer) close() {
	w.dec.close()
	if w.enc != nil {
		w.enc.Close()
	}
}

// prepare returns the record of source i: its file's bytes when its
// shorter side is at most the resize, else the image resized as training
// resizes it and encoded as a JPEG. A source training could not decode
// is an error.
func (w *packer) prepare(l *ImageList, i int) ([]byte, bool, error) {
	b, err := files{l}.read(i, w.buf)
	if err != nil {
		return nil, false, err
	}
	w.buf = b
	m, err := w.dec.decode(b, w.resize)
	if err != nil {
		return nil, false, err
	}
	if min(m.SrcW, m.SrcH) <= w.resize {
		return bytes.Clone(b), true, nil
	}
	a := Augment{Resize: w.resize}
	rw, rh := a.resized(m.SrcW, m.SrcH)
	w.ax.Set(m.W, rw, 0, rw)
	w.ay.Set(m.H, rh, 0, rh)
	w.pix = grow(w.pix, 3*rw*rh)
	w.tmp = grow(w.tmp, kernels.ImageTmpLen(&w.ax, &w.ay))
	w.img.Resize(m.Pix, m.W, m.H, &w.ax, &w.ay, w.pix, w.tmp)
	d, err := w.encode(w.pix, rw, rh)
	return d, false, err
}

// encode compresses a packed RGB image as a JPEG: libjpeg-turbo when
// built in, else Go's image/jpeg (which writes 4:2:0 chroma only).
func (w *packer) encode(pix []byte, width, height int) ([]byte, error) {
	if turbo.Built && w.enc == nil {
		if e, err := turbo.NewEncoder(); err == nil {
			w.enc = e
		}
	}
	if w.enc != nil {
		return w.enc.Encode(nil, pix, width, height, w.quality, w.sub, false)
	}
	m := image.NewRGBA(image.Rect(0, 0, width, height))
	for p := range width * height {
		copy(m.Pix[4*p:4*p+3], pix[3*p:3*p+3])
		m.Pix[4*p+3] = 255
	}
	var out bytes.Buffer
	if err := jpeg.Encode(&out, m, &jpeg.Options{Quality: w.quality}); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
