package kernels

import (
	"fmt"
	"math"
)

// Validation shared by every Engine implementation, so that both panic on
// the same misuse with the same message. Messages have the form
// "kernels: Op: <argument> <problem>", naming the argument.

func fail(op, format string, args ...any) {
	panic(fmt.Sprintf("kernels: %s: ", op) + fmt.Sprintf(format, args...))
}

// needLen panics unless len(x) ≥ n. name is the argument's name.
func needLen(op, name string, x []float32, n int) {
	if len(x) < n {
		fail(op, "len(%s) = %d, need %d", name, len(x), n)
	}
}

// needLenOrNil is needLen for an optional argument.
func needLenOrNil(op, name string, x []float32, n int) {
	if x != nil {
		needLen(op, name, x, n)
	}
}

func needLen32(op, name string, x []int32, n int) {
	if len(x) < n {
		fail(op, "len(%s) = %d, need %d", name, len(x), n)
	}
}

func positive(op, name string, v int) {
	if v < 1 {
		fail(op, "%s = %d, must be ≥ 1", name, v)
	}
}

func nonNegative(op, name string, v int) {
	if v < 0 {
		fail(op, "%s = %d, must be ≥ 0", name, v)
	}
}

// checkGemm validates the arguments of Gemm (row-major storage).
func checkGemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	const op = "Gemm"
	nonNegative(op, "m", m)
	nonNegative(op, "n", n)
	nonNegative(op, "k", k)
	// Stored shapes: A is m×k (k×m if transposed), B is k×n (n×k), C is m×n.
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	checkMatrix(op, "a", "lda", a, ar, ac, lda)
	checkMatrix(op, "b", "ldb", b, br, bc, ldb)
	checkMatrix(op, "c", "ldc", c, m, n, ldc)
}

// checkMatrix validates a rows×cols row-major matrix x with row stride ld.
func checkMatrix(op, name, ldName string, x []float32, rows, cols, ld int) {
	if ld < max(1, cols) {
		fail(op, "%s = %d, must be ≥ max(1, %d)", ldName, ld, cols)
	}
	if rows > 0 && cols > 0 {
		needLen(op, name, x, (rows-1)*ld+cols)
	}
}

func (s ConvShape) check(op string) {
	if s.Layout != NCHW && s.Layout != CNHW {
		fail(op, "ConvShape.Layout = %d, must be NCHW or CNHW", s.Layout)
	}
	positive(op, "ConvShape.N", s.N)
	positive(op, "ConvShape.C", s.C)
	positive(op, "ConvShape.H", s.H)
	positive(op, "ConvShape.W", s.W)
	positive(op, "ConvShape.OC", s.OC)
	positive(op, "ConvShape.KH", s.KH)
	positive(op, "ConvShape.KW", s.KW)
	nonNegative(op, "ConvShape.PadH", s.PadH)
	nonNegative(op, "ConvShape.PadW", s.PadW)
	positive(op, "ConvShape.StrideH", s.StrideH)
	positive(op, "ConvShape.StrideW", s.StrideW)
	if s.KH > s.H+2*s.PadH {
		fail(op, "ConvShape.KH = %d exceeds padded height %d", s.KH, s.H+2*s.PadH)
	}
	if s.KW > s.W+2*s.PadW {
		fail(op, "ConvShape.KW = %d exceeds padded width %d", s.KW, s.W+2*s.PadW)
	}
	nonNegative(op, "ConvShape.Group", s.Group)
	if g := s.Groups(); s.C%g != 0 || s.OC%g != 0 {
		fail(op, "ConvShape.Group = %d does not divide C = %d and OC = %d", s.Group, s.C, s.OC)
	}
}

func (s PoolShape) check(op string) {
	if s.Mode != MaxPool && s.Mode != AvgPool {
		fail(op, "PoolShape.Mode = %d, must be MaxPool or AvgPool", s.Mode)
	}
	positive(op, "PoolShape.N", s.N)
	positive(op, "PoolShape.C", s.C)
	positive(op, "PoolShape.H", s.H)
	positive(op, "PoolShape.W", s.W)
	positive(op, "PoolShape.KH", s.KH)
	positive(op, "PoolShape.KW", s.KW)
	nonNegative(op, "PoolShape.PadH", s.PadH)
	nonNegative(op, "PoolShape.PadW", s.PadW)
	positive(op, "PoolShape.StrideH", s.StrideH)
	positive(op, "PoolShape.StrideW", s.StrideW)
	// Caffe requires the padding to be smaller than the kernel, so that
	// every window overlaps the input.
	if s.PadH >= s.KH {
		fail(op, "PoolShape.PadH = %d, must be < KH = %d", s.PadH, s.KH)
	}
	if s.PadW >= s.KW {
		fail(op, "PoolShape.PadW = %d, must be < KW = %d", s.PadW, s.KW)
	}
	if s.KH > s.H+2*s.PadH {
		fail(op, "PoolShape.KH = %d exceeds padded height %d", s.KH, s.H+2*s.PadH)
	}
	if s.KW > s.W+2*s.PadW {
		fail(op, "PoolShape.KW = %d exceeds padded width %d", s.KW, s.W+2*s.PadW)
	}
	// With a stride larger than the kernel, ceil rounding can add a last
	// window that lies wholly outside the input; Caffe would emit -FLT_MAX.
	if start := (s.OutH()-1)*s.StrideH - s.PadH; start >= s.H {
		fail(op, "PoolShape.StrideH = %d leaves the last window outside the input (starts at row %d of %d)", s.StrideH, start, s.H)
	}
	if start := (s.OutW()-1)*s.StrideW - s.PadW; start >= s.W {
		fail(op, "PoolShape.StrideW = %d leaves the last window outside the input (starts at column %d of %d)", s.StrideW, start, s.W)
	}
}

func (s LRNShape) check(op string) {
	positive(op, "LRNShape.N", s.N)
	positive(op, "LRNShape.C", s.C)
	positive(op, "LRNShape.H", s.H)
	positive(op, "LRNShape.W", s.W)
	if s.Size < 1 || s.Size%2 == 0 {
		fail(op, "LRNShape.Size = %d, must be odd and ≥ 1", s.Size)
	}
	if !(s.K > 0) {
		fail(op, "LRNShape.K = %g, must be > 0", s.K)
	}
	if !(s.Alpha >= 0) {
		fail(op, "LRNShape.Alpha = %g, must be ≥ 0", s.Alpha)
	}
	if !(s.Beta >= 0) {
		fail(op, "LRNShape.Beta = %g, must be ≥ 0", s.Beta)
	}
	if s.Region != WithinChannel && s.Region != AcrossChannels {
		fail(op, "LRNShape.Region = %d, must be WithinChannel or AcrossChannels", s.Region)
	}
}

func (d Dropout) check(op string) {
	if !(d.Ratio >= 0 && d.Ratio < 1) {
		fail(op, "Dropout.Ratio = %g, must be in [0, 1)", d.Ratio)
	}
}

func (s BNShape) check(op string) {
	positive(op, "BNShape.N", s.N)
	positive(op, "BNShape.C", s.C)
	positive(op, "BNShape.HW", s.HW)
	if !(s.Eps > 0) || s.Eps > math.MaxFloat32 {
		fail(op, "BNShape.Eps = %g, must be finite and > 0", s.Eps)
	}
}

func checkConvForward(s ConvShape, x, w, b, y []float32) {
	const op = "ConvForward"
	s.check(op)
	needLen(op, "x", x, s.InputLen())
	needLen(op, "w", w, s.WeightLen())
	needLenOrNil(op, "b", b, s.OC)
	needLen(op, "y", y, s.OutputLen())
}

func checkConvBackward(s ConvShape, x, w, dy, dx, dw, db []float32) {
	const op = "ConvBackward"
	s.check(op)
	needLen(op, "x", x, s.InputLen())
	needLen(op, "w", w, s.WeightLen())
	needLen(op, "dy", dy, s.OutputLen())
	needLenOrNil(op, "dx", dx, s.InputLen())
	needLen(op, "dw", dw, s.WeightLen())
	needLenOrNil(op, "db", db, s.OC)
}

func checkPoolForward(s PoolShape, x, y []float32, mask []int32) {
	const op = "PoolForward"
	s.check(op)
	needLen(op, "x", x, s.InputLen())
	needLen(op, "y", y, s.OutputLen())
	if s.Mode == MaxPool {
		needLen32(op, "mask", mask, s.OutputLen())
	}
}

func checkPoolBackward(s PoolShape, dy []float32, mask []int32, dx []float32) {
	const op = "PoolBackward"
	s.check(op)
	needLen(op, "dy", dy, s.OutputLen())
	if s.Mode == MaxPool {
		needLen32(op, "mask", mask, s.OutputLen())
	}
	needLen(op, "dx", dx, s.InputLen())
}

// checkMaskEntry panics if a max-pooling mask entry lies outside the input
// plane, so that a corrupted mask can never cause an out-of-bounds write.
func checkMaskEntry(m int32, plane int) {
	if m < 0 || int(m) >= plane {
		fail("PoolBackward", "mask entry %d outside the input plane [0, %d)", m, plane)
	}
}

func checkReLUForward(x, y []float32) {
	needLen("ReLUForward", "y", y, len(x))
}

func checkReLUBackward(y, dy, dx []float32) {
	needLen("ReLUBackward", "dy", dy, len(y))
	needLen("ReLUBackward", "dx", dx, len(y))
}

func checkLRNForward(s LRNShape, x, y, scale []float32) {
	const op = "LRNForward"
	s.check(op)
	needLen(op, "x", x, s.Len())
	needLen(op, "y", y, s.Len())
	needLen(op, "scale", scale, s.Len())
}

func checkLRNBackward(s LRNShape, x, y, scale, dy, dx []float32) {
	const op = "LRNBackward"
	s.check(op)
	needLen(op, "x", x, s.Len())
	needLen(op, "y", y, s.Len())
	needLen(op, "scale", scale, s.Len())
	needLen(op, "dy", dy, s.Len())
	needLen(op, "dx", dx, s.Len())
}

func checkDropoutForward(d Dropout, x, y []float32) {
	const op = "DropoutForward"
	d.check(op)
	needLen(op, "y", y, len(x))
}

func checkDropoutBackward(d Dropout, dy, dx []float32) {
	const op = "DropoutBackward"
	d.check(op)
	needLen(op, "dx", dx, len(dy))
}

// checkBNForward validates the arguments of BNForwardTrain (whose mean
// and variance are outputs) and BNForwardInfer (inputs).
func checkBNForward(op string, s BNShape, x, gamma, beta, mean, variance, y []float32) {
	s.check(op)
	needLen(op, "x", x, s.Len())
	needLen(op, "gamma", gamma, s.C)
	needLen(op, "beta", beta, s.C)
	needLen(op, "mean", mean, s.C)
	needLen(op, "variance", variance, s.C)
	needLen(op, "y", y, s.Len())
}

func checkBNBackward(s BNShape, x, gamma, mean, variance, dy, dx, dgamma, dbeta []float32) {
	const op = "BNBackward"
	s.check(op)
	needLen(op, "x", x, s.Len())
	needLen(op, "gamma", gamma, s.C)
	needLen(op, "mean", mean, s.C)
	needLen(op, "variance", variance, s.C)
	needLen(op, "dy", dy, s.Len())
	needLenOrNil(op, "dx", dx, s.Len())
	needLen(op, "dgamma", dgamma, s.C)
	needLen(op, "dbeta", dbeta, s.C)
}

func checkAdd(a, b, y []float32) {
	needLen("Add", "b", b, len(a))
	needLen("Add", "y", y, len(a))
}

func checkFC(op string, n, in, out int) {
	positive(op, "n", n)
	positive(op, "in", in)
	positive(op, "out", out)
}

func checkFCForward(n, in, out int, x, w, b, y []float32) {
	const op = "FCForward"
	checkFC(op, n, in, out)
	needLen(op, "x", x, n*in)
	needLen(op, "w", w, out*in)
	needLenOrNil(op, "b", b, out)
	needLen(op, "y", y, n*out)
}

func checkFCBackward(n, in, out int, x, w, dy, dx, dw, db []float32) {
	const op = "FCBackward"
	checkFC(op, n, in, out)
	needLen(op, "x", x, n*in)
	needLen(op, "w", w, out*in)
	needLen(op, "dy", dy, n*out)
	needLenOrNil(op, "dx", dx, n*in)
	needLen(op, "dw", dw, out*in)
	needLenOrNil(op, "db", db, out)
}

func checkSoftmax(n, k int, logits []float32, labels []int32, prob, dlogits []float32) {
	const op = "SoftmaxCrossEntropy"
	positive(op, "n", n)
	positive(op, "k", k)
	needLen(op, "logits", logits, n*k)
	needLen32(op, "labels", labels, n)
	needLen(op, "prob", prob, n*k)
	needLenOrNil(op, "dlogits", dlogits, n*k)
	for i, l := range labels[:n] {
		if l < 0 || int(l) >= k {
			fail(op, "labels[%d] = %d outside [0, %d)", i, l, k)
		}
	}
}
