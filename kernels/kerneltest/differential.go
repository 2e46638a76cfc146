package kerneltest

import (
	"testing"

	"github.com/softsync/softsync/kernels"
)

// Differential runs one randomly shaped operation, chosen by op and drawn
// from seed, on both engines and fails t if their results disagree beyond
// rounding. It is the body of the kernels package's fuzz target; want is
// normally the reference engine. Tolerances are relative to the sum of
// the magnitudes of the terms, obtained by running want on absolute
// values.
func Differential(t *testing.T, want, got kernels.Engine, op uint8, seed uint64) {
	r := newRand(seed)
	dim := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	switch op % Ops {
	case 0: // convolution, forward and backward
		s := kernels.ConvShape{N: dim(1, 5), C: dim(1, 6), H: dim(1, 14), W: dim(1, 14), OC: dim(1, 7),
			KH: dim(1, 5), KW: dim(1, 5), PadH: dim(0, 2), PadW: dim(0, 2), StrideH: dim(1, 3), StrideW: dim(1, 3)}
		if g := dim(0, 3); g > 1 {
			s.C, s.OC, s.Group = s.C*g, s.OC*g, g
		}
		s.KH, s.KW = min(s.KH, s.H+2*s.PadH), min(s.KW, s.W+2*s.PadW)
		s.Layout = kernels.Layout(r.IntN(2))
		x, w, b, dy := uniform(r, s.InputLen()), uniform(r, s.WeightLen()), uniform(r, s.OC), uniform(r, s.OutputLen())
		run := func(e kernels.Engine, x, w, b, dy []float32) (y, dx, dw, db []float32) {
			ws := &kernels.Workspace{}
			y, dx, dw, db = make([]float32, s.OutputLen()), make([]float32, s.InputLen()), make([]float32, s.WeightLen()), make([]float32, s.OC)
			e.ConvForward(s, x, w, b, y, ws)
			e.ConvBackward(s, x, w, dy, dx, dw, db, ws)
			return
		}
		y1, dx1, dw1, db1 := run(want, x, w, b, dy)
		y2, dx2, dw2, db2 := run(got, x, w, b, dy)
		my, mdx, mdw, mdb := run(want, abs32(x), abs32(w), abs32(b), abs32(dy))
		p := s.OutH() * s.OutW()
		approx(t, "y", y2, sliceTo64(y1), sliceTo64(my), sumTol(s.C*s.KH*s.KW))
		approx(t, "dx", dx2, sliceTo64(dx1), sliceTo64(mdx), sumTol(s.OC*s.KH*s.KW))
		approx(t, "dw", dw2, sliceTo64(dw1), sliceTo64(mdw), sumTol(s.N*p))
		approx(t, "db", db2, sliceTo64(db1), sliceTo64(mdb), sumTol(s.N*p))
	case 1: // pooling
		s := kernels.PoolShape{Mode: kernels.PoolMode(r.IntN(2)), N: dim(1, 3), C: dim(1, 4), H: dim(1, 17), W: dim(1, 17),
			KH: dim(1, 4), KW: dim(1, 4), StrideH: dim(1, 3), StrideW: dim(1, 3)}
		s.PadH, s.PadW = r.IntN(s.KH), r.IntN(s.KW)
		s.KH, s.KW = min(s.KH, s.H+2*s.PadH), min(s.KW, s.W+2*s.PadW)
		s.PadH, s.PadW = min(s.PadH, s.KH-1), min(s.PadW, s.KW-1)
		// Keep the last window inside the input (stride ≤ kernel + pad
		// suffices).
		s.StrideH, s.StrideW = min(s.StrideH, s.KH+s.PadH), min(s.StrideW, s.KW+s.PadW)
		x, dy := uniform(r, s.InputLen()), uniform(r, s.OutputLen())
		run := func(e kernels.Engine, x, dy []float32) (y, dx []float32) {
			y, dx = make([]float32, s.OutputLen()), make([]float32, s.InputLen())
			mask := make([]int32, s.OutputLen())
			e.PoolForward(s, x, y, mask)
			e.PoolBackward(s, dy, mask, dx)
			return
		}
		y1, dx1 := run(want, x, dy)
		y2, dx2 := run(got, x, dy)
		my, mdx := run(want, abs32(x), abs32(dy))
		approx(t, "y", y2, sliceTo64(y1), sliceTo64(my), 1e-6)
		approx(t, "dx", dx2, sliceTo64(dx1), sliceTo64(mdx), 1e-6)
	case 2: // LRN
		s := kernels.LRNShape{N: dim(1, 3), C: dim(1, 4), H: dim(1, 12), W: dim(1, 12), Size: 2*r.IntN(3) + 1,
			Alpha: 2 * r.Float32(), Beta: []float32{0.75, 0.5, 1, 0.3}[r.IntN(4)], K: 0.5 + r.Float32(),
			Region: kernels.LRNRegion(r.IntN(2))}
		if s.Region == kernels.AcrossChannels {
			s.C = dim(1, 12)
		}
		x, dy := uniform(r, s.Len()), uniform(r, s.Len())
		run := func(e kernels.Engine) (y, scale, dx []float32) {
			ws := &kernels.Workspace{}
			y, scale, dx = make([]float32, s.Len()), make([]float32, s.Len()), make([]float32, s.Len())
			e.LRNForward(s, x, y, scale, ws)
			e.LRNBackward(s, x, y, scale, dy, dx, ws)
			return
		}
		y1, s1, dx1 := run(want)
		y2, s2, dx2 := run(got)
		approx(t, "scale", s2, sliceTo64(s1), nil, 1e-5)
		approx(t, "y", y2, sliceTo64(y1), abs64(sliceTo64(x)), 1e-5)
		approx(t, "dx", dx2, sliceTo64(dx1), addAbs(dy, dx1), 1e-4)
	case 3: // fully connected
		n, in, out := dim(1, 9), dim(1, 70), dim(1, 20)
		x, w, b, dy := uniform(r, n*in), uniform(r, out*in), uniform(r, out), uniform(r, n*out)
		run := func(e kernels.Engine, x, w, b, dy []float32) (y, dx, dw, db []float32) {
			y, dx, dw, db = make([]float32, n*out), make([]float32, n*in), make([]float32, out*in), make([]float32, out)
			e.FCForward(n, in, out, x, w, b, y)
			e.FCBackward(n, in, out, x, w, dy, dx, dw, db)
			return
		}
		y1, dx1, dw1, db1 := run(want, x, w, b, dy)
		y2, dx2, dw2, db2 := run(got, x, w, b, dy)
		my, mdx, mdw, mdb := run(want, abs32(x), abs32(w), abs32(b), abs32(dy))
		approx(t, "y", y2, sliceTo64(y1), sliceTo64(my), sumTol(in))
		approx(t, "dx", dx2, sliceTo64(dx1), sliceTo64(mdx), sumTol(out))
		approx(t, "dw", dw2, sliceTo64(dw1), sliceTo64(mdw), sumTol(n))
		approx(t, "db", db2, sliceTo64(db1), sliceTo64(mdb), sumTol(n))
	case 4: // softmax cross-entropy and ReLU
		n, k := dim(1, 9), dim(1, 12)
		z := uniform(r, n*k)
		for i := range z {
			z[i] *= 10
		}
		labels := make([]int32, n)
		for i := range labels {
			labels[i] = int32(r.IntN(k))
		}
		g := uniform(r, n*k)
		run := func(e kernels.Engine) (loss float32, p, d, y, dx []float32) {
			p, d, y, dx = make([]float32, n*k), make([]float32, n*k), make([]float32, n*k), make([]float32, n*k)
			loss = e.SoftmaxCrossEntropy(n, k, z, labels, p, d)
			e.ReLUForward(z, y)
			e.ReLUBackward(y, g, dx)
			return
		}
		l1, p1, d1, y1, dx1 := run(want)
		l2, p2, d2, y2, dx2 := run(got)
		approx(t, "loss", []float32{l2}, []float64{float64(l1)}, nil, 1e-5)
		approx(t, "prob", p2, sliceTo64(p1), addAbs(p1, nil), 1e-5)
		approx(t, "dlogits", d2, sliceTo64(d1), addAbs(d1, p1), 1e-5)
		approx(t, "relu y", y2, sliceTo64(y1), nil, 0)
		approx(t, "relu dx", dx2, sliceTo64(dx1), nil, 0)
	case 5: // batch normalisation
		s := kernels.BNShape{N: dim(1, 6), C: dim(1, 9), HW: dim(1, 70), Eps: []float32{1e-5, 1e-3}[r.IntN(2)]}
		x, gamma, beta, dy := bnInputs(s, r.Uint64())
		w, g := BNPasses(want, s, x, gamma, beta, dy), BNPasses(got, s, x, gamma, beta, dy)
		_, magY, mu, v := naiveBN(s, x, gamma, beta, nil, nil)
		_, magI, _, _ := naiveBN(s, x, gamma, beta, w[1], w[2])
		ng := naiveBNBackward(s, x, gamma, dy, w[1], w[2])
		approx(t, "mean", g[1], sliceTo64(w[1]), absAdd(mu, v), 2e-6)
		approx(t, "variance", g[2], sliceTo64(w[2]), nil, 2e-6)
		// The two engines' statistics may differ in their last bit,
		// which moves y and dx by about that much relative to x̂.
		approx(t, "y", g[0], sliceTo64(w[0]), magY, 4e-6)
		approx(t, "y (infer)", g[3], sliceTo64(w[3]), magI, 4e-6)
		approx(t, "dgamma", g[5], sliceTo64(w[5]), ng.dgammaMag, 2e-6)
		approx(t, "dbeta", g[6], sliceTo64(w[6]), ng.dbetaMag, 2e-6)
		approx(t, "dx", g[4], sliceTo64(w[4]), ng.dxMag, 4e-6)
	case 6: // dropout and Add, which agree bit for bit
		n := dim(1, 3000)
		d := kernels.Dropout{Ratio: r.Float32(), Seed: r.Uint64(), Offset: r.Uint64()}
		if r.IntN(2) == 0 {
			d.Offset = 1<<32 - uint64(r.IntN(n)) // across an upper-word boundary
		}
		a, b := uniform(r, n), uniform(r, n)
		run := func(e kernels.Engine) (y, dx, sum []float32) {
			y, dx, sum = make([]float32, n), make([]float32, n), make([]float32, n)
			e.DropoutForward(d, a, y)
			e.DropoutBackward(d, b, dx)
			e.Add(a, b, sum)
			return
		}
		y1, dx1, s1 := run(want)
		y2, dx2, s2 := run(got)
		approx(t, "dropout y", y2, sliceTo64(y1), nil, 0)
		approx(t, "dropout dx", dx2, sliceTo64(dx1), nil, 0)
		approx(t, "a+b", s2, sliceTo64(s1), nil, 0)
	}
}

// Ops is the number of operations Differential chooses from (op mod
// Ops).
const Ops = 7

// addAbs returns |a| + |b| element-wise (b may be nil), plus a floor of
// 1e-6 for values that are zero in both.
func addAbs(a, b []float32) []float64 {
	m := abs64(sliceTo64(a))
	for i := range m {
		if b != nil {
			m[i] += abs64(sliceTo64(b[i : i+1]))[0]
		}
		m[i] += 1e-6
	}
	return m
}
