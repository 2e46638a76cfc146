package kernels

import "math"

// The reference engine's dropout, batch normalisation and element-wise
// sum: plain loops, statistics summed in float64.

func (reference) DropoutForward(d Dropout, x, y []float32) {
	checkDropoutForward(d, x, y)
	dropout(d, x, y)
}

func (reference) DropoutBackward(d Dropout, dy, dx []float32) {
	checkDropoutBackward(d, dy, dx)
	dropout(d, dy, dx)
}

// dropout writes out[i] = in[i]·m, m = scale where d keeps i, else 0.
func dropout(d Dropout, in, out []float32) {
	scale := d.scale()
	d.mask(len(in), func(i int, kept bool) {
		m := float32(0)
		if kept {
			m = scale
		}
		out[i] = in[i] * m
	})
}

// at returns the index of the first value of channel c in image n.
func (s BNShape) at(n, c int) int { return (n*s.C + c) * s.HW }

// invStd returns 1/sqrt(v + eps) in float32 arithmetic, as the C kernels
// compute it.
func invStd(v, eps float32) float32 { return 1 / float32(math.Sqrt(float64(v+eps))) }

func (reference) BNForwardTrain(s BNShape, x, gamma, beta, y, mean, variance []float32) {
	checkBNForward("BNForwardTrain", s, x, gamma, beta, mean, variance, y)
	m := float64(s.N * s.HW)
	for c := 0; c < s.C; c++ {
		var sum float64
		for n := 0; n < s.N; n++ {
			for _, v := range x[s.at(n, c) : s.at(n, c)+s.HW] {
				sum += float64(v)
			}
		}
		mu := sum / m
		var ss float64
		for n := 0; n < s.N; n++ {
			for _, v := range x[s.at(n, c) : s.at(n, c)+s.HW] {
				ss += (float64(v) - mu) * (float64(v) - mu)
			}
		}
		mean[c], variance[c] = float32(mu), float32(ss/m)
	}
	bnApply(s, x, gamma, beta, mean, variance, y)
}

func (reference) BNForwardInfer(s BNShape, x, gamma, beta, mean, variance, y []float32) {
	checkBNForward("BNForwardInfer", s, x, gamma, beta, mean, variance, y)
	bnApply(s, x, gamma, beta, mean, variance, y)
}

// bnApply writes y = (x − mean)·(gamma·invstd) + beta per channel.
func bnApply(s BNShape, x, gamma, beta, mean, variance, y []float32) {
	for c := 0; c < s.C; c++ {
		a, mu, b := gamma[c]*invStd(variance[c], s.Eps), mean[c], beta[c]
		for n := 0; n < s.N; n++ {
			o := s.at(n, c)
			for i, v := range x[o : o+s.HW] {
				y[o+i] = float32((v-mu)*a) + b // rounded before the add, as in C (no fused multiply-add)
			}
		}
	}
}

func (reference) BNBackward(s BNShape, x, gamma, mean, variance, dy, dx, dgamma, dbeta []float32) {
	checkBNBackward(s, x, gamma, mean, variance, dy, dx, dgamma, dbeta)
	m := float64(s.N * s.HW)
	for c := 0; c < s.C; c++ {
		mu := mean[c]
		var sdy, sdyx float64
		for n := 0; n < s.N; n++ {
			o := s.at(n, c)
			for i, g := range dy[o : o+s.HW] {
				sdy += float64(g)
				sdyx += float64(g) * (float64(x[o+i]) - float64(mu))
			}
		}
		is := invStd(variance[c], s.Eps)
		dgamma[c], dbeta[c] = float32(sdyx*float64(is)), float32(sdy)
		if dx == nil {
			continue
		}
		a := gamma[c] * is
		mdy := float32(sdy / m)
		k := float32(sdyx * float64(is) * float64(is) / m)
		for n := 0; n < s.N; n++ {
			o := s.at(n, c)
			for i, g := range dy[o : o+s.HW] {
				dx[o+i] = ((g - mdy) - float32((x[o+i]-mu)*k)) * a
			}
		}
	}
}

func (reference) Add(a, b, y []float32) {
	checkAdd(a, b, y)
	for i, v := range a {
		y[i] = v + b[i]
	}
}
