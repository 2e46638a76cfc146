// Package kernels is the compute layer of softsync: GEMM, convolution
// through im2col/col2im, pooling, ReLU, Caffe's within-channel LRN, fully
// connected layers and softmax cross-entropy, behind one Engine interface.
//
// Two engines implement it and pass the same tests (package kerneltest):
//
//   - the native engine, C99 kernels from csrc/ compiled through cgo, with
//     GEMM done by OpenBLAS. OpenBLAS is not linked into the binary: it is
//     loaded with dlopen after its kernel (OPENBLAS_CORETYPE) has been chosen
//     from the CPU's features, because OpenBLAS reads that choice only once,
//     when it is loaded. See New and Config.
//   - the reference engine (Reference), pure Go: gonum's BLAS for GEMM and
//     plain loops for the rest. It is the only engine in builds with the
//     noblas tag or CGO_ENABLED=0.
//
// Threads: the native engine runs GEMMs on OpenBLAS's threads and splits
// the rest (im2col, col2im, layout transposes, pooling, LRN, ReLU) over a
// small pool of C threads that sleep between jobs; Config.Threads sets
// both. Convolutions cover a group of images with one GEMM, its column
// matrix either batch-innermost (the group transposed to CHWN so that
// im2col copies long runs; small images) or image-major (wide output
// rows copied whole; first layers).
//
// Layouts: every tensor is a row-major float32 slice; activations are NCHW.
// See Engine for the conventions every method follows, and the Shape types
// (ConvShape, PoolShape, LRNShape) for the sizes each argument must have.
//
// Misuse (inconsistent shapes, slices shorter than a shape requires, bad
// strides) panics with a message that names the argument, as gonum does:
// it is a programming error, not a run-time condition. Configuration
// problems return errors that match the exported sentinels with errors.Is.
//
// This package never reads environment variables and never prints; the
// caller passes a Config and reads back an Info.
package kernels
