package nn

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/softsync/softsync/kernels"
)

// ErrTooLarge is wrapped by the errors of a network, or a Net of it,
// whose parameters or activations cannot be allocated: a tensor beyond
// MaxTensor values, or a Net beyond Config.MemoryLimit. They name the
// spec file, the line and the layer, and the bytes.
var ErrTooLarge = errors.New("network too large")

// MaxTensor is the most values one tensor (a layer's weights, one
// activation of a whole batch, the parameter vector) may hold: the
// kernels index with 32-bit integers, and weights files count in them.
const MaxTensor = math.MaxInt32

// MemoryPlan is the memory, in bytes, a Net allocates when it is built
// (New with the same Config and engine): nothing more is allocated while
// it trains, except by the engine's Workspaces, which grow to Workspace
// on the first step.
type MemoryPlan struct {
	// Params is the parameter vector (learnable values and state), which
	// Nets made with WithBatch share.
	Params int64
	// Grads is the gradient vector (none with Config.Inference); with
	// Config.Grads it lies in the caller's memory.
	Grads int64
	// WorkerGrads are the gradient vectors of the workers after the
	// first (without the parameters of a split fc tail, Config.SplitFC)
	// and the scratch vectors of workers cut into several parts, which
	// each step sums into Grads.
	WorkerGrads int64
	// Activations are the buffers of the layers' outputs and, in
	// training, of their gradients, reused where their lifetimes allow,
	// with pooling masks, LRN scales, layout changes and the logits and
	// probabilities, for every worker, and the whole batch's buffers of
	// a split fc tail.
	Activations int64
	// Workspace is the engine's scratch memory: the kernels.Workspace
	// of every part of every worker, which grows to the largest need of
	// the part's convolutions and LRN layers, forward and (training)
	// backward, as the engine reports them (kernels.ConvWorkspace,
	// kernels.LRNWorkspace: an estimate for an engine that cannot say),
	// and, with several workers, to the input of its largest batch norm
	// layer, which the backward pass corrects its gradient with.
	Workspace int64
	// Largest is the largest single buffer, and LargestLayer the name of
	// the layer whose output or weights it holds.
	Largest      int64
	LargestLayer string
}

// Total is the sum of the components.
func (m MemoryPlan) Total() int64 {
	return m.Params + m.Grads + m.WorkerGrads + m.Activations + m.Workspace
}

// String lists the components, as "1.2 GiB (parameters 44.6 MiB,
// gradients 44.6 MiB, worker gradients 0 B, activations 1.1 GiB,
// workspace 12.0 MiB)".
func (m MemoryPlan) String() string {
	return fmt.Sprintf("%s (parameters %s, gradients %s, worker gradients %s, activations %s, workspace %s)",
		formatBytes(m.Total()), formatBytes(m.Params), formatBytes(m.Grads), formatBytes(m.WorkerGrads),
		formatBytes(m.Activations), formatBytes(m.Workspace))
}

// split is how a Net cuts its batch: the parts of each worker, in images.
type split [][]int

// splitBatch returns how a Net of cfg cuts its batch (see Config.Workers
// and Config.Part).
func (s *Spec) splitBatch(cfg Config) split {
	w := min(max(cfg.Workers, 1), cfg.Batch)
	part := cfg.Part
	if part == 0 && !s.autoSplit(cfg, w) {
		part = s.PartBatch(w)
	}
	if part <= 0 {
		part = cfg.Batch
	}
	sp := make(split, w)
	for i := range w {
		lo, hi := i*cfg.Batch/w, (i+1)*cfg.Batch/w
		parts := (hi - lo + part - 1) / part
		for j := range parts {
			sp[i] = append(sp[i], (j+1)*(hi-lo)/parts-j*(hi-lo)/parts)
		}
	}
	return sp
}

// autoSplit reports whether a Net of cfg with w workers splits its fc
// tail when its shares are not cut into parts (Config.SplitFC): a split
// tail runs between the forward and backward passes of every part, so
// that parts would no longer find their activations in cache, and is not
// cut.
func (s *Spec) autoSplit(cfg Config, w int) bool {
	if cfg.SplitFC < 0 || w < 2 {
		return false
	}
	t := s.fcTail()
	return t >= 0 && (cfg.SplitFC > 0 || s.tailWeightBytes(t) >= splitFCBytes)
}

// check validates cfg for s: the batch, the workers and parts, every
// tensor of a part within MaxTensor, and the whole within
// cfg.MemoryLimit. It returns the plan of the memory on engine e.
func (s *Spec) check(cfg Config, e kernels.Engine) (MemoryPlan, error) {
	switch {
	case cfg.Batch < 1:
		return MemoryPlan{}, fmt.Errorf("%s: batch size must be ≥ 1, got %d", s.Name, cfg.Batch)
	case cfg.Workers < 0:
		return MemoryPlan{}, fmt.Errorf("%s: workers must be ≥ 0, got %d", s.Name, cfg.Workers)
	case cfg.Part > 0 && s.HasBatchNorm() && !cfg.Inference:
		return MemoryPlan{}, fmt.Errorf("%s: Part must be 0 or negative for a network with batch norm, whose statistics span each whole batch; got %d", s.Name, cfg.Part)
	case cfg.MemoryLimit < 0:
		return MemoryPlan{}, fmt.Errorf("%s: MemoryLimit must be ≥ 0, got %d", s.Name, cfg.MemoryLimit)
	}
	if err := s.checkBatchNorm(cfg); err != nil {
		return MemoryPlan{}, err
	}
	sp := s.splitBatch(cfg)
	largest := 0
	for _, parts := range sp {
		largest = max(largest, parts[0])
	}
	// Every tensor of the largest part, and the logits of the batch.
	for i := range s.Layers {
		l := &s.Layers[i]
		n, ok := product(largest, s.outs[i].Len())
		if l.Kind == Softmax {
			n, ok = product(cfg.Batch, s.outs[i].Len())
		}
		if !ok || n > MaxTensor {
			return MemoryPlan{}, fmt.Errorf("%w: %s:%d: %s %s: its output for %d images holds %s values (%s), more than the %s a tensor may hold",
				ErrTooLarge, s.File, l.Line, l.Kind, l.Name, largest, formatCount(n), formatBytes(4*int64(n)), formatCount(MaxTensor))
		}
	}
	m := s.memory(cfg, sp, e)
	if cfg.MemoryLimit > 0 && m.Total() > cfg.MemoryLimit {
		return m, fmt.Errorf("%w: %s at batch %d with %d worker(s) needs %s, above the limit of %s; its largest buffer is %s of %s",
			ErrTooLarge, s.Name, cfg.Batch, len(sp), m, formatBytes(cfg.MemoryLimit), formatBytes(m.Largest), m.LargestLayer)
	}
	return m, nil
}

// checkBatchNorm refuses training with batch norm on one value per
// channel: its variance is then undefined (PyTorch refuses it too).
func (s *Spec) checkBatchNorm(cfg Config) error {
	if cfg.Inference {
		return nil
	}
	for i := range s.Layers {
		l := &s.Layers[i]
		if l.Kind != BatchNorm {
			continue
		}
		if in := s.inShape(i); cfg.Batch*in.H*in.W < 2 {
			return fmt.Errorf("%s:%d: batchnorm %s: training needs more than one value per channel, got batch %d of %s",
				s.File, l.Line, l.Name, cfg.Batch, in)
		}
	}
	return nil
}

// Memory returns what a Net of this spec built with cfg on engine e
// allocates (see MemoryPlan), or the error New would return for cfg,
// before anything is allocated. Only the workspace depends on e, which
// may be nil when the engine is not known yet: the workspace is then
// estimated (see kernels.ConvWorkspace).
func (s *Spec) Memory(cfg Config, e kernels.Engine) (MemoryPlan, error) { return s.check(cfg, e) }

// memory sums the plan of every part of split sp on engine e.
func (s *Spec) memory(cfg Config, sp split, e kernels.Engine) MemoryPlan {
	vec := int64(s.VectorLen()) * 4
	m := MemoryPlan{Params: vec}
	if !cfg.Inference {
		m.Grads = vec
	}
	k := int64(s.Classes())
	m.Activations = 3 * int64(cfg.Batch) * k * 4 // logits, probabilities, loss gradient
	t, workerVec := s.splitTail(cfg, sp), vec
	if t < len(s.Layers) {
		m.Activations += 4 * int64(s.tailFloats(t, cfg.Batch, len(sp), !cfg.Inference))
		workerVec = 4 * int64(s.tailOffset(t))
	}
	plans := map[int]*plan{}
	for w, parts := range sp {
		if !cfg.Inference && w > 0 {
			m.WorkerGrads += workerVec
		}
		if !cfg.Inference && len(parts) > 1 {
			m.WorkerGrads += vec
		}
		for _, n := range parts {
			p := plans[n]
			if p == nil {
				p = newPlan(s, n, !cfg.Inference, t)
				plans[n] = p
			}
			m.Activations += 4 * (int64(p.slotFloats()) + int64(p.maskInts()) + int64(p.statFloats()))
			m.Workspace += 4 * int64(p.workspace(e, len(sp)))
			for _, size := range p.slots {
				if b := 4 * int64(size); b > m.Largest {
					m.Largest, m.LargestLayer = b, p.slotLayer(size)
				}
			}
		}
	}
	if m.Params >= m.Largest {
		m.Largest, m.LargestLayer = m.Params, "the parameter vector"
	}
	return m
}

// statFloats is the floats of batch norm's per-channel statistics of a
// replica.
func (p *plan) statFloats() int {
	n := 0
	for _, op := range p.ops {
		if op.kind == BatchNorm {
			n += 4 * p.tensors[op.out].shape.C
		}
	}
	return n
}

// workspace is, in floats, what the Workspace of a replica of the plan
// grows to on engine e in a Net of workers workers: the largest need of
// its convolutions and LRN layers, forward and in training backward
// (the first layer's convolution without its input gradient), and in
// training with several workers the input of its batch norm layers
// (bnLayer.backward).
func (p *plan) workspace(e kernels.Engine, workers int) int {
	need := 0
	for _, op := range p.ops {
		if op.alias || op.layer < 0 {
			continue
		}
		l, in := &p.spec.Layers[op.layer], &p.tensors[op.in[0]]
		switch op.kind {
		case Conv:
			need = max(need, kernels.ConvWorkspace(e, layerConvShape(l, in.shape, p.n), kernels.ConvForwardPass))
		case LRN:
			need = max(need, kernels.LRNWorkspace(e, lrnShape(l, in.shape, in.cnhw, p.n)))
		}
	}
	if !p.train {
		return need
	}
	for _, st := range p.bwd {
		op := &p.ops[st.op]
		if op.alias || op.layer < 0 {
			continue
		}
		l, in := &p.spec.Layers[op.layer], &p.tensors[op.in[0]]
		switch {
		case op.kind == Conv:
			pass := kernels.ConvBackwardPass
			if st.dx[0] < 0 {
				pass = kernels.ConvWeightsPass
			}
			need = max(need, kernels.ConvWorkspace(e, layerConvShape(l, in.shape, p.n), pass))
		case op.kind == BatchNorm && workers > 1 && st.dx[0] >= 0:
			need = max(need, in.len)
		}
	}
	return need
}

// slotLayer names the layer whose output or weights a slot of size
// floats holds first.
func (p *plan) slotLayer(size int) string {
	for _, t := range p.tensors {
		if t.len == size && t.producer >= 0 {
			if l := p.ops[t.producer].layer; l >= 0 {
				ls := &p.spec.Layers[l]
				return fmt.Sprintf("the output of %s %s (%s:%d)", ls.Kind, ls.Name, p.spec.File, ls.Line)
			}
		}
	}
	return "an activation"
}

// product returns the product of vals and whether it fits an int
// without overflow (every value ≥ 0).
func product(vals ...int) (int, bool) {
	p := uint64(1)
	for _, v := range vals {
		if v < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(p, uint64(v))
		if hi != 0 || lo > math.MaxInt64 {
			return math.MaxInt64, false
		}
		p = lo
	}
	return int(p), true
}

// formatCount writes n with thousands separators: 1,568,000,000.
func formatCount(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var b []byte
	for i, c := range []byte(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, c)
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}

// formatBytes writes a byte count in binary units: 44.6 MiB, 5.7 TiB.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
