// Package nn builds convolutional networks from declarative specs and runs
// their forward and backward passes on a kernels.Engine.
//
// A Spec (Parse, Load, Builtin) describes a network in a small
// line-oriented text format, documented in docs/network-spec.md: an input
// shape, then layers (conv, pool, relu, lrn, fc) ending with a softmax
// cross-entropy loss. Built in are "lenet" (Caffe's MNIST LeNet, 431,080
// parameters), "cifar10_full" (Caffe's CIFAR-10 network used by the
// staleness-aware async-SGD paper, 89,578 parameters) and "mlp" (a small
// fully connected net for fast tests).
//
// A Net (New) instantiates a Spec for one batch size. Its parameters and
// gradients are each one contiguous []float32 in layer order (within a
// layer the weights, [out][in][kh][kw] or [out][in], then the bias),
// described by Layout as []param.Segment so that a parameter server can
// shard the vector by range and apply per-layer multipliers. Forward
// returns the mean loss of a batch, Backward the gradient of that mean.
// All buffers are allocated when the Net is built; a training step
// allocates nothing. Inside, activations from the first convolution on
// are channel-major (kernels.CNHW: each channel's planes of every image
// together), so that convolutions, pooling, ReLU and LRN hand each output
// to the next layer as is; the images (NCHW) are reordered into the first
// convolution when they have several channels, and the planes back into
// NCHW before a fully connected layer. ReLU runs in place where the layer
// before it does not need its own output, gradients of activations use
// two shared buffers, and the first layer computes no input gradient.
//
// Using several cores for one network: Config.Workers splits every batch
// into contiguous parts run by that many goroutines, each with its own
// activations and kernels.Workspace, and sums their parameter gradients
// (in parallel, by range). With the engine's BLAS on one thread this
// parallelises every kernel, not only GEMM, and is the fastest way to run
// a single learner on a multi-core machine; with one learner per core,
// keep Workers = 1. With several workers, each cuts its share into parts
// of a few images (Config.Part, Spec.PartBatch) and Gradient runs each
// part forward and backward before the next, so that the part's
// activations are read back from the core's L2 cache rather than from
// memory, which the cores share.
package nn
