package onnx

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	pb "github.com/softsync/softsync/learner/nn/onnx/internal/onnxpb"
	"github.com/softsync/softsync/ps/param"
)

// The versions Export writes: ONNX's default operator set at version 13
// and IR version 7, the IR that opset 13 came with (ONNX 1.8), which
// every runtime of the last years reads.
const (
	Opset     = 13
	IRVersion = 7
)

// The names of the graph's inputs and outputs, and of the normalised input
// inside it.
const (
	// Pixels is the graph's input: float32 [batch, C, H, W], the values
	// the training data gave before normalisation (bytes, 0–255).
	Pixels = "pixels"
	// Input is the normalised input, Scale·pixels − Mean, the tensor the
	// spec's first layer (and from=input) reads.
	Input = "input"
	// Logits is the output [batch, classes]: the loss layer's input.
	Logits = "logits"
	// Probabilities is the output [batch, classes]: softmax of Logits.
	Probabilities = "probabilities"
)

// batchDim names the symbolic first dimension of the inputs and outputs;
// inputScale and inputMean the normalisation's initialisers, pixelsScaled
// the value between its two nodes.
const (
	batchDim     = "batch"
	inputScale   = "input_scale"
	inputMean    = "input_mean"
	pixelsScaled = "pixels_scaled"
)

// ErrMismatch: the parameter vector or the normaliser's mean does not fit
// the network.
var ErrMismatch = errors.New("parameters do not fit the network")

// ErrUnsupported: the network has a layer ONNX cannot express exactly.
var ErrUnsupported = errors.New("not expressible in ONNX")

// Export writes spec's network with the parameter vector params
// (spec.VectorLen() values in the network's layout, batch norm's running
// statistics included) and the input normalisation z as an ONNX model
// (protobuf, opset Opset) to w. The graph takes raw pixels (Pixels),
// normalises them as z does (Input), runs the network at test (batch
// norm's running statistics, no dropout) and gives Logits and
// Probabilities. The model's doc_string and metadata_props (keys
// "softsync.*") say so; package doc has the mapping of every layer.
func Export(w io.Writer, spec *nn.Spec, params []float32, z data.Normalizer) error {
	m, err := build(spec, params, z)
	if err != nil {
		return err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("%s: %w", spec.Name, err)
	}
	_, err = w.Write(b)
	return err
}

// value is a tensor of the graph and its rank: 4 for [N, C, H, W], 2 for
// [N, F] (the output of a fully connected layer, F×1×1 to the spec).
type value struct {
	name string
	rank int
}

// builder accumulates the graph.
type builder struct {
	spec   *nn.Spec
	params []float32
	segs   map[string]param.Segment // by name
	g      *pb.GraphProto
	used   map[string]bool  // names of values and initialisers
	as4d   map[string]value // rank-4 views of rank-2 values, made once
}

// fresh returns name, or name_2, name_3…, whichever is not used yet, and
// marks it used.
func (b *builder) fresh(name string) string {
	n := name
	for k := 2; b.used[n]; k++ {
		n = name + "_" + strconv.Itoa(k)
	}
	b.used[n] = true
	return n
}

// node appends a node of type op reading inputs and writing out; the node
// is named as its output.
func (b *builder) node(op string, inputs []string, out string, attrs ...*pb.AttributeProto) {
	b.g.Node = append(b.g.Node, &pb.NodeProto{Name: proto.String(out), OpType: proto.String(op),
		Input: inputs, Output: []string{out}, Attribute: attrs})
}

// constant adds a float32 initialiser of the given dimensions (none: a
// scalar) under a fresh name and returns the name.
func (b *builder) constant(name string, v []float32, dims ...int) string {
	return b.tensor(b.fresh(name), v, dims...)
}

// tensor adds a float32 initialiser under name, which the caller made
// unique, and returns the name.
func (b *builder) tensor(name string, v []float32, dims ...int) string {
	b.g.Initializer = append(b.g.Initializer, floatTensor(name, dims, v))
	return name
}

// segment adds the parameter segment called name as an initialiser of the
// given dimensions and returns its name.
func (b *builder) segment(name string, dims ...int) string {
	s := b.segs[name]
	return b.constant(name, b.params[s.Offset:s.Offset+s.Len], dims...)
}

// to4d returns v as [N, C, H, W]: a rank-2 value [N, F] becomes
// [N, F, 1, 1] (Unsqueeze).
func (b *builder) to4d(v value) value {
	if v.rank == 4 {
		return v
	}
	if u, ok := b.as4d[v.name]; ok {
		return u
	}
	axes := b.fresh(v.name + ".axes")
	b.g.Initializer = append(b.g.Initializer, int64Tensor(axes, []int{2, 3}))
	u := value{b.fresh(v.name + ".4d"), 4}
	b.node("Unsqueeze", []string{v.name, axes}, u.name)
	b.as4d[v.name] = u
	return u
}

// to2d returns v as [N, C·H·W] (Flatten, C, H, W order).
func (b *builder) to2d(v value) value {
	if v.rank == 2 {
		return v
	}
	u := value{b.fresh(v.name + ".flat"), 2}
	b.node("Flatten", []string{v.name}, u.name, attrInt("axis", 1))
	return u
}

func build(spec *nn.Spec, params []float32, z data.Normalizer) (*pb.ModelProto, error) {
	if len(params) != spec.VectorLen() {
		return nil, fmt.Errorf("%s: %w: %d values, the network has %d (%d parameters, %d running statistics)",
			spec.Name, ErrMismatch, len(params), spec.VectorLen(), spec.NumParams(), spec.NumState())
	}
	if z.Mean != nil && len(z.Mean) != spec.Input.Len() {
		return nil, fmt.Errorf("%s: %w: a mean of %d values, the input %s has %d",
			spec.Name, ErrMismatch, len(z.Mean), spec.Input, spec.Input.Len())
	}
	b := &builder{spec: spec, params: params, segs: map[string]param.Segment{}, used: map[string]bool{},
		as4d: map[string]value{}, g: &pb.GraphProto{Name: proto.String(spec.Name)}}
	for _, s := range spec.Layout() {
		b.segs[s.Name] = s
	}
	for _, n := range []string{Pixels, Input, Logits, Probabilities, inputScale, inputMean, pixelsScaled} {
		b.used[n] = true
	}
	// Every layer's output is named after the layer; the names are taken
	// first, so that helpers never take a later layer's.
	names := make([]string, len(spec.Layers))
	for i, l := range spec.Layers {
		names[i] = b.fresh(l.Name)
	}
	in := spec.Input
	b.g.Input = []*pb.ValueInfoProto{floatValue(Pixels, in.C, in.H, in.W)}
	b.normalise(z)

	outs := make([]value, len(spec.Layers))
	get := func(j int) value {
		if j < 0 {
			return value{Input, 4}
		}
		return outs[j]
	}
	last := len(spec.Layers) - 1
	for i := range last {
		var ins []value
		for _, j := range spec.Inputs(i) {
			ins = append(ins, get(j))
		}
		v, err := b.layer(i, names[i], ins)
		if err != nil {
			return nil, err
		}
		outs[i] = v
	}
	logits := b.to2d(get(spec.Inputs(last)[0]))
	b.rename(logits.name, Logits)
	b.node("Softmax", []string{Logits}, Probabilities, attrInt("axis", 1))
	k := spec.Classes()
	b.g.Output = []*pb.ValueInfoProto{floatValue(Logits, k), floatValue(Probabilities, k)}
	return &pb.ModelProto{
		IrVersion:     proto.Int64(IRVersion),
		OpsetImport:   []*pb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(Opset)}},
		ProducerName:  proto.String("softsync"),
		DocString:     proto.String(Describe(spec, z)),
		Graph:         b.g,
		MetadataProps: metadata(spec, z),
	}, nil
}

// rename gives the value called from the name to, which must be unused
// but for a reservation: its producer's output, its readers' inputs. A
// value no node writes (the graph's input) is copied instead.
func (b *builder) rename(from, to string) {
	produced := false
	for _, n := range b.g.Node {
		for i := range n.Output {
			if n.Output[i] == from {
				n.Output[i], n.Name, produced = to, proto.String(to), true
			}
		}
		for i := range n.Input {
			if n.Input[i] == from {
				n.Input[i] = to
			}
		}
	}
	if !produced {
		b.node("Identity", []string{from}, to)
	}
}

// meanKind is how the normaliser's mean reaches the graph.
type meanKind int

const (
	noMean      meanKind = iota // no subtraction
	channelMean                 // one value per channel, [1, C, 1, 1]
	pixelMean                   // a mean image, [1, C, H, W]
)

// normalise writes Input = Scale·Pixels − Mean: a Mul by the scalar
// input_scale, then a Sub of input_mean, per channel when the mean image
// is constant over each plane, else the image.
func (b *builder) normalise(z data.Normalizer) {
	in := b.spec.Input
	b.tensor(inputScale, []float32{z.Scale})
	switch meanKindOf(z, in) {
	case noMean:
		b.node("Mul", []string{Pixels, inputScale}, Input)
		return
	case channelMean:
		b.tensor(inputMean, channelMeans(z.Mean, in), 1, in.C, 1, 1)
	case pixelMean:
		b.tensor(inputMean, z.Mean, 1, in.C, in.H, in.W)
	}
	b.node("Mul", []string{Pixels, inputScale}, pixelsScaled)
	b.node("Sub", []string{pixelsScaled, inputMean}, Input)
}

func meanKindOf(z data.Normalizer, in nn.Shape) meanKind {
	switch {
	case z.Mean == nil:
		return noMean
	case channelMeans(z.Mean, in) != nil:
		return channelMean
	}
	return pixelMean
}

// channelMeans returns the mean's value per channel when every plane of
// the mean image is constant, else nil.
func channelMeans(mean []float32, in nn.Shape) []float32 {
	plane := in.H * in.W
	c := make([]float32, in.C)
	for ch := range in.C {
		c[ch] = mean[ch*plane]
		for _, v := range mean[ch*plane : (ch+1)*plane] {
			if v != c[ch] {
				return nil
			}
		}
	}
	return c
}

func formatFloat(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }

// meanText describes the mean for the doc string and the metadata:
// "none", "per-channel 123.7,116.8,103.9 (1×3×1×1)" or "per-pixel image
// (1×1×28×28)".
func meanText(z data.Normalizer, in nn.Shape) string {
	switch meanKindOf(z, in) {
	case channelMean:
		var s []string
		for _, v := range channelMeans(z.Mean, in) {
			s = append(s, formatFloat(v))
		}
		return fmt.Sprintf("per-channel %s (1×%d×1×1)", strings.Join(s, ","), in.C)
	case pixelMean:
		return fmt.Sprintf("per-pixel image (1×%d×%d×%d)", in.C, in.H, in.W)
	}
	return "none"
}

// Describe is the doc_string of the model Export writes for spec and z:
// the network, its input (what values, how the graph normalises them,
// how to cut the graph to feed normalised tensors) and its outputs.
func Describe(spec *nn.Spec, z data.Normalizer) string {
	in := spec.Input
	norm := fmt.Sprintf("%s = %s·%s − %s, with %s = %s and %s %s", Input, inputScale, Pixels, inputMean,
		inputScale, formatFloat(z.Scale), inputMean, meanText(z, in))
	if z.Mean == nil {
		norm = fmt.Sprintf("%s = %s·%s, with %s = %s (no mean)", Input, inputScale, Pixels, inputScale, formatFloat(z.Scale))
	}
	return fmt.Sprintf(`softsync network %s: %d parameters and %d batch-norm running statistics, at test (batch norm uses its running statistics; dropout is left out).
Input %q: float32 [batch, %d, %d, %d], the image's values before normalisation, as the training data holds them (bytes 0-255; image folders: the resized and cropped image, planes R, G, B).
The graph normalises them first: %s. To feed normalised tensors instead, cut the graph at %q: onnx.utils.extract_model(path, out, [%q], [%q, %q]).
Outputs %q: float32 [batch, %d], the input of softsync's softmax loss; %q: their softmax.`,
		spec.Name, spec.NumParams(), spec.NumState(), Pixels, in.C, in.H, in.W,
		norm, Input, Input, Logits, Probabilities, Logits, spec.Classes(), Probabilities)
}

// metadata lists the model's metadata_props: what a serving program
// reads to prepare inputs and name outputs.
func metadata(spec *nn.Spec, z data.Normalizer) []*pb.StringStringEntryProto {
	in := spec.Input
	kv := [][2]string{
		{"softsync.network", spec.Name},
		{"softsync.spec", string(spec.Format())},
		{"softsync.input", fmt.Sprintf("%s: float32 [batch, %d, %d, %d], values 0-255 before normalisation", Pixels, in.C, in.H, in.W)},
		{"softsync.normalized_input", fmt.Sprintf("%s = %s·%s − %s", Input, inputScale, Pixels, inputMean)},
		{"softsync.input_scale", formatFloat(z.Scale)},
		{"softsync.input_mean", meanText(z, in)},
		{"softsync.outputs", fmt.Sprintf("%s, %s: float32 [batch, %d]", Logits, Probabilities, spec.Classes())},
	}
	out := make([]*pb.StringStringEntryProto, len(kv))
	for i, e := range kv {
		out[i] = &pb.StringStringEntryProto{Key: proto.String(e[0]), Value: proto.String(e[1])}
	}
	return out
}
