package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/ps/param"
)

// Config sizes a Net.
type Config struct {
	// Batch is the number of images per Forward, ≥ 1.
	Batch int
	// Workers is the number of goroutines that share each step: the batch
	// is split into Workers contiguous parts that run concurrently, each
	// with its own activations and Workspace, and their parameter
	// gradients are summed. 0 means 1 (the caller's goroutine alone).
	// At most Batch workers are used. Splitting pays off when one network
	// should use several cores and the engine's own BLAS runs one thread
	// (kernels.Config.Threads = 1); with several learners per process,
	// keep 1. Batch norm's statistics span every worker's images (the
	// workers meet at each batch norm layer), so the results do not
	// depend on Workers but for the order of float32 sums.
	Workers int
	// Part is the number of images a worker runs through the layers at a
	// time: its share of the batch is cut into parts of at most Part
	// images, each with its own activations, and Gradient runs each part
	// forward then backward before the next one starts, so that a part's
	// activations are still in the core's cache when they are read back.
	// The parts' parameter gradients are summed into the worker's. 0
	// means Spec.PartBatch(Workers): with several workers, parts whose
	// largest activation fits a core's L2 cache, unless the workers split
	// the fc tail (SplitFC), which runs between every part's forward and
	// backward passes: then one part per worker; a negative value means
	// no cutting (one part per worker). A network with batch norm is not
	// cut (its statistics span the batch): Part must be 0 or negative.
	Part int
	// Grads, if set, is where the Net keeps its gradient vector
	// (Spec.VectorLen() floats): memory a transport can send from in
	// place, such as the payload of a message of rdma.Network.NewMsg.
	// nil: the Net allocates it.
	Grads []float32
	// Inference makes a Net for testing only (Evaluate): no gradient
	// vector, no backward pass, and activations kept only as long as the
	// forward pass reads them, which for deep networks is a fraction of
	// a training Net's memory.
	Inference bool
	// SplitFC decides how several workers share the network's fc tail:
	// the fully connected layers just before the loss, with the relus
	// and dropouts between them, after at least one other layer (AlexNet's
	// fc6 to fc8). Split, each worker computes a slice of each of those
	// layers' outputs, and their weight gradients, for the whole batch,
	// instead of all the outputs for its share of the images: the weights
	// are read once per pass in all, not once per worker, and their
	// gradients are not summed across workers. 0 splits the tail when its
	// weights take 4 MiB or more (and then does not cut the workers'
	// shares into parts: Part 0 means one part per worker); a positive
	// value whenever the Net has a tail and no worker's share is cut into
	// parts; a negative value never. The results do not depend on it but
	// for the order of float32 sums.
	SplitFC int
	// MemoryLimit, if positive, is the most bytes New may allocate
	// (Spec.Memory's Total): a larger Net is refused with ErrTooLarge
	// before anything is allocated.
	MemoryLimit int64
}

// Net is a network from a Spec, instantiated for a fixed batch size on one
// kernels.Engine, with every buffer allocated up front: in steady state
// Forward, Backward, Gradient and Evaluate allocate nothing.
//
// Parameters: the parameter vector (Params) is one contiguous []float32
// of Spec.VectorLen() values: the layers with parameters in spec order,
// within a layer the weights then the bias (conv, fc; no bias with
// bias=none), or the scale, the shift, the running mean and the running
// variance (batchnorm); convolution weights are [out][in/group][kh][kw]
// and fully connected weights [out][in] (in = C·H·W of the layer's input,
// flattened in NCHW order). Grads has the same layout. Layout describes
// it as param.Segments, named "<layer>.weight", "<layer>.bias",
// "<layer>.running_mean" and "<layer>.running_var" (PyTorch's names),
// carrying the layer's lr_mult and decay_mult; the running statistics
// are param.State segments, whose slots in Grads hold, after a training
// pass, the batch's mean and unbiased variance (see BNMomentum for how a
// solver folds them in).
//
// Concurrency: a Net is used by one goroutine at a time (with Workers > 1
// it starts its own helper goroutines, stopped by Close). Any number of
// Nets may run concurrently on one Engine: each owns its
// kernels.Workspaces and buffers. Nets made with WithBatch share the
// parameter vector, so they must not run while another one's parameters
// are being written.
type Net struct {
	spec      *Spec
	e         kernels.Engine
	batch     int
	workers   int // as configured; len(groups) may be fewer
	part      int // as configured
	splitFC   int // as configured
	inference bool
	params    []float32
	grads     []float32
	layout    []param.Segment
	logits    []float32 // batch × classes, written by the replicas
	prob      []float32
	dlogits   []float32
	loss      float32
	reps      []*replica   // every part, in batch order; reps[0] writes grads directly
	groups    [][]*replica // the parts of each worker, a contiguous run of reps
	pool      *pool        // nil with one worker
	hook      func(lo int) // SetGradHook's
	reduced   int          // with a pool and a hook: Grads()[reduced:] holds the workers' sum
	onLayer   func(lo int) // n.poolReady, made once
	onTail    func(lo int) // n.tailReady, made once
	// tail, with several workers splitting the fc tail (Config.SplitFC),
	// runs the layers from the spec's layer tailLayer on; the replicas
	// run those before it. Its parameters are Params()[tailLo:], whose
	// gradients the workers write straight into Grads: the other
	// workers' gradient vectors hold tailLo floats.
	tail      *tail
	tailLayer int
	tailLo    int
	// seed is the dropout seed of the current training pass; fresh: set
	// by SetSeed and not used yet. tested: the last forward pass was
	// Evaluate, so Backward has nothing to work on.
	seed          uint64
	fresh, tested bool
	stateLimit    float32 // SetStateLimit's; 0 for none
}

// replica runs the operations of a plan on a contiguous part of the
// batch.
type replica struct {
	e       kernels.Engine
	n       int // images
	off     int // first image within the Net's batch
	il, k   int // values per image, classes
	scale   float32
	plan    *plan
	vals    [][]float32 // per value of the plan: its buffer (vals[valInput] set per pass)
	layers  []layer     // per op: nil for add and the operations that copy nothing
	prob    []float32   // this part's rows of the Net's buffers
	dlogits []float32
	grads   []float32
	// accum is the worker's gradient sum when this part is not the
	// worker's first: backward writes each layer's parameter gradients
	// into grads (a scratch vector the worker's other parts share) and
	// adds them into accum. The first part writes accum directly.
	accum  []float32
	params [][2]int // per op: the range of its layer's parameters in the vector
	ws     kernels.Workspace
	loss   float32
	// tail is the Net's split fc tail, which the replica's worker runs
	// its share of after the replica's layers (one part per worker).
	tail   *tail
	worker int
	// ready, set on the last part of a Net with one worker and a hook,
	// is called after each layer with parameters has its final gradient
	// (see SetGradHook).
	ready func(lo int)
}

// New builds spec on engine e for cfg. Its parameters are zero: call
// Init, or copy trained values into Params. Call Close when done if
// cfg.Workers > 1. A Net that Spec.Memory(cfg, e) refuses (a tensor beyond
// MaxTensor values, or beyond cfg.MemoryLimit bytes in all) is refused
// before anything is allocated, with an error wrapping ErrTooLarge.
func New(spec *Spec, e kernels.Engine, cfg Config) (*Net, error) {
	return build(spec, e, cfg, nil)
}

// WithBatch returns a Net of the same spec, engine, workers and purpose
// (training or Inference) for another batch size (for example to
// evaluate with a larger batch) that shares this Net's parameter vector;
// it has its own gradients and buffers.
func (n *Net) WithBatch(batch int) (*Net, error) {
	return build(n.spec, n.e, Config{Batch: batch, Workers: n.workers, Part: n.part, SplitFC: n.splitFC, Inference: n.inference}, n.params)
}

func build(spec *Spec, e kernels.Engine, cfg Config, params []float32) (*Net, error) {
	if e == nil {
		panic("nn.New: nil engine")
	}
	if _, err := spec.check(cfg, e); err != nil {
		return nil, err
	}
	np := spec.VectorLen()
	if cfg.Grads != nil && len(cfg.Grads) != np {
		return nil, fmt.Errorf("%s: Grads holds %d floats, the network's vector has %d", spec.Name, len(cfg.Grads), np)
	}
	if params == nil {
		params = make([]float32, np)
	}
	var grads []float32
	switch {
	case cfg.Inference:
	case cfg.Grads == nil:
		grads = make([]float32, np)
	default:
		grads = cfg.Grads
		clear(grads)
	}
	k := spec.Classes()
	n := &Net{
		spec: spec, e: e, batch: cfg.Batch, workers: cfg.Workers, part: cfg.Part, splitFC: cfg.SplitFC, inference: cfg.Inference,
		params: params, grads: grads,
		logits: make([]float32, cfg.Batch*k), prob: make([]float32, cfg.Batch*k), dlogits: make([]float32, cfg.Batch*k),
	}
	n.layout = slices.Clone(spec.layout())
	segOf := map[string]int{}
	for i, s := range n.layout {
		segOf[s.Name] = i
	}
	sp := spec.splitBatch(cfg)
	plans := map[int]*plan{}
	var bar *barrier
	if len(sp) > 1 {
		bar = newBarrier(len(sp))
	}
	n.tailLayer, n.tailLo = spec.splitTail(cfg, sp), np
	if n.tailLayer < len(spec.Layers) {
		n.tail = n.newTail(n.tailLayer, len(sp), bar, segOf)
		n.tailLo = n.tail.fcs[0].lo
	}
	syncs := map[int]*bnSync{} // per op index, with several workers
	lo := 0
	for w, parts := range sp {
		var accum, scratch []float32
		if !cfg.Inference {
			accum = n.grads
			if w > 0 {
				accum = make([]float32, n.tailLo)
			}
			if len(parts) > 1 {
				scratch = make([]float32, np)
			}
		}
		var group []*replica
		for j, size := range parts {
			p := plans[size]
			if p == nil {
				p = newPlan(spec, size, !cfg.Inference, n.tailLayer)
				plans[size] = p
			}
			var r *replica
			if j == 0 {
				r = n.newReplica(p, lo, accum, nil, segOf)
			} else {
				r = n.newReplica(p, lo, scratch, accum, segOf)
			}
			r.worker = w
			r.connectBN(w, len(sp), bar, syncs)
			group = append(group, r)
			lo += size
		}
		n.reps = append(n.reps, group...)
		n.groups = append(n.groups, group)
	}
	if len(sp) > 1 {
		n.pool = startPool(n.groups)
		runtime.AddCleanup(n, (*pool).stop, n.pool)
	}
	return n, nil
}

// newReplica builds the operations of plan p for the images from lo on,
// writing parameter gradients into grads, and adding them into accum when
// it is not nil; segOf indexes the layout by segment name.
func (n *Net) newReplica(p *plan, lo int, grads, accum []float32, segOf map[string]int) *replica {
	spec, k := n.spec, n.spec.Classes()
	hi := lo + p.n
	r := &replica{
		e: n.e, n: p.n, off: lo, il: spec.Input.Len(), k: k, scale: float32(p.n) / float32(n.batch), plan: p,
		vals: make([][]float32, len(p.values)), layers: make([]layer, len(p.ops)), params: make([][2]int, len(p.ops)),
		prob: n.prob[lo*k : hi*k], dlogits: n.dlogits[lo*k : hi*k], grads: grads, accum: accum,
	}
	slots := make([][]float32, len(p.slots))
	for i, size := range p.slots {
		slots[i] = make([]float32, size)
	}
	for v := numPinned; v < len(p.values); v++ {
		val := &p.values[v]
		r.vals[v] = slots[val.slot][:val.len:val.len]
	}
	r.vals[valLogits] = n.logits[lo*k : hi*k]
	r.vals[valDlogits] = r.dlogits
	if t := n.tail; t != nil { // the replica's layers end at the tail's input
		in := len(t.x0) / n.batch
		r.tail = t
		r.vals[valLogits] = t.x0[lo*in : hi*in]
		r.vals[valDlogits] = nil
		if t.dx0 != nil {
			r.vals[valDlogits] = t.dx0[lo*in : hi*in]
		}
	}
	var shared []int32
	if p.sharedMask {
		shared = make([]int32, p.maskInts())
	}
	for o := range p.ops {
		r.layers[o] = n.newLayer(r, p, o, segOf, shared)
	}
	return r
}

// segs returns the parameter and gradient slices of layer i's segment
// named suffix (nil, nil if it has none), and records the layer's range.
func (n *Net) segs(r *replica, o int, name string, segOf map[string]int) (w, g []float32) {
	k, ok := segOf[name]
	if !ok {
		return nil, nil
	}
	s := n.layout[k]
	lo, hi := s.Offset, s.Offset+s.Len
	rg := &r.params[o]
	if rg[1] == 0 {
		rg[0] = lo
	}
	rg[1] = hi
	w = n.params[lo:hi:hi]
	if r.grads != nil {
		g = r.grads[lo:hi:hi]
	}
	return w, g
}

// newLayer makes op o of plan p for replica r.
func (n *Net) newLayer(r *replica, p *plan, o int, segOf map[string]int, sharedMask []int32) layer {
	op := &p.ops[o]
	in, out := &p.tensors[op.in[0]], &p.tensors[op.out]
	if op.alias || op.kind == Add {
		return nil
	}
	// planes is the (outer, inner) order of the H×W planes of the input.
	planes := [2]int{r.n, in.shape.C}
	if in.cnhw {
		planes = [2]int{in.shape.C, r.n}
	}
	if op.layer < 0 {
		return &swapLayer{a: planes[0], b: planes[1], p: in.shape.H * in.shape.W}
	}
	ls := &n.spec.Layers[op.layer]
	switch ls.Kind {
	case Conv:
		l := &convLayer{e: n.e, ws: &r.ws, s: layerConvShape(ls, in.shape, r.n)}
		l.w, l.dw = n.segs(r, o, ls.Name+".weight", segOf)
		l.b, l.db = n.segs(r, o, ls.Name+".bias", segOf)
		return l
	case FC:
		l := &fcLayer{e: n.e, n: r.n, in: in.shape.Len(), out: ls.Out}
		l.w, l.dw = n.segs(r, o, ls.Name+".weight", segOf)
		l.b, l.db = n.segs(r, o, ls.Name+".bias", segOf)
		return l
	case Pool:
		s := poolShape(ls, in.shape, r.n)
		s.N, s.C = planes[0], planes[1]
		var mask []int32
		if ls.Mode == kernels.MaxPool {
			if mask = sharedMask; mask == nil {
				mask = make([]int32, s.OutputLen())
			}
			mask = mask[:s.OutputLen()]
		}
		l := &poolLayer{e: n.e, s: s, mask: mask, oh: out.shape.H, ow: out.shape.W}
		if op.trim >= 0 {
			l.trim = r.vals[op.trim]
		}
		if op.trimGrad >= 0 {
			l.trimGrad = r.vals[op.trimGrad]
		}
		return l
	case ReLU:
		return &reluLayer{e: n.e}
	case LRN:
		return &lrnLayer{e: n.e, ws: &r.ws, s: lrnShape(ls, in.shape, in.cnhw, r.n), scale: r.vals[op.scale]}
	case Dropout:
		return &dropoutLayer{e: n.e, ratio: ls.Ratio, seed: &n.seed, index: uint64(op.layer), cnhw: in.cnhw,
			n: r.n, off: r.off, batch: n.batch, c: in.shape.C, plane: in.shape.H * in.shape.W, perItem: in.shape.Len()}
	case BatchNorm:
		c := in.shape.C
		s := kernels.BNShape{N: r.n, C: c, HW: in.shape.H * in.shape.W, Eps: ls.Eps}
		if in.cnhw {
			s.N, s.HW = 1, r.n*in.shape.H*in.shape.W
		}
		l := &bnLayer{e: n.e, ws: &r.ws, s: s, limit: &n.stateLimit, count: float64(r.n * in.shape.H * in.shape.W),
			batchCount: float64(n.batch * in.shape.H * in.shape.W), mean: make([]float32, c), vari: make([]float32, c)}
		l.gamma, l.dgamma = n.segs(r, o, ls.Name+".weight", segOf)
		l.beta, l.dbeta = n.segs(r, o, ls.Name+".bias", segOf)
		l.rmean, l.smean = n.segs(r, o, ls.Name+".running_mean", segOf)
		l.rvar, l.svar = n.segs(r, o, ls.Name+".running_var", segOf)
		return l
	}
	panic(fmt.Sprintf("nn: layer %s of kind %v inside the network", ls.Name, ls.Kind))
}

// connectBN joins replica r's batch norm layers, of worker w of workers,
// to the layers of the same op of the other workers.
func (r *replica) connectBN(w, workers int, bar *barrier, syncs map[int]*bnSync) {
	for o, l := range r.layers {
		bn, ok := l.(*bnLayer)
		if !ok {
			continue
		}
		bn.worker = w
		if workers == 1 {
			continue
		}
		s := syncs[o]
		if s == nil {
			s = newBNSync(bar, workers, bn.s.C)
			syncs[o] = s
		}
		s.layers[w] = bn
		bn.sync, bn.mean, bn.vari, bn.local = s, s.mean, s.vari, make([]float32, 2*bn.s.C)
	}
}

// Close stops the helper goroutines of a Net with several workers; the
// Net must not be used afterwards. It is idempotent and a no-op with one
// worker. (An unreachable Net's goroutines are also stopped by the
// garbage collector, eventually.)
func (n *Net) Close() {
	if n.pool != nil {
		n.pool.stop()
	}
}

// Spec is the network's spec.
func (n *Net) Spec() *Spec { return n.spec }

// Engine is the engine the network runs on.
func (n *Net) Engine() kernels.Engine { return n.e }

// Batch is the number of images per Forward.
func (n *Net) Batch() int { return n.batch }

// Workers is the number of goroutines each batch is split over.
func (n *Net) Workers() int { return len(n.groups) }

// Parts is the number of parts each batch is cut into, all workers
// together (Config.Part).
func (n *Net) Parts() int { return len(n.reps) }

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
func (n *Net) Layout() []param.Segment { return n.layout }

// Init fills the parameters with the spec's fillers drawn from seed (see
// Spec.Init).
func (n *Net) Init(seed uint64) { n.spec.Init(n.params, seed) }

// fill applies filler f (see FillerType).
func fill(v []float32, f Filler, fanIn, fanOut int, r *rand.Rand) {
	uniform := func(a float64) {
		for i := range v {
			v[i] = float32((2*r.Float64() - 1) * a)
		}
	}
	normal := func(std float64) {
		for i := range v {
			v[i] = float32(r.NormFloat64() * std)
		}
	}
	switch f.Type {
	case Xavier:
		uniform(math.Sqrt(3 / float64(fanIn)))
	case Uniform:
		uniform(float64(f.Value))
	case Gaussian:
		normal(float64(f.Value))
	case MSRA:
		normal(math.Sqrt(2 / float64(fanIn)))
	case MSRAFanOut:
		normal(math.Sqrt(2 / float64(fanOut)))
	default:
		for i := range v {
			v[i] = f.Value
		}
	}
}

// SetStateLimit bounds the batch statistics Backward writes into the
// running statistics' slots of Grads to ±limit (0: no bound), for
// gradients sent in a format of smaller range: fp16's largest value is
// 65504, and a variance beyond it would make the push infinite. A
// running statistic then saturates at the bound.
func (n *Net) SetStateLimit(limit float32) { n.stateLimit = limit }

// SetSeed sets the seed of the dropout masks of the next training pass
// (Forward or Gradient). Each training pass after it draws from the seed
// of the pass before mixed once more, so that the masks of a sequence of
// passes after a SetSeed are reproducible; a learner sets the seed of
// each mini-batch from the job's seed and the mini-batch's id. A Net's
// seed starts at 0. Backward and Evaluate draw nothing.
func (n *Net) SetSeed(seed uint64) { n.seed, n.fresh = seed, true }

// Forward runs the network in training on x (Batch images, NCHW,
// Batch·C·H·W values) with their labels (Batch classes in [0, Classes))
// and returns the mean softmax cross-entropy loss over the batch: batch
// norm normalises with the batch's statistics, dropout drops. It keeps
// what Backward needs. x is not modified and must stay unchanged until
// Backward returns. Wrong lengths or a label out of range panic:
// validate data when it is read (package data does); so does a Net made
// for Inference.
func (n *Net) Forward(x []float32, labels []int32) float32 {
	n.checkTraining("Forward")
	n.checkBatch(x, labels)
	n.nextSeed()
	n.run(phaseForward, x, labels)
	return n.loss
}

// Evaluate runs the network at test on x with its labels (as Forward)
// and returns the mean loss: batch norm normalises with its running
// statistics, dropout passes its input on. Logits, Probs and Score then
// describe it; Backward may not follow.
func (n *Net) Evaluate(x []float32, labels []int32) float32 {
	n.checkBatch(x, labels)
	n.tested = true
	n.run(phaseTest, x, labels)
	return n.loss
}

// checkTraining panics in a Net made for Inference.
func (n *Net) checkTraining(method string) {
	if n.inference {
		panic("nn." + method + ": the Net was made for Inference (Config.Inference): only Evaluate runs it")
	}
}

// nextSeed sets the dropout seed of a training pass.
func (n *Net) nextSeed() {
	if !n.fresh {
		n.seed = mix64(n.seed)
	}
	n.fresh, n.tested = false, false
}

// checkBatch panics on a batch of the wrong size or a label out of range.
func (n *Net) checkBatch(x []float32, labels []int32) {
	if want := n.batch * n.spec.Input.Len(); len(x) != want {
		panic(fmt.Sprintf("nn.Forward: x has %d values, want %d (batch %d × %v)", len(x), want, n.batch, n.spec.Input))
	}
	if len(labels) != n.batch {
		panic(fmt.Sprintf("nn.Forward: %d labels, want %d", len(labels), n.batch))
	}
	k := int32(n.Classes())
	for i, l := range labels {
		if l < 0 || l >= k {
			panic(fmt.Sprintf("nn.Forward: label %d of image %d outside [0, %d)", l, i, k))
		}
	}
}

// run performs phase ph on every worker (on the caller's goroutine alone
// with one worker), then the reduction of the workers' gradients after a
// backward pass, and sets the loss after a forward pass.
func (n *Net) run(ph phase, x []float32, labels []int32) {
	if n.pool == nil {
		runGroup(n.groups[0], ph, x, labels)
	} else {
		n.pool.x, n.pool.labels = x, labels
		back := ph == phaseBackward || ph == phaseGradient
		hooked := n.hook != nil && back
		if hooked { // the workers' sums are made layer by layer (poolReady)
			n.pool.onLayer, n.reduced = n.onLayer, n.tailLo
			if n.tail != nil {
				n.tail.hook = n.onTail
			}
			defer func() { // the pool's goroutines keep no reference to n
				n.pool.onLayer = nil
				if n.tail != nil {
					n.tail.hook = nil
				}
			}()
		}
		n.pool.run(ph)
		if back && !hooked {
			n.pool.run(phaseReduce)
		}
	}
	if ph != phaseBackward {
		n.sumLoss()
	}
}

// paramLayers counts the operations with parameters of a replica.
func (r *replica) paramLayers() int {
	k := 0
	for _, p := range r.params {
		if p[1] > p[0] {
			k++
		}
	}
	return k
}

// sumLoss sets the loss from the parts' losses.
func (n *Net) sumLoss() {
	n.loss = 0
	for _, r := range n.reps {
		n.loss += r.scale * r.loss
	}
}

// SetGradHook makes Gradient and Backward call f, on their caller's
// goroutine, each time the parameter gradients Grads()[lo:] have their
// final values for the batch: lo decreases from call to call, and the
// last call of a pass has lo = 0. The calls come while backward goes on,
// after each layer with parameters, last layers first (Grads is in layer
// order), so that the caller can send what is done while the earlier
// layers are computed. With several workers a layer is final once every
// worker has run it backward: the caller's goroutine (worker 0) then
// sums the workers' gradients of that layer, in the order of the sum
// without a hook, and calls f, while the other workers go on. During a
// call Loss is the batch's loss. f must not write Params or Grads, nor
// use the Net. nil removes the hook.
func (n *Net) SetGradHook(f func(lo int)) {
	n.hook = f
	for _, g := range n.groups {
		g[len(g)-1].ready = nil
	}
	if f == nil {
		return
	}
	if n.pool == nil {
		n.reps[len(n.reps)-1].ready = n.gradReady
		return
	}
	n.onLayer, n.onTail = n.poolReady, n.tailReady
	n.pool.hook(n.reps[0].paramLayers())
}

// gradReady is the last part's ready with one worker: every part's
// forward pass is done, so the loss is known.
func (n *Net) gradReady(lo int) {
	n.sumLoss()
	n.hook(lo)
}

// tailReady is the split tail's hook: every worker has written its
// gradients of the fc layer whose parameters start at lo, after every
// forward pass.
func (n *Net) tailReady(lo int) {
	n.sumLoss()
	n.hook(lo)
}

// poolReady is worker 0's ready with several workers, called by its
// last part when it has run backward through the layer whose parameters
// start at lo: it waits until every other worker has too, adds their
// gradients of the parameters from lo to those already summed into
// Grads, and calls the hook. Every worker's forward passes are done by
// then, so the loss is known.
func (n *Net) poolReady(lo int) {
	p := n.pool
	for g := 1; g < len(n.groups); g++ {
		<-p.layerDone[g]
		n.e.Add(n.grads[lo:n.reduced], n.groups[g][0].grads[lo:n.reduced], n.grads[lo:n.reduced])
	}
	n.reduced = lo
	n.sumLoss()
	n.hook(lo)
}

// Backward computes Grads, the gradient of the mean loss of the last
// Forward with respect to every parameter (so averaged over the batch),
// overwriting the previous gradients.
func (n *Net) Backward() {
	n.checkTraining("Backward")
	if n.tested {
		panic("nn.Backward: the last forward pass was Evaluate's, which keeps nothing for Backward")
	}
	n.run(phaseBackward, nil, nil)
}

// Gradient runs Forward and Backward and returns the loss, with the same
// results, faster: each worker runs each of its parts backward right
// after its forward pass, while the part's activations are in cache.
func (n *Net) Gradient(x []float32, labels []int32) float32 {
	n.checkTraining("Gradient")
	n.checkBatch(x, labels)
	n.nextSeed()
	n.run(phaseGradient, x, labels)
	return n.loss
}

// forward runs this part's images (its rows of the Net's batch), in
// training or at test, and returns their mean loss. dlogits is scaled so
// that the parts' gradients add up to the gradient of the whole batch's
// mean loss.
func (r *replica) forward(x []float32, labels []int32, test bool) float32 {
	r.vals[valInput] = x[r.off*r.il : (r.off+r.n)*r.il]
	labels = labels[r.off : r.off+r.n]
	p := r.plan
	for o := range p.ops {
		op := &p.ops[o]
		y := r.vals[p.tensors[op.out].value]
		x := r.vals[p.tensors[op.in[0]].value]
		switch l := r.layers[o]; {
		case op.alias:
		case op.kind == Add:
			r.e.Add(x, r.vals[p.tensors[op.in[1]].value], y)
		case test:
			if t, ok := l.(tester); ok {
				t.test(x, y)
				break
			}
			l.forward(x, y)
		default:
			l.forward(x, y)
		}
	}
	if r.tail != nil { // the loss is the tail's
		return 0
	}
	r.loss = r.e.SoftmaxCrossEntropy(r.n, r.k, r.vals[valLogits], labels, r.prob, r.dlogits)
	if r.scale != 1 {
		for i := range r.dlogits {
			r.dlogits[i] *= r.scale
		}
	}
	return r.loss
}

// backward runs the plan's backward program (see plan).
func (r *replica) backward() {
	p := r.plan
	for i := range p.bwd {
		st := &p.bwd[i]
		op := &p.ops[st.op]
		if l := r.layers[st.op]; l != nil {
			var dx []float32
			if v := st.dx[0]; v >= 0 {
				dx = r.vals[v]
			}
			l.backward(r.vals[p.tensors[op.in[0]].value], r.vals[p.tensors[op.out].value], r.vals[st.dy], dx)
		}
		for _, a := range st.accum {
			r.e.Add(r.vals[a.a], r.vals[a.b], r.vals[a.y])
		}
		if rg := r.params[st.op]; rg[1] > rg[0] {
			if r.accum != nil {
				r.e.Add(r.accum[rg[0]:rg[1]], r.grads[rg[0]:rg[1]], r.accum[rg[0]:rg[1]])
			}
			if r.ready != nil {
				r.ready(rg[0])
			}
		}
	}
}

// Loss is the loss of the last Forward.
func (n *Net) Loss() float32 { return n.loss }

// Logits are the network's outputs of the last Forward, Batch×Classes.
func (n *Net) Logits() []float32 { return n.logits }

// Probs are the softmax probabilities of the last Forward, Batch×Classes.
func (n *Net) Probs() []float32 { return n.prob }

// Score returns, over the rows i < len(labels) of the last Forward, how
// many are classified correctly (largest logit at labels[i], the first on
// ties) and the sum of their cross-entropy losses −log prob[labels[i]].
// Pass a prefix of the labels to score only the valid rows of a partial
// batch.
func (n *Net) Score(labels []int32) (correct int, loss float64) {
	k := n.Classes()
	for i, l := range labels[:min(len(labels), n.batch)] {
		row := n.logits[i*k : (i+1)*k]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if int32(best) == l {
			correct++
		}
		loss -= math.Log(max(float64(n.prob[i*k+int(l)]), math.SmallestNonzeroFloat32))
	}
	return correct, loss
}
