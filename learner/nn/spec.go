package nn

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/ps/param"
)

// ErrSpec is wrapped by every error about a network spec; the message
// names the file, the line, the layer kind and what is wrong, as in
// "lenet.net:7: conv: kernel must be ≥ 1, got 0".
var ErrSpec = errors.New("invalid network spec")

// ErrUnknownNet: a name is neither a built-in network nor a spec file.
var ErrUnknownNet = errors.New("unknown network")

// Kind is the type of a layer.
type Kind int

// The layer kinds of a spec, with their keyword in the spec format.
const (
	Conv      Kind = iota + 1 // conv: 2-D convolution, optionally grouped, with or without bias
	Pool                      // pool: max or average pooling, Caffe's ceil rounding, or global
	ReLU                      // relu: max(x, 0)
	LRN                       // lrn: local response normalisation within or across channels
	FC                        // fc: fully connected with bias (flattens C×H×W)
	Softmax                   // softmax: softmax cross-entropy loss, the last layer
	Dropout                   // dropout: inverted dropout in training, identity at test
	BatchNorm                 // batchnorm: PyTorch's BatchNorm2d (per feature after fc)
	Add                       // add: element-wise sum of two earlier outputs
)

var kindNames = map[Kind]string{Conv: "conv", Pool: "pool", ReLU: "relu", LRN: "lrn", FC: "fc", Softmax: "softmax",
	Dropout: "dropout", BatchNorm: "batchnorm", Add: "add"}

// String is the kind's keyword in the spec format.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// FillerType is a parameter initialisation, as Caffe's fillers.
type FillerType int

// The fillers. Xavier draws uniformly from ±sqrt(3/fan_in) (Caffe's
// default FAN_IN variance norm); Gaussian draws from N(0, Value²);
// Constant sets Value; Uniform draws uniformly from ±Value; MSRA draws
// from N(0, 2/fan_in) and MSRAFanOut from N(0, 2/fan_out) (He et al.;
// Caffe's msra filler, PyTorch's kaiming_normal_ for ReLU). fan_in is
// the inputs of one output: input channels of the group × kernel height
// × kernel width for a convolution, inputs for a fully connected layer;
// fan_out is output channels × kernel height × kernel width, or
// outputs.
const (
	Constant FillerType = iota
	Gaussian
	Xavier
	Uniform
	MSRA
	MSRAFanOut
)

// Filler is one parameter initialisation.
type Filler struct {
	Type  FillerType
	Value float32 // the constant, the Gaussian's standard deviation or the uniform bound
}

// String is the filler as written in the spec format.
func (f Filler) String() string {
	switch f.Type {
	case Gaussian:
		return "gaussian:" + formatFloat(f.Value)
	case Xavier:
		return "xavier"
	case Uniform:
		return "uniform:" + formatFloat(f.Value)
	case MSRA:
		return "msra"
	case MSRAFanOut:
		return "msra:fan_out"
	}
	return "constant:" + formatFloat(f.Value)
}

func formatFloat(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }

// LayerSpec is one layer of a Spec. Which fields apply depends on Kind;
// the others are zero.
type LayerSpec struct {
	Line int    // line of the spec file, for messages
	Kind Kind   // layer type
	Name string // unique within the net; names parameter segments
	// From names the layers whose outputs are this layer's inputs, as
	// written (from=A or, for add, from=A,B; "input" is the network's
	// input); empty: the layer written before it (the input for the
	// first).
	From []string

	Out                 int              // conv: output channels; fc: outputs
	Kernel, Stride, Pad int              // conv, pool: square window, stride, zero padding
	Group               int              // conv: groups (≥ 1), dividing the input and output channels
	Mode                kernels.PoolMode // pool: kernels.MaxPool or kernels.AvgPool
	Global              bool             // pool: the window is the whole input plane
	Floor               bool             // pool: PyTorch's floor rounding of the output size instead of Caffe's ceil

	Size           int               // lrn: window side or channels (odd)
	Alpha, Beta, K float32           // lrn: see Region
	Region         kernels.LRNRegion // lrn: kernels.WithinChannel or kernels.AcrossChannels

	Ratio float32 // dropout: the fraction of values dropped, in [0, 1)
	Eps   float32 // batchnorm: added to the variance

	// Weight and Bias are the fillers of conv and fc (weights, bias) and
	// batchnorm (scale, shift); NoBias: conv or fc without a bias.
	Weight, Bias              Filler
	NoBias                    bool
	LRMult, DecayMult         float32 // conv, fc, batchnorm: solver multipliers of the weights (scale)
	BiasLRMult, BiasDecayMult float32 // conv, fc, batchnorm: solver multipliers of the bias (shift)
}

// HasParams reports whether the layer has parameters (weights, a bias, a
// batch norm's scale and shift and running statistics).
func (l *LayerSpec) HasParams() bool { return l.Kind == Conv || l.Kind == FC || l.Kind == BatchNorm }

// BNMomentum is the weight of a batch's statistics in batch norm's
// running statistics (PyTorch's momentum): running = (1 − m)·running +
// m·batch. The solver folds them so (param.StateMomentum).
const BNMomentum = param.StateMomentum

// Shape is the C×H×W shape of one image's activations.
type Shape struct{ C, H, W int }

// Len is C·H·W.
func (s Shape) Len() int { return s.C * s.H * s.W }

// String writes the shape as C×H×W.
func (s Shape) String() string { return fmt.Sprintf("%d×%d×%d", s.C, s.H, s.W) }

// Spec is a parsed, validated network description: an input shape and
// layers ending with a softmax loss, each taking the output of an earlier
// layer (or two, for add) or the input, so a directed acyclic graph in
// the order written. Build a Net from it with New. A Spec is read-only
// once parsed.
type Spec struct {
	Name   string      // the network's name (built-in name or file base name)
	File   string      // where it was read from, for messages
	Input  Shape       // one input image
	Layers []LayerSpec // in order; the last is the Softmax loss
	inputs [][]int     // inputs[i]: the layers whose outputs layer i reads; −1 is the input
	outs   []Shape     // outs[i]: the output of layer i (of the loss: its input, the logits)
	segs   []param.Segment
}

// Inputs returns the indices in Layers of the layers whose outputs layer
// i reads, in order; −1 stands for the network's input. The caller must
// not modify the slice.
func (s *Spec) Inputs(i int) []int { return s.inputs[i] }

// Output returns the shape of one image's output of layer i (for the
// loss, its input: the logits).
func (s *Spec) Output(i int) Shape { return s.outs[i] }

// inShape is the shape of layer i's (first) input.
func (s *Spec) inShape(i int) Shape { return s.shapeOf(s.inputs[i][0]) }

// shapeOf is the output shape of layer j, or the input's for −1.
func (s *Spec) shapeOf(j int) Shape {
	if j < 0 {
		return s.Input
	}
	return s.outs[j]
}

// Classes is the number of outputs of the network (inputs to the loss).
func (s *Spec) Classes() int { return s.outs[len(s.Layers)-1].Len() }

// NumParams is the number of learnable parameters (weights, biases, batch
// norm's scales and shifts), the count frameworks report: 11,689,512
// for resnet18. The parameter vector is longer by NumState.
func (s *Spec) NumParams() int {
	n := 0
	for _, seg := range s.layout() {
		if seg.Kind == param.Learnable {
			n += seg.Len
		}
	}
	return n
}

// NumState is the number of state values of the parameter vector: batch
// norm's running means and variances (two per channel or feature).
func (s *Spec) NumState() int { return s.VectorLen() - s.NumParams() }

// VectorLen is the length of the parameter vector (and of the gradient
// vector): NumParams learnable values and NumState state values.
func (s *Spec) VectorLen() int {
	n := 0
	for _, seg := range s.layout() {
		n += seg.Len
	}
	return n
}

// HasBatchNorm reports whether the network has a batchnorm layer, whose
// training statistics span the whole batch: its Nets run each worker's
// share whole (Config.Part).
func (s *Spec) HasBatchNorm() bool {
	return slices.ContainsFunc(s.Layers, func(l LayerSpec) bool { return l.Kind == BatchNorm })
}

// needsGrad reports, per layer, whether the gradient of the loss with
// respect to its output is needed: it has parameters or reads, directly
// or not, the output of a layer with parameters.
func (s *Spec) needsGrad() []bool {
	need := make([]bool, len(s.Layers))
	for i := range s.Layers {
		need[i] = s.Layers[i].HasParams()
		for _, j := range s.inputs[i] {
			need[i] = need[i] || (j >= 0 && need[j])
		}
	}
	return need
}

// TrainFLOPs is the number of floating-point operations (a multiply-add
// counts two) of one image's training step in the convolution and fully
// connected layers: the forward pass, the weight gradients and the input
// gradients of every such layer whose input needs a gradient. Pooling,
// ReLU, LRN, batch norm, dropout, add, the loss and the biases are left
// out.
func (s *Spec) TrainFLOPs() int {
	flops, need := 0, s.needsGrad()
	for i := range s.Layers {
		l := &s.Layers[i]
		if l.Kind != Conv && l.Kind != FC {
			continue
		}
		out := s.outs[i]
		macs := s.weightLen(i) * out.H * out.W // every weight meets every output pixel once
		passes := 2
		if j := s.inputs[i][0]; j >= 0 && need[j] {
			passes = 3
		}
		flops += 2 * passes * macs
	}
	return flops
}

// workerFLOPsPerParam is the work, per parameter, that a network worker's
// share of a mini-batch must bring for a second worker to pay: each
// worker keeps a gradient vector of its own that the step sums, and reads
// every weight. `softsync bench train --threads 1` against `--threads 2`
// at several batches of LeNet and cifar10_full is how it is chosen.
const workerFLOPsPerParam = 240

// WorkerBatch is the smallest share of a mini-batch worth a network worker
// of its own (Config.Workers): 8 images for LeNet, whose weights are
// large for its work, 1 for cifar10_full.
func (s *Spec) WorkerBatch() int {
	f := s.TrainFLOPs()
	if f == 0 {
		return 1
	}
	return max(1, (workerFLOPsPerParam*s.NumParams()+f-1)/f)
}

// partCacheBytes is the cache the largest activation of a part of a
// worker's share (Config.Part) should fit: a core's L2 cache (1 MiB on
// the AMD EPYC hosts, 2 MiB on the Intel Xeon ones) less room for the
// weights and the layer's other operands. partFLOPsPerParam is the work
// per parameter a part must bring to pay for adding its parameter
// gradients into its worker's. `go test -bench TrainStepParts
// ./learner/nn` at several part sizes is how both are chosen.
const (
	partCacheBytes    = 768 << 10
	partFLOPsPerParam = 2000
)

// PartBatch is the default part size of Config.Part for a Net of the
// given number of workers: with one worker, or a network with batch norm,
// the whole share (0), as that core has the memory bandwidth to itself
// and the kernels run fastest on many images per call, and batch norm's
// statistics span the whole batch; with several, the most images whose
// largest activation fits partCacheBytes, but no fewer than bring
// partFLOPsPerParam. That is 6 images for cifar10_full, whose first
// convolution writes 128 KiB per image, and 66 for LeNet, whose weights
// are large for its work (so its shares are not cut).
func (s *Spec) PartBatch(workers int) int {
	f := s.TrainFLOPs()
	if workers <= 1 || f == 0 || s.HasBatchNorm() {
		return 0
	}
	largest := 0
	for _, sh := range s.outs {
		largest = max(largest, 4*sh.Len())
	}
	return max(1, partCacheBytes/largest, (partFLOPsPerParam*s.NumParams()+f-1)/f)
}

// weightLen is the length of layer i's weights (0 without any).
func (s *Spec) weightLen(i int) int {
	l := &s.Layers[i]
	in := s.inShape(i)
	switch l.Kind {
	case Conv:
		return l.Out * in.C / l.Group * l.Kernel * l.Kernel
	case FC:
		return l.Out * in.Len()
	case BatchNorm:
		return in.C
	}
	return 0
}

// fans returns fan_in and fan_out of layer i's weights (see FillerType).
func (s *Spec) fans(i int) (in, out int) {
	l := &s.Layers[i]
	w := s.weightLen(i)
	switch l.Kind {
	case Conv:
		return w / l.Out, w / (s.inShape(i).C / l.Group)
	case FC:
		return w / l.Out, l.Out
	}
	return 1, 1
}

// segment is one parameter segment of a layer with its filler.
type segment struct {
	param.Segment
	fill Filler
}

// segments lists layer i's parameter segments in order, offsets from 0:
// the weights, then the bias (conv, fc); the scale, shift, running mean
// and running variance (batchnorm).
func (s *Spec) segments(i int) []segment {
	l := &s.Layers[i]
	w := s.weightLen(i)
	seg := func(suffix string, n int, lr, decay float32, f Filler, kind param.Kind) segment {
		return segment{param.Segment{Name: l.Name + "." + suffix, Len: n, LRMult: lr, DecayMult: decay, Kind: kind}, f}
	}
	switch l.Kind {
	case Conv, FC:
		segs := []segment{seg("weight", w, l.LRMult, l.DecayMult, l.Weight, param.Learnable)}
		if !l.NoBias {
			segs = append(segs, seg("bias", l.Out, l.BiasLRMult, l.BiasDecayMult, l.Bias, param.Learnable))
		}
		return segs
	case BatchNorm:
		return []segment{
			seg("weight", w, l.LRMult, l.DecayMult, l.Weight, param.Learnable),
			seg("bias", w, l.BiasLRMult, l.BiasDecayMult, l.Bias, param.Learnable),
			seg("running_mean", w, 0, 0, Filler{Type: Constant}, param.State),
			seg("running_var", w, 0, 0, Filler{Type: Constant, Value: 1}, param.State),
		}
	}
	return nil
}

// Layout describes the parameter vector as ordered, contiguous segments
// (see Net): a copy.
func (s *Spec) Layout() []param.Segment { return slices.Clone(s.layout()) }

// Init fills params, a parameter vector (VectorLen values), with the
// spec's fillers, drawn from seed: segment k (in Layout order) uses its
// own stream seeded with (seed, k), so a layer's initial values do not
// depend on the layers before it. Batch norm's running means start at
// 0, its running variances at 1.
func (s *Spec) Init(params []float32, seed uint64) {
	if len(params) != s.VectorLen() {
		panic(fmt.Sprintf("nn.Spec.Init: %d values, the vector has %d", len(params), s.VectorLen()))
	}
	k := 0
	for i := range s.Layers {
		fanIn, fanOut := s.fans(i)
		for _, seg := range s.segments(i) {
			l := s.layout()[k]
			fill(params[l.Offset:l.Offset+l.Len], seg.fill, fanIn, fanOut, rand.New(rand.NewPCG(seed, uint64(k))))
			k++
		}
	}
}

// layout lists the segments of the parameter vector in order: the layers
// with parameters in the order written, each layer's segments as
// segments lists them. The caller must not modify it.
func (s *Spec) layout() []param.Segment {
	if s.segs == nil { // a Spec not made by Parse
		return s.makeLayout()
	}
	return s.segs
}

func (s *Spec) makeLayout() []param.Segment {
	var segs []param.Segment
	off := 0
	for i := range s.Layers {
		for _, seg := range s.segments(i) {
			seg.Offset = off
			off += seg.Len
			segs = append(segs, seg.Segment)
		}
	}
	return segs
}

//go:embed specs/*.net
var builtinFS embed.FS

// Builtins lists the names of the built-in networks.
func Builtins() []string {
	ents, _ := builtinFS.ReadDir("specs")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".net"))
	}
	return names
}

// Builtin returns the built-in network spec of that name (see Builtins):
// "alexnet", "cifar10_full", "lenet", "mlp" or "resnet18". Its text is
// BuiltinText(name).
func Builtin(name string) (*Spec, error) {
	src, err := BuiltinText(name)
	if err != nil {
		return nil, err
	}
	return Parse(name+".net", src)
}

// BuiltinText returns the spec text of a built-in network, a starting
// point for writing one's own.
func BuiltinText(name string) ([]byte, error) {
	src, err := builtinFS.ReadFile("specs/" + name + ".net")
	if err != nil {
		return nil, fmt.Errorf("%w %q: built-in networks are %s", ErrUnknownNet, name, strings.Join(Builtins(), ", "))
	}
	return src, nil
}

// Load returns the built-in network called nameOrPath, or else parses the
// spec file at that path.
func Load(nameOrPath string) (*Spec, error) {
	if slices.Contains(Builtins(), nameOrPath) {
		return Builtin(nameOrPath)
	}
	src, err := os.ReadFile(nameOrPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w %q: not a built-in network (%s) nor a readable spec file: %w",
				ErrUnknownNet, nameOrPath, strings.Join(Builtins(), ", "), err)
		}
		return nil, err
	}
	return Parse(nameOrPath, src)
}

func convShape(l *LayerSpec, in Shape, n int) kernels.ConvShape {
	return kernels.ConvShape{N: n, C: in.C, H: in.H, W: in.W, OC: l.Out, KH: l.Kernel, KW: l.Kernel,
		PadH: l.Pad, PadW: l.Pad, StrideH: l.Stride, StrideW: l.Stride, Group: l.Group}
}

// layerConvShape is the kernel's shape of convolution layer l as a Net
// runs it: on n images of in, channel-major (CNHW).
func layerConvShape(l *LayerSpec, in Shape, n int) kernels.ConvShape {
	s := convShape(l, in, n)
	s.Layout = kernels.CNHW
	return s
}

// lrnShape is the kernel's shape of LRN layer l over n images of in,
// channel-major when cnhw (see kernels.LRNShape).
func lrnShape(l *LayerSpec, in Shape, cnhw bool, n int) kernels.LRNShape {
	s := kernels.LRNShape{N: n, C: in.C, H: in.H, W: in.W, Size: l.Size, Alpha: l.Alpha, Beta: l.Beta, K: l.K, Region: l.Region}
	switch {
	case cnhw && l.Region == kernels.AcrossChannels:
		s.N, s.H = 1, n*in.H
	case cnhw:
		s.N, s.C = in.C, n
	}
	return s
}

// poolShape is the kernel's shape of pooling layer l: with Caffe's ceil
// rounding, which may give one row or column more than l's output with
// floor rounding (poolOut).
func poolShape(l *LayerSpec, in Shape, n int) kernels.PoolShape {
	if l.Global {
		return kernels.PoolShape{Mode: l.Mode, N: n, C: in.C, H: in.H, W: in.W, KH: in.H, KW: in.W, StrideH: 1, StrideW: 1}
	}
	return kernels.PoolShape{Mode: l.Mode, N: n, C: in.C, H: in.H, W: in.W, KH: l.Kernel, KW: l.Kernel,
		PadH: l.Pad, PadW: l.Pad, StrideH: l.Stride, StrideW: l.Stride}
}

// poolOut is the output height and width of pooling layer l on input in:
// the kernel's, or with floor rounding ⌊(H + 2·pad − kernel)/stride⌋ + 1.
func poolOut(l *LayerSpec, in Shape) (h, w int) {
	s := poolShape(l, in, 1)
	if !l.Floor || l.Global {
		return s.OutH(), s.OutW()
	}
	return (in.H+2*l.Pad-l.Kernel)/l.Stride + 1, (in.W+2*l.Pad-l.Kernel)/l.Stride + 1
}

// Format writes the spec back in the spec format, every key explicit.
// Parse(Format(s)) gives a spec equal to s.
func (s *Spec) Format() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "input channels=%d height=%d width=%d\n", s.Input.C, s.Input.H, s.Input.W)
	for i := range s.Layers {
		l := &s.Layers[i]
		fmt.Fprintf(&b, "%s %s", l.Kind, l.Name)
		if len(l.From) > 0 {
			fmt.Fprintf(&b, " from=%s", strings.Join(l.From, ","))
		}
		switch l.Kind {
		case Conv:
			fmt.Fprintf(&b, " out=%d kernel=%d stride=%d pad=%d group=%d", l.Out, l.Kernel, l.Stride, l.Pad, l.Group)
		case FC:
			fmt.Fprintf(&b, " out=%d", l.Out)
		case Pool:
			mode := "max"
			if l.Mode == kernels.AvgPool {
				mode = "avg"
			}
			round := "ceil"
			if l.Floor {
				round = "floor"
			}
			if l.Global {
				fmt.Fprintf(&b, " mode=%s global=true", mode)
			} else {
				fmt.Fprintf(&b, " mode=%s kernel=%d stride=%d pad=%d round=%s", mode, l.Kernel, l.Stride, l.Pad, round)
			}
		case LRN:
			region := "within_channel"
			if l.Region == kernels.AcrossChannels {
				region = "across_channels"
			}
			fmt.Fprintf(&b, " size=%d alpha=%s beta=%s k=%s region=%s",
				l.Size, formatFloat(l.Alpha), formatFloat(l.Beta), formatFloat(l.K), region)
		case Dropout:
			fmt.Fprintf(&b, " ratio=%s", formatFloat(l.Ratio))
		case BatchNorm:
			fmt.Fprintf(&b, " eps=%s", formatFloat(l.Eps))
		}
		if l.HasParams() {
			bias := l.Bias.String()
			if l.NoBias {
				bias = "none"
			}
			fmt.Fprintf(&b, " weight=%s bias=%s lr_mult=%s decay_mult=%s", l.Weight, bias, formatFloat(l.LRMult), formatFloat(l.DecayMult))
			if !l.NoBias {
				fmt.Fprintf(&b, " bias_lr_mult=%s bias_decay_mult=%s", formatFloat(l.BiasLRMult), formatFloat(l.BiasDecayMult))
			}
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}
