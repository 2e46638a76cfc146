package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/ps/sgd"
)

// Net is a network from a Spec, instantiated for a fixed batch size on one
// kernels.Engine, with every buffer allocated up front: in steady state
// Forward and Backward allocate nothing.
//
// Parameters: all weights and biases live in one contiguous []float32
// (Params), in layer order, within a layer the weights then the bias;
// convolution weights are [out][in][kh][kw] and fully connected weights
// [out][in] (in = C·H·W of the layer's input, flattened in NCHW order).
// Grads has the same layout. Layout describes it as sgd.Segments, one per
// weight or bias, named "<layer>.weight" and "<layer>.bias", carrying the
// layer's lr_mult and decay_mult.
//
// Concurrency: a Net is used by one goroutine at a time. Any number of
// Nets may run concurrently on one Engine: each owns its
// kernels.Workspace and buffers. Nets made with WithBatch share the
// parameter vector, so they must not run while another one's parameters
// are being written.
type Net struct {
	spec    *Spec
	e       kernels.Engine
	batch   int
	ws      kernels.Workspace
	params  []float32
	grads   []float32
	layout  []sgd.Segment
	layers  []layer     // spec.Layers without the final softmax
	acts    [][]float32 // acts[i] is the input of layer i (acts[0] the caller's batch), acts[len(layers)] the logits
	inPlace []bool      // layer i writes its output over its input
	gbuf    [2][]float32
	prob    []float32
	dlogits []float32
	// firstParam is the first layer with parameters (len(layers) if none):
	// layers before it need no backward pass, and it needs no dx.
	firstParam int
	loss       float32
}

// New builds spec for batch images per step on engine e. Its parameters
// are zero: call Init, or copy trained values into Params.
func New(spec *Spec, e kernels.Engine, batch int) (*Net, error) {
	return build(spec, e, batch, nil)
}

// WithBatch returns a Net of the same spec and engine for another batch
// size (for example to evaluate with a larger batch) that shares this
// Net's parameter vector; it has its own gradients and buffers.
func (n *Net) WithBatch(batch int) (*Net, error) {
	return build(n.spec, n.e, batch, n.params)
}

func build(spec *Spec, e kernels.Engine, batch int, params []float32) (*Net, error) {
	if e == nil {
		panic("nn.New: nil engine")
	}
	if batch < 1 {
		return nil, fmt.Errorf("%s: batch size must be ≥ 1, got %d", spec.Name, batch)
	}
	np := spec.NumParams()
	if params == nil {
		params = make([]float32, np)
	}
	L := len(spec.Layers) - 1
	n := &Net{
		spec: spec, e: e, batch: batch, params: params, grads: make([]float32, np),
		layers: make([]layer, L), acts: make([][]float32, L+1), inPlace: make([]bool, L),
		firstParam: L,
	}
	off, maxGrad := 0, 0
	for i := range L {
		ls := &spec.Layers[i]
		in := spec.shapes[i]
		outLen := batch * spec.shapes[i+1].Len()
		if ls.HasParams() && n.firstParam == L {
			n.firstParam = i
		}
		// ReLU runs in place unless its input is the caller's batch or the
		// layer before reads its own output in its backward pass.
		if ls.Kind == ReLU && i > 0 && !readsOutput(spec.Layers[i-1].Kind) {
			n.inPlace[i] = true
			n.acts[i+1] = n.acts[i]
		} else {
			n.acts[i+1] = make([]float32, outLen)
		}
		if i > 0 {
			maxGrad = max(maxGrad, batch*in.Len())
		}
		var w, b, dw, db []float32
		if ls.HasParams() {
			wl, bl := spec.paramLens(i)
			w, dw = params[off:off+wl:off+wl], n.grads[off:off+wl:off+wl]
			n.layout = append(n.layout, sgd.Segment{Name: ls.Name + ".weight", Offset: off, Len: wl,
				LRMult: ls.LRMult, DecayMult: ls.DecayMult})
			off += wl
			b, db = params[off:off+bl:off+bl], n.grads[off:off+bl:off+bl]
			n.layout = append(n.layout, sgd.Segment{Name: ls.Name + ".bias", Offset: off, Len: bl,
				LRMult: ls.BiasLRMult, DecayMult: ls.BiasDecayMult})
			off += bl
		}
		switch ls.Kind {
		case Conv:
			n.layers[i] = &convLayer{e: e, ws: &n.ws, s: convShape(ls, in, batch), w: w, b: b, dw: dw, db: db}
		case FC:
			n.layers[i] = &fcLayer{e: e, n: batch, in: in.Len(), out: ls.Out, w: w, b: b, dw: dw, db: db}
		case Pool:
			s := poolShape(ls, in, batch)
			var mask []int32
			if ls.Mode == kernels.MaxPool {
				mask = make([]int32, s.OutputLen())
			}
			n.layers[i] = &poolLayer{e: e, s: s, mask: mask}
		case ReLU:
			n.layers[i] = &reluLayer{e: e}
		case LRN:
			s := kernels.LRNShape{N: batch, C: in.C, H: in.H, W: in.W, Size: ls.Size, Alpha: ls.Alpha, Beta: ls.Beta, K: ls.K}
			n.layers[i] = &lrnLayer{e: e, ws: &n.ws, s: s, scale: make([]float32, s.Len())}
		default:
			panic(fmt.Sprintf("nn: layer %s of kind %v inside the network", ls.Name, ls.Kind))
		}
	}
	if off != np {
		panic(fmt.Sprintf("nn: layout covers %d of %d parameters", off, np))
	}
	for k := range n.gbuf {
		n.gbuf[k] = make([]float32, maxGrad)
	}
	k := spec.Classes()
	n.prob = make([]float32, batch*k)
	n.dlogits = make([]float32, batch*k)
	return n, nil
}

// readsOutput reports whether a layer kind's backward pass reads its own
// forward output (which an in-place layer after it would overwrite).
func readsOutput(k Kind) bool { return k == LRN || k == ReLU }

// Spec is the network's spec.
func (n *Net) Spec() *Spec { return n.spec }

// Engine is the engine the network runs on.
func (n *Net) Engine() kernels.Engine { return n.e }

// Batch is the number of images per Forward.
func (n *Net) Batch() int { return n.batch }

// Input is the shape of one input image.
func (n *Net) Input() Shape { return n.spec.Input }

// Classes is the number of outputs (classes) of the network.
func (n *Net) Classes() int { return n.spec.Classes() }

// Params is the parameter vector (see Net for its layout). The slice is
// live: writing it changes the network.
func (n *Net) Params() []float32 { return n.params }

// Grads is the gradient vector written by Backward, laid out as Params.
func (n *Net) Grads() []float32 { return n.grads }

// Layout describes Params and Grads as ordered, contiguous segments
// covering the whole vector. The caller must not modify it.
func (n *Net) Layout() []sgd.Segment { return n.layout }

// Init fills the parameters with the spec's fillers, drawn from seed:
// segment k (in Layout order) uses its own stream seeded with (seed, k),
// so a layer's initial values do not depend on the layers before it.
func (n *Net) Init(seed uint64) {
	k := 0
	for i := range n.layers {
		ls := &n.spec.Layers[i]
		if !ls.HasParams() {
			continue
		}
		fanIn := n.spec.fanIn(i)
		for _, f := range []Filler{ls.Weight, ls.Bias} {
			seg := n.layout[k]
			fill(n.params[seg.Offset:seg.Offset+seg.Len], f, fanIn, rand.New(rand.NewPCG(seed, uint64(k))))
			k++
		}
	}
}

// fill applies filler f as Caffe does: Xavier is uniform on
// ±sqrt(3/fanIn), Gaussian is N(0, Value²), Constant sets Value.
func fill(v []float32, f Filler, fanIn int, r *rand.Rand) {
	switch f.Type {
	case Xavier:
		a := math.Sqrt(3 / float64(fanIn))
		for i := range v {
			v[i] = float32((2*r.Float64() - 1) * a)
		}
	case Gaussian:
		for i := range v {
			v[i] = float32(r.NormFloat64() * float64(f.Value))
		}
	default:
		for i := range v {
			v[i] = f.Value
		}
	}
}

// Forward runs the network on x (Batch images, NCHW, Batch·C·H·W values)
// with their labels (Batch classes in [0, Classes)) and returns the mean
// softmax cross-entropy loss over the batch. It keeps what Backward
// needs. x is not modified and must stay unchanged until Backward
// returns. Wrong lengths or a label out of range panic: validate data
// when it is read (package data does).
func (n *Net) Forward(x []float32, labels []int32) float32 {
	if want := n.batch * n.spec.Input.Len(); len(x) != want {
		panic(fmt.Sprintf("nn.Forward: x has %d values, want %d (batch %d × %v)", len(x), want, n.batch, n.spec.Input))
	}
	if len(labels) != n.batch {
		panic(fmt.Sprintf("nn.Forward: %d labels, want %d", len(labels), n.batch))
	}
	n.acts[0] = x
	if len(n.layers) > 0 && n.inPlace[0] {
		panic("nn: the first layer cannot run in place")
	}
	for i, l := range n.layers {
		l.forward(n.acts[i], n.acts[i+1])
	}
	n.loss = n.e.SoftmaxCrossEntropy(n.batch, n.Classes(), n.acts[len(n.layers)], labels, n.prob, n.dlogits)
	return n.loss
}

// Backward computes Grads, the gradient of the mean loss of the last
// Forward with respect to every parameter (so averaged over the batch),
// overwriting the previous gradients.
func (n *Net) Backward() {
	g, cur := n.dlogits, -1
	for i := len(n.layers) - 1; i >= n.firstParam; i-- {
		var dx []float32
		if i > n.firstParam {
			if n.inPlace[i] && cur >= 0 { // never over dlogits: Backward may run again
				dx = g
			} else {
				cur = 1 - max(cur, 0)
				dx = n.gbuf[cur][:len(n.acts[i])]
			}
		}
		n.layers[i].backward(n.acts[i], n.acts[i+1], g, dx)
		g = dx
	}
}

// Gradient runs Forward and Backward and returns the loss.
func (n *Net) Gradient(x []float32, labels []int32) float32 {
	loss := n.Forward(x, labels)
	n.Backward()
	return loss
}

// Loss is the loss of the last Forward.
func (n *Net) Loss() float32 { return n.loss }

// Logits are the network's outputs of the last Forward, Batch×Classes.
func (n *Net) Logits() []float32 { return n.acts[len(n.layers)] }

// Probs are the softmax probabilities of the last Forward, Batch×Classes.
func (n *Net) Probs() []float32 { return n.prob }

// Correct counts the rows i < len(labels) of the last Forward whose
// largest logit (the first, on ties) is at labels[i]. Pass a prefix of the
// labels to count only the valid rows of a partial batch.
func (n *Net) Correct(labels []int32) int {
	k, logits, c := n.Classes(), n.Logits(), 0
	for i, l := range labels[:min(len(labels), n.batch)] {
		row := logits[i*k : (i+1)*k]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if int32(best) == l {
			c++
		}
	}
	return c
}
