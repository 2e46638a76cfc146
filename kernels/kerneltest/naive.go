package kerneltest

import (
	"math"

	"github.com/softsync/softsync/kernels"
)

// Naive float64 references, written from the definitions with no attempt
// at speed. Each returns the exact result and, where it is a sum, the sum
// of the magnitudes of its terms (for approx).

func at(x []float32, ld, i, j int) float64 { return float64(x[i*ld+j]) }

// naiveGemm returns alpha·op(A)·op(B) + beta·C (m×n, packed) and the
// magnitudes |alpha|·Σ|a·b| + |beta·c|.
func naiveGemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int,
	beta float32, c []float32, ldc int) (want, mag []float64) {
	want, mag = make([]float64, m*n), make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, sm float64
			for p := 0; p < k; p++ {
				var av, bv float64
				if tA {
					av = at(a, lda, p, i)
				} else {
					av = at(a, lda, i, p)
				}
				if tB {
					bv = at(b, ldb, j, p)
				} else {
					bv = at(b, ldb, p, j)
				}
				s += av * bv
				sm += math.Abs(av * bv)
			}
			cv := 0.0
			if beta != 0 {
				cv = float64(beta) * at(c, ldc, i, j)
			}
			want[i*n+j] = float64(alpha)*s + cv
			mag[i*n+j] = math.Abs(float64(alpha))*sm + math.Abs(cv)
		}
	}
	return want, mag
}

// convTaps calls f for every (input index, weight index, output index)
// triple of a convolution that touches the image (padding taps skipped),
// in NCHW. With G groups, output channel oc reads the C/G input channels
// of its group, oc/(OC/G), through weights [OC][C/G][KH][KW].
func convTaps(s kernels.ConvShape, f func(xi, wi, yi int)) {
	oh, ow := s.OutH(), s.OutW()
	cg, og := s.C/s.Groups(), s.OC/s.Groups()
	for n := 0; n < s.N; n++ {
		for oc := 0; oc < s.OC; oc++ {
			for y := 0; y < oh; y++ {
				for x := 0; x < ow; x++ {
					yi := ((n*s.OC+oc)*oh+y)*ow + x
					for k := 0; k < cg; k++ {
						c := oc/og*cg + k
						for i := 0; i < s.KH; i++ {
							h := y*s.StrideH - s.PadH + i
							if h < 0 || h >= s.H {
								continue
							}
							for j := 0; j < s.KW; j++ {
								w := x*s.StrideW - s.PadW + j
								if w < 0 || w >= s.W {
									continue
								}
								f(((n*s.C+c)*s.H+h)*s.W+w, ((oc*cg+k)*s.KH+i)*s.KW+j, yi)
							}
						}
					}
				}
			}
		}
	}
}

func naiveConvForward(s kernels.ConvShape, x, w, b []float32) (y, mag []float64) {
	y, mag = make([]float64, s.OutputLen()), make([]float64, s.OutputLen())
	convTaps(s, func(xi, wi, yi int) {
		p := float64(x[xi]) * float64(w[wi])
		y[yi] += p
		mag[yi] += math.Abs(p)
	})
	if b != nil {
		p := s.OutH() * s.OutW()
		for i := range y {
			bv := float64(b[i/p%s.OC])
			y[i] += bv
			mag[i] += math.Abs(bv)
		}
	}
	return y, mag
}

type naiveGrads struct{ dx, dxMag, dw, dwMag, db, dbMag []float64 }

func naiveConvBackward(s kernels.ConvShape, x, w, dy []float32) naiveGrads {
	g := naiveGrads{
		dx: make([]float64, s.InputLen()), dxMag: make([]float64, s.InputLen()),
		dw: make([]float64, s.WeightLen()), dwMag: make([]float64, s.WeightLen()),
		db: make([]float64, s.OC), dbMag: make([]float64, s.OC),
	}
	convTaps(s, func(xi, wi, yi int) {
		p := float64(w[wi]) * float64(dy[yi])
		g.dx[xi] += p
		g.dxMag[xi] += math.Abs(p)
		q := float64(x[xi]) * float64(dy[yi])
		g.dw[wi] += q
		g.dwMag[wi] += math.Abs(q)
	})
	p := s.OutH() * s.OutW()
	for i, v := range dy[:s.OutputLen()] {
		g.db[i/p%s.OC] += float64(v)
		g.dbMag[i/p%s.OC] += math.Abs(float64(v))
	}
	return g
}

// naivePoolForward pools by testing every input pixel for membership in
// each output's window, Caffe's rules: the window of output (py, px) spans
// rows [py·S−P, min(py·S−P+K, H+P)) (likewise columns); max pooling takes
// the first largest pixel inside the image, average pooling divides the sum
// of the pixels inside the image by the window's size before clipping to
// the image. It returns the outputs and, for max pooling, the arg-max
// indices within the plane.
func naivePoolForward(s kernels.PoolShape, x []float32) (y []float64, arg []int) {
	oh, ow := s.OutH(), s.OutW()
	y, arg = make([]float64, s.OutputLen()), make([]int, s.OutputLen())
	for q := 0; q < s.N*s.C; q++ {
		for py := 0; py < oh; py++ {
			for px := 0; px < ow; px++ {
				o := (q*oh+py)*ow + px
				hs, ws := py*s.StrideH-s.PadH, px*s.StrideW-s.PadW
				he, we := min(hs+s.KH, s.H+s.PadH), min(ws+s.KW, s.W+s.PadW)
				best, sum, arg0 := math.Inf(-1), 0.0, -1
				for h := 0; h < s.H; h++ {
					for w := 0; w < s.W; w++ {
						if h < hs || h >= he || w < ws || w >= we {
							continue
						}
						v := float64(x[(q*s.H+h)*s.W+w])
						sum += v
						if arg0 < 0 || v > best {
							best, arg0 = v, h*s.W+w
						}
					}
				}
				if s.Mode == kernels.MaxPool {
					y[o], arg[o] = best, arg0
				} else {
					y[o] = sum / float64((he-hs)*(we-ws))
				}
			}
		}
	}
	return y, arg
}

// lrnWindow calls f with the index of every element of the window of
// element (q, h, w) (q = n·C + c) that lies inside the tensor: the
// Size×Size pixels centred on (h, w) of plane q within a channel, the
// pixel (h, w) of channels c−⌊Size/2⌋ … c+⌊Size/2⌋ of image n across
// channels.
func lrnWindow(s kernels.LRNShape, q, h, w int, f func(p int)) {
	r := s.Size / 2
	if s.Region == kernels.AcrossChannels {
		n, c := q/s.C, q%s.C
		for k := c - r; k <= c+r; k++ {
			if k >= 0 && k < s.C {
				f(((n*s.C+k)*s.H+h)*s.W + w)
			}
		}
		return
	}
	for i := h - r; i <= h+r; i++ {
		for j := w - r; j <= w+r; j++ {
			if i >= 0 && i < s.H && j >= 0 && j < s.W {
				f((q*s.H+i)*s.W + j)
			}
		}
	}
}

// lrnNorm is the divisor of Alpha: Size² within a channel, Size across.
func lrnNorm(s kernels.LRNShape) float64 {
	if s.Region == kernels.AcrossChannels {
		return float64(s.Size)
	}
	return float64(s.Size * s.Size)
}

// naiveLRN returns scale and y of Caffe's LRN.
func naiveLRN(s kernels.LRNShape, x []float32) (scale, y []float64) {
	scale, y = make([]float64, s.Len()), make([]float64, s.Len())
	for q := 0; q < s.N*s.C; q++ {
		for h := 0; h < s.H; h++ {
			for w := 0; w < s.W; w++ {
				var sum float64
				lrnWindow(s, q, h, w, func(p int) { sum += float64(x[p]) * float64(x[p]) })
				k := (q*s.H+h)*s.W + w
				scale[k] = float64(s.K) + float64(s.Alpha)/lrnNorm(s)*sum
				y[k] = float64(x[k]) * math.Pow(scale[k], -float64(s.Beta))
			}
		}
	}
	return scale, y
}

// naiveLRNBackward returns dx and its magnitudes from the exact scale and
// y: dx_q = dy_q·scale_q^(−β) − 2αβ/norm·x_q·Σ_{p ∋ q} dy_p·y_p/scale_p,
// the windows containing q being those centred in q's own window.
func naiveLRNBackward(s kernels.LRNShape, x, dy []float32, scale, y []float64) (dx, mag []float64) {
	dx, mag = make([]float64, s.Len()), make([]float64, s.Len())
	c := 2 * float64(s.Alpha) * float64(s.Beta) / lrnNorm(s)
	for q := 0; q < s.N*s.C; q++ {
		for h := 0; h < s.H; h++ {
			for w := 0; w < s.W; w++ {
				k := (q*s.H+h)*s.W + w
				var sum, sumMag float64
				lrnWindow(s, q, h, w, func(p int) {
					v := float64(dy[p]) * y[p] / scale[p]
					sum += v
					sumMag += math.Abs(v)
				})
				d := float64(dy[k]) * math.Pow(scale[k], -float64(s.Beta))
				dx[k] = d - c*float64(x[k])*sum
				mag[k] = math.Abs(d) + c*math.Abs(float64(x[k]))*sumMag
			}
		}
	}
	return dx, mag
}

// naiveKept returns the dropout mask of d over n elements, written from
// the definition in kernels.Dropout's doc comment.
func naiveKept(d kernels.Dropout, n int) []bool {
	fmix := func(z uint64) uint64 {
		z ^= z >> 30
		z *= 0xbf58476d1ce4e5b9
		z ^= z >> 27
		z *= 0x94d049bb133111eb
		return z ^ z>>31
	}
	hash := func(x uint32) uint32 {
		for _, r := range [3]struct {
			shift int
			mul   uint32
		}{{17, 0xed5ad4bb}, {11, 0xac4c1b51}, {15, 0x31848bab}} {
			x ^= x >> r.shift
			x *= r.mul
		}
		return x ^ x>>14
	}
	thr := uint32(float64(d.Ratio) * math.Exp2(32))
	kept := make([]bool, n)
	for i := range kept {
		c := d.Offset + uint64(i)
		key := uint32(fmix(fmix(d.Seed) + c>>32))
		kept[i] = hash(uint32(c)^key) >= thr
	}
	return kept
}

// naiveBN returns, for batch normalisation of x with the given channel
// statistics (nil: the batch's, two passes in float64), y and its
// magnitudes, and the statistics used.
func naiveBN(s kernels.BNShape, x, gamma, beta, mean, variance []float32) (y, mag, mu, v []float64) {
	m := float64(s.N * s.HW)
	y, mag = make([]float64, s.Len()), make([]float64, s.Len())
	mu, v = make([]float64, s.C), make([]float64, s.C)
	each := func(c int, f func(i int)) {
		for n := 0; n < s.N; n++ {
			for i := 0; i < s.HW; i++ {
				f((n*s.C+c)*s.HW + i)
			}
		}
	}
	for c := 0; c < s.C; c++ {
		if mean != nil {
			mu[c], v[c] = float64(mean[c]), float64(variance[c])
		} else {
			each(c, func(i int) { mu[c] += float64(x[i]) })
			mu[c] /= m
			each(c, func(i int) { v[c] += (float64(x[i]) - mu[c]) * (float64(x[i]) - mu[c]) })
			v[c] /= m
		}
		is := 1 / math.Sqrt(v[c]+float64(s.Eps))
		each(c, func(i int) {
			t := float64(gamma[c]) * (float64(x[i]) - mu[c]) * is
			y[i] = t + float64(beta[c])
			// x − mean cancels: its rounding is relative to |x| + |mean|.
			mag[i] = math.Abs(float64(gamma[c])*is)*(math.Abs(float64(x[i]))+math.Abs(mu[c])) + math.Abs(float64(beta[c]))
		})
	}
	return y, mag, mu, v
}

// bnGrads holds the naive gradients of batch normalisation and the
// magnitudes of their terms.
type bnGrads struct{ dx, dxMag, dgamma, dgammaMag, dbeta, dbetaMag []float64 }

// naiveBNBackward returns the gradients of batch normalisation from x,
// gamma, dy and the statistics mean and variance that BNBackward is given
// (the forward's), by the formula of kernels.Engine.BNBackward.
func naiveBNBackward(s kernels.BNShape, x, gamma, dy, mean, variance []float32) bnGrads {
	m := float64(s.N * s.HW)
	g := bnGrads{dx: make([]float64, s.Len()), dxMag: make([]float64, s.Len()),
		dgamma: make([]float64, s.C), dgammaMag: make([]float64, s.C),
		dbeta: make([]float64, s.C), dbetaMag: make([]float64, s.C)}
	for c := 0; c < s.C; c++ {
		mu := float64(mean[c])
		is := 1 / math.Sqrt(float64(variance[c])+float64(s.Eps))
		var idx []int
		for n := 0; n < s.N; n++ {
			for i := 0; i < s.HW; i++ {
				idx = append(idx, (n*s.C+c)*s.HW+i)
			}
		}
		for _, i := range idx {
			d := float64(dy[i])
			g.dbeta[c] += d
			g.dbetaMag[c] += math.Abs(d)
			g.dgamma[c] += d * (float64(x[i]) - mu) * is
			g.dgammaMag[c] += math.Abs(d) * (math.Abs(float64(x[i])) + math.Abs(mu)) * is
		}
		a := float64(gamma[c]) * is
		for _, i := range idx {
			xh := (float64(x[i]) - mu) * is
			g.dx[i] = a * (float64(dy[i]) - g.dbeta[c]/m - xh*g.dgamma[c]/m)
			xhMag := (math.Abs(float64(x[i])) + math.Abs(mu)) * is
			g.dxMag[i] = math.Abs(a) * (math.Abs(float64(dy[i])) + g.dbetaMag[c]/m + xhMag*g.dgammaMag[c]/m)
		}
	}
	return g
}

// naiveSoftmax returns the probabilities and the mean cross-entropy.
func naiveSoftmax(n, k int, logits []float32, labels []int32) (prob []float64, loss float64) {
	prob = make([]float64, n*k)
	for r := 0; r < n; r++ {
		m := math.Inf(-1)
		for j := 0; j < k; j++ {
			m = math.Max(m, float64(logits[r*k+j]))
		}
		var z float64
		for j := 0; j < k; j++ {
			z += math.Exp(float64(logits[r*k+j]) - m)
		}
		for j := 0; j < k; j++ {
			prob[r*k+j] = math.Exp(float64(logits[r*k+j])-m) / z
		}
		loss += -(float64(logits[r*k+int(labels[r])]) - m - math.Log(z))
	}
	return prob, loss / float64(n)
}
