package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"

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
	// keep 1.
	Workers int
	// Part is the number of images a worker runs through the layers at a
	// time: its share of the batch is cut into parts of at most Part
	// images, each with its own activations, and Gradient runs each part
	// forward then backward before the next one starts, so that a part's
	// activations are still in the core's cache when they are read back.
	// The parts' parameter gradients are summed into the worker's. 0
	// means Spec.PartBatch(Workers): with several workers, parts whose
	// largest activation fits a core's L2 cache; a negative value means
	// no cutting (one part per worker).
	Part int
	// Grads, if set, is where the Net keeps its gradient vector
	// (Spec.NumParams() floats): memory a transport can send from in
	// place, such as the payload of a message of rdma.Network.NewMsg.
	// nil: the Net allocates it.
	Grads []float32
}

// Net is a network from a Spec, instantiated for a fixed batch size on one
// kernels.Engine, with every buffer allocated up front: in steady state
// Forward and Backward allocate nothing.
//
// Parameters: all weights and biases live in one contiguous []float32
// (Params), in layer order, within a layer the weights then the bias;
// convolution weights are [out][in][kh][kw] and fully connected weights
// [out][in] (in = C·H·W of the layer's input, flattened in NCHW order).
// Grads has the same layout. Layout describes it as param.Segments, one per
// weight or bias, named "<layer>.weight" and "<layer>.bias", carrying the
// layer's lr_mult and decay_mult.
//
// Concurrency: a Net is used by one goroutine at a time (with Workers > 1
// it starts its own helper goroutines, stopped by Close). Any number of
// Nets may run concurrently on one Engine: each owns its
// kernels.Workspaces and buffers. Nets made with WithBatch share the
// parameter vector, so they must not run while another one's parameters
// are being written.
type Net struct {
	spec    *Spec
	e       kernels.Engine
	batch   int
	workers int // as configured; len(groups) may be fewer
	part    int // as configured
	params  []float32
	grads   []float32
	layout  []param.Segment
	logits  []float32 // batch × classes, written by the replicas
	prob    []float32
	dlogits []float32
	loss    float32
	reps    []*replica   // every part, in batch order; reps[0] writes grads directly
	groups  [][]*replica // the parts of each worker, a contiguous run of reps
	pool    *pool        // nil with one worker
	hook    func(lo int) // SetGradHook's
	reduced int          // with a pool and a hook: Grads()[reduced:] holds the workers' sum
	onLayer func(lo int) // n.poolReady, made once
}

// replica runs the layers on a contiguous part of the batch.
type replica struct {
	e       kernels.Engine
	n       int         // images
	off     int         // first image within the Net's batch
	il, k   int         // values per image, classes
	scale   float32     // n / batch: weight of this part's mean loss
	layers  []layer     // the spec's layers without the final softmax
	acts    [][]float32 // acts[i] is the input of layer i (acts[0] the caller's images), acts[len(layers)] the logits
	inPlace []bool      // layer i writes its output over its input
	gbuf    [2][]float32
	prob    []float32 // this part's rows of the Net's buffers
	dlogits []float32
	grads   []float32
	// accum is the worker's gradient sum when this part is not the
	// worker's first: backward writes each layer's parameter gradients
	// into grads (a scratch vector the worker's other parts share) and
	// adds them into accum. The first part writes accum directly.
	accum  []float32
	params [][2]int // the range of layer i's weights and bias in the parameter vector
	ws     kernels.Workspace
	// firstParam is the first layer with parameters: layers before it
	// need no backward pass, and it needs no input gradient.
	firstParam int
	loss       float32
	// ready, set on the last part of a Net with one worker and a hook,
	// is called after each layer with parameters has its final gradient
	// (see SetGradHook).
	ready func(lo int)
}

// New builds spec on engine e for cfg. Its parameters are zero: call
// Init, or copy trained values into Params. Call Close when done if
// cfg.Workers > 1.
func New(spec *Spec, e kernels.Engine, cfg Config) (*Net, error) {
	return build(spec, e, cfg, nil)
}

// WithBatch returns a Net of the same spec, engine and workers for another
// batch size (for example to evaluate with a larger batch) that shares
// this Net's parameter vector; it has its own gradients and buffers.
func (n *Net) WithBatch(batch int) (*Net, error) {
	return build(n.spec, n.e, Config{Batch: batch, Workers: n.workers, Part: n.part}, n.params)
}

func build(spec *Spec, e kernels.Engine, cfg Config, params []float32) (*Net, error) {
	if e == nil {
		panic("nn.New: nil engine")
	}
	if cfg.Batch < 1 {
		return nil, fmt.Errorf("%s: batch size must be ≥ 1, got %d", spec.Name, cfg.Batch)
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("%s: workers must be ≥ 0, got %d", spec.Name, cfg.Workers)
	}
	np := spec.NumParams()
	if params == nil {
		params = make([]float32, np)
	}
	grads := cfg.Grads
	switch {
	case grads == nil:
		grads = make([]float32, np)
	case len(grads) != np:
		return nil, fmt.Errorf("%s: Grads holds %d floats, the network has %d parameters", spec.Name, len(grads), np)
	default:
		clear(grads)
	}
	k := spec.Classes()
	n := &Net{
		spec: spec, e: e, batch: cfg.Batch, workers: cfg.Workers, part: cfg.Part, params: params, grads: grads,
		logits: make([]float32, cfg.Batch*k), prob: make([]float32, cfg.Batch*k), dlogits: make([]float32, cfg.Batch*k),
	}
	n.layout = spec.layout()
	w := min(max(cfg.Workers, 1), cfg.Batch)
	part := cfg.Part
	if part == 0 {
		part = spec.PartBatch(w)
	}
	if part <= 0 {
		part = cfg.Batch
	}
	for i := range w {
		lo, hi := i*cfg.Batch/w, (i+1)*cfg.Batch/w
		accum := n.grads
		if i > 0 {
			accum = make([]float32, np)
		}
		parts := (hi - lo + part - 1) / part
		var scratch []float32
		if parts > 1 {
			scratch = make([]float32, np)
		}
		var group []*replica
		for j := range parts {
			plo, phi := lo+j*(hi-lo)/parts, lo+(j+1)*(hi-lo)/parts
			if j == 0 {
				group = append(group, n.newReplica(plo, phi, accum, nil))
			} else {
				group = append(group, n.newReplica(plo, phi, scratch, accum))
			}
		}
		n.reps = append(n.reps, group...)
		n.groups = append(n.groups, group)
	}
	if w > 1 {
		n.pool = startPool(n.groups)
		runtime.AddCleanup(n, (*pool).stop, n.pool)
	}
	return n, nil
}

// layout lists the parameter segments in order.
func (s *Spec) layout() []param.Segment {
	var segs []param.Segment
	off := 0
	for i := range s.Layers {
		ls := &s.Layers[i]
		if !ls.HasParams() {
			continue
		}
		wl, bl := s.paramLens(i)
		segs = append(segs,
			param.Segment{Name: ls.Name + ".weight", Offset: off, Len: wl, LRMult: ls.LRMult, DecayMult: ls.DecayMult},
			param.Segment{Name: ls.Name + ".bias", Offset: off + wl, Len: bl, LRMult: ls.BiasLRMult, DecayMult: ls.BiasDecayMult})
		off += wl + bl
	}
	return segs
}

// newReplica builds the layers for images lo…hi−1 of the batch, writing
// parameter gradients into grads, and adding them into accum when it is
// not nil.
func (n *Net) newReplica(lo, hi int, grads, accum []float32) *replica {
	spec, batch, k := n.spec, hi-lo, n.spec.Classes()
	L := len(spec.Layers) - 1
	r := &replica{
		e: n.e, n: batch, off: lo, il: spec.Input.Len(), k: k, scale: float32(batch) / float32(n.batch),
		layers: make([]layer, L), acts: make([][]float32, L+1), inPlace: make([]bool, L),
		prob: n.prob[lo*k : hi*k], dlogits: n.dlogits[lo*k : hi*k], grads: grads, accum: accum,
		params: make([][2]int, L), firstParam: L,
	}
	off, maxGrad, seg := 0, 0, 0
	cnhw := false // the layout of layer i's input: NCHW for the caller's images
	for i := range L {
		ls := &spec.Layers[i]
		in := spec.shapes[i]
		if ls.HasParams() && r.firstParam == L {
			r.firstParam = i
		}
		switch {
		case i == L-1:
			// The logits go to this part's rows of the Net's logits.
			r.acts[i+1] = n.logits[lo*k : hi*k]
		case ls.Kind == ReLU && i > 0 && !readsOutput(spec.Layers[i-1].Kind):
			// ReLU runs in place unless its input is the caller's batch
			// or the layer before reads its own output when going back.
			r.inPlace[i] = true
			r.acts[i+1] = r.acts[i]
		default:
			r.acts[i+1] = make([]float32, batch*spec.shapes[i+1].Len())
		}
		if i > 0 {
			maxGrad = max(maxGrad, batch*in.Len())
		}
		var w, b, dw, db []float32
		if ls.HasParams() {
			wl, bl := n.layout[seg].Len, n.layout[seg+1].Len
			r.params[i] = [2]int{off, off + wl + bl}
			w, dw = n.params[off:off+wl:off+wl], grads[off:off+wl:off+wl]
			off += wl
			b, db = n.params[off:off+bl:off+bl], grads[off:off+bl:off+bl]
			off += bl
			seg += 2
		}
		// planes is the (images, channels) order of the H×W planes of
		// this layer's input: channel-major after a convolution.
		planes := [2]int{batch, in.C}
		if cnhw {
			planes = [2]int{in.C, batch}
		}
		// The layouts differ in memory only with several images and channels.
		differ := batch > 1 && in.C > 1
		switch ls.Kind {
		case Conv:
			s := convShape(ls, in, batch)
			s.Layout = kernels.CNHW
			l := &convLayer{e: n.e, ws: &r.ws, s: s, w: w, b: b, dw: dw, db: db}
			if !cnhw && differ {
				l.swap = newSwap(batch, in, i > r.firstParam)
			}
			r.layers[i] = l
			cnhw = true
		case FC:
			l := &fcLayer{e: n.e, n: batch, in: in.Len(), out: ls.Out, w: w, b: b, dw: dw, db: db}
			if cnhw && differ {
				l.swap = newSwap(in.C, Shape{C: batch, H: in.H, W: in.W}, i > r.firstParam)
			}
			r.layers[i] = l
			cnhw = false
		case Pool:
			s := poolShape(ls, in, batch)
			s.N, s.C = planes[0], planes[1]
			var mask []int32
			if ls.Mode == kernels.MaxPool {
				mask = make([]int32, s.OutputLen())
			}
			r.layers[i] = &poolLayer{e: n.e, s: s, mask: mask}
		case ReLU:
			r.layers[i] = &reluLayer{e: n.e}
		case LRN:
			s := kernels.LRNShape{N: planes[0], C: planes[1], H: in.H, W: in.W, Size: ls.Size, Alpha: ls.Alpha, Beta: ls.Beta, K: ls.K}
			r.layers[i] = &lrnLayer{e: n.e, ws: &r.ws, s: s, scale: make([]float32, s.Len())}
		default:
			panic(fmt.Sprintf("nn: layer %s of kind %v inside the network", ls.Name, ls.Kind))
		}
	}
	for j := range r.gbuf {
		r.gbuf[j] = make([]float32, maxGrad)
	}
	return r
}

// readsOutput reports whether a layer kind's backward pass reads its own
// forward output (which an in-place layer after it would overwrite).
func readsOutput(k Kind) bool { return k == LRN || k == ReLU }

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

// Init fills the parameters with the spec's fillers, drawn from seed:
// segment k (in Layout order) uses its own stream seeded with (seed, k),
// so a layer's initial values do not depend on the layers before it.
func (n *Net) Init(seed uint64) {
	k := 0
	for i := range n.spec.Layers {
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
	n.checkBatch(x, labels)
	n.run(phaseForward, x, labels)
	return n.loss
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
		hooked := n.hook != nil && ph != phaseForward
		if hooked { // the workers' sums are made layer by layer (poolReady)
			n.pool.onLayer, n.reduced = n.onLayer, len(n.grads)
			defer func() { n.pool.onLayer = nil }() // the pool's goroutines keep no reference to n
		}
		n.pool.run(ph)
		if ph != phaseForward && !hooked {
			n.pool.run(phaseReduce)
		}
	}
	if ph != phaseBackward {
		n.sumLoss()
	}
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
	n.onLayer = n.poolReady
	n.pool.hook(len(n.layout) / 2) // a weight and a bias segment per layer with parameters
}

// gradReady is the last part's ready with one worker: every part's
// forward pass is done, so the loss is known.
func (n *Net) gradReady(lo int) {
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
		add(n.grads[lo:n.reduced], n.groups[g][0].grads[lo:n.reduced])
	}
	n.reduced = lo
	n.sumLoss()
	n.hook(lo)
}

// Backward computes Grads, the gradient of the mean loss of the last
// Forward with respect to every parameter (so averaged over the batch),
// overwriting the previous gradients.
func (n *Net) Backward() {
	n.run(phaseBackward, nil, nil)
}

// Gradient runs Forward and Backward and returns the loss, with the same
// results, faster: each worker runs each of its parts backward right
// after its forward pass, while the part's activations are in cache.
func (n *Net) Gradient(x []float32, labels []int32) float32 {
	n.checkBatch(x, labels)
	n.run(phaseGradient, x, labels)
	return n.loss
}

// forward runs this part's images (its rows of the Net's batch) and
// returns their mean loss. dlogits is scaled so that the parts' gradients
// add up to the gradient of the whole batch's mean loss.
func (r *replica) forward(x []float32, labels []int32) float32 {
	r.acts[0] = x[r.off*r.il : (r.off+r.n)*r.il]
	labels = labels[r.off : r.off+r.n]
	for i, l := range r.layers {
		l.forward(r.acts[i], r.acts[i+1])
	}
	r.loss = r.e.SoftmaxCrossEntropy(r.n, r.k, r.acts[len(r.layers)], labels, r.prob, r.dlogits)
	if r.scale != 1 {
		for i := range r.dlogits {
			r.dlogits[i] *= r.scale
		}
	}
	return r.loss
}

func (r *replica) backward() {
	g, cur := r.dlogits, -1
	for i := len(r.layers) - 1; i >= r.firstParam; i-- {
		var dx []float32
		if i > r.firstParam {
			if r.inPlace[i] && cur >= 0 { // never over dlogits: Backward may run again
				dx = g
			} else {
				cur = 1 - max(cur, 0)
				dx = r.gbuf[cur][:len(r.acts[i])]
			}
		}
		r.layers[i].backward(r.acts[i], r.acts[i+1], g, dx)
		if p := r.params[i]; p[1] > p[0] {
			if r.accum != nil {
				add(r.accum[p[0]:p[1]], r.grads[p[0]:p[1]])
			}
			if r.ready != nil {
				r.ready(p[0])
			}
		}
		g = dx
	}
}

// add adds src into dst, element by element.
func add(dst, src []float32) {
	src = src[:len(dst)]
	for j := range dst {
		dst[j] += src[j]
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
