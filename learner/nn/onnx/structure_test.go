package onnx

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/softsync/softsync/learner/data"
	pb "github.com/softsync/softsync/learner/nn/onnx/internal/onnxpb"
)

// exported exports c and parses the bytes back.
func exported(t *testing.T, c exportCase) *pb.ModelProto {
	t.Helper()
	var buf bytes.Buffer
	if err := Export(&buf, c.spec, c.params, c.z); err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	var m pb.ModelProto
	if err := proto.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	return &m
}

func findCase(t *testing.T, name string) exportCase {
	for _, c := range exportCases(t) {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no case %s", name)
	return exportCase{}
}

// dims returns a value's dimensions, "batch" for the symbolic one.
func dims(v *pb.ValueInfoProto) []any {
	var d []any
	for _, x := range v.GetType().GetTensorType().GetShape().GetDim() {
		if p := x.GetDimParam(); p != "" {
			d = append(d, p)
		} else {
			d = append(d, int(x.GetDimValue()))
		}
	}
	return d
}

func attr(n *pb.NodeProto, name string) *pb.AttributeProto {
	for _, a := range n.Attribute {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

// checkModel checks what every export must be: the versions, the inputs
// and outputs, a graph in topological order over known operators, every
// parameter segment as an initialiser of its values, the metadata.
func checkModel(t *testing.T, c exportCase, m *pb.ModelProto) {
	t.Helper()
	if m.GetIrVersion() != IRVersion || len(m.OpsetImport) != 1 || m.OpsetImport[0].GetDomain() != "" ||
		m.OpsetImport[0].GetVersion() != Opset || m.GetProducerName() != "softsync" {
		t.Errorf("%s: IR %d, opsets %v, producer %q", c.name, m.GetIrVersion(), m.OpsetImport, m.GetProducerName())
	}
	g := m.Graph
	in, k := c.spec.Input, c.spec.Classes()
	if len(g.Input) != 1 || g.Input[0].GetName() != Pixels || !slices.Equal(dims(g.Input[0]), []any{"batch", in.C, in.H, in.W}) {
		t.Errorf("%s: inputs %v", c.name, g.Input)
	}
	if len(g.Output) != 2 || g.Output[0].GetName() != Logits || g.Output[1].GetName() != Probabilities ||
		!slices.Equal(dims(g.Output[0]), []any{"batch", k}) || !slices.Equal(dims(g.Output[1]), []any{"batch", k}) {
		t.Errorf("%s: outputs %v", c.name, g.Output)
	}
	// Every node reads defined values; every value is written once.
	defined := map[string]bool{Pixels: true}
	for _, i := range g.Initializer {
		if defined[i.GetName()] {
			t.Errorf("%s: initializer %s twice", c.name, i.GetName())
		}
		defined[i.GetName()] = true
	}
	known := []string{"Conv", "MaxPool", "AveragePool", "Pad", "GlobalMaxPool", "GlobalAveragePool", "Relu", "LRN",
		"Mul", "Add", "Sub", "Pow", "Gemm", "Flatten", "Unsqueeze", "BatchNormalization", "Softmax"}
	for _, n := range g.Node {
		if !slices.Contains(known, n.GetOpType()) || n.GetDomain() != "" {
			t.Errorf("%s: node %s: operator %s.%s", c.name, n.GetName(), n.GetDomain(), n.GetOpType())
		}
		for _, x := range n.Input {
			if !defined[x] {
				t.Errorf("%s: node %s reads %s before it is written", c.name, n.GetName(), x)
			}
		}
		for _, y := range n.Output {
			if defined[y] {
				t.Errorf("%s: node %s writes %s again", c.name, n.GetName(), y)
			}
			defined[y] = true
		}
		if a := attr(n, "ceil_mode"); a != nil && a.GetI() != 0 {
			t.Errorf("%s: node %s: ceil_mode %d", c.name, n.GetName(), a.GetI())
		}
	}
	for _, o := range g.Output {
		if !defined[o.GetName()] {
			t.Errorf("%s: output %s is never written", c.name, o.GetName())
		}
	}
	// Each segment is an initialiser of its name holding its values.
	inits := map[string]*pb.TensorProto{}
	for _, i := range g.Initializer {
		inits[i.GetName()] = i
	}
	total := 0
	for _, s := range c.spec.Layout() {
		i := inits[s.Name]
		if i == nil {
			t.Errorf("%s: no initializer %s", c.name, s.Name)
			continue
		}
		n := 1
		for _, d := range i.Dims {
			n *= int(d)
		}
		if n != s.Len || i.GetDataType() != int32(pb.TensorProto_FLOAT) || !bytes.Equal(i.RawData, f32bytes(c.params[s.Offset:s.Offset+s.Len])) {
			t.Errorf("%s: initializer %s: dims %v, type %d, %d bytes; segment of %d values", c.name, s.Name, i.Dims, i.GetDataType(), len(i.RawData), s.Len)
		}
		total += n
	}
	if total != c.spec.VectorLen() {
		t.Errorf("%s: segments' initializers hold %d values, the vector %d", c.name, total, c.spec.VectorLen())
	}
	if s := inits[inputScale]; s == nil || len(s.Dims) != 0 || !bytes.Equal(s.RawData, f32bytes([]float32{c.z.Scale})) {
		t.Errorf("%s: input_scale %v", c.name, s)
	}
	meta := map[string]string{}
	for _, p := range m.MetadataProps {
		meta[p.GetKey()] = p.GetValue()
	}
	if meta["softsync.network"] != c.spec.Name || meta["softsync.spec"] != string(c.spec.Format()) ||
		meta["softsync.input_scale"] != formatFloat(c.z.Scale) || !strings.Contains(meta["softsync.input"], "0-255") {
		t.Errorf("%s: metadata %q", c.name, meta)
	}
	if doc := m.GetDocString(); !strings.Contains(doc, "extract_model") || !strings.Contains(doc, Pixels) {
		t.Errorf("%s: doc string %q", c.name, doc)
	}
}

// TestExportStructure checks the graph of every case, and how each layer
// of every.net and pools.net and the normalisers are written.
func TestExportStructure(t *testing.T) {
	models := map[string]*pb.ModelProto{}
	for _, c := range exportCases(t) {
		m := exported(t, c)
		checkModel(t, c, m)
		models[c.name] = m
	}
	nodes := func(name string) map[string]*pb.NodeProto {
		out := map[string]*pb.NodeProto{}
		for _, n := range models[name].Graph.Node {
			out[n.GetName()] = n
		}
		return out
	}
	// every.net: each layer's node (by its name) and what it reads.
	ev := nodes("every")
	for layer, op := range map[string]string{"c0": "Conv", "n0": "Mul", "r0": "Relu", "p0": "MaxPool", "c1": "Conv",
		"b0": "BatchNormalization", "n1": "LRN", "p1": "AveragePool", "f0": "Gemm", "b1": "BatchNormalization",
		"c2": "Conv", "g0": "GlobalMaxPool", "s0": "Add", "f1": "Gemm", "s1": "Add", "c3": "Conv", "g1": "GlobalAveragePool",
		"logits": "Flatten", "probabilities": "Softmax", "input": "Mul"} {
		if n := ev[layer]; n == nil || n.GetOpType() != op {
			t.Errorf("every: node %s: %v, want %s", layer, n, op)
		}
	}
	for _, d := range []string{"d0", "d1"} {
		if ev[d] != nil {
			t.Errorf("every: dropout %s has a node", d)
		}
	}
	wantInputs := map[string][]string{
		"c1":    {"p0", "c1.weight"}, // bias=none
		"f0":    {"p1.flat", "f0.weight"},
		"p1":    {"p1.padded"},
		"c2":    {"r2.4d", "c2.weight", "c2.bias"}, // reads d1, dropout: r2
		"f1":    {"r2", "f1.weight", "f1.bias"},
		"s1":    {"s0", "f1.4d"},
		"b1":    {"f0", "b1.weight", "b1.bias", "b1.running_mean", "b1.running_var"},
		"n0":    {"c0", "n0.scale_pow"},
		"n1":    {"b0"},
		"g0":    {"r1"},
		"c0":    {"input", "c0.weight", "c0.bias"},
		"input": {"pixels", "input_scale"},
	}
	for name, want := range wantInputs {
		if n := ev[name]; n == nil || !slices.Equal(n.Input, want) {
			t.Errorf("every: node %s reads %v, want %v", name, n.GetInput(), want)
		}
	}
	if a := attr(ev["c0"], "group"); a.GetI() != 3 {
		t.Errorf("every: c0's group %d", a.GetI())
	}
	// Pooling: pads [top, left, bottom, right], count_include_pad.
	po := nodes("pools")
	for name, want := range map[string]struct {
		op   string
		pads []int64
		cip  int64 // AveragePool's count_include_pad
	}{
		"a0": {"MaxPool", []int64{1, 1, 1, 1}, 0},     // a last window starting in the padding, dropped
		"a1": {"AveragePool", []int64{1, 1, 1, 1}, 1}, // the same, averaged: windows inside the padded input
		"a2": {"AveragePool", []int64{0, 0, 1, 1}, 0}, // after Pad: windows past the padded input
		"a3": {"MaxPool", []int64{2, 2, 3, 2}, 0},     // past the padded input in height only
		"a4": {"AveragePool", []int64{1, 1, 1, 1}, 1}, // floor
		"a5": {"MaxPool", []int64{0, 0, 0, 0}, 0},     // floor
		"a6": {"AveragePool", []int64{0, 0, 0, 0}, 1},
		"a7": {"AveragePool", []int64{0, 0, 1, 1}, 0}, // past the input, no padding: no Pad
	} {
		n := po[name]
		if n == nil || n.GetOpType() != want.op || !slices.Equal(attr(n, "pads").GetInts(), want.pads) ||
			(want.op == "AveragePool" && attr(n, "count_include_pad").GetI() != want.cip) {
			t.Errorf("pools: %s is %v, want %s pads %v count_include_pad %d", name, n, want.op, want.pads, want.cip)
		}
	}
	if n := po["a2.padded"]; n == nil || n.GetOpType() != "Pad" || !slices.Equal(n.Input, []string{"input", "a2.pads"}) || po["a7.padded"] != nil {
		t.Errorf("pools: a2's Pad %v, a7's %v", n, po["a7.padded"])
	}
	// The normalisers: a per-pixel mean image, per-channel means, none.
	for name, want := range map[string][]int64{"pools": {1, 2, 11, 9}, "alexnet": {1, 3, 1, 1}, "every": nil} {
		var mean *pb.TensorProto
		for _, i := range models[name].Graph.Initializer {
			if i.GetName() == inputMean {
				mean = i
			}
		}
		if !slices.Equal(mean.GetDims(), want) || (want == nil) != (nodes(name)[Input].GetOpType() == "Mul") {
			t.Errorf("%s: input_mean %v, want dims %v", name, mean.GetDims(), want)
		}
	}
}

// TestExportBuiltins checks the full-size resnet18 and lenet: operator
// counts and initialisers.
func TestExportBuiltins(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  map[string]int
	}{
		{"resnet18", map[string]int{"Conv": 20, "BatchNormalization": 20, "Relu": 17, "Add": 8, "MaxPool": 1,
			"GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1, "Softmax": 1, "Mul": 1, "Sub": 1}},
		{"lenet", map[string]int{"Conv": 2, "MaxPool": 2, "Flatten": 1, "Gemm": 2, "Relu": 1, "Softmax": 1, "Mul": 1, "Sub": 1}},
	} {
		spec := loadSpec(t, tc.name)
		params := make([]float32, spec.VectorLen()) // distinct values, cheaper than Init
		for i := range params {
			params[i] = float32(i)
		}
		c := exportCase{tc.name, spec, params, normaliser(spec, 1.0/255, "channel", 7)}
		m := exported(t, c)
		checkModel(t, c, m)
		ops := map[string]int{}
		for _, n := range m.Graph.Node {
			ops[n.GetOpType()]++
		}
		if !maps.Equal(ops, tc.ops) {
			t.Errorf("%s: operators %v, want %v", tc.name, ops, tc.ops)
		}
		if len(m.Graph.Initializer) != len(spec.Layout())+2 {
			t.Errorf("%s: %d initializers, want the %d segments, input_scale and input_mean", tc.name, len(m.Graph.Initializer), len(spec.Layout()))
		}
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

// TestExportErrors: parameters or a mean of the wrong length, a pooling
// ONNX cannot express, a writer's error.
func TestExportErrors(t *testing.T) {
	spec := loadSpec(t, "lenet")
	params := seededParams(spec, 1)
	var buf bytes.Buffer
	err := Export(&buf, spec, params[:len(params)-1], data.Normalizer{Scale: 1})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "lenet") || buf.Len() != 0 {
		t.Errorf("short vector: %v, %d bytes written", err, buf.Len())
	}
	err = Export(&buf, spec, params, data.Normalizer{Scale: 1, Mean: make([]float32, 10)})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "1×28×28") {
		t.Errorf("mean of 10 values: %v", err)
	}
	disk := errors.New("disk full")
	if err := Export(failWriter{disk}, spec, params, data.Normalizer{Scale: 1}); !errors.Is(err, disk) {
		t.Errorf("failing writer: %v", err)
	}
}
