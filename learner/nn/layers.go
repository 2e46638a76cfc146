package nn

import (
	"math"

	"github.com/softsync/softsync/kernels"
)

// layer is one operation of a replica for a fixed number of images. x is
// the operation's input, y its output, dy the gradient of the loss with
// respect to y, dx the gradient with respect to x, to be overwritten (nil
// when no earlier layer needs it). Parameter gradients are overwritten,
// never accumulated. Every operation but add and those that copy
// nothing is a layer.
type layer interface {
	forward(x, y []float32)
	backward(x, y, dy, dx []float32)
}

// tester is a layer that computes otherwise at test (Net.Evaluate):
// dropout passes its input on, batch norm uses its running statistics.
type tester interface {
	test(x, y []float32)
}

// convLayer: kernels.Engine ConvForward/ConvBackward on channel-major
// (CNHW) activations; b and db are nil without a bias.
type convLayer struct {
	e            kernels.Engine
	ws           *kernels.Workspace
	s            kernels.ConvShape
	w, b, dw, db []float32
}

func (l *convLayer) forward(x, y []float32) { l.e.ConvForward(l.s, x, l.w, l.b, y, l.ws) }
func (l *convLayer) backward(x, _, dy, dx []float32) {
	l.e.ConvBackward(l.s, x, l.w, dy, dx, l.dw, l.db, l.ws)
}

// fcLayer: a fully connected layer over the flattened C×H×W input, which
// it takes image-major (NCHW); b and db are nil without a bias.
type fcLayer struct {
	e            kernels.Engine
	n, in, out   int
	w, b, dw, db []float32
}

func (l *fcLayer) forward(x, y []float32) { l.e.FCForward(l.n, l.in, l.out, x, l.w, l.b, y) }
func (l *fcLayer) backward(x, _, dy, dx []float32) {
	l.e.FCBackward(l.n, l.in, l.out, x, l.w, dy, dx, l.dw, l.db)
}

// swapLayer changes a tensor's layout: forward writes x, a×b planes of p
// floats, into y as b×a planes; backward writes dy back into dx in x's
// order.
type swapLayer struct{ a, b, p int }

func (l *swapLayer) forward(x, y []float32)          { swapPlanes(y, x, l.a, l.b, l.p) }
func (l *swapLayer) backward(_, _, dy, dx []float32) { swapPlanes(dx, dy, l.b, l.a, l.p) }

// swapPlanes writes src, a×b planes of p floats, into dst as b×a planes:
// plane (i, j) of src becomes plane (j, i) of dst.
func swapPlanes(dst, src []float32, a, b, p int) {
	for i := range a {
		for j := range b {
			copy(dst[(j*a+i)*p:(j*a+i+1)*p], src[(i*b+j)*p:(i*b+j+1)*p])
		}
	}
}

// poolLayer keeps the arg-max mask of max pooling for the backward pass.
// With floor rounding where the kernel's ceil rounding gives one row or
// column more (trim set), the kernel writes into trim, whose planes'
// leading rows and columns are the output, and takes its gradient from
// trimGrad, the output's gradient with zeros in the row and column more.
type poolLayer struct {
	e              kernels.Engine
	s              kernels.PoolShape
	mask           []int32
	trim, trimGrad []float32
	oh, ow         int // the output's height and width
}

func (l *poolLayer) forward(x, y []float32) {
	if l.trim == nil {
		l.e.PoolForward(l.s, x, y, l.mask)
		return
	}
	l.e.PoolForward(l.s, x, l.trim, l.mask)
	l.crop(y, l.trim, false)
}

func (l *poolLayer) backward(_, _, dy, dx []float32) {
	if l.trim == nil {
		l.e.PoolBackward(l.s, dy, l.mask, dx)
		return
	}
	l.crop(dy, l.trimGrad, true)
	l.e.PoolBackward(l.s, l.trimGrad, l.mask, dx)
}

// crop copies the leading oh×ow block of each of full's planes into
// out, or back (with zeros elsewhere).
func (l *poolLayer) crop(out, full []float32, back bool) {
	fh, fw := l.s.OutH(), l.s.OutW()
	if back {
		clear(full)
	}
	for p := range l.s.N * l.s.C {
		for h := range l.oh {
			f := full[(p*fh+h)*fw : (p*fh+h)*fw+l.ow]
			o := out[(p*l.oh+h)*l.ow : (p*l.oh+h+1)*l.ow]
			if back {
				copy(f, o)
			} else {
				copy(o, f)
			}
		}
	}
}

// reluLayer may run in place (y aliasing x, dx aliasing dy); its backward
// pass reads only its output y.
type reluLayer struct{ e kernels.Engine }

func (l *reluLayer) forward(x, y []float32)          { l.e.ReLUForward(x, y) }
func (l *reluLayer) backward(_, y, dy, dx []float32) { l.e.ReLUBackward(y, dy, dx) }

// lrnLayer keeps the scale of the forward pass; its backward pass reads
// x and y, so no layer after it overwrites y in place.
type lrnLayer struct {
	e     kernels.Engine
	ws    *kernels.Workspace
	s     kernels.LRNShape
	scale []float32
}

func (l *lrnLayer) forward(x, y []float32) { l.e.LRNForward(l.s, x, y, l.scale, l.ws) }
func (l *lrnLayer) backward(x, y, dy, dx []float32) {
	l.e.LRNBackward(l.s, x, y, l.scale, dy, dx, l.ws)
}

// dropoutLayer draws its mask from the Net's seed of the pass mixed with
// the layer's index, per element of the whole batch's tensor in its
// layout (see dropoutOffsets), so that the mask does not depend on how
// the batch is split; backward draws the same mask again. It may run in
// place; at test it passes its input on.
type dropoutLayer struct {
	e     kernels.Engine
	ratio float32
	seed  *uint64 // the Net's seed of the current pass
	index uint64  // the layer's index in the spec
	// The replica's images are images off … off+n−1 of a batch of
	// batch; with cnhw its tensor holds c planes of n·plane floats,
	// each a range of the batch's channel plane.
	cnhw              bool
	n, off, batch     int
	c, plane, perItem int
}

func (l *dropoutLayer) params() kernels.Dropout {
	return kernels.Dropout{Ratio: l.ratio, Seed: mix64(*l.seed ^ mix64(l.index+1))}
}

// run applies the kernel (backward: DropoutBackward) to each
// contiguous run of the replica's tensor with its offset in the batch's
// tensor.
func (l *dropoutLayer) run(x, y []float32, backward bool) {
	d := l.params()
	f := func(x, y []float32) {
		if backward {
			l.e.DropoutBackward(d, x, y)
		} else {
			l.e.DropoutForward(d, x, y)
		}
	}
	if !l.cnhw {
		d.Offset = uint64(l.off * l.perItem)
		f(x, y)
		return
	}
	run := l.n * l.plane
	for c := range l.c {
		d.Offset = uint64((c*l.batch + l.off) * l.plane)
		f(x[c*run:(c+1)*run], y[c*run:(c+1)*run])
	}
}

func (l *dropoutLayer) forward(x, y []float32)          { l.run(x, y, false) }
func (l *dropoutLayer) backward(_, _, dy, dx []float32) { l.run(dy, dx, true) }
func (l *dropoutLayer) test(x, y []float32) {
	if &x[0] != &y[0] {
		copy(y, x)
	}
}

// mix64 is SplitMix64's finaliser: a bijection of 64-bit values whose
// outputs look independent for related inputs.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// bnLayer is batch normalisation over the replica's images (BNShape: a
// CNHW tensor as one image of n·H·W values per channel, an NCHW one as
// n images of H·W). In training it normalises with the batch's mean
// and biased variance and its backward pass writes, besides the scale's
// and shift's gradients, the batch's mean and unbiased variance into the
// gradient vector's slots of the running statistics (worker 0 only; the
// others write zeros, so that the workers' sum holds them once). With
// several workers the statistics and the backward sums span every
// worker's images (bnSync).
type bnLayer struct {
	e                 kernels.Engine
	ws                *kernels.Workspace
	s                 kernels.BNShape
	gamma, beta       []float32 // parameters
	rmean, rvar       []float32 // running statistics (parameter vector)
	dgamma, dbeta     []float32 // this worker's gradients
	smean, svar       []float32 // this worker's slots of the running statistics in its gradient vector
	mean, vari        []float32 // the batch's statistics of the last forward pass
	local             []float32 // with sync: this worker's mean and variance, then the correction's scale and shift
	sync              *bnSync
	worker            int
	limit             *float32 // the Net's bound of the statistics written (SetStateLimit)
	count, batchCount float64  // values per channel: this replica's, the whole batch's
}

func (l *bnLayer) forward(x, y []float32) {
	if l.sync == nil {
		l.e.BNForwardTrain(l.s, x, l.gamma, l.beta, y, l.mean, l.vari)
		return
	}
	c := l.s.C
	l.e.BNForwardTrain(l.s, x, l.gamma, l.beta, y, l.local[:c], l.local[c:2*c])
	l.sync.bar.wait(l.worker, l.sync.combine)
	l.e.BNForwardInfer(l.s, x, l.gamma, l.beta, l.mean, l.vari, y)
}

func (l *bnLayer) test(x, y []float32) {
	l.e.BNForwardInfer(l.s, x, l.gamma, l.beta, l.rmean, l.rvar, y)
}

func (l *bnLayer) backward(x, _, dy, dx []float32) {
	l.e.BNBackward(l.s, x, l.gamma, l.mean, l.vari, dy, dx, l.dgamma, l.dbeta)
	if l.worker == 0 {
		unbias := l.batchCount / (l.batchCount - 1)
		for c := range l.smean {
			l.smean[c], l.svar[c] = l.mean[c], float32(float64(l.vari[c])*unbias)
		}
		if b := *l.limit; b > 0 {
			for c := range l.smean {
				l.smean[c], l.svar[c] = min(max(l.smean[c], -b), b), min(l.svar[c], b)
			}
		}
	} else {
		clear(l.smean)
		clear(l.svar)
	}
	if l.sync == nil {
		return
	}
	l.sync.bar.wait(l.worker, l.sync.sum)
	if dx == nil {
		return
	}
	// The kernel's dx subtracts this replica's means of dy and dy·x̂;
	// the batch's differ by a per-channel A·x̂ + B (see bnSync).
	c := l.s.C
	a, b := l.local[:c], l.local[c:2*c]
	for k := range c {
		r := l.gamma[k] / float32(math.Sqrt(float64(l.vari[k]+l.s.Eps)))
		a[k] = r * (l.dgamma[k]/float32(l.count) - l.sync.dgamma[k]/float32(l.batchCount))
		b[k] = r * (l.dbeta[k]/float32(l.count) - l.sync.dbeta[k]/float32(l.batchCount))
	}
	tmp := l.ws.Floats(len(x))
	l.e.BNForwardInfer(l.s, x, a, b, l.mean, l.vari, tmp)
	l.e.Add(dx, tmp, dx)
}

// bnSync joins the workers of a Net at a batch norm layer. Forward, each
// worker computes its images' mean and biased variance; the first
// combines them into the batch's (per channel, over N values in all:
// mean = Σ n_w·mean_w / N, variance = Σ n_w·(var_w + (mean_w − mean)²) /
// N), which every worker then normalises with. Backward, each computes
// its images' sums Σdy and Σdy·x̂ (its gradients of the shift and the
// scale); the first adds them up, and each corrects its input gradient
// from its own sums to the batch's: dx = γ·r·(dy − Σdy/N − x̂·Σdy·x̂/N),
// r = 1/√(var + ε), which is the kernel's dx over its own n_w values
// plus γ·r·((Σ_w dy·x̂/n_w − Σdy·x̂/N)·x̂ + Σ_w dy/n_w − Σdy/N): a
// per-channel scale and shift of x̂ that BNForwardInfer computes.
type bnSync struct {
	bar           *barrier
	layers        []*bnLayer // per worker
	mean, vari    []float32  // the batch's statistics, shared by the workers' layers
	dgamma, dbeta []float32  // the batch's sums
	combine, sum  func()     // run by worker 0 while the others wait
}

func newBNSync(bar *barrier, workers, c int) *bnSync {
	s := &bnSync{bar: bar, layers: make([]*bnLayer, workers), mean: make([]float32, c), vari: make([]float32, c),
		dgamma: make([]float32, c), dbeta: make([]float32, c)}
	s.combine, s.sum = s.combineStats, s.sumGrads
	return s
}

func (s *bnSync) combineStats() {
	c := len(s.mean)
	total := s.layers[0].batchCount
	for k := range c {
		var m float64
		for _, l := range s.layers {
			m += l.count * float64(l.local[k])
		}
		m /= total
		var v float64
		for _, l := range s.layers {
			d := float64(l.local[k]) - m
			v += l.count * (float64(l.local[c+k]) + d*d)
		}
		s.mean[k], s.vari[k] = float32(m), float32(v/total)
	}
}

func (s *bnSync) sumGrads() {
	clear(s.dgamma)
	clear(s.dbeta)
	for _, l := range s.layers {
		for k := range s.dgamma {
			s.dgamma[k] += l.dgamma[k]
			s.dbeta[k] += l.dbeta[k]
		}
	}
}

// barrier holds the workers of a Net until all have arrived; worker 0
// then runs a function (if not nil) before it releases the others. Every worker
// passes the same barriers in the same order; nothing is allocated.
type barrier struct {
	arrive  chan struct{}
	release []chan struct{}
}

func newBarrier(workers int) *barrier {
	b := &barrier{arrive: make(chan struct{}, workers), release: make([]chan struct{}, workers)}
	for i := 1; i < workers; i++ {
		b.release[i] = make(chan struct{}, 1)
	}
	return b
}

func (b *barrier) wait(worker int, f func()) {
	if worker != 0 {
		b.arrive <- struct{}{}
		<-b.release[worker]
		return
	}
	for range len(b.release) - 1 {
		<-b.arrive
	}
	if f != nil {
		f()
	}
	for _, r := range b.release[1:] {
		r <- struct{}{}
	}
}
