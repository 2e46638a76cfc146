package kerneltest

import (
	"fmt"
	"math"
	"testing"

	"github.com/softsync/softsync/kernels"
)

// bnShapes covers one value per channel and image (after a fully
// connected layer), planes of whole and partial vectors, a CNHW tensor
// passed as one image, and a single channel.
var bnShapes = []kernels.BNShape{
	{N: 4, C: 5, HW: 1, Eps: 1e-5},
	{N: 3, C: 4, HW: 37, Eps: 1e-5},
	{N: 2, C: 3, HW: 64, Eps: 1e-3},
	{N: 1, C: 6, HW: 3 * 49, Eps: 1e-5},
	{N: 5, C: 1, HW: 19, Eps: 0.1},
}

// bnInputs returns x with a channel-dependent mean and spread (so that
// the mean does not vanish and x − mean cancels), gamma, beta and dy.
func bnInputs(s kernels.BNShape, seed uint64) (x, gamma, beta, dy []float32) {
	r := newRand(seed)
	x = uniform(r, s.Len())
	for n := 0; n < s.N; n++ {
		for c := 0; c < s.C; c++ {
			for i := 0; i < s.HW; i++ {
				k := (n*s.C+c)*s.HW + i
				x[k] = float32(c-2) + float32(c+1)*x[k]
			}
		}
	}
	gamma, beta, dy = uniform(r, s.C), uniform(r, s.C), uniform(r, s.Len())
	for c := range gamma {
		gamma[c] += 1.5
	}
	return x, gamma, beta, dy
}

func testBN(t *testing.T, e kernels.Engine) {
	for i, s := range bnShapes {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			x, gamma, beta, dy := bnInputs(s, uint64(1400+i))
			n := s.Len()
			wantY, magY, mu, v := naiveBN(s, x, gamma, beta, nil, nil)
			y, mean, variance := output(n), output(s.C), output(s.C)
			in := freeze("x", x, "gamma", gamma, "beta", beta)
			e.BNForwardTrain(s, x, gamma, beta, y, mean, variance)
			in.check(t, "BNForwardTrain")
			checkTail(t, "y", y, n)
			checkTail(t, "mean", mean, s.C)
			checkTail(t, "variance", variance, s.C)
			// The statistics are sums of M terms, which the engines
			// accumulate in float64: a float32 rounding.
			approx(t, "mean", mean, mu, absAdd(mu, v), 1e-6)
			approx(t, "variance", variance, v, nil, 1e-6)
			approx(t, "y", y, wantY, magY, 2e-6)

			// In place.
			xy := append([]float32(nil), x...)
			e.BNForwardTrain(s, xy, gamma, beta, xy, output(s.C), output(s.C))
			approx(t, "y (in place)", xy, sliceTo64(y[:n]), nil, 0)

			// Evaluation mode with other statistics.
			rm, rv := make([]float32, s.C), make([]float32, s.C)
			for c := range rm {
				rm[c], rv[c] = 0.3*float32(c)-0.5, 0.5+float32(c)
			}
			wantI, magI, _, _ := naiveBN(s, x, gamma, beta, rm, rv)
			yi := output(n)
			in = freeze("x", x, "gamma", gamma, "beta", beta, "mean", rm, "variance", rv)
			e.BNForwardInfer(s, x, gamma, beta, rm, rv, yi)
			in.check(t, "BNForwardInfer")
			checkTail(t, "y", yi, n)
			approx(t, "y (infer)", yi, wantI, magI, 2e-6)
			copy(xy, x)
			e.BNForwardInfer(s, xy, gamma, beta, rm, rv, xy)
			approx(t, "y (infer, in place)", xy, sliceTo64(yi[:n]), nil, 0)

			// Backward, from the statistics the forward pass wrote.
			mean, variance = mean[:s.C], variance[:s.C]
			g := naiveBNBackward(s, x, gamma, dy, mean, variance)
			dx, dgamma, dbeta := output(n), output(s.C), output(s.C)
			in = freeze("x", x, "gamma", gamma, "mean", mean, "variance", variance, "dy", dy)
			e.BNBackward(s, x, gamma, mean, variance, dy, dx, dgamma, dbeta)
			in.check(t, "BNBackward")
			checkTail(t, "dx", dx, n)
			checkTail(t, "dgamma", dgamma, s.C)
			checkTail(t, "dbeta", dbeta, s.C)
			approx(t, "dgamma", dgamma, g.dgamma, g.dgammaMag, 1e-6)
			approx(t, "dbeta", dbeta, g.dbeta, g.dbetaMag, 1e-6)
			approx(t, "dx", dx, g.dx, g.dxMag, 2e-6)
			dg2, db2 := output(s.C), output(s.C)
			e.BNBackward(s, x, gamma, mean, variance, dy, nil, dg2, db2)
			approx(t, "dgamma (dx nil)", dg2, g.dgamma, g.dgammaMag, 1e-6)
			d := append([]float32(nil), dy...)
			e.BNBackward(s, x, gamma, mean, variance, d, d, dg2, db2)
			approx(t, "dx (in place)", d, sliceTo64(dx[:n]), nil, 0)
		})
	}
}

// absAdd returns |a| + √b element-wise: the size of x around a mean a
// with variance b, which bounds the terms the mean sums.
func absAdd(a, b []float64) []float64 {
	m := make([]float64, len(a))
	for i := range a {
		m[i] = math.Abs(a[i]) + math.Sqrt(b[i])
	}
	return m
}

// testBNGradient checks BNBackward against finite differences of
// BNForwardTrain, whose statistics move with x.
func testBNGradient(t *testing.T, e kernels.Engine) {
	for i, s := range bnShapes[:3] {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			x, gamma, beta, g := bnInputs(s, uint64(1500+i))
			r := newRand(uint64(1600 + i))
			y, mean, variance := make([]float32, s.Len()), make([]float32, s.C), make([]float32, s.C)
			loss := func() float64 { e.BNForwardTrain(s, x, gamma, beta, y, mean, variance); return dot64(g, y) }
			loss()
			dx, dgamma, dbeta := make([]float32, s.Len()), make([]float32, s.C), make([]float32, s.C)
			e.BNBackward(s, x, gamma, mean, variance, g, dx, dgamma, dbeta)
			gradCheck(t, "dx", r, x, dx, loss, 1e-2, 40, 1e-2, 0.1)
			gradCheck(t, "dgamma", r, gamma, dgamma, loss, 1e-2, 40, 1e-2, 0.1)
			gradCheck(t, "dbeta", r, beta, dbeta, loss, 1e-2, 40, 1e-2, 0.1)
		})
	}
}
