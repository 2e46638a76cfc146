package data

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CIFAR-10 binary format: each record is one label byte followed by
// 32×32×3 pixel bytes, the red plane, then green, then blue, each row-major
// (so the pixels are already C×H×W). The published training set is
// data_batch_1.bin … data_batch_5.bin, the test set test_batch.bin.
const (
	cifarSide   = 32
	cifarPixels = 3 * cifarSide * cifarSide
	cifarRecord = 1 + cifarPixels
)

// CIFAR10TestFile is the published name of the CIFAR-10 test set's file.
const CIFAR10TestFile = "test_batch.bin"

// CIFAR10TrainFiles returns the published names of the five files of the
// CIFAR-10 training set, in order (a new slice at every call).
func CIFAR10TrainFiles() []string {
	return []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"}
}

// LoadCIFAR10 reads the CIFAR-10 training set (data_batch_1.bin …
// data_batch_5.bin) and test set (test_batch.bin) from dir, or from its
// sub-folder cifar-10-batches-bin as the published archive unpacks. Images
// are 3×32×32, 10 classes, Scale 1 (Caffe's cifar10_full subtracts the
// mean from raw 0…255 pixels).
func LoadCIFAR10(dir string) (train, test *Dataset, err error) {
	if _, err := os.Stat(filepath.Join(dir, CIFAR10TestFile)); err != nil {
		if sub := filepath.Join(dir, "cifar-10-batches-bin"); isDir(sub) {
			dir = sub
		}
	}
	paths := CIFAR10TrainFiles()
	for i, n := range paths {
		paths[i] = filepath.Join(dir, n)
	}
	if train, err = ReadCIFAR10(paths...); err != nil {
		return nil, nil, err
	}
	if test, err = ReadCIFAR10(filepath.Join(dir, CIFAR10TestFile)); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// ReadCIFAR10 reads and concatenates CIFAR-10 binary files (any number of
// records each; the size must be a multiple of 3,073 bytes).
func ReadCIFAR10(paths ...string) (*Dataset, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no CIFAR-10 file given", ErrMissing)
	}
	n := 0
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMissing, err)
		}
		if fi.Size()%cifarRecord != 0 {
			return nil, fmt.Errorf("%s: %w: %d bytes is not a whole number of %d-byte records", p, ErrTruncated, fi.Size(), cifarRecord)
		}
		n += int(fi.Size() / cifarRecord)
	}
	d := &Dataset{
		Source: paths[0], N: n, C: 3, H: cifarSide, W: cifarSide, Classes: 10, Scale: 1,
		Pixels: make([]uint8, n*cifarPixels), Labels: make([]int32, n),
	}
	if len(paths) > 1 {
		d.Source = fmt.Sprintf("%s (and %d more)", paths[0], len(paths)-1)
	}
	i := 0
	for _, p := range paths {
		m, err := readCIFARFile(p, d.Pixels[i*cifarPixels:], d.Labels[i:])
		if err != nil {
			return nil, err
		}
		i += m
	}
	if i != n {
		return nil, fmt.Errorf("%s: %w: files changed while being read", d.Source, ErrTruncated)
	}
	return d, nil
}

// readCIFARFile reads the records of one file into pix and labels and
// returns how many it read.
func readCIFARFile(path string, pix []uint8, labels []int32) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrMissing, err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	var lab [1]byte
	for i := 0; i < len(labels); i++ {
		if _, err := io.ReadFull(r, lab[:]); err == io.EOF {
			return i, nil
		} else if err != nil {
			return i, readErr(path, "labels", err)
		}
		if lab[0] >= 10 {
			return i, fmt.Errorf("%s: %w: label %d of record %d, want 0…9", path, ErrLabel, lab[0], i)
		}
		labels[i] = int32(lab[0])
		if _, err := io.ReadFull(r, pix[i*cifarPixels:(i+1)*cifarPixels]); err != nil {
			return i, readErr(path, "pixels", err)
		}
	}
	return len(labels), nil
}

// WriteCIFAR10 writes d (3×32×32 images, labels below 10) as one CIFAR-10
// binary file: the inverse of ReadCIFAR10, for converting data and for
// tests.
func WriteCIFAR10(path string, d *Dataset) error {
	if d.C != 3 || d.H != cifarSide || d.W != cifarSide {
		return fmt.Errorf("%s: %w: CIFAR-10 images are 3×32×32, the data set has %d×%d×%d", path, ErrShape, d.C, d.H, d.W)
	}
	if err := checkLabels(path, d.Labels[:d.N], 10); err != nil {
		return err
	}
	buf := make([]byte, 0, d.N*cifarRecord)
	for i := 0; i < d.N; i++ {
		buf = append(buf, byte(d.Labels[i]))
		buf = append(buf, d.Pixels[i*cifarPixels:(i+1)*cifarPixels]...)
	}
	return writeFile(path, false, buf)
}
