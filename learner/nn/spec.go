package nn

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/softsync/softsync/kernels"
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
	Conv    Kind = iota + 1 // conv: 2-D convolution with bias
	Pool                    // pool: max or average pooling, Caffe's ceil rounding
	ReLU                    // relu: max(x, 0)
	LRN                     // lrn: local response normalisation within channel
	FC                      // fc: fully connected with bias (flattens C×H×W)
	Softmax                 // softmax: softmax cross-entropy loss, the last layer
)

var kindNames = map[Kind]string{Conv: "conv", Pool: "pool", ReLU: "relu", LRN: "lrn", FC: "fc", Softmax: "softmax"}

// String is the kind's keyword in the spec format.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// FillerType is a parameter initialisation, as Caffe's fillers.
type FillerType int

// The fillers. Xavier draws uniformly from ±sqrt(3/fan_in) with fan_in =
// inputs·kernel height·kernel width (Caffe's default FAN_IN variance
// norm); Gaussian draws from N(0, Value²); Constant sets Value.
const (
	Constant FillerType = iota
	Gaussian
	Xavier
)

// Filler is one parameter initialisation.
type Filler struct {
	Type  FillerType
	Value float32 // the constant, or the Gaussian's standard deviation
}

// String is the filler as written in the spec format.
func (f Filler) String() string {
	switch f.Type {
	case Gaussian:
		return "gaussian:" + formatFloat(f.Value)
	case Xavier:
		return "xavier"
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

	Out                 int              // conv: output channels; fc: outputs
	Kernel, Stride, Pad int              // conv, pool: square window, stride, zero padding
	Mode                kernels.PoolMode // pool: kernels.MaxPool or kernels.AvgPool

	Size           int     // lrn: window side (odd)
	Alpha, Beta, K float32 // lrn: scale = K + Alpha/Size²·Σx², y = x·scale^−Beta

	Weight, Bias              Filler  // conv, fc: initialisation
	LRMult, DecayMult         float32 // conv, fc: solver multipliers of the weights
	BiasLRMult, BiasDecayMult float32 // conv, fc: solver multipliers of the bias
}

// HasParams reports whether the layer has weights and a bias.
func (l *LayerSpec) HasParams() bool { return l.Kind == Conv || l.Kind == FC }

// Shape is the C×H×W shape of one image's activations.
type Shape struct{ C, H, W int }

// Len is C·H·W.
func (s Shape) Len() int { return s.C * s.H * s.W }

// String writes the shape as C×H×W.
func (s Shape) String() string { return fmt.Sprintf("%d×%d×%d", s.C, s.H, s.W) }

// Spec is a parsed, validated network description: an input shape and a
// sequence of layers ending with a softmax loss. Build a Net from it with
// New. A Spec is read-only once parsed.
type Spec struct {
	Name   string      // the network's name (built-in name or file base name)
	File   string      // where it was read from, for messages
	Input  Shape       // one input image
	Layers []LayerSpec // in order; the last is the Softmax loss
	shapes []Shape     // shapes[i] is the input of layer i; shapes[len] the logits
}

// Classes is the number of outputs of the network (inputs to the loss).
func (s *Spec) Classes() int { return s.shapes[len(s.Layers)-1].Len() }

// NumParams is the length of the network's parameter vector.
func (s *Spec) NumParams() int {
	n := 0
	for i := range s.Layers {
		w, b := s.paramLens(i)
		n += w + b
	}
	return n
}

// TrainFLOPs is the number of floating-point operations (a multiply-add
// counts two) of one image's training step in the convolution and fully
// connected layers: the forward pass, the weight gradients and the input
// gradients of every layer but the first with parameters. Pooling, ReLU,
// LRN, the loss and the biases are left out.
func (s *Spec) TrainFLOPs() int {
	flops, first := 0, true
	for i := range s.Layers {
		if !s.Layers[i].HasParams() {
			continue
		}
		w, _ := s.paramLens(i)
		out := s.shapes[i+1]
		macs := w * out.H * out.W // every weight meets every output pixel once
		passes := 3
		if first {
			passes = 2
		}
		flops += 2 * passes * macs
		first = false
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
// given number of workers: with one worker, the whole share (0), as that
// core has the memory bandwidth to itself and the kernels run fastest on
// many images per call; with several, the most images whose largest
// activation fits partCacheBytes, but no fewer than bring
// partFLOPsPerParam. That is 6 images for cifar10_full, whose first
// convolution writes 128 KiB per image, and 66 for LeNet, whose weights
// are large for its work (so its shares are not cut).
func (s *Spec) PartBatch(workers int) int {
	f := s.TrainFLOPs()
	if workers <= 1 || f == 0 {
		return 0
	}
	largest := 0
	for _, sh := range s.shapes[1:] {
		largest = max(largest, 4*sh.Len())
	}
	return max(1, partCacheBytes/largest, (partFLOPsPerParam*s.NumParams()+f-1)/f)
}

// paramLens returns the weight and bias lengths of layer i.
func (s *Spec) paramLens(i int) (w, b int) {
	l := &s.Layers[i]
	in := s.shapes[i]
	switch l.Kind {
	case Conv:
		return l.Out * in.C * l.Kernel * l.Kernel, l.Out
	case FC:
		return l.Out * in.Len(), l.Out
	}
	return 0, 0
}

// fanIn is the number of inputs of one output of layer i (Xavier's fan_in).
func (s *Spec) fanIn(i int) int {
	w, _ := s.paramLens(i)
	return w / s.Layers[i].Out
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
// "lenet", "cifar10_full" or "mlp". Its text is BuiltinText(name).
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

// specError is a parse error at one line.
type specError struct {
	file string
	line int
	kind string // layer keyword, "" for none
	msg  string
}

func (e *specError) Error() string {
	var b strings.Builder
	b.WriteString(e.file)
	if e.line > 0 {
		fmt.Fprintf(&b, ":%d", e.line)
	}
	b.WriteString(": ")
	if e.kind != "" {
		b.WriteString(e.kind + ": ")
	}
	b.WriteString(e.msg)
	return b.String()
}

func (e *specError) Unwrap() error { return ErrSpec }

// Parse parses and validates a network spec (the format is described in
// docs/network-spec.md). file names the source in error messages and
// gives the network its name (base name without extension).
func Parse(file string, src []byte) (*Spec, error) {
	p := &parser{file: file, counts: map[Kind]int{}, names: map[string]int{}}
	spec := &Spec{Name: strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)), File: file}
	sc := bufio.NewScanner(bytes.NewReader(src))
	lineNo, haveInput := 0, false
	var cur Shape
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		p.line, p.kind = lineNo, fields[0]
		if err := p.splitFields(fields[1:]); err != nil {
			return nil, err
		}
		if fields[0] == "input" {
			if haveInput {
				return nil, p.errorf("input given twice (first on line %d)", p.inputLine)
			}
			if len(spec.Layers) > 0 {
				return nil, p.errorf("input must come before the first layer")
			}
			if p.name != "" {
				return nil, p.errorf("unexpected word %q (write key=value)", p.name)
			}
			cur = Shape{C: p.intKey("channels", -1), H: p.intKey("height", -1), W: p.intKey("width", -1)}
			if err := p.finish(); err != nil {
				return nil, err
			}
			if err := p.atLeast("channels", cur.C, 1); err != nil {
				return nil, err
			}
			if err := p.atLeast("height", cur.H, 1); err != nil {
				return nil, err
			}
			if err := p.atLeast("width", cur.W, 1); err != nil {
				return nil, err
			}
			spec.Input, haveInput, p.inputLine = cur, true, lineNo
			continue
		}
		if !haveInput {
			return nil, p.errorf("the spec must start with an input line (input channels=C height=H width=W)")
		}
		if n := len(spec.Layers); n > 0 && spec.Layers[n-1].Kind == Softmax {
			return nil, p.errorf("softmax (line %d) must be the last layer", spec.Layers[n-1].Line)
		}
		l, err := p.layer(cur)
		if err != nil {
			return nil, err
		}
		spec.shapes = append(spec.shapes, cur)
		spec.Layers = append(spec.Layers, l)
		if cur, err = p.outShape(&l, cur); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &specError{file: file, line: lineNo + 1, msg: err.Error()}
	}
	if !haveInput {
		return nil, &specError{file: file, msg: "no input line"}
	}
	if n := len(spec.Layers); n == 0 || spec.Layers[n-1].Kind != Softmax {
		return nil, &specError{file: file, line: lineNo, msg: "the last layer must be softmax (the loss)"}
	}
	if !slices.ContainsFunc(spec.Layers, func(l LayerSpec) bool { return l.HasParams() }) {
		return nil, &specError{file: file, line: lineNo, msg: "the network has no conv or fc layer: nothing to learn"}
	}
	spec.shapes = append(spec.shapes, cur)
	return spec, nil
}

// parser holds the state of one line being parsed.
type parser struct {
	file      string
	line      int
	kind      string
	name      string            // the optional word after the keyword
	keys      map[string]string // key=value pairs of the line
	keyOrder  []string
	used      map[string]bool
	err       error // first error of a key lookup
	inputLine int
	counts    map[Kind]int   // layers of each kind so far, for default names
	names     map[string]int // layer name → line
}

func (p *parser) errorf(format string, args ...any) error {
	return &specError{file: p.file, line: p.line, kind: p.kind, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) splitFields(fields []string) error {
	p.name, p.keys, p.keyOrder, p.used, p.err = "", map[string]string{}, nil, map[string]bool{}, nil
	for i, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			if i == 0 {
				p.name = f
				continue
			}
			return p.errorf("%q is not key=value", f)
		}
		if k == "" || v == "" {
			return p.errorf("%q: empty key or value", f)
		}
		if _, dup := p.keys[k]; dup {
			return p.errorf("key %q given twice", k)
		}
		p.keys[k] = v
		p.keyOrder = append(p.keyOrder, k)
	}
	return nil
}

// intKey returns the integer value of key, or def when absent; def < 0
// makes the key required.
func (p *parser) intKey(key string, def int) int {
	v, ok := p.lookup(key, def < 0)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil && p.err == nil {
		p.err = p.errorf("%s must be an integer, got %q", key, v)
	}
	return n
}

func (p *parser) floatKey(key string, def float32) float32 {
	v, ok := p.lookup(key, false)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 32)
	if (err != nil || math.IsNaN(f) || math.IsInf(f, 0)) && p.err == nil {
		p.err = p.errorf("%s must be a number, got %q", key, v)
	}
	return float32(f)
}

func (p *parser) lookup(key string, required bool) (string, bool) {
	v, ok := p.keys[key]
	if ok {
		p.used[key] = true
	} else if required && p.err == nil {
		p.err = p.errorf("missing %s=", key)
	}
	return v, ok
}

// finish reports an unknown key (often a misspelt one), else the first
// lookup error.
func (p *parser) finish() error {
	for _, k := range p.keyOrder {
		if !p.used[k] {
			return p.errorf("unknown key %q", k)
		}
	}
	return p.err
}

func (p *parser) atLeast(key string, v, min int) error {
	if v < min {
		return p.errorf("%s must be ≥ %d, got %d", key, min, v)
	}
	return nil
}

func (p *parser) filler(key string, def Filler) Filler {
	v, ok := p.lookup(key, false)
	if !ok {
		return def
	}
	typ, arg, hasArg := strings.Cut(v, ":")
	f := Filler{}
	switch typ {
	case "xavier":
		f.Type = Xavier
		if hasArg {
			p.setErr("%s: xavier takes no argument, got %q", key, v)
		}
		return f
	case "gaussian":
		f.Type = Gaussian
		if !hasArg {
			p.setErr("%s: gaussian needs its standard deviation, as gaussian:0.01", key)
			return f
		}
	case "constant":
		f.Type = Constant
		if !hasArg {
			return f
		}
	default:
		p.setErr("%s: unknown filler %q (xavier, gaussian:STD or constant:VALUE)", key, typ)
		return f
	}
	x, err := strconv.ParseFloat(arg, 32)
	switch {
	case err != nil || math.IsNaN(x) || math.IsInf(x, 0):
		p.setErr("%s: %q is not a number", key, arg)
	case f.Type == Gaussian && x <= 0:
		p.setErr("%s: gaussian standard deviation must be > 0, got %s", key, arg)
	}
	f.Value = float32(x)
	return f
}

func (p *parser) setErr(format string, args ...any) {
	if p.err == nil {
		p.err = p.errorf(format, args...)
	}
}

// layer parses the current line as a layer whose input has shape in.
func (p *parser) layer(in Shape) (LayerSpec, error) {
	var l LayerSpec
	for k, name := range kindNames {
		if name == p.kind {
			l.Kind = k
		}
	}
	if l.Kind == 0 {
		return l, p.errorf("unknown layer kind %q (input, conv, pool, relu, lrn, fc, softmax)", p.kind)
	}
	l.Line = p.line
	p.counts[l.Kind]++
	l.Name = p.name
	if l.Name == "" {
		l.Name = fmt.Sprintf("%s%d", p.kind, p.counts[l.Kind])
		if l.Kind == Softmax {
			l.Name = "loss"
		}
	}
	if first, dup := p.names[l.Name]; dup {
		return l, p.errorf("layer name %q already used on line %d", l.Name, first)
	}
	p.names[l.Name] = l.Line

	switch l.Kind {
	case Conv, FC:
		l.Out = p.intKey("out", -1)
		if l.Kind == Conv {
			l.Kernel = p.intKey("kernel", -1)
			l.Stride = p.intKey("stride", 1)
			l.Pad = p.intKey("pad", 0)
		}
		l.Weight = p.filler("weight", Filler{Type: Xavier})
		l.Bias = p.filler("bias", Filler{Type: Constant})
		l.LRMult = p.floatKey("lr_mult", 1)
		l.DecayMult = p.floatKey("decay_mult", 1)
		l.BiasLRMult = p.floatKey("bias_lr_mult", 1)
		l.BiasDecayMult = p.floatKey("bias_decay_mult", 1)
	case Pool:
		switch mode, _ := p.lookup("mode", true); mode {
		case "max":
			l.Mode = kernels.MaxPool
		case "avg", "ave", "average":
			l.Mode = kernels.AvgPool
		case "":
		default:
			p.setErr("mode must be max or avg, got %q", mode)
		}
		l.Kernel = p.intKey("kernel", -1)
		l.Stride = p.intKey("stride", 1)
		l.Pad = p.intKey("pad", 0)
	case LRN:
		l.Size = p.intKey("size", 5)
		l.Alpha = p.floatKey("alpha", 1)
		l.Beta = p.floatKey("beta", 0.75)
		l.K = p.floatKey("k", 1)
		if r, ok := p.lookup("region", false); ok && r != "within_channel" {
			p.setErr("region %q is not supported: only within_channel", r)
		}
	}
	if err := p.finish(); err != nil {
		return l, err
	}
	return l, p.validate(&l, in)
}

// validate checks the values of l against its input shape.
func (p *parser) validate(l *LayerSpec, in Shape) error {
	switch l.Kind {
	case Conv, FC:
		if err := p.atLeast("out", l.Out, 1); err != nil {
			return err
		}
		for _, m := range []struct {
			key string
			v   float32
		}{{"lr_mult", l.LRMult}, {"decay_mult", l.DecayMult}, {"bias_lr_mult", l.BiasLRMult}, {"bias_decay_mult", l.BiasDecayMult}} {
			if m.v < 0 {
				return p.errorf("%s must be ≥ 0, got %s", m.key, formatFloat(m.v))
			}
		}
	case LRN:
		if l.Size < 1 || l.Size%2 == 0 {
			return p.errorf("size must be odd and ≥ 1, got %d", l.Size)
		}
		if l.Alpha < 0 || l.Beta < 0 || l.K <= 0 {
			return p.errorf("need alpha ≥ 0, beta ≥ 0, k > 0; got alpha=%s beta=%s k=%s",
				formatFloat(l.Alpha), formatFloat(l.Beta), formatFloat(l.K))
		}
	case Softmax:
		if in.Len() < 2 {
			return p.errorf("needs at least 2 inputs (classes), got %d", in.Len())
		}
	}
	if l.Kind == Conv || l.Kind == Pool {
		if err := p.atLeast("kernel", l.Kernel, 1); err != nil {
			return err
		}
		if err := p.atLeast("stride", l.Stride, 1); err != nil {
			return err
		}
		if err := p.atLeast("pad", l.Pad, 0); err != nil {
			return err
		}
		if l.Kind == Pool && l.Pad >= l.Kernel {
			return p.errorf("pad must be smaller than kernel, got pad=%d kernel=%d", l.Pad, l.Kernel)
		}
		if l.Kernel > in.H+2*l.Pad || l.Kernel > in.W+2*l.Pad {
			return p.errorf("kernel %d is larger than its padded input %d×%d (input %s, pad %d)",
				l.Kernel, in.H+2*l.Pad, in.W+2*l.Pad, in, l.Pad)
		}
	}
	return nil
}

// outShape is the shape of layer l's output for input shape in.
func (p *parser) outShape(l *LayerSpec, in Shape) (Shape, error) {
	switch l.Kind {
	case Conv:
		s := convShape(l, in, 1)
		return Shape{C: l.Out, H: s.OutH(), W: s.OutW()}, nil
	case Pool:
		s := poolShape(l, in, 1)
		return Shape{C: in.C, H: s.OutH(), W: s.OutW()}, nil
	case FC:
		return Shape{C: l.Out, H: 1, W: 1}, nil
	}
	return in, nil
}

func convShape(l *LayerSpec, in Shape, n int) kernels.ConvShape {
	return kernels.ConvShape{N: n, C: in.C, H: in.H, W: in.W, OC: l.Out, KH: l.Kernel, KW: l.Kernel,
		PadH: l.Pad, PadW: l.Pad, StrideH: l.Stride, StrideW: l.Stride}
}

func poolShape(l *LayerSpec, in Shape, n int) kernels.PoolShape {
	return kernels.PoolShape{Mode: l.Mode, N: n, C: in.C, H: in.H, W: in.W, KH: l.Kernel, KW: l.Kernel,
		PadH: l.Pad, PadW: l.Pad, StrideH: l.Stride, StrideW: l.Stride}
}

// Format writes the spec back in the spec format, every key explicit.
// Parse(Format(s)) gives a spec equal to s.
func (s *Spec) Format() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "input channels=%d height=%d width=%d\n", s.Input.C, s.Input.H, s.Input.W)
	for i := range s.Layers {
		l := &s.Layers[i]
		fmt.Fprintf(&b, "%s %s", l.Kind, l.Name)
		switch l.Kind {
		case Conv:
			fmt.Fprintf(&b, " out=%d kernel=%d stride=%d pad=%d", l.Out, l.Kernel, l.Stride, l.Pad)
		case FC:
			fmt.Fprintf(&b, " out=%d", l.Out)
		case Pool:
			mode := "max"
			if l.Mode == kernels.AvgPool {
				mode = "avg"
			}
			fmt.Fprintf(&b, " mode=%s kernel=%d stride=%d pad=%d", mode, l.Kernel, l.Stride, l.Pad)
		case LRN:
			fmt.Fprintf(&b, " size=%d alpha=%s beta=%s k=%s region=within_channel",
				l.Size, formatFloat(l.Alpha), formatFloat(l.Beta), formatFloat(l.K))
		}
		if l.HasParams() {
			fmt.Fprintf(&b, " weight=%s bias=%s lr_mult=%s decay_mult=%s bias_lr_mult=%s bias_decay_mult=%s",
				l.Weight, l.Bias, formatFloat(l.LRMult), formatFloat(l.DecayMult),
				formatFloat(l.BiasLRMult), formatFloat(l.BiasDecayMult))
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}
