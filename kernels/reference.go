package kernels

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Reference returns the pure-Go engine: gonum's BLAS for GEMM and plain
// loops for everything else, one image at a time. It is available in every
// build, allocates nothing in steady state, and is the yardstick the native
// engine is tested against.
func Reference() Engine { return reference{} }

type reference struct{}

var _ Engine = reference{}

func (reference) Name() string { return "reference" }

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

func (reference) Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	gonum.Implementation{}.Sgemm(trans(transA), trans(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// im2col writes the column matrix of one image whose H×W planes start cs
// floats apart in x: row (c*KH+i)*KW+j, column oh*OW+ow holds pixel
// (oh*SH−PH+i, ow*SW−PW+j) of plane c, zero outside the image. col has
// C·KH·KW rows of OH·OW entries.
func im2col(s ConvShape, x []float32, cs int, col []float32) {
	oh, ow := s.OutH(), s.OutW()
	r := 0
	for c := 0; c < s.C; c++ {
		plane := x[c*cs : c*cs+s.H*s.W]
		for i := 0; i < s.KH; i++ {
			for j := 0; j < s.KW; j++ {
				row := col[r*oh*ow : (r+1)*oh*ow]
				for y := 0; y < oh; y++ {
					h := y*s.StrideH - s.PadH + i
					for xo := 0; xo < ow; xo++ {
						w := xo*s.StrideW - s.PadW + j
						v := float32(0)
						if h >= 0 && h < s.H && w >= 0 && w < s.W {
							v = plane[h*s.W+w]
						}
						row[y*ow+xo] = v
					}
				}
				r++
			}
		}
	}
}

// col2im is the adjoint of im2col: it overwrites the C planes of one image
// (cs floats apart in x) with the sum of the column entries that im2col
// would have read from each pixel.
func col2im(s ConvShape, col, x []float32, cs int) {
	oh, ow := s.OutH(), s.OutW()
	r := 0
	for c := 0; c < s.C; c++ {
		plane := x[c*cs : c*cs+s.H*s.W]
		clear(plane)
		for i := 0; i < s.KH; i++ {
			for j := 0; j < s.KW; j++ {
				row := col[r*oh*ow : (r+1)*oh*ow]
				for y := 0; y < oh; y++ {
					h := y*s.StrideH - s.PadH + i
					if h < 0 || h >= s.H {
						continue
					}
					for xo := 0; xo < ow; xo++ {
						w := xo*s.StrideW - s.PadW + j
						if w >= 0 && w < s.W {
							plane[h*s.W+w] += row[y*ow+xo]
						}
					}
				}
				r++
			}
		}
	}
}

// The convolutions run image by image and group by group: plane (n, c)
// of x is at n·xn + c·xc and row oc of image n's output (OC×P) at n·yn +
// oc·yc, a matrix of row stride yc, in either layout. Group g is the
// ungrouped convolution sub (C/G channels to OC/G) of the planes from
// channel g·C/G of x and g·OC/G of y, with the g-th block of weights.

// groupShape returns the shape of one group of s (its channel counts; the
// strides stay those of s, see planes).
func (s ConvShape) groupShape() ConvShape {
	g := s.Groups()
	s.C, s.OC, s.Group = s.C/g, s.OC/g, 1
	return s
}

func (e reference) ConvForward(s ConvShape, x, w, b, y []float32, ws *Workspace) {
	checkConvForward(s, x, w, b, y)
	sub := s.groupShape()
	p := s.OutH() * s.OutW()
	ckk := sub.C * s.KH * s.KW
	xn, xc, yn, yc := s.planes()
	col := ws.Floats(ckk * p)
	for n := 0; n < s.N; n++ {
		for g := 0; g < s.Groups(); g++ {
			im2col(sub, x[n*xn+g*sub.C*xc:], xc, col)
			out := y[n*yn+g*sub.OC*yc:]
			e.Gemm(false, false, sub.OC, p, ckk, 1, w[g*sub.OC*ckk:], ckk, col, p, 0, out, yc)
			if b == nil {
				continue
			}
			for oc := 0; oc < sub.OC; oc++ {
				row := out[oc*yc : oc*yc+p]
				for i := range row {
					row[i] += b[g*sub.OC+oc]
				}
			}
		}
	}
}

func (e reference) ConvBackward(s ConvShape, x, w, dy, dx, dw, db []float32, ws *Workspace) {
	checkConvBackward(s, x, w, dy, dx, dw, db)
	sub := s.groupShape()
	p := s.OutH() * s.OutW()
	ckk := sub.C * s.KH * s.KW
	xn, xc, yn, yc := s.planes()
	buf := ws.Floats(2 * ckk * p)
	col, dcol := buf[:ckk*p], buf[ckk*p:]
	for n := 0; n < s.N; n++ {
		beta := float32(1)
		if n == 0 {
			beta = 0
		}
		for g := 0; g < s.Groups(); g++ {
			dyn := dy[n*yn+g*sub.OC*yc:]
			wg := w[g*sub.OC*ckk:]
			im2col(sub, x[n*xn+g*sub.C*xc:], xc, col)
			// dw_g (OC/G×CKK) += dy_ng (OC/G×P) · col_ngᵀ (P×CKK)
			e.Gemm(false, true, sub.OC, ckk, p, 1, dyn, yc, col, p, beta, dw[g*sub.OC*ckk:], ckk)
			if dx != nil {
				// dcol (CKK×P) = w_gᵀ (CKK×OC/G) · dy_ng (OC/G×P)
				e.Gemm(true, false, ckk, p, sub.OC, 1, wg, ckk, dyn, yc, 0, dcol, p)
				col2im(sub, dcol, dx[n*xn+g*sub.C*xc:], xc)
			}
		}
	}
	if db != nil {
		for oc := 0; oc < s.OC; oc++ {
			var sum float32
			for n := 0; n < s.N; n++ {
				for _, v := range dy[n*yn+oc*yc : n*yn+oc*yc+p] {
					sum += v
				}
			}
			db[oc] = sum
		}
	}
}

// poolWindow returns Caffe's window of output (py, px): the rows [h0, h1)
// and columns [w0, w1) of the input plane, and the divisor of average
// pooling, which counts padding cells but not cells past the padded input.
func poolWindow(s PoolShape, py, px int) (h0, h1, w0, w1, size int) {
	h0 = py*s.StrideH - s.PadH
	w0 = px*s.StrideW - s.PadW
	h1 = min(h0+s.KH, s.H+s.PadH)
	w1 = min(w0+s.KW, s.W+s.PadW)
	size = (h1 - h0) * (w1 - w0)
	h0, w0 = max(h0, 0), max(w0, 0)
	h1, w1 = min(h1, s.H), min(w1, s.W)
	return
}

func (reference) PoolForward(s PoolShape, x, y []float32, mask []int32) {
	checkPoolForward(s, x, y, mask)
	oh, ow := s.OutH(), s.OutW()
	plane, oplane := s.H*s.W, oh*ow
	for q := 0; q < s.N*s.C; q++ {
		xp := x[q*plane : (q+1)*plane]
		for py := 0; py < oh; py++ {
			for px := 0; px < ow; px++ {
				h0, h1, w0, w1, size := poolWindow(s, py, px)
				o := q*oplane + py*ow + px
				if s.Mode == MaxPool {
					best, arg := float32(math.Inf(-1)), -1
					for h := h0; h < h1; h++ {
						for w := w0; w < w1; w++ {
							if v := xp[h*s.W+w]; arg < 0 || v > best {
								best, arg = v, h*s.W+w
							}
						}
					}
					y[o], mask[o] = best, int32(arg)
					continue
				}
				var sum float32
				for h := h0; h < h1; h++ {
					for w := w0; w < w1; w++ {
						sum += xp[h*s.W+w]
					}
				}
				y[o] = sum / float32(size)
			}
		}
	}
}

func (reference) PoolBackward(s PoolShape, dy []float32, mask []int32, dx []float32) {
	checkPoolBackward(s, dy, mask, dx)
	oh, ow := s.OutH(), s.OutW()
	plane, oplane := s.H*s.W, oh*ow
	clear(dx[:s.InputLen()])
	for q := 0; q < s.N*s.C; q++ {
		dxp := dx[q*plane : (q+1)*plane]
		for py := 0; py < oh; py++ {
			for px := 0; px < ow; px++ {
				o := q*oplane + py*ow + px
				if s.Mode == MaxPool {
					checkMaskEntry(mask[o], plane)
					dxp[mask[o]] += dy[o]
					continue
				}
				h0, h1, w0, w1, size := poolWindow(s, py, px)
				g := dy[o] / float32(size)
				for h := h0; h < h1; h++ {
					for w := w0; w < w1; w++ {
						dxp[h*s.W+w] += g
					}
				}
			}
		}
	}
}

func (reference) ReLUForward(x, y []float32) {
	checkReLUForward(x, y)
	for i, v := range x {
		y[i] = max(v, 0)
	}
}

func (reference) ReLUBackward(y, dy, dx []float32) {
	checkReLUBackward(y, dy, dx)
	for i, v := range y {
		if v > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// lrnWindowSum returns Σ v over the window of element (q, h, w) of an
// N·C×H×W tensor (q = n·C + c): the Size×Size pixels centred on (h, w) of
// plane q, or the same pixel of channels c−⌊Size/2⌋ … c+⌊Size/2⌋ of image
// n, in ascending order, clipped to the tensor (zero padding).
func lrnWindowSum(s LRNShape, v []float32, q, h, w int) float32 {
	r := s.Size / 2
	var sum float32
	if s.Region == AcrossChannels {
		plane := s.H * s.W
		n, c := q/s.C, q%s.C
		for k := max(c-r, 0); k <= min(c+r, s.C-1); k++ {
			sum += v[(n*s.C+k)*plane+h*s.W+w]
		}
		return sum
	}
	o := q * s.H * s.W
	for i := max(h-r, 0); i <= min(h+r, s.H-1); i++ {
		for j := max(w-r, 0); j <= min(w+r, s.W-1); j++ {
			sum += v[o+i*s.W+j]
		}
	}
	return sum
}

func (reference) LRNForward(s LRNShape, x, y, scale []float32, ws *Workspace) {
	checkLRNForward(s, x, y, scale)
	n := s.Len()
	sq := ws.Floats(n)
	for i, v := range x[:n] {
		sq[i] = v * v
	}
	coef := s.Alpha / s.norm()
	for q := 0; q < s.N*s.C; q++ {
		for h := 0; h < s.H; h++ {
			for w := 0; w < s.W; w++ {
				i := (q*s.H+h)*s.W + w
				scale[i] = s.K + coef*lrnWindowSum(s, sq, q, h, w)
				y[i] = x[i] * float32(math.Pow(float64(scale[i]), -float64(s.Beta)))
			}
		}
	}
}

// LRNBackward uses, for y = x·scale^(−β) with scale = K + α/norm·Σ x²,
// dx_q = dy_q·scale_q^(−β) − 2αβ/norm·x_q·Σ_{p ∋ q} dy_p·y_p/scale_p, where
// the sum runs over the windows containing q: the window centred on q,
// windows being symmetric.
func (reference) LRNBackward(s LRNShape, x, y, scale, dy, dx []float32, ws *Workspace) {
	checkLRNBackward(s, x, y, scale, dy, dx)
	n := s.Len()
	t := ws.Floats(n)
	for i := range t {
		t[i] = dy[i] * y[i] / scale[i]
	}
	coef := 2 * s.Alpha * s.Beta / s.norm()
	for q := 0; q < s.N*s.C; q++ {
		for h := 0; h < s.H; h++ {
			for w := 0; w < s.W; w++ {
				i := (q*s.H+h)*s.W + w
				dx[i] = dy[i]*float32(math.Pow(float64(scale[i]), -float64(s.Beta))) -
					coef*x[i]*lrnWindowSum(s, t, q, h, w)
			}
		}
	}
}

func (e reference) FCForward(n, in, out int, x, w, b, y []float32) {
	checkFCForward(n, in, out, x, w, b, y)
	e.Gemm(false, true, n, out, in, 1, x, in, w, in, 0, y, out)
	if b != nil {
		for r := 0; r < n; r++ {
			row := y[r*out : (r+1)*out]
			for j := range row {
				row[j] += b[j]
			}
		}
	}
}

func (e reference) FCBackward(n, in, out int, x, w, dy, dx, dw, db []float32) {
	checkFCBackward(n, in, out, x, w, dy, dx, dw, db)
	e.Gemm(true, false, out, in, n, 1, dy, out, x, in, 0, dw, in)
	if dx != nil {
		e.Gemm(false, false, n, in, out, 1, dy, out, w, in, 0, dx, in)
	}
	if db != nil {
		clear(db[:out])
		for r := 0; r < n; r++ {
			for j, v := range dy[r*out : (r+1)*out] {
				db[j] += v
			}
		}
	}
}

func (reference) SoftmaxCrossEntropy(n, k int, logits []float32, labels []int32, prob, dlogits []float32) float32 {
	checkSoftmax(n, k, logits, labels, prob, dlogits)
	var loss float64
	for r := 0; r < n; r++ {
		z := logits[r*k : (r+1)*k]
		p := prob[r*k : (r+1)*k]
		m := z[0]
		for _, v := range z {
			m = max(m, v)
		}
		var sum float32
		for j, v := range z {
			p[j] = float32(math.Exp(float64(v - m)))
			sum += p[j]
		}
		for j := range p {
			p[j] /= sum
		}
		l := int(labels[r])
		// log p_l computed from the logits, which stays finite when p_l
		// underflows to zero.
		loss -= float64(z[l]-m) - math.Log(float64(sum))
		if dlogits != nil {
			d := dlogits[r*k : (r+1)*k]
			for j := range d {
				d[j] = p[j] / float32(n)
			}
			d[l] -= 1 / float32(n)
		}
	}
	return float32(loss / float64(n))
}
