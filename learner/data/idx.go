package data

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The idx magic numbers: two zero bytes, the element type (0x08: unsigned
// byte) and the number of dimensions.
const (
	idxImagesMagic = 0x00000803
	idxLabelsMagic = 0x00000801
)

// MNIST's file names, as published; each may also be gzipped with a .gz
// suffix.
const (
	MNISTTrainImages = "train-images-idx3-ubyte"
	MNISTTrainLabels = "train-labels-idx1-ubyte"
	MNISTTestImages  = "t10k-images-idx3-ubyte"
	MNISTTestLabels  = "t10k-labels-idx1-ubyte"
)

// MNISTScale is the factor applied to MNIST pixels before mean subtraction,
// Caffe's 0.00390625 = 1/256, so that scaled pixels lie in [0, 1).
const MNISTScale = 1.0 / 256

// LoadMNIST reads the MNIST training and test sets from dir, which holds
// the four idx files of MNIST under their published names, each raw or
// gzipped (name or name.gz). Images are 1×28×28, 10 classes, Scale
// MNISTScale.
func LoadMNIST(dir string) (train, test *Dataset, err error) {
	train, err = readMNISTPair(dir, MNISTTrainImages, MNISTTrainLabels)
	if err != nil {
		return nil, nil, err
	}
	test, err = readMNISTPair(dir, MNISTTestImages, MNISTTestLabels)
	if err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

func readMNISTPair(dir, images, labels string) (*Dataset, error) {
	ip, err := findFile(dir, images, images+".gz")
	if err != nil {
		return nil, err
	}
	lp, err := findFile(dir, labels, labels+".gz")
	if err != nil {
		return nil, err
	}
	d, err := ReadIDX(ip, lp, 10)
	if err != nil {
		return nil, err
	}
	d.Scale = MNISTScale
	return d, nil
}

// findFile returns the path of the first of names that exists in dir, or
// an ErrMissing error naming dir and every name tried.
func findFile(dir string, names ...string) (string, error) {
	for _, n := range names {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%s: %w: no such folder", dir, ErrMissing)
	}
	return "", fmt.Errorf("%s: %w: none of %q", dir, ErrMissing, names)
}

// ReadIDX reads a data set from an idx image file (magic 0x00000803, N×H×W
// unsigned bytes) and an idx label file (magic 0x00000801, N unsigned
// bytes), each raw or gzipped (recognised by content). Labels must lie in
// [0, classes). The images get C = 1 and Scale 1; LoadMNIST sets MNIST's
// scale.
func ReadIDX(images, labels string, classes int) (*Dataset, error) {
	var dims [3]uint32
	pix, err := readIDXFile(images, idxImagesMagic, dims[:])
	if err != nil {
		return nil, err
	}
	var ldims [1]uint32
	lab, err := readIDXFile(labels, idxLabelsMagic, ldims[:])
	if err != nil {
		return nil, err
	}
	if ldims[0] != dims[0] {
		return nil, fmt.Errorf("%s: %w: %d labels for the %d images of %s", labels, ErrFormat, ldims[0], dims[0], images)
	}
	d := &Dataset{
		Source: images, N: int(dims[0]), C: 1, H: int(dims[1]), W: int(dims[2]),
		Classes: classes, Scale: 1, Pixels: pix, Labels: make([]int32, len(lab)),
	}
	for i, l := range lab {
		d.Labels[i] = int32(l)
	}
	if err := checkLabels(labels, d.Labels, classes); err != nil {
		return nil, err
	}
	return d, nil
}

// readIDXFile reads one idx file of unsigned bytes with the given magic
// number, stores its dimensions into dims (len(dims) = number of
// dimensions) and returns its data.
func readIDXFile(path string, magic uint32, dims []uint32) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMissing, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	rawSize := int64(-1)
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: gzip: %w", path, ErrFormat, err)
		}
		r = zr
	} else if fi, err := f.Stat(); err == nil {
		rawSize = fi.Size()
	}

	hdr := make([]byte, 4+4*len(dims))
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, readErr(path, "header", err)
	}
	if got := binary.BigEndian.Uint32(hdr); got != magic {
		return nil, fmt.Errorf("%s: %w: magic number 0x%08x, want 0x%08x", path, ErrFormat, got, magic)
	}
	size := int64(1)
	for i := range dims {
		dims[i] = binary.BigEndian.Uint32(hdr[4+4*i:])
		size *= int64(dims[i])
	}
	if size > 1<<34 {
		return nil, fmt.Errorf("%s: %w: header announces %d bytes of data", path, ErrFormat, size)
	}
	if rawSize >= 0 && rawSize < int64(len(hdr))+size {
		return nil, fmt.Errorf("%s: %w: %d bytes of data, header announces %d", path, ErrTruncated, rawSize-int64(len(hdr)), size)
	}
	buf, err := readN(r, size)
	if err != nil {
		return nil, readErr(path, "data", err)
	}
	var one [1]byte
	if n, err := r.Read(one[:]); n > 0 {
		return nil, fmt.Errorf("%s: %w: data continues past the %d bytes the header announces", path, ErrFormat, size)
	} else if err != nil && err != io.EOF {
		return nil, readErr(path, "data", err)
	}
	return buf, nil
}

// readN reads exactly n bytes. Large sizes (which a corrupt gzipped
// header may announce) are read in chunks, so that memory is only spent
// on data that exists.
func readN(r io.Reader, n int64) ([]byte, error) {
	const chunk = 64 << 20
	if n <= chunk {
		buf := make([]byte, n)
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	buf := make([]byte, 0, chunk)
	for int64(len(buf)) < n {
		m := min(n-int64(len(buf)), chunk)
		buf = append(buf, make([]byte, m)...)
		if _, err := io.ReadFull(r, buf[int64(len(buf))-m:]); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// readErr wraps a read error: a short read is ErrTruncated, a corrupt
// gzip stream ErrFormat.
func readErr(path, what string, err error) error {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return fmt.Errorf("%s: %w: file ends inside the %s", path, ErrTruncated, what)
	case errors.Is(err, gzip.ErrChecksum), errors.Is(err, gzip.ErrHeader):
		return fmt.Errorf("%s: %w: %w", path, ErrFormat, err)
	}
	return fmt.Errorf("%s: reading %s: %w", path, what, err)
}

// WriteIDX writes d (which must have C = 1 and labels below 256) as an idx
// image file and an idx label file, gzipped if gz is set. It is the
// inverse of ReadIDX, for converting data and for tests.
func WriteIDX(images, labels string, d *Dataset, gz bool) error {
	if d.C != 1 {
		return fmt.Errorf("%s: %w: idx images have one channel, the data set has %d", images, ErrShape, d.C)
	}
	hdr := binary.BigEndian.AppendUint32(nil, idxImagesMagic)
	for _, v := range []int{d.N, d.H, d.W} {
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(v))
	}
	if err := writeFile(images, gz, hdr, d.Pixels[:d.N*d.ImageLen()]); err != nil {
		return err
	}
	lab := make([]byte, d.N)
	for i, l := range d.Labels[:d.N] {
		if l < 0 || l > 255 {
			return fmt.Errorf("%s: %w: label %d does not fit a byte", labels, ErrLabel, l)
		}
		lab[i] = byte(l)
	}
	hdr = binary.BigEndian.AppendUint32(nil, idxLabelsMagic)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(d.N))
	return writeFile(labels, gz, hdr, lab)
}

// writeFile writes the concatenation of parts to path, gzipped if gz.
func writeFile(path string, gz bool, parts ...[]byte) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	var w io.Writer = f
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(f)
		w = zw
	}
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	if zw != nil {
		return zw.Close()
	}
	return nil
}
