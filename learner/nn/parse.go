package nn

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/softsync/softsync/kernels"
)

// specError is a parse error at one line.
type specError struct {
	file string
	line int
	kind string // layer keyword, "" for none
	msg  string
	also error // a second error it wraps (ErrTooLarge), or nil
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

func (e *specError) Unwrap() []error { return []error{ErrSpec, e.also} }

// statement is one non-empty line of a spec.
type statement struct {
	line   int
	fields []string
}

// Parse parses and validates a network spec (the format is described in
// docs/network-spec.md). file names the source in error messages and
// gives the network its name (base name without extension).
func Parse(file string, src []byte) (*Spec, error) {
	var stmts []statement
	sc := bufio.NewScanner(bytes.NewReader(src))
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if fields := strings.Fields(line); len(fields) > 0 {
			stmts = append(stmts, statement{lineNo, fields})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &specError{file: file, line: lineNo + 1, msg: err.Error()}
	}
	p := &parser{file: file, counts: map[Kind]int{}, names: map[string]int{}, lines: map[string]int{}}
	p.nameLayers(stmts)
	spec := &Spec{Name: strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)), File: file}
	haveInput := false
	for _, st := range stmts {
		p.line, p.kind = st.line, st.fields[0]
		if err := p.splitFields(st.fields[1:]); err != nil {
			return nil, err
		}
		if st.fields[0] == "input" {
			if haveInput {
				return nil, p.errorf("input given twice (first on line %d)", p.inputLine)
			}
			if len(spec.Layers) > 0 {
				return nil, p.errorf("input must come before the first layer")
			}
			if p.name != "" {
				return nil, p.errorf("unexpected word %q (write key=value)", p.name)
			}
			in := Shape{C: p.intKey("channels", -1), H: p.intKey("height", -1), W: p.intKey("width", -1)}
			if err := p.finish(); err != nil {
				return nil, err
			}
			for _, d := range []struct {
				key string
				v   int
			}{{"channels", in.C}, {"height", in.H}, {"width", in.W}} {
				if err := p.atLeast(d.key, d.v, 1); err != nil {
					return nil, err
				}
			}
			if n, ok := product(in.C, in.H, in.W); !ok || n > MaxTensor {
				return nil, p.tooLarge("an image of %s holds more than the %s values a tensor may hold", in, formatCount(MaxTensor))
			}
			spec.Input, haveInput, p.inputLine = in, true, st.line
			continue
		}
		if !haveInput {
			return nil, p.errorf("the spec must start with an input line (input channels=C height=H width=W)")
		}
		if n := len(spec.Layers); n > 0 && spec.Layers[n-1].Kind == Softmax {
			return nil, p.errorf("softmax (line %d) must be the last layer", spec.Layers[n-1].Line)
		}
		if err := p.layer(spec); err != nil {
			return nil, err
		}
	}
	if !haveInput {
		return nil, &specError{file: file, msg: "no input line"}
	}
	if n := len(spec.Layers); n == 0 || spec.Layers[n-1].Kind != Softmax {
		return nil, &specError{file: file, line: lineNo, msg: "the last layer must be softmax (the loss)"}
	}
	if !slices.ContainsFunc(spec.Layers, func(l LayerSpec) bool { return l.HasParams() }) {
		return nil, &specError{file: file, line: lineNo, msg: "the network has no conv, fc or batchnorm layer: nothing to learn"}
	}
	if err := spec.checkUsed(); err != nil {
		return nil, err
	}
	if err := spec.checkVectorLen(file); err != nil {
		return nil, err
	}
	spec.segs = spec.makeLayout()
	return spec, nil
}

// checkUsed returns an error naming the first layer whose output no later
// layer reads (the loss's input is read by the loss).
func (s *Spec) checkUsed() error {
	used := make([]bool, len(s.Layers))
	for i := range s.Layers {
		for _, j := range s.inputs[i] {
			if j >= 0 {
				used[j] = true
			}
		}
	}
	for i, u := range used[:len(used)-1] {
		if !u {
			l := &s.Layers[i]
			return &specError{file: s.File, line: l.Line, kind: l.Kind.String(),
				msg: fmt.Sprintf("the output of %s is read by no later layer (name it in a from=, or remove the layer)", l.Name)}
		}
	}
	return nil
}

// checkVectorLen returns an error naming the layer at which the
// parameter vector (parameters and state, in layer order) grows past
// MaxTensor values, with the whole vector's size. Each layer's size was
// checked when it was parsed, so the sum cannot overflow.
func (s *Spec) checkVectorLen(file string) error {
	n, at := 0, -1
	for i := range s.Layers {
		for _, seg := range s.segments(i) {
			if n += seg.Len; n > MaxTensor && at < 0 {
				at = i
			}
		}
	}
	if at < 0 {
		return nil
	}
	l := &s.Layers[at]
	return &specError{file: file, line: l.Line, kind: l.Kind.String(), also: ErrTooLarge,
		msg: fmt.Sprintf("%s: the parameter vector passes the %s values a vector may hold here (the whole network's: %s values, %s)",
			l.Name, formatCount(MaxTensor), formatCount(n), formatBytes(4*int64(n)))}
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
	names     map[string]int // name of each layer parsed so far → its index
	lines     map[string]int // name of every layer of the spec → its line
}

// nameLayers records the line of every layer's name, so that a from=
// naming a later layer can say so. Duplicates are reported by layer.
func (p *parser) nameLayers(stmts []statement) {
	counts := map[string]int{}
	for _, st := range stmts {
		kw := st.fields[0]
		if kw == "input" {
			continue
		}
		counts[kw]++
		name := fmt.Sprintf("%s%d", kw, counts[kw])
		if kw == "softmax" {
			name = "loss"
		}
		if len(st.fields) > 1 && !strings.Contains(st.fields[1], "=") {
			name = st.fields[1]
		}
		if _, dup := p.lines[name]; !dup {
			p.lines[name] = st.line
		}
	}
}

func (p *parser) errorf(format string, args ...any) error {
	return &specError{file: p.file, line: p.line, kind: p.kind, msg: fmt.Sprintf(format, args...)}
}

// tooLarge is errorf for a size that cannot be allocated: it also wraps
// ErrTooLarge.
func (p *parser) tooLarge(format string, args ...any) error {
	return &specError{file: p.file, line: p.line, kind: p.kind, msg: fmt.Sprintf(format, args...), also: ErrTooLarge}
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

func (p *parser) boolKey(key string) bool {
	v, ok := p.lookup(key, false)
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.setErr("%s must be true or false, got %q", key, v)
	}
	return b
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

// filler parses a filler key; with none, the value "none" sets *none.
func (p *parser) filler(key string, def Filler, none *bool) Filler {
	v, ok := p.lookup(key, false)
	if !ok {
		return def
	}
	typ, arg, hasArg := strings.Cut(v, ":")
	f := Filler{}
	noArg := func() Filler {
		if hasArg {
			p.setErr("%s: %s takes no argument, got %q", key, typ, v)
		}
		return f
	}
	switch typ {
	case "none":
		if none == nil {
			p.setErr("%s: none is for a bias only", key)
		} else {
			*none = true
		}
		return noArg()
	case "xavier":
		f.Type = Xavier
		return noArg()
	case "msra":
		f.Type = MSRA
		switch arg {
		case "fan_out":
			f.Type = MSRAFanOut
		case "fan_in":
		default:
			if hasArg {
				p.setErr("%s: msra takes fan_in or fan_out, got %q", key, v)
			}
		}
		return f
	case "gaussian", "uniform":
		f.Type = Gaussian
		if typ == "uniform" {
			f.Type = Uniform
		}
		if !hasArg {
			what := "standard deviation, as gaussian:0.01"
			if f.Type == Uniform {
				what = "bound, as uniform:0.05"
			}
			p.setErr("%s: %s needs its %s", key, typ, what)
			return f
		}
	case "constant":
		f.Type = Constant
		if !hasArg {
			return f
		}
	default:
		p.setErr("%s: unknown filler %q (xavier, msra[:fan_in|fan_out], gaussian:STD, uniform:BOUND or constant:VALUE)", key, typ)
		return f
	}
	x, err := strconv.ParseFloat(arg, 32)
	switch {
	case err != nil || math.IsNaN(x) || math.IsInf(x, 0):
		p.setErr("%s: %q is not a number", key, arg)
	case f.Type == Gaussian && x <= 0:
		p.setErr("%s: gaussian standard deviation must be > 0, got %s", key, arg)
	case f.Type == Uniform && x <= 0:
		p.setErr("%s: uniform bound must be > 0, got %s", key, arg)
	}
	f.Value = float32(x)
	return f
}

func (p *parser) setErr(format string, args ...any) {
	if p.err == nil {
		p.err = p.errorf(format, args...)
	}
}

// layer parses the current line as the next layer of spec.
func (p *parser) layer(spec *Spec) error {
	var l LayerSpec
	for k, name := range kindNames {
		if name == p.kind {
			l.Kind = k
		}
	}
	if l.Kind == 0 {
		return p.errorf("unknown layer kind %q (input, conv, pool, relu, lrn, fc, dropout, batchnorm, add, softmax)", p.kind)
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
	if l.Name == "input" {
		return p.errorf(`the name "input" stands for the network's input`)
	}
	if first, dup := p.names[l.Name]; dup {
		return p.errorf("layer name %q already used on line %d", l.Name, spec.Layers[first].Line)
	}
	inputs, err := p.from(spec, &l)
	if err != nil {
		return err
	}
	in := spec.shapeOf(inputs[0])

	switch l.Kind {
	case Conv, FC:
		l.Out = p.intKey("out", -1)
		if l.Kind == Conv {
			l.Kernel = p.intKey("kernel", -1)
			l.Stride = p.intKey("stride", 1)
			l.Pad = p.intKey("pad", 0)
			l.Group = p.intKey("group", 1)
		}
		l.Weight = p.filler("weight", Filler{Type: Xavier}, nil)
		l.Bias = p.filler("bias", Filler{Type: Constant}, &l.NoBias)
		p.multipliers(&l)
	case BatchNorm:
		l.Eps = p.floatKey("eps", 1e-5)
		l.Weight = p.filler("weight", Filler{Type: Constant, Value: 1}, nil)
		l.Bias = p.filler("bias", Filler{Type: Constant}, nil)
		p.multipliers(&l)
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
		if l.Global = p.boolKey("global"); l.Global {
			for _, k := range []string{"kernel", "stride", "pad", "round"} {
				if _, ok := p.keys[k]; ok {
					p.used[k] = true
					p.setErr("global pooling takes no %s (its window is the whole %d×%d plane)", k, in.H, in.W)
				}
			}
		} else {
			l.Kernel = p.intKey("kernel", -1)
			l.Stride = p.intKey("stride", 1)
			l.Pad = p.intKey("pad", 0)
			switch r, _ := p.lookup("round", false); r {
			case "", "ceil":
			case "floor":
				l.Floor = true
			default:
				p.setErr("round must be ceil (Caffe's) or floor (PyTorch's), got %q", r)
			}
		}
	case LRN:
		l.Size = p.intKey("size", 5)
		l.Alpha = p.floatKey("alpha", 1)
		l.Beta = p.floatKey("beta", 0.75)
		l.K = p.floatKey("k", 1)
		switch r, _ := p.lookup("region", false); r {
		case "", "within_channel":
		case "across_channels":
			l.Region = kernels.AcrossChannels
		default:
			p.setErr("region must be within_channel or across_channels, got %q", r)
		}
	case Dropout:
		l.Ratio = p.floatKey("ratio", 0.5)
	}
	if err := p.finish(); err != nil {
		return err
	}
	if err := p.validate(spec, &l, inputs); err != nil {
		return err
	}
	p.names[l.Name] = len(spec.Layers)
	spec.Layers = append(spec.Layers, l)
	spec.inputs = append(spec.inputs, inputs)
	spec.outs = append(spec.outs, outShape(&l, in))
	i := len(spec.Layers) - 1
	for _, seg := range spec.segments(i) {
		if seg.Len > MaxTensor {
			return p.tooLarge("%s: %s has %s values (%s), more than the %s a tensor may hold",
				l.Name, seg.Name, formatCount(seg.Len), formatBytes(4*int64(seg.Len)), formatCount(MaxTensor))
		}
	}
	return nil
}

// multipliers parses the solver multipliers of a layer with parameters.
func (p *parser) multipliers(l *LayerSpec) {
	l.LRMult = p.floatKey("lr_mult", 1)
	l.DecayMult = p.floatKey("decay_mult", 1)
	l.BiasLRMult = p.floatKey("bias_lr_mult", 1)
	l.BiasDecayMult = p.floatKey("bias_decay_mult", 1)
}

// from parses the from= key of l, or takes the layer written before it,
// and returns the indices of its inputs.
func (p *parser) from(spec *Spec, l *LayerSpec) ([]int, error) {
	v, ok := p.lookup("from", false)
	if !ok {
		if l.Kind == Add {
			return nil, p.errorf("needs two inputs: from=A,B")
		}
		return []int{len(spec.Layers) - 1}, nil
	}
	l.From = strings.Split(v, ",")
	if want := 1 + btoi(l.Kind == Add); len(l.From) != want {
		if l.Kind == Add {
			return nil, p.errorf("from must name two layers, as from=A,B; got %q", v)
		}
		return nil, p.errorf("from must name one layer, got %q", v)
	}
	inputs := make([]int, len(l.From))
	for k, name := range l.From {
		j, ok := p.names[name]
		switch {
		case name == "input":
			inputs[k] = -1
		case ok:
			inputs[k] = j
		case name == l.Name:
			return nil, p.errorf("from: %s cannot read its own output", name)
		case p.lines[name] > 0:
			return nil, p.errorf("from: layer %q comes later (line %d): a layer reads only the outputs of layers before it", name, p.lines[name])
		default:
			return nil, p.errorf("from: no layer is called %q", name)
		}
	}
	return inputs, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// validate checks the values of l against its inputs.
func (p *parser) validate(spec *Spec, l *LayerSpec, inputs []int) error {
	in := spec.shapeOf(inputs[0])
	switch l.Kind {
	case Conv, FC:
		if err := p.atLeast("out", l.Out, 1); err != nil {
			return err
		}
	}
	if l.HasParams() {
		for _, m := range []struct {
			key string
			v   float32
		}{{"lr_mult", l.LRMult}, {"decay_mult", l.DecayMult}, {"bias_lr_mult", l.BiasLRMult}, {"bias_decay_mult", l.BiasDecayMult}} {
			if m.v < 0 {
				return p.errorf("%s must be ≥ 0, got %s", m.key, formatFloat(m.v))
			}
		}
	}
	switch l.Kind {
	case Conv:
		if err := p.atLeast("group", l.Group, 1); err != nil {
			return err
		}
		if in.C%l.Group != 0 || l.Out%l.Group != 0 {
			return p.errorf("group %d must divide the input channels (%d) and out (%d)", l.Group, in.C, l.Out)
		}
	case LRN:
		if l.Size < 1 || l.Size%2 == 0 {
			return p.errorf("size must be odd and ≥ 1, got %d", l.Size)
		}
		if l.Alpha < 0 || l.Beta < 0 || l.K <= 0 {
			return p.errorf("need alpha ≥ 0, beta ≥ 0, k > 0; got alpha=%s beta=%s k=%s",
				formatFloat(l.Alpha), formatFloat(l.Beta), formatFloat(l.K))
		}
	case Dropout:
		if !(l.Ratio >= 0 && l.Ratio < 1) {
			return p.errorf("ratio must be in [0, 1), got %s", formatFloat(l.Ratio))
		}
	case BatchNorm:
		if !(l.Eps > 0) {
			return p.errorf("eps must be > 0, got %s", formatFloat(l.Eps))
		}
	case Add:
		if b := spec.shapeOf(inputs[1]); b != in {
			return p.errorf("%s (%s) and %s (%s) differ in shape", l.From[0], in, l.From[1], b)
		}
	case Softmax:
		if in.Len() < 2 {
			return p.errorf("needs at least 2 inputs (classes), got %d", in.Len())
		}
	}
	if l.Kind == Conv || (l.Kind == Pool && !l.Global) {
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
		if l.Kind == Pool && !l.Floor {
			// Ceil rounding may add a window that starts past the padded
			// input and would pool nothing.
			if h, w := poolOut(l, in); (h-1)*l.Stride >= in.H+l.Pad || (w-1)*l.Stride >= in.W+l.Pad {
				return p.errorf("the last window of ceil rounding starts past the input %s (kernel %d, stride %d, pad %d): use round=floor or a stride no larger than the kernel",
					in, l.Kernel, l.Stride, l.Pad)
			}
		}
	}
	// The sizes of the layer's parameters and of its output per image.
	var w, out int
	var ok bool
	switch l.Kind {
	case Conv:
		w, ok = product(l.Out, in.C/l.Group, l.Kernel, l.Kernel)
	case FC:
		w, ok = product(l.Out, in.Len())
	default:
		ok = true
	}
	if !ok || w > MaxTensor {
		return p.tooLarge("%s: %s weights (%s), more than the %s values a tensor may hold",
			l.Name, formatCount(w), formatBytes(4*int64(w)), formatCount(MaxTensor))
	}
	o := outShape(l, in)
	if out, ok = product(o.C, o.H, o.W); !ok || out > MaxTensor {
		return p.tooLarge("%s: an output of %d×%d×%d per image holds more than the %s values a tensor may hold",
			l.Name, o.C, o.H, o.W, formatCount(MaxTensor))
	}
	return nil
}

// outShape is the shape of layer l's output for input shape in.
func outShape(l *LayerSpec, in Shape) Shape {
	switch l.Kind {
	case Conv:
		s := convShape(l, in, 1)
		return Shape{C: l.Out, H: s.OutH(), W: s.OutW()}
	case Pool:
		h, w := poolOut(l, in)
		return Shape{C: in.C, H: h, W: w}
	case FC:
		return Shape{C: l.Out, H: 1, W: 1}
	}
	return in
}
