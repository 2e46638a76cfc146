package kernels

// Engine is the compute API every layer of softsync runs on. Two
// implementations exist and pass the same tests: the native one (C in csrc/
// with OpenBLAS, through cgo) and the pure-Go reference (gonum's BLAS and
// plain loops), selected with the noblas build tag or CGO_ENABLED=0.
//
// Conventions shared by every method:
//   - Tensors are float32 slices in row-major order. Activations are NCHW:
//     element (n, c, h, w) of a tensor with C channels and H×W pixels is at
//     ((n*C+c)*H+h)*W+w; convolutions also take them channel-major (CNHW,
//     see Layout). Per-plane methods (pooling, LRN, ReLU) see a CNHW
//     tensor as an NCHW one with N and C swapped; cross-channel LRN and
//     batch normalisation see it as one image (see LRNShape, BNShape).
//     Convolution weights are [OC][C/G][KH][KW] (G channel groups, see
//     ConvShape), fully connected weights [Out][In], biases one value per
//     output channel.
//   - Outputs are overwritten, never accumulated into, unless a method says
//     otherwise. Inputs are never modified. Outputs must not alias inputs
//     unless a method allows it.
//   - Shapes are validated on entry: inconsistent shapes or slices shorter
//     than the shape requires panic with a message naming the argument (a
//     programming error, as in gonum). Slices may be longer than required;
//     only the leading part is used.
//   - An Engine is safe for concurrent use by several goroutines as long as
//     each uses its own Workspace and its own output slices.
type Engine interface {
	// Name identifies the implementation ("native" or "reference").
	Name() string

	// Gemm computes C = alpha·op(A)·op(B) + beta·C, all matrices row-major,
	// op(X) = Xᵀ when the matching trans flag is set. op(A) is m×k, op(B) is
	// k×n, C is m×n; lda, ldb, ldc are the row strides of A, B, C as stored.
	Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
		b []float32, ldb int, beta float32, c []float32, ldc int)

	// ConvForward computes y = conv(x, w) + b for a whole batch; b may be
	// nil (no bias). x is s.InputLen(), w s.WeightLen(), y s.OutputLen(),
	// x and y both in s.Layout.
	ConvForward(s ConvShape, x, w, b, y []float32, ws *Workspace)
	// ConvBackward computes, from the forward input x, the weights w and the
	// output gradient dy: dw (overwritten), db (overwritten; nil to skip)
	// and dx (overwritten; nil to skip, as for a network's first layer);
	// x, dy and dx in s.Layout.
	ConvBackward(s ConvShape, x, w, dy, dx, dw, db []float32, ws *Workspace)

	// PoolForward computes max or average pooling (s.Mode). For max
	// pooling, mask (s.OutputLen() entries) receives the index within the
	// input plane (h*W+w) of each output's arg-max, for PoolBackward; for
	// average pooling mask is ignored and may be nil.
	PoolForward(s PoolShape, x, y []float32, mask []int32)
	// PoolBackward computes dx (overwritten) from dy and, for max pooling,
	// the mask written by PoolForward.
	PoolBackward(s PoolShape, dy []float32, mask []int32, dx []float32)

	// ReLUForward computes y = max(x, 0); y may alias x.
	ReLUForward(x, y []float32)
	// ReLUBackward computes dx = dy where y > 0, else 0, from the forward
	// output y; dx may alias dy.
	ReLUBackward(y, dy, dx []float32)

	// LRNForward computes Caffe's local response normalisation (s.Region):
	// within a channel, scale = K + Alpha/Size²·Σ x² over a Size×Size
	// window centred on each pixel; across channels, scale = K +
	// Alpha/Size·Σ x² over channels c−⌊Size/2⌋ … c+⌊Size/2⌋ at the same
	// pixel; zero padded; y = x·scale^(−Beta). scale (s.Len() entries) is
	// kept for LRNBackward.
	LRNForward(s LRNShape, x, y, scale []float32, ws *Workspace)
	// LRNBackward computes dx (overwritten) from the forward x, y, scale and
	// the output gradient dy.
	LRNBackward(s LRNShape, x, y, scale, dy, dx []float32, ws *Workspace)

	// DropoutForward computes inverted dropout, y = x·m for the len(x)
	// elements of x, where m is 1/(1−d.Ratio) for the elements the mask
	// of d keeps and 0 for the others (see Dropout). y may alias x.
	DropoutForward(d Dropout, x, y []float32)
	// DropoutBackward computes dx = dy·m, with the m of DropoutForward,
	// for the len(dy) elements of dy: the gradient of DropoutForward with
	// the same d. dx may alias dy.
	DropoutBackward(d Dropout, dy, dx []float32)

	// BNForwardTrain computes batch normalisation with the batch's
	// statistics, PyTorch's BatchNorm2d in training mode: for each
	// channel c, mean[c] and variance[c] (overwritten) receive the mean
	// and the biased variance (divided by M = N·HW) of its M values, and
	// y = gamma[c]·(x − mean[c])/sqrt(variance[c] + Eps) + beta[c]. A
	// running variance that follows PyTorch's is updated with the unbiased
	// variance[c]·M/(M−1). gamma, beta, mean and variance have s.C
	// entries; y may alias x.
	BNForwardTrain(s BNShape, x, gamma, beta, y, mean, variance []float32)
	// BNForwardInfer computes y = gamma[c]·(x − mean[c])/sqrt(variance[c]
	// + Eps) + beta[c] with the given (running) statistics, PyTorch's
	// evaluation mode. y may alias x.
	BNForwardInfer(s BNShape, x, gamma, beta, mean, variance, y []float32)
	// BNBackward computes the gradients of BNForwardTrain from its input
	// x, gamma, the batch mean and variance it wrote, and the output
	// gradient dy: dgamma[c] = Σ dy·x̂ and dbeta[c] = Σ dy over the
	// channel's values (x̂ = (x − mean)/sqrt(variance + Eps)), and dx =
	// gamma/sqrt(variance + Eps)·(dy − dbeta/M − x̂·dgamma/M), all
	// overwritten; dx may be nil (not computed) and may alias dy.
	BNBackward(s BNShape, x, gamma, mean, variance, dy, dx, dgamma, dbeta []float32)

	// Add computes y = a + b element-wise over the len(a) elements of a;
	// y may alias a or b. It serves residual sums and the accumulation of
	// the gradients of an activation that several layers read.
	Add(a, b, y []float32)

	// FCForward computes y = x·wᵀ + b for n rows of in features: x is n×in,
	// w is out×in, b has out entries (nil for none), y is n×out.
	FCForward(n, in, out int, x, w, b, y []float32)
	// FCBackward computes dw = dyᵀ·x (out×in), db = column sums of dy (nil
	// to skip) and dx = dy·w (n×in; nil to skip), all overwritten.
	FCBackward(n, in, out int, x, w, dy, dx, dw, db []float32)

	// SoftmaxCrossEntropy computes, for n rows of k logits and integer
	// labels in [0, k), the softmax probabilities prob (n×k), the mean
	// cross-entropy loss over the n rows (returned), and dlogits = (prob −
	// onehot(label))/n, the gradient of that mean. dlogits may be nil.
	// A label out of range panics.
	SoftmaxCrossEntropy(n, k int, logits []float32, labels []int32, prob, dlogits []float32) float32
}
