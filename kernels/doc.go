// Package kernels is the compute layer of softsync: GEMM, convolution
// (grouped too), pooling, ReLU, Caffe's LRN within and across channels,
// dropout, batch normalisation, element-wise sums, fully connected layers
// and softmax cross-entropy, behind one Engine interface.
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
// the rest (convolutions, pooling, LRN, ReLU, dropout, batch
// normalisation, Add) over a small pool of C threads that sleep between
// jobs. Each engine owns its thread count
// (Config.Threads, reported by Info.Threads and ThreadsOf): a later New
// with another count leaves the engines already made as they were. The C
// pool is process-wide and only grows, to the largest count asked for;
// every call passes its engine's count down to the C kernels, which split
// their jobs over at most that many of the pool's threads and size their
// per-thread workspace by it. OpenBLAS's thread count is process-wide
// too: before each GEMM the engine compares it with its own count (one
// atomic load) and changes it, under a lock, only when they differ. The
// caveat: when two engines with different counts run GEMMs at the same
// moment, one of them may run that GEMM with the other's count, which
// changes its speed, and its result within rounding (OpenBLAS splits a
// product differently for another count), never beyond. Everything else is
// independent of the thread count and of concurrent callers: the C
// kernels split work by items whose sums run in a fixed order, so their
// bits are the same for every count (kerneltest.ThreadsAgree).
//
// Convolutions: at instruction-set levels AVX2 and AVX-512, stride-1
// convolutions run on direct kernels (csrc/direct.c, csrc/direct512.c)
// with no column matrix: a register tile of 4 output channels × 24 output
// pixels (AVX2) or 4 × 96 (AVX-512, in 16-pixel vectors that run across
// output rows over shifted copies of each image) accumulates over every
// tap, and the gradients use the same tiles (the input gradient as the
// correlation of the padded output gradient with the rotated kernel, or
// by scattering when the forward padding is narrower than the kernel);
// the AVX-512 weight gradient puts output channels in the lanes. The
// method is chosen per pass (ss_conv_pass_method: forward, weight
// gradient, input gradient; ConvBackward makes two calls when the two
// gradients' methods differ). At level AVX-512, layers of at least 1024
// taps whose output planes are narrower than 16 pixels run the input
// gradient on the GEMMs, the forward pass too with at least 192 output
// channels, and the weight gradient on planes of fewer than 64 pixels; on
// CPUs whose 512-bit FMAs run at half rate (CPU.HalfRate512: Zen 4) the
// direct forward passes run the AVX2 kernels on wide rows of whole
// 8-pixel vectors and on kernels 5 or more wide with at least 1024 taps.
// At level AVX2, narrow
// output planes whose rows end in a partial 8-pixel vector
// (OW < 16) with many taps (C·KH·KW ≥ 1024) run on the GEMMs instead, and
// the weight gradient of every layer of at least 96 output channels and
// 128 taps, of any stride, is one GEMM over the batch's pixels
// (csrc/wgrad.c): the
// input copied channel-last so that a block of 24 taps of a pixel is
// contiguous, a 4 × 24 register tile of output channels by taps. Before
// all of these, at level AVX2, 3×3 convolutions of stride 1 (padding 0 or
// 1) with at least 64 input and 64 output channels run every pass as
// Winograd's F(2×2, 3×3) (csrc/winograd.c): transforms of the weights,
// 4×4 input tiles and 2×2 output tiles around 16 OpenBLAS GEMMs per block
// of tiles, 4 multiplications per output pixel and channel pair instead
// of 9; on output rows of 16 pixels or more as F(4×4, 3×3) on 6×6 tiles
// around 36 GEMMs (2.25 multiplications), and 5×5 ones of at least 48
// input and 64 output channels as F(2×2, 5×5) (9 instead of 25); the
// gradients are those of the same computation. Also at level
// AVX2, the first layers' strided kernels over at most 4 input channels
// (ResNet-18's and AlexNet's conv1) run rewritten by space to depth
// (csrc/s2d.c) as stride-1 convolutions over stride² times the channels,
// on the direct kernels or Winograd (the forward pass and the weight
// gradient; the input gradient where the rewrite runs on Winograd). Other
// convolutions cover a group of images with one OpenBLAS GEMM, the column
// matrix either batch-innermost (the group transposed to CHWN so that
// im2col copies long runs; small images) or image-major (wide output rows
// copied whole). Fully connected layers of at most 8 rows use direct
// kernels too, larger ones OpenBLAS. A grouped convolution (ConvShape.Group)
// runs as its groups one after the other, each an ungrouped convolution
// of the same kernels over its block of channels, addressed through the
// whole tensors' plane strides (no gathering of a group's channels), by
// the method the group's shape chooses.
//
// Normalisation and dropout: batch normalisation sums each channel's
// values in float64 (eight interleaved lanes per run of a plane, runs in
// order), so its statistics are the batch's to float32 rounding whatever
// the batch size; the training pass and the backward pass split over
// channels, inference over planes. LRN across channels splits a tensor
// into blocks of pixels of one image and walks the channels once per
// block. Dropout draws no random numbers: the mask is a hash of each
// element's position in a seeded stream (see Dropout), the same in both
// engines, at every level and for every thread count, and recomputed by
// the backward pass instead of being stored.
//
// Instruction sets: the C kernels exist at the levels of package
// kernels/isa (AVX-512, AVX2, portable code); each engine runs the
// highest the CPU supports, or Config.ISA when lower (Info.ISA and
// Info.ISAReason say which and why). ISAOf reports an engine's level.
//
// Layouts: every tensor is a row-major float32 slice. Activations are
// NCHW, except that a convolution can take and give them channel-major
// (ConvShape.Layout = CNHW), which lets a stack of convolutions, pooling,
// ReLU and LRN pass each output on as the next input. See Engine for the
// conventions every method follows, and the Shape types (ConvShape,
// PoolShape, LRNShape) for the sizes each argument must have.
//
// Misuse (inconsistent shapes, slices shorter than a shape requires, bad
// strides) panics with a message that names the argument, as gonum does:
// it is a programming error, not a run-time condition. Configuration
// problems return errors that match the exported sentinels with errors.Is.
//
// This package never reads environment variables and never prints; the
// caller passes a Config and reads back an Info.
package kernels
