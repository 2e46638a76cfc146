package nn

import (
	"github.com/softsync/softsync/kernels"
)

// splitFCBytes is the size of the fc tail's weights (fcTail) from which a
// Net of several workers splits the tail by outputs (Config.SplitFC 0):
// below it the weights stay in a core's L2 cache, and each worker reading
// them all costs less than the tail's meetings (a barrier per layer and
// pass). `go test -bench TrainStep ./learner/nn` of lenet (1.6 MB of fc
// weights) and alexnet (235 MB) with both settings is how it is chosen.
const splitFCBytes = 4 << 20

// fcTail returns the index of the first layer of the network's fc tail,
// or −1 if it has none: the longest run of fc, relu and dropout layers
// just before the loss, each reading the layer before it, that starts
// with an fc layer and leaves at least one layer before it.
func (s *Spec) fcTail() int {
	last := len(s.Layers) - 1 // the loss
	t := last
	for t > 0 {
		l := &s.Layers[t-1]
		if l.Kind != FC && l.Kind != ReLU && l.Kind != Dropout {
			break
		}
		if in := s.inputs[t]; len(in) != 1 || in[0] != t-1 {
			break
		}
		if in := s.inputs[t-1]; len(in) != 1 || in[0] != t-2 {
			break
		}
		t--
	}
	for t < last && s.Layers[t].Kind != FC {
		t++
	}
	if t == last || t == 0 {
		return -1
	}
	return t
}

// tailWeightBytes is the bytes of the weights of the fc tail from layer t.
func (s *Spec) tailWeightBytes(t int) int64 {
	var b int64
	for i := t; i < len(s.Layers)-1; i++ {
		b += 4 * int64(s.weightLen(i))
	}
	return b
}

// tailOffset is the offset in the parameter vector of the parameters of
// the fc tail from layer t: those of its first layer, its weights, and
// every later layer's follow them.
func (s *Spec) tailOffset(t int) int {
	name := s.Layers[t].Name + ".weight"
	for _, sg := range s.layout() {
		if sg.Name == name {
			return sg.Offset
		}
	}
	panic("nn: fc layer " + s.Layers[t].Name + " without weights")
}

// splitTail returns the first layer of the fc tail a Net of cfg cut as sp
// splits across its workers (Config.SplitFC), or len(s.Layers) for none.
func (s *Spec) splitTail(cfg Config, sp split) int {
	none := len(s.Layers)
	if cfg.SplitFC < 0 || len(sp) < 2 {
		return none
	}
	for _, parts := range sp {
		if len(parts) > 1 {
			return none
		}
	}
	if !s.autoSplit(cfg, len(sp)) {
		return none
	}
	return s.fcTail()
}

// tail runs the fc tail of a Net whose workers split it by outputs: each
// worker computes, for the whole batch, the outputs cols[w] of every fc
// layer (its rows of the weights), applies the relus and dropouts after
// it to them, and writes the weight and bias gradients of those rows
// straight into the Net's gradient vector; backward, the input gradient's
// columns cols[w] of the layer's input (all of the output gradient times
// those columns of the weights). So the weights are read once per pass
// in all, and no worker's gradient of them is summed with another's. The
// activations are whole-batch NCHW buffers shared by the workers, who
// meet at a barrier once the buffer a layer reads is complete.
type tail struct {
	e       kernels.Engine
	n       int // the batch
	bar     *barrier
	fcs     []*tailFC
	x0, dx0 []float32 // the tail's input (the heads' outputs) and its gradient (nil if the heads need none)
	// yt, per worker, holds its outputs of an fc layer transposed, as
	// the GEMM writes them: cols × batch.
	yt   [][]float32
	k    int       // classes
	seed *uint64   // the Net's dropout seed of the pass
	prob []float32 // the Net's probabilities
	// hook, set by the Net for a backward pass with a gradient hook, is
	// called by worker 0 once every worker has written the gradients of
	// the fc layer whose parameters start at lo.
	hook func(lo int)
}

// tailFC is one fc layer of a tail with the element-wise layers after it.
type tailFC struct {
	in, out      int
	w, b, dw, db []float32 // the whole layer's, in the Net's vectors; b, db nil without a bias
	x, y         []float32 // batch × in, batch × out (the Net's logits for the last)
	dx, dy       []float32 // their gradients (dx nil if not needed; dy the Net's dlogits for the last)
	lo           int       // the offset of its parameters in the vector
	done         func()    // run by worker 0 once every worker has run it backward: calls the hook
	cols         [][2]int  // per worker: its outputs
	inCols       [][2]int  // per worker: its columns of the input gradient (the previous layer's cols)
	after        []tailElem
}

// tailElem is a relu or a dropout, run in place on an fc layer's outputs.
type tailElem struct {
	relu  bool
	ratio float32
	index uint64 // the dropout's layer index (its masks' stream)
}

// splitCols cuts n columns into the ranges of workers workers, at
// multiples of 16 floats (64 bytes) when each gets at least 16.
func splitCols(n, workers int) [][2]int {
	cols := make([][2]int, workers)
	for w := range workers {
		lo, hi := w*n/workers, (w+1)*n/workers
		if n >= 16*workers {
			lo, hi = lo&^15, hi&^15
			if w == workers-1 {
				hi = n
			}
		}
		cols[w] = [2]int{lo, hi}
	}
	return cols
}

// tailFloats is the floats of the activation buffers of the tail from
// layer t for a batch of batch split over workers (the logits and their
// gradient are the Net's), in training or not.
func (s *Spec) tailFloats(t, batch, workers int, train bool) int {
	in := s.inShape(t).Len()
	f := batch * in // the input
	for w := range workers {
		f += batch * s.tailWidest(t, workers, w)
	}
	if train && s.needsGrad()[t-1] {
		f += batch * in
	}
	for i := t; i < len(s.Layers)-2; i++ {
		if s.Layers[i].Kind == FC {
			f += batch * s.Layers[i].Out // its output, the next fc's input
			if train {
				f += batch * s.Layers[i].Out
			}
		}
	}
	return f
}

// tailWidest is the most outputs worker w of workers computes of any fc
// layer of the tail from layer t.
func (s *Spec) tailWidest(t, workers, w int) int {
	widest := 0
	for i := t; i < len(s.Layers)-1; i++ {
		if s.Layers[i].Kind == FC {
			c := splitCols(s.Layers[i].Out, workers)[w]
			widest = max(widest, c[1]-c[0])
		}
	}
	return widest
}

// newTail builds the tail from layer t of n's spec for workers workers.
func (n *Net) newTail(t, workers int, bar *barrier, segOf map[string]int) *tail {
	s := n.spec
	in := s.inShape(t).Len()
	tl := &tail{e: n.e, n: n.batch, bar: bar, k: s.Classes(), x0: make([]float32, n.batch*in), seed: &n.seed, prob: n.prob}
	train := !n.inference
	if train && s.needsGrad()[t-1] {
		tl.dx0 = make([]float32, n.batch*in)
	}
	tl.yt = make([][]float32, workers)
	for w := range workers {
		tl.yt[w] = make([]float32, n.batch*s.tailWidest(t, workers, w))
	}
	x, dx := tl.x0, tl.dx0
	seg := func(name string) ([]float32, []float32, int) {
		k, ok := segOf[name]
		if !ok {
			return nil, nil, 0
		}
		sg := n.layout[k]
		w := n.params[sg.Offset : sg.Offset+sg.Len : sg.Offset+sg.Len]
		var g []float32
		if train {
			g = n.grads[sg.Offset : sg.Offset+sg.Len : sg.Offset+sg.Len]
		}
		return w, g, sg.Offset
	}
	var prev *tailFC
	for i := t; i < len(s.Layers)-1; i++ {
		l := &s.Layers[i]
		switch l.Kind {
		case ReLU:
			prev.after = append(prev.after, tailElem{relu: true})
			continue
		case Dropout:
			prev.after = append(prev.after, tailElem{ratio: l.Ratio, index: uint64(i)})
			continue
		}
		f := &tailFC{in: in, out: l.Out, x: x, dx: dx, cols: splitCols(l.Out, workers), inCols: splitCols(in, workers)}
		f.w, f.dw, f.lo = seg(l.Name + ".weight")
		f.b, f.db, _ = seg(l.Name + ".bias")
		f.done = func() {
			if tl.hook != nil {
				tl.hook(f.lo)
			}
		}
		last := true
		for j := i + 1; j < len(s.Layers)-1; j++ {
			last = last && s.Layers[j].Kind != FC
		}
		if last {
			f.y, f.dy = n.logits, n.dlogits
		} else {
			f.y = make([]float32, n.batch*l.Out)
			if train {
				f.dy = make([]float32, n.batch*l.Out)
			}
		}
		tl.fcs = append(tl.fcs, f)
		prev, in, x, dx = f, l.Out, f.y, f.dy
	}
	return tl
}

// forward runs worker w's share of the tail's forward pass (test: dropout
// passes its input on) on the input x0 the workers' heads have written,
// and the loss over the rows [lo, hi) of the batch, whose mean it
// returns; dlogits are scaled by (hi − lo)/batch as a replica's are.
func (t *tail) forward(w int, test bool, labels []int32, lo, hi int) float32 {
	seed, prob := *t.seed, t.prob
	t.bar.wait(w, nil) // the input is complete
	for _, f := range t.fcs {
		c0, c1 := f.cols[w][0], f.cols[w][1]
		if c1 > c0 {
			// yᵀ = w·xᵀ: a product with few columns, which the native
			// engine runs on its own kernels (OpenBLAS, 1.5 times as fast
			// as y = x·wᵀ, for AlexNet's fc6 at 32 images otherwise).
			yt := t.yt[w]
			t.e.Gemm(false, true, c1-c0, t.n, f.in, 1, f.w[c0*f.in:], f.in, f.x, f.in, 0, yt, t.n)
			for r := range t.n {
				row := f.y[r*f.out+c0 : r*f.out+c1]
				for j := range row {
					row[j] = yt[j*t.n+r]
				}
				if f.b != nil {
					t.e.Add(row, f.b[c0:c1], row)
				}
				for _, el := range f.after {
					switch {
					case el.relu:
						t.e.ReLUForward(row, row)
					case !test:
						d := kernels.Dropout{Ratio: el.ratio, Seed: mix64(seed ^ mix64(el.index+1)), Offset: uint64(r*f.out + c0)}
						t.e.DropoutForward(d, row, row)
					}
				}
			}
		}
		t.bar.wait(w, nil) // its outputs are complete
	}
	k := t.k
	logits, dlogits := t.fcs[len(t.fcs)-1].y, t.fcs[len(t.fcs)-1].dy
	var dl []float32
	if dlogits != nil {
		dl = dlogits[lo*k : hi*k]
	}
	loss := t.e.SoftmaxCrossEntropy(hi-lo, k, logits[lo*k:hi*k], labels[lo:hi], prob[lo*k:hi*k], dl)
	if scale := float32(hi-lo) / float32(t.n); scale != 1 && dl != nil {
		for i := range dl {
			dl[i] *= scale
		}
	}
	return loss
}

// backward runs worker w's share of the tail's backward pass, after a
// forward pass in training with the same seed; once it returns, every
// worker's rows of dx0 are complete.
func (t *tail) backward(w int) {
	seed := *t.seed
	t.bar.wait(w, nil) // the loss's gradient is complete
	for i := len(t.fcs) - 1; i >= 0; i-- {
		f := t.fcs[i]
		c0, c1 := f.cols[w][0], f.cols[w][1]
		if c1 > c0 {
			t.e.Gemm(true, false, c1-c0, f.in, t.n, 1, f.dy[c0:], f.out, f.x, f.in, 0, f.dw[c0*f.in:], f.in)
			if f.db != nil {
				db := f.db[c0:c1]
				clear(db)
				for r := range t.n {
					t.e.Add(db, f.dy[r*f.out+c0:r*f.out+c1], db)
				}
			}
		}
		if i0, i1 := f.inCols[w][0], f.inCols[w][1]; f.dx != nil && i1 > i0 {
			t.e.Gemm(false, false, t.n, i1-i0, f.out, 1, f.dy, f.out, f.w[i0:], f.in, 0, f.dx[i0:], f.in)
			if i > 0 {
				p := t.fcs[i-1]
				for r := range t.n {
					row, y := f.dx[r*f.in+i0:r*f.in+i1], p.y[r*f.in+i0:r*f.in+i1]
					for j := len(p.after) - 1; j >= 0; j-- {
						if el := p.after[j]; el.relu {
							t.e.ReLUBackward(y, row, row)
						} else {
							d := kernels.Dropout{Ratio: el.ratio, Seed: mix64(seed ^ mix64(el.index+1)), Offset: uint64(r*f.in + i0)}
							t.e.DropoutBackward(d, row, row)
						}
					}
				}
			}
		}
		t.bar.wait(w, f.done) // this layer's gradients and its input's are complete
	}
}
