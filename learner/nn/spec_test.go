package nn

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/softsync/softsync/kernels"
)

func TestBuiltins(t *testing.T) {
	for _, c := range []struct {
		name          string
		params, state int
		classes       int
		input         Shape
		layers        int
	}{
		// Counts published with the networks (Caffe, the paper,
		// torchvision); resnet18's state is two running statistics per
		// channel of its 20 batch norms: 2·(64 + 4·64 + 5·128 + 5·256 +
		// 5·512).
		{"lenet", 431080, 0, 10, Shape{1, 28, 28}, 8},
		{"cifar10_full", 89578, 0, 10, Shape{3, 32, 32}, 13},
		{"mlp", 784*64 + 64 + 64*10 + 10, 0, 10, Shape{1, 28, 28}, 4},
		{"alexnet", 60965224, 0, 1000, Shape{3, 227, 227}, 23},
		{"resnet18", 11689512, 9600, 1000, Shape{3, 224, 224}, 69},
	} {
		s, err := Builtin(c.name)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := s.NumParams(); got != c.params || s.NumState() != c.state || s.VectorLen() != c.params+c.state {
			t.Errorf("%s: %d parameters and %d state values in a vector of %d, want %d and %d", c.name, got, s.NumState(), s.VectorLen(), c.params, c.state)
		}
		if s.Classes() != c.classes || s.Input != c.input || len(s.Layers) != c.layers {
			t.Errorf("%s: classes %d input %v layers %d", c.name, s.Classes(), s.Input, len(s.Layers))
		}
		if s.Name != c.name {
			t.Errorf("name %q, want %q", s.Name, c.name)
		}
		// Format writes a spec that parses back to the same one.
		again, err := Parse(c.name+".net", s.Format())
		if err != nil {
			t.Fatalf("%s: reparse: %v\n%s", c.name, err, s.Format())
		}
		if !reflect.DeepEqual(stripLines(again), stripLines(s)) {
			t.Errorf("%s: Format/Parse round trip differs:\n%s", c.name, s.Format())
		}
	}
	if _, err := Builtin("vgg16"); !errors.Is(err, ErrUnknownNet) {
		t.Fatalf("unknown built-in: %v", err)
	}
}

func stripLines(s *Spec) *Spec {
	c := *s
	c.Layers = append([]LayerSpec(nil), s.Layers...)
	for i := range c.Layers {
		c.Layers[i].Line = 0
	}
	return &c
}

// The cifar10_full spec against the paper's description and Caffe's
// prototxt: shapes after each layer, LRN and pooling parameters, fillers.
func TestCifar10FullSpec(t *testing.T) {
	s, _ := Builtin("cifar10_full")
	want := []Shape{{32, 32, 32}, {32, 16, 16}, {32, 16, 16}, {32, 16, 16}, {32, 16, 16},
		{32, 16, 16}, {32, 8, 8}, {32, 8, 8}, {64, 8, 8}, {64, 8, 8}, {64, 4, 4}, {10, 1, 1}, {10, 1, 1}}
	if !reflect.DeepEqual(s.outs, want) {
		t.Fatalf("shapes %v\nwant   %v", s.outs, want)
	}
	kinds := []Kind{Conv, Pool, ReLU, LRN, Conv, ReLU, Pool, LRN, Conv, ReLU, Pool, FC, Softmax}
	for i, l := range s.Layers {
		if l.Kind != kinds[i] {
			t.Fatalf("layer %d is %v, want %v", i, l.Kind, kinds[i])
		}
	}
	l := s.Layers
	if l[1].Mode != kernels.MaxPool || l[6].Mode != kernels.AvgPool || l[10].Mode != kernels.AvgPool {
		t.Error("pooling modes are not max, avg, avg")
	}
	if l[3].Size != 3 || l[3].Alpha != 5e-5 || l[3].Beta != 0.75 || l[3].K != 1 {
		t.Errorf("norm1 %+v", l[3])
	}
	if l[0].Weight != (Filler{Gaussian, 1e-4}) || l[4].Weight != (Filler{Gaussian, 0.01}) ||
		l[8].Weight != (Filler{Gaussian, 0.01}) || l[11].Weight != (Filler{Gaussian, 0.01}) {
		t.Error("weight fillers differ from Caffe's")
	}
	if l[11].DecayMult != 250 || l[11].BiasDecayMult != 0 || l[11].BiasLRMult != 2 || l[0].BiasLRMult != 2 {
		t.Errorf("ip1 multipliers %+v", l[11])
	}
}

func TestSpecErrors(t *testing.T) {
	const head = "input channels=1 height=28 width=28\n"
	for _, c := range []struct{ src, want string }{
		{head + "conv out=20 kernel=0\nsoftmax\n", "x.net:2: conv: kernel must be ≥ 1, got 0"},
		{head + "conv out=20\nsoftmax\n", "x.net:2: conv: missing kernel="},
		{head + "conv out=20 kernal=5\nsoftmax\n", `x.net:2: conv: unknown key "kernal"`},
		{head + "conv out=2x kernel=5\nsoftmax\n", `x.net:2: conv: out must be an integer, got "2x"`},
		{head + "\n# comment\nconv out=20 kernel=29\nsoftmax\n", "x.net:4: conv: kernel 29 is larger than its padded input 28×28"},
		{head + "pool kernel=2\nsoftmax\n", "x.net:2: pool: missing mode="},
		{head + "pool mode=min kernel=2\nsoftmax\n", `x.net:2: pool: mode must be max or avg, got "min"`},
		{head + "pool mode=max kernel=2 pad=2\nsoftmax\n", "x.net:2: pool: pad must be smaller than kernel"},
		{head + "pool mode=max kernel=1 stride=4\nfc out=2\nsoftmax\n", "x.net:2: pool: the last window of ceil rounding starts past the input"},
		{head + "lrn size=4\nsoftmax\n", "x.net:2: lrn: size must be odd"},
		{head + "lrn region=between\nfc out=2\nsoftmax\n", `x.net:2: lrn: region must be within_channel or across_channels, got "between"`},
		{head + "fc out=10 weight=gaussian\nsoftmax\n", "x.net:2: fc: weight: gaussian needs its standard deviation"},
		{head + "fc out=10 weight=gaussian:-1\nsoftmax\n", "x.net:2: fc: weight: gaussian standard deviation must be > 0"},
		{head + "fc out=10 weight=he\nsoftmax\n", `x.net:2: fc: weight: unknown filler "he"`},
		{head + "fc out=10 lr_mult=-1\nsoftmax\n", "x.net:2: fc: lr_mult must be ≥ 0, got -1"},
		{head + "fc out=10 lr_mult=x\nsoftmax\n", `x.net:2: fc: lr_mult must be a number, got "x"`},
		{head + "fc a out=10\nfc a out=10\nsoftmax\n", `x.net:3: fc: layer name "a" already used on line 2`},
		{head + "fc out=10 out=5\nsoftmax\n", `x.net:2: fc: key "out" given twice`},
		{head + "fc out=10 extra\nsoftmax\n", `x.net:2: fc: "extra" is not key=value`},
		{head + "dense out=10\nsoftmax\n", `x.net:2: dense: unknown layer kind "dense"`},
		{head + "fc out=10\n", "x.net:2: the last layer must be softmax"},
		{head + "fc out=10\nsoftmax\nrelu\n", "x.net:4: relu: softmax (line 3) must be the last layer"},
		{head + "fc out=1\nsoftmax\n", "x.net:3: softmax: needs at least 2 inputs"},
		{"fc out=10\nsoftmax\n", "x.net:1: fc: the spec must start with an input line"},
		{head + head + "softmax\n", "x.net:2: input: input given twice (first on line 1)"},
		{"input channels=0 height=28 width=28\nsoftmax\n", "x.net:1: input: channels must be ≥ 1, got 0"},
		{"input channels=1 height=28\nsoftmax\n", "x.net:1: input: missing width="},
		{"# nothing\n", "x.net: no input line"},
		{head + "relu\nsoftmax\n", "x.net:3: the network has no conv, fc or batchnorm layer"},
		// The graph: from= and add.
		{head + "fc a out=4\nfc b out=4 from=c\nfc c out=4\nsoftmax\n", `x.net:3: fc: from: layer "c" comes later (line 4)`},
		{head + "fc a out=4\nfc b out=4 from=zz\nsoftmax\n", `x.net:3: fc: from: no layer is called "zz"`},
		{head + "fc a out=4 from=a\nsoftmax\n", `x.net:2: fc: from: a cannot read its own output`},
		{head + "fc a out=4\nfc b out=4 from=a,a\nsoftmax\n", `x.net:3: fc: from must name one layer, got "a,a"`},
		{head + "fc a out=4\nadd s\nsoftmax\n", "x.net:3: add: needs two inputs: from=A,B"},
		{head + "fc a out=4\nadd s from=a\nsoftmax\n", `x.net:3: add: from must name two layers, as from=A,B; got "a"`},
		{head + "fc a out=4\nfc b out=5 from=input\nadd s from=a,b\nsoftmax\n", "x.net:4: add: a (4×1×1) and b (5×1×1) differ in shape"},
		{head + "fc a out=4\nfc b out=4 from=input\nsoftmax\n", "x.net:2: fc: the output of a is read by no later layer"},
		{head + "fc input out=4\nsoftmax\n", `x.net:2: fc: the name "input" stands for the network's input`},
		// The new layers.
		{head + "conv out=4 kernel=3 group=2\nsoftmax\n", "x.net:2: conv: group 2 must divide the input channels (1) and out (4)"},
		{"input channels=4 height=8 width=8\nconv out=6 kernel=3 group=4\nsoftmax\n", "x.net:2: conv: group 4 must divide the input channels (4) and out (6)"},
		{head + "conv out=4 kernel=3 group=0\nsoftmax\n", "x.net:2: conv: group must be ≥ 1, got 0"},
		{head + "fc out=4\ndropout ratio=1\nsoftmax\n", "x.net:3: dropout: ratio must be in [0, 1), got 1"},
		{head + "fc out=4\ndropout ratio=-0.1\nsoftmax\n", "x.net:3: dropout: ratio must be in [0, 1), got -0.1"},
		{head + "fc out=4\nbatchnorm eps=0\nsoftmax\n", "x.net:3: batchnorm: eps must be > 0, got 0"},
		{head + "fc out=4\nbatchnorm bias=none\nsoftmax\n", "x.net:3: batchnorm: bias: none is for a bias only"},
		{head + "fc out=4 weight=msra:fan\nsoftmax\n", `x.net:2: fc: weight: msra takes fan_in or fan_out, got "msra:fan"`},
		{head + "fc out=4 weight=uniform:0\nsoftmax\n", "x.net:2: fc: weight: uniform bound must be > 0"},
		{head + "pool mode=avg global=true kernel=2\nfc out=2\nsoftmax\n", "x.net:2: pool: global pooling takes no kernel"},
		{head + "pool mode=avg global=yes\nfc out=2\nsoftmax\n", `x.net:2: pool: global must be true or false, got "yes"`},
		{head + "pool mode=avg kernel=2 round=up\nfc out=2\nsoftmax\n", `x.net:2: pool: round must be ceil (Caffe's) or floor (PyTorch's), got "up"`},
		// Sizes that cannot be allocated, before anything is.
		{head + "fc fc1 out=2000000000\nsoftmax\n", "x.net:2: fc: fc1: 1,568,000,000,000 weights (5.7 TiB), more than the 2,147,483,647 values a tensor may hold"},
		{head + "conv c out=100000 kernel=28\nconv d out=100000 kernel=1\nsoftmax\n", "x.net:3: conv: d: 10,000,000,000 weights (37.3 GiB)"},
		{"input channels=100000 height=100000 width=1000\nfc out=2\nsoftmax\n", "x.net:1: input: an image of 100000×100000×1000 holds more than"},
		{head + "fc a out=2000000\nfc b out=1000\nfc c out=1000\nsoftmax\n", "x.net:3: fc: b: the parameter vector passes the 2,147,483,647 values a vector may hold here (the whole network's: 3,571,002,000 values, 13.3 GiB)"},
	} {
		_, err := Parse("x.net", []byte(c.src))
		if err == nil {
			t.Errorf("%q: no error, want %q", c.src, c.want)
			continue
		}
		if !errors.Is(err, ErrSpec) {
			t.Errorf("%q: %v does not wrap ErrSpec", c.src, err)
		}
		if big := strings.Contains(err.Error(), "may hold"); errors.Is(err, ErrTooLarge) != big {
			t.Errorf("%q: %v: wraps ErrTooLarge %v, want %v", c.src, err, !big, big)
		}
		if !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("error %q\nwant   %q…", err, c.want)
		}
	}
}

func TestSpecDefaults(t *testing.T) {
	s, err := Parse("d.net", []byte("input channels=2 height=9 width=9\nconv out=3 kernel=3\npool mode=avg kernel=3 stride=2 # ceil rounding\nrelu\nlrn\nfc out=4\nsoftmax\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Layers[0]
	if c.Name != "conv1" || c.Stride != 1 || c.Pad != 0 || c.Weight.Type != Xavier || c.Bias != (Filler{}) ||
		c.LRMult != 1 || c.DecayMult != 1 || c.BiasLRMult != 1 || c.BiasDecayMult != 1 {
		t.Errorf("conv defaults %+v", c)
	}
	if l := s.Layers[3]; l.Size != 5 || l.Alpha != 1 || l.Beta != 0.75 || l.K != 1 {
		t.Errorf("lrn defaults %+v", l)
	}
	// 9 → conv 3 → 7 → pool 3/2 with ceil rounding: ceil((7−3)/2)+1 = 3.
	if s.outs[1] != (Shape{3, 3, 3}) || s.Classes() != 4 || s.Layers[4].Name != "fc1" || s.Layers[5].Name != "loss" {
		t.Errorf("shapes %v, names %s %s", s.outs, s.Layers[4].Name, s.Layers[5].Name)
	}
	if s.NumParams() != 3*2*9+3+4*27+4 {
		t.Errorf("%d parameters", s.NumParams())
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tiny.net")
	os.WriteFile(p, []byte("input channels=1 height=2 width=2\nfc out=3\nsoftmax\n"), 0o644)
	s, err := Load(p)
	if err != nil || s.Name != "tiny" || s.NumParams() != 15 {
		t.Fatalf("Load(%s) = %v, %v", p, s, err)
	}
	if s, err := Load("lenet"); err != nil || s.NumParams() != 431080 {
		t.Fatalf("Load(lenet): %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none.net")); !errors.Is(err, ErrUnknownNet) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestTrainFLOPs(t *testing.T) {
	// Counted by hand from the layer shapes: multiply-adds per image of
	// each layer with parameters, times 3 (forward, weight and input
	// gradients) or 2 for the first, times 2 FLOPs.
	lenet := 2*2*(20*25*24*24) + 2*3*(50*500*8*8+500*800+10*500)
	cifar := 2*2*(32*75*32*32) + 2*3*(32*800*16*16+64*800*8*8+10*1024)
	for _, c := range []struct {
		name         string
		flops, share int
	}{{"lenet", lenet, 8}, {"cifar10_full", cifar, 1}} {
		s, err := Builtin(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.TrainFLOPs(); got != c.flops {
			t.Errorf("%s: TrainFLOPs = %d, want %d", c.name, got, c.flops)
		}
		if got := s.WorkerBatch(); got != c.share {
			t.Errorf("%s: WorkerBatch = %d, want %d", c.name, got, c.share)
		}
	}
}

// TestPartBatch: the default part sizes the doc comment of PartBatch
// quotes, from the built-in specs' sizes and costs.
func TestPartBatch(t *testing.T) {
	for _, c := range []struct {
		net           string
		workers, part int
	}{{"cifar10_full", 1, 0}, {"cifar10_full", 2, 6}, {"lenet", 1, 0}, {"lenet", 2, 66}} {
		spec, _ := Builtin(c.net)
		if got := spec.PartBatch(c.workers); got != c.part {
			t.Errorf("%s, %d workers: part %d, want %d", c.net, c.workers, got, c.part)
		}
	}
}
