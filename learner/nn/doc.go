// Package nn builds convolutional networks from declarative specs and runs
// their forward and backward passes on a kernels.Engine.
//
// A Spec (Parse, Load, Builtin) describes a network in a small
// line-oriented text format, documented in docs/network-spec.md: an input
// shape, then layers (conv, optionally grouped and without bias; pool,
// max or average, with Caffe's or PyTorch's rounding, or global; relu;
// lrn within or across channels; fc; dropout; batchnorm; add) ending with
// a softmax cross-entropy loss. Each layer reads the output of the layer
// before it or, with from=, of any earlier layer (add reads two), so a
// network is a directed acyclic graph written in order: residual networks
// are specs too. Built in are "lenet" (Caffe's MNIST LeNet, 431,080
// parameters), "cifar10_full" (Caffe's CIFAR-10 network used by the
// staleness-aware async-SGD paper, 89,578 parameters), "mlp" (a small
// fully connected net for fast tests), "alexnet" (Caffe's bvlc_alexnet,
// 60,965,224 parameters) and "resnet18" (torchvision's, 11,689,512
// parameters). Spec.Memory computes what a Net will allocate before it
// does; a tensor that cannot be allocated is refused (ErrTooLarge).
//
// A Net (New) instantiates a Spec for one batch size. Its parameters and
// gradients are each one contiguous []float32 in layer order (within a
// layer the weights, [out][in/group][kh][kw] or [out][in], then the bias;
// for batch norm the scale, the shift, and its running mean and variance,
// which are state, not parameters), described by Layout as
// []param.Segment so that a parameter server can shard the vector by
// range, apply per-layer multipliers and fold the state's measurements
// (the batch statistics that a training pass writes into the state's
// slots of the gradient). Forward, Backward and Gradient run in training
// (batch statistics, dropout drawn from SetSeed's seed), Evaluate at test
// (running statistics, no dropout); Forward returns the mean loss of a
// batch, Backward the gradient of that mean. All buffers are allocated
// when the Net is built; a training step allocates nothing.
//
// Inside, a plan per replica lists the operations (the layers, and layout
// changes where a layer needs another layout) and gives every activation
// and activation gradient a buffer by lifetime, reusing buffers whose
// values are dead. Activations from a convolution on are channel-major
// (kernels.CNHW: each channel's planes of every image together), so that
// convolutions, pooling, ReLU, LRN, batch norm, dropout and add hand each
// output to the next layer as is; the images (NCHW) are reordered before
// the first convolution when they have several channels, and the planes
// back into NCHW before a fully connected layer. ReLU, dropout and add run
// in place where nothing else reads their input afterwards (batch norm
// and ReLU, or a residual add and ReLU, share one buffer); an output read
// by several layers receives the sum of their gradients; layers before
// the first with parameters run no backward pass, and no layer computes a
// gradient nothing needs.
//
// Using several cores for one network: Config.Workers splits every batch
// into contiguous parts run by that many goroutines, each with its own
// activations and kernels.Workspace, and sums their parameter gradients
// (in parallel, by range). With the engine's BLAS on one thread this
// parallelises every kernel, not only GEMM, and is the fastest way to run
// a single learner on a multi-core machine; with one learner per core,
// keep Workers = 1. Batch norm's statistics span every worker's images:
// the workers meet at each batch norm layer. With several workers, each
// cuts its share into parts of a few images (Config.Part, Spec.PartBatch;
// not for a network with batch norm) and Gradient runs each part forward
// and backward before the next, so that the part's activations are read
// back from the core's L2 cache rather than from memory, which the cores
// share. A network whose last layers are fully connected with large
// weights (AlexNet's fc6 to fc8, 235 MB) has its workers split those
// layers by outputs instead (Config.SplitFC): each computes a slice of
// every such layer's outputs and weight gradients for the whole batch, so
// that the weights are read once per pass in all rather than once per
// worker, and their gradients, written once, are not summed.
package nn
