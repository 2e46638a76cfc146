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
// triple of a convolution that touches the image (padding taps skipped).
func convTaps(s kernels.ConvShape, f func(xi, wi, yi int)) {
	oh, ow := s.OutH(), s.OutW()
	for n := 0; n < s.N; n++ {
		for oc := 0; oc < s.OC; oc++ {
			for y := 0; y < oh; y++ {
				for x := 0; x < ow; x++ {
					yi := ((n*s.OC+oc)*oh+y)*ow + x
					for c := 0; c < s.C; c++ {
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
								f(((n*s.C+c)*s.H+h)*s.W+w, ((oc*s.C+c)*s.KH+i)*s.KW+j, yi)
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

// naiveLRN returns scale and y of Caffe's within-channel LRN.
func naiveLRN(s kernels.LRNShape, x []float32) (scale, y []float64) {
	scale, y = make([]float64, s.Len()), make([]float64, s.Len())
	r := s.Size / 2
	for q := 0; q < s.N*s.C; q++ {
		for h := 0; h < s.H; h++ {
			for w := 0; w < s.W; w++ {
				var sum float64
				for i := h - r; i <= h+r; i++ {
					for j := w - r; j <= w+r; j++ {
						if i >= 0 && i < s.H && j >= 0 && j < s.W {
							v := float64(x[(q*s.H+i)*s.W+j])
							sum += v * v
						}
					}
				}
				k := (q*s.H+h)*s.W + w
				scale[k] = float64(s.K) + float64(s.Alpha)/float64(s.Size*s.Size)*sum
				y[k] = float64(x[k]) * math.Pow(scale[k], -float64(s.Beta))
			}
		}
	}
	return scale, y
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
