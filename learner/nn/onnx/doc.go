// Package onnx writes a network and its weights as an ONNX model, so that
// a trained network leaves softsync for any runtime of ONNX's default
// operator set (version Opset, 13) without a converter.
//
// Export(w, spec, params, normalizer) writes one ModelProto: the graph of
// spec at test (batch norm with its running statistics, no dropout), every
// parameter segment an initialiser under its segment name (PyTorch's
// state_dict names: conv1.weight, bn1.running_var, …) holding the
// segment's values, row-major as the parameter vector keeps them.
//
// Inputs and outputs. The graph's input Pixels ("pixels") is float32
// [batch, C, H, W], the values the training data gave before
// normalisation (bytes, 0–255). Its first nodes normalise them as the
// weights file's data.Normalizer did: Input ("input") = input_scale ·
// pixels − input_mean, the mean a [1, C, 1, 1] initialiser when it is
// constant over each plane (a per-channel mean), else the [1, C, H, W]
// mean image, and no Sub without a mean. A user who feeds normalised
// tensors cuts the graph at Input (onnx.utils.extract_model). The
// outputs are Logits ("logits", [batch, classes]: the loss layer's input)
// and Probabilities ("probabilities": Softmax over axis 1). The model's
// doc_string (Describe) and metadata_props (softsync.network, .spec,
// .input, .normalized_input, .input_scale, .input_mean, .outputs) say so.
//
// Layers, each one or more nodes named after the layer, whose output is
// the value of the layer's name:
//
//	conv       Conv (kernel_shape, strides, pads, group; B unless bias=none)
//	fc         Gemm (transB=1; C unless bias=none), after a Flatten of a
//	           [N, C, H, W] input
//	pool       MaxPool or AveragePool with ceil_mode=0 and the padding that
//	           gives the spec's output size (Caffe's ceil rounding or
//	           floor), see below; global=true: GlobalMaxPool or
//	           GlobalAveragePool
//	relu       Relu
//	lrn        across_channels: LRN (size, alpha, beta, bias = k);
//	           within_channel: Mul(x, x), AveragePool(size, stride 1,
//	           pads size/2, count_include_pad=1), Mul(alpha), Add(k),
//	           Pow(−beta), Mul(x, ·): y = x·(k + α/size²·Σx²)^−β
//	batchnorm  BatchNormalization (epsilon; scale, B, mean, var: the
//	           segments .weight, .bias, .running_mean, .running_var)
//	dropout    no node: identity at test
//	add        Add
//	softmax    the outputs (above)
//
// Values keep their rank: [N, F] after a Gemm, [N, C, H, W] elsewhere; a
// layer that needs four dimensions after a fully connected layer reads
// Unsqueeze(axes 2, 3) of it, and an add of the two kinds adds two
// [N, C, 1, 1].
//
// Pooling at the edges. Readers of ONNX disagree on ceil_mode=1's edge
// windows: whether a last window that starts in the padding exists
// (Caffe's and PyTorch's rounding drop it; ONNX 1.12's shape inference
// keeps it), and whether an average window that runs past the padded
// input divides by the whole kernel. So no node uses it. With tail = (out−1)·stride +
// kernel − H − pad, the padding after the input that the last window
// needs (per axis), max pooling pads pad before and max(pad, tail)
// after: the padding never wins a max, the output has the spec's size.
// Average pooling divides, as Caffe does, by the window clipped to the
// padded input [−pad, H+pad): where tail ≤ pad every window lies inside
// it and AveragePool with pads pad and count_include_pad=1 divides by
// kernel² as Caffe does; where tail > pad an explicit Pad of pad zeros
// on each side (cells that count) precedes an AveragePool with pads
// tail − pad after and count_include_pad=0 (cells that do not).
//
// Names of values and initialisers are unique: a name already taken (a
// layer called "logits", a helper value colliding with a segment) gets
// a suffix _2, _3, … .
package onnx
