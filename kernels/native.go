//go:build cgo && !noblas

package kernels

/*
#cgo CFLAGS: -std=c99 -O3 -Wall -Wextra -I${SRCDIR}/../csrc
#cgo LDFLAGS: -ldl -lm
// The kernels neither keep pointers past the call nor call back into Go,
// so arguments may stay on the Go stack (no allocation per call); the C
// threads that share a call's work finish before it returns, while the
// calling goroutine's stack cannot move.
#cgo noescape ss_gemm
#cgo nocallback ss_gemm
#cgo noescape ss_conv_group
#cgo noescape ss_conv_pass_method
#cgo nocallback ss_conv_pass_method
#cgo noescape ss_conv_direct_supported
#cgo nocallback ss_conv_direct_supported
#cgo noescape ss_conv_winograd_supported
#cgo nocallback ss_conv_winograd_supported
#cgo noescape ss_conv_s2d_supported
#cgo nocallback ss_conv_s2d_supported
#cgo nocallback ss_conv_group
#cgo noescape ss_conv_workspace
#cgo nocallback ss_conv_workspace
#cgo noescape ss_conv_forward
#cgo nocallback ss_conv_forward
#cgo noescape ss_conv_backward
#cgo nocallback ss_conv_backward
#cgo noescape ss_pool_forward
#cgo nocallback ss_pool_forward
#cgo noescape ss_pool_backward
#cgo nocallback ss_pool_backward
#cgo noescape ss_relu_forward
#cgo nocallback ss_relu_forward
#cgo noescape ss_relu_backward
#cgo nocallback ss_relu_backward
#cgo noescape ss_lrn_forward
#cgo nocallback ss_lrn_forward
#cgo noescape ss_lrn_backward
#cgo nocallback ss_lrn_backward
#cgo noescape ss_fc_forward
#cgo nocallback ss_fc_forward
#cgo noescape ss_fc_backward
#cgo nocallback ss_fc_backward
#cgo noescape ss_softmax_xent
#cgo nocallback ss_softmax_xent
#cgo noescape ss_lrn_workspace
#cgo nocallback ss_lrn_workspace
#cgo noescape ss_add
#cgo nocallback ss_add
#cgo noescape ss_dropout
#cgo nocallback ss_dropout
#cgo noescape ss_bn_forward_train
#cgo nocallback ss_bn_forward_train
#cgo noescape ss_bn_forward_infer
#cgo nocallback ss_bn_forward_infer
#cgo noescape ss_bn_backward
#cgo nocallback ss_bn_backward
#cgo noescape ss_isa_best
#cgo nocallback ss_isa_best
#cgo noescape ss_threads_init
#cgo nocallback ss_threads_init
#cgo noescape ss_parallel_max_parts
#cgo nocallback ss_parallel_max_parts
#cgo noescape ss_blas_threads
#cgo nocallback ss_blas_threads
#include <stdlib.h>
#include "softsync.h"
void ss_wgrad_set_test(ptrdiff_t xt_floats, ptrdiff_t dy_floats, int all);
void ss_winograd_set_test(ptrdiff_t tiles);
*/
import "C"

import (
	"math"
	"sync"
	"unsafe"

	"github.com/softsync/softsync/kernels/isa"
)

// NativeBuilt reports whether this binary contains the native engine.
func NativeBuilt() bool { return true }

// native is the cgo engine: csrc kernels with OpenBLAS GEMM. Its fields are
// fixed when it is made, so it is safe for concurrent use; what it shares
// with other native engines (OpenBLAS, the C kernels' thread pool) each
// call sets up for its own thread count (see the package doc).
type native struct {
	// budget bounds, in floats, the column matrix of one convolution
	// GEMM, which decides how many images it covers (ss_conv_group);
	// 0 means defaultConvBudget.
	budget int
	// method forces a convolution method (methodCHWN, methodImage,
	// methodDirect, methodWinograd, methodWinograd6 or methodS2D, the
	// last four only where ss_conv_direct_supported,
	// ss_conv_winograd_supported and ss_conv_s2d_supported); 0 lets
	// ss_conv_pass_method choose per shape and pass.
	method int
	// isa is the C kernels' instruction-set level (SS_ISA_*, see
	// cISA).
	isa C.int
	// threads is the number of threads the engine's kernels and GEMMs
	// split their work over, the calling thread included (1 to
	// maxThreads).
	threads C.int
	// half512 is set on CPUs whose 512-bit FMAs run at half rate
	// (CPU.HalfRate512): there the AVX2 direct convolution kernels run
	// the forward passes at level AVX-512 (convPass).
	half512 bool
}

// cpuHalfRate512 is DetectCPU().HalfRate512(), read once.
var cpuHalfRate512 = sync.OnceValue(func() bool { return DetectCPU().HalfRate512() })

// maxThreads bounds an engine's threads (SS_MAX_THREADS of the C kernels).
const maxThreads = 256

// newNativeAt returns the native engine at C level l over threads threads
// (bounded to 1..maxThreads), the C kernels' thread pool grown to them.
func newNativeAt(l C.int, threads int) native {
	t := C.int(min(max(threads, 1), maxThreads))
	// A pool that cannot grow (no thread could be started) only makes
	// the calls use fewer threads: not an error.
	C.ss_threads_init(t)
	return native{isa: l, threads: t, half512: cpuHalfRate512()}
}

// Threads returns the number of threads the engine splits its work over.
func (e native) Threads() int { return int(e.threads) }

// The C levels (SS_ISA_*) are the concrete isa.Levels, in the same order,
// counted from SS_ISA_GENERIC (checked at compile time: the array types
// differ otherwise).
var (
	_ [C.SS_ISA_AVX2 - C.SS_ISA_GENERIC]struct{}   = [isa.AVX2 - isa.Generic]struct{}{}
	_ [C.SS_ISA_AVX512 - C.SS_ISA_GENERIC]struct{} = [isa.AVX512 - isa.Generic]struct{}{}
)

// cISA returns the C level (SS_ISA_*) of a concrete isa.Level.
func cISA(l isa.Level) C.int { return C.SS_ISA_GENERIC + C.int(l-isa.Generic) }

// goISA is the inverse of cISA.
func goISA(l C.int) isa.Level { return isa.Generic + isa.Level(l-C.SS_ISA_GENERIC) }

// cBest is the highest level the C kernels of this build run on this CPU
// (ss_isa_best: GCC's view of the CPU, which agrees with isa.Best unless
// the C compiler lacked the instruction set).
func cBest() isa.Level { return goISA(C.ss_isa_best()) }

// ISA returns the instruction-set level the engine's kernels run at.
func (e native) ISA() isa.Level { return goISA(e.isa) }

// Forced convolution methods of native.method (tests run each).
const (
	methodCHWN     = 1 + C.SS_CONV_CHWN
	methodImage    = 1 + C.SS_CONV_IMAGE
	methodDirect   = 1 + C.SS_CONV_DIRECT
	methodWinograd = 1 + C.SS_CONV_WINOGRAD
	// methodWinograd6 is Winograd on 6×6 tiles: F(4×4, 3×3) for 3×3
	// kernels, F(2×2, 5×5) for 5×5 ones.
	methodWinograd6 = 1 + C.SS_CONV_WINOGRAD6
	methodS2D       = 1 + C.SS_CONV_S2D
)

var (
	_ Engine         = native{}
	_ WorkspaceSizer = native{}
)

func (native) Name() string { return "native" }

func fptr(x []float32) *C.float {
	if len(x) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&x[0]))
}

func iptr(x []int32) *C.int {
	if len(x) == 0 {
		return nil
	}
	return (*C.int)(unsafe.Pointer(&x[0]))
}

// fits32 panics unless every value fits the C int the kernels take.
func fits32(op string, vals ...int) {
	for _, v := range vals {
		if v > math.MaxInt32 {
			fail(op, "size %d exceeds the 32-bit range of the C kernels", v)
		}
	}
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func (e native) Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	fits32("Gemm", m, n, k, lda, ldb, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		// C = beta·C; beta = 0 clears C without reading it.
		for i := 0; i < m; i++ {
			row := c[i*ldc : i*ldc+n]
			if beta == 0 {
				clear(row)
				continue
			}
			for j := range row {
				row[j] *= beta
			}
		}
		return
	}
	yieldSlice()
	C.ss_gemm(e.isa, e.threads, cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		fptr(a), C.int(lda), fptr(b), C.int(ldb), C.float(beta), fptr(c), C.int(ldc))
}

// convShape returns the C shape of one group of s (all of s when it is
// ungrouped): its channel counts, and the number of groups the tensors
// hold, from which the C kernels take the plane strides (see
// ss_conv_shape).
func convShape(s ConvShape) C.ss_conv_shape {
	sub := s.groupShape()
	fits32("conv", s.N, s.C, s.H, s.W, s.OC, s.C*s.KH*s.KW, s.OutH()*s.OutW())
	return C.ss_conv_shape{n: C.int(s.N), c: C.int(sub.C), h: C.int(s.H), w: C.int(s.W),
		oc: C.int(sub.OC), kh: C.int(s.KH), kw: C.int(s.KW), pad_h: C.int(s.PadH), pad_w: C.int(s.PadW),
		stride_h: C.int(s.StrideH), stride_w: C.int(s.StrideW), layout: C.int(s.Layout), groups: C.int(s.Groups())}
}

// convGroup returns the offsets, in floats, of group g's first plane of
// x and of y, of its first weight, and of its first bias.
func convGroup(s ConvShape, g int) (xo, yo, wo, bo int) {
	sub := s.groupShape()
	_, xc, _, yc := s.planes()
	return g * sub.C * xc, g * sub.OC * yc, g * sub.OC * sub.C * s.KH * s.KW, g * sub.OC
}

// convPass is how one pass of a convolution runs: its method and the
// level of its kernels.
type convPass struct{ method, isa C.int }

// convPlan returns the GEMM group size, how a pass (C.SS_CONV_PASS_*)
// runs and a workspace slice large enough for it (and, when also is not
// negative, for a second pass: both backward passes).
func (e native) convPlan(cs *C.ss_conv_shape, pass, also C.int, ws *Workspace) (C.int, convPass, []float32) {
	g, p, need := e.convNeed(cs, pass, also)
	return g, p, ws.Floats(need)
}

// convNeed returns the GEMM group size, how a pass runs and the floats
// of workspace it needs (with a second pass when also is not negative),
// for convPlan and ConvWorkspace.
func (e native) convNeed(cs *C.ss_conv_shape, pass, also C.int) (C.int, convPass, int) {
	budget := e.budget
	if budget == 0 {
		budget = defaultConvBudget
	}
	g := C.ss_conv_group(cs, C.ptrdiff_t(budget))
	backward := cbool(pass != C.SS_CONV_PASS_FORWARD)
	p := e.convPass(cs, pass)
	need := C.ss_conv_workspace(p.isa, e.threads, cs, g, p.method, backward)
	if also >= 0 {
		q := e.convPass(cs, also)
		need = max(need, C.ss_conv_workspace(q.isa, e.threads, cs, g, q.method, backward))
	}
	return g, p, int(need)
}

// ConvWorkspace returns what ConvForward (pass ConvForwardPass) or
// ConvBackward asks of its Workspace for s: the need of the method and
// level convPass chooses for the pass, or for both gradients the larger
// of their two needs.
func (e native) ConvWorkspace(s ConvShape, pass ConvPass) int {
	cs := convShape(s)
	first, also := C.int(C.SS_CONV_PASS_WGRAD), C.int(-1)
	switch pass {
	case ConvForwardPass:
		first = C.SS_CONV_PASS_FORWARD
	case ConvBackwardPass:
		also = C.SS_CONV_PASS_DGRAD
	}
	_, _, need := e.convNeed(&cs, first, also)
	return need
}

// LRNWorkspace returns ss_lrn_workspace of s at the engine's threads.
func (e native) LRNWorkspace(s LRNShape) int {
	ls := lrnShape(s)
	return int(C.ss_lrn_workspace(e.threads, &ls))
}

// convPass returns how one pass runs: the forced method where it runs
// the shape, else ss_conv_pass_method's choice, at the engine's level;
// except that where 512-bit FMAs run at half rate (half512), a forward
// pass that chose the AVX-512 direct kernels runs the AVX2 ones where
// those waste no lanes on wide rows (a multiple of 8 pixels, at least 32)
// or the AVX-512 kernels' shifted copies of the input are many (kw >= 5
// copies of each channel) beside 1024 taps or more. The gradients stay on
// the AVX-512 kernels. docs/performance.md ("ImageNet-size
// convolutions") has the measurements behind each bound.
func (e native) convPass(cs *C.ss_conv_shape, pass C.int) convPass {
	if e.method != 0 && (e.method != methodDirect || C.ss_conv_direct_supported(e.isa, cs) != 0) &&
		(e.method != methodWinograd && e.method != methodWinograd6 ||
			C.ss_conv_winograd_supported(C.int(e.method-1), cs) != 0) &&
		(e.method != methodS2D || C.ss_conv_s2d_supported(cs) != 0) {
		return convPass{C.int(e.method - 1), e.isa}
	}
	p := convPass{C.ss_conv_pass_method(e.isa, cs, pass), e.isa}
	ow, taps := (cs.w+2*cs.pad_w-cs.kw)/cs.stride_w+1, cs.c*cs.kh*cs.kw
	if e.half512 && p.method == C.SS_CONV_DIRECT && pass == C.SS_CONV_PASS_FORWARD &&
		(ow%8 == 0 && ow >= 32 || cs.kw >= 5 && taps >= 1024) &&
		e.isa >= C.SS_ISA_AVX512 && C.ss_isa_best() >= C.SS_ISA_AVX512 &&
		C.ss_conv_direct_supported(C.SS_ISA_AVX2, cs) != 0 {
		p.isa = C.SS_ISA_AVX2
	}
	return p
}

// convOwn reports whether every pass of s runs on the C kernels' own
// convolutions (the direct kernels, and at level AVX2 the weight gradient
// of csrc/wgrad.c), whose bits do not depend on the thread count, rather
// than on OpenBLAS's GEMMs (the GEMM methods, and Winograd's 16 GEMMs).
func (e native) convOwn(s ConvShape) bool {
	cs := convShape(s)
	for _, pass := range []C.int{C.SS_CONV_PASS_FORWARD, C.SS_CONV_PASS_WGRAD, C.SS_CONV_PASS_DGRAD} {
		if e.convPass(&cs, pass).method != C.SS_CONV_DIRECT {
			return false
		}
	}
	return true
}

// fptrAt returns a pointer to x[o], or nil when x is nil.
func fptrAt(x []float32, o int) *C.float {
	if x == nil {
		return nil
	}
	return fptr(x[o:])
}

// ConvForward runs the groups one after the other, each an ungrouped
// convolution of the C kernels over its block of channels.
func (e native) ConvForward(s ConvShape, x, w, b, y []float32, ws *Workspace) {
	checkConvForward(s, x, w, b, y)
	cs := convShape(s)
	g, p, buf := e.convPlan(&cs, C.SS_CONV_PASS_FORWARD, -1, ws)
	for k := range s.Groups() {
		xo, yo, wo, bo := convGroup(s, k)
		yieldSlice()
		C.ss_conv_forward(p.isa, e.threads, &cs, g, p.method, fptrAt(x, xo), fptrAt(w, wo), fptrAt(b, bo), fptrAt(y, yo),
			fptr(buf), C.ptrdiff_t(len(buf)))
	}
}

// ConvBackward runs the weight and the input gradient in one call per
// group when they run alike, else in one call each.
func (e native) ConvBackward(s ConvShape, x, w, dy, dx, dw, db []float32, ws *Workspace) {
	checkConvBackward(s, x, w, dy, dx, dw, db)
	cs := convShape(s)
	also := C.int(-1)
	if dx != nil {
		also = C.SS_CONV_PASS_DGRAD
	}
	g, p, buf := e.convPlan(&cs, C.SS_CONV_PASS_WGRAD, also, ws)
	d := p
	if dx != nil {
		d = e.convPass(&cs, C.SS_CONV_PASS_DGRAD)
	}
	for k := range s.Groups() {
		xo, yo, wo, bo := convGroup(s, k)
		yieldSlice()
		if d == p {
			C.ss_conv_backward(p.isa, e.threads, &cs, g, p.method, fptrAt(x, xo), fptrAt(w, wo), fptrAt(dy, yo),
				fptrAt(dx, xo), fptrAt(dw, wo), fptrAt(db, bo), fptr(buf), C.ptrdiff_t(len(buf)))
			continue
		}
		C.ss_conv_backward(p.isa, e.threads, &cs, g, p.method, fptrAt(x, xo), fptrAt(w, wo), fptrAt(dy, yo),
			nil, fptrAt(dw, wo), fptrAt(db, bo), fptr(buf), C.ptrdiff_t(len(buf)))
		C.ss_conv_backward(d.isa, e.threads, &cs, g, d.method, fptrAt(x, xo), fptrAt(w, wo), fptrAt(dy, yo),
			fptrAt(dx, xo), nil, nil, fptr(buf), C.ptrdiff_t(len(buf)))
	}
}

func poolShape(s PoolShape) C.ss_pool_shape {
	fits32("pool", s.N*s.C, s.H*s.W)
	return C.ss_pool_shape{mode: C.int(s.Mode), n: C.int(s.N), c: C.int(s.C), h: C.int(s.H), w: C.int(s.W),
		kh: C.int(s.KH), kw: C.int(s.KW), pad_h: C.int(s.PadH), pad_w: C.int(s.PadW),
		stride_h: C.int(s.StrideH), stride_w: C.int(s.StrideW)}
}

func (e native) PoolForward(s PoolShape, x, y []float32, mask []int32) {
	checkPoolForward(s, x, y, mask)
	ps := poolShape(s)
	var m *C.int
	if s.Mode == MaxPool {
		m = iptr(mask)
	}
	yieldSlice()
	C.ss_pool_forward(e.isa, e.threads, &ps, fptr(x), fptr(y), m)
}

func (e native) PoolBackward(s PoolShape, dy []float32, mask []int32, dx []float32) {
	checkPoolBackward(s, dy, mask, dx)
	ps := poolShape(s)
	var m *C.int
	if s.Mode == MaxPool {
		m = iptr(mask)
	}
	yieldSlice()
	// The C kernel skips and counts mask entries outside the input plane,
	// so a corrupted mask never writes out of bounds; report the first.
	if C.ss_pool_backward(e.isa, e.threads, &ps, fptr(dy), m, fptr(dx)) != 0 {
		plane := s.H * s.W
		for _, v := range mask[:s.OutputLen()] {
			checkMaskEntry(v, plane)
		}
	}
}

func (e native) ReLUForward(x, y []float32) {
	checkReLUForward(x, y)
	if len(x) > 0 {
		yieldSlice()
		C.ss_relu_forward(e.isa, e.threads, C.ptrdiff_t(len(x)), fptr(x), fptr(y))
	}
}

func (e native) ReLUBackward(y, dy, dx []float32) {
	checkReLUBackward(y, dy, dx)
	if len(y) > 0 {
		yieldSlice()
		C.ss_relu_backward(e.isa, e.threads, C.ptrdiff_t(len(y)), fptr(y), fptr(dy), fptr(dx))
	}
}

func lrnShape(s LRNShape) C.ss_lrn_shape {
	fits32("LRN", s.N*s.C, s.H*s.W)
	return C.ss_lrn_shape{n: C.int(s.N), c: C.int(s.C), h: C.int(s.H), w: C.int(s.W),
		size: C.int(s.Size), alpha: C.float(s.Alpha), beta: C.float(s.Beta), k: C.float(s.K), region: C.int(s.Region)}
}

// The Go and C names of the LRN windows agree (checked at compile time).
var (
	_ [C.SS_LRN_WITHIN]struct{} = [WithinChannel]struct{}{}
	_ [C.SS_LRN_ACROSS]struct{} = [AcrossChannels]struct{}{}
)

func (e native) LRNForward(s LRNShape, x, y, scale []float32, ws *Workspace) {
	checkLRNForward(s, x, y, scale)
	ls := lrnShape(s)
	buf := ws.Floats(int(C.ss_lrn_workspace(e.threads, &ls)))
	yieldSlice()
	C.ss_lrn_forward(e.isa, e.threads, &ls, fptr(x), fptr(y), fptr(scale), fptr(buf), C.ptrdiff_t(len(buf)))
}

func (e native) LRNBackward(s LRNShape, x, y, scale, dy, dx []float32, ws *Workspace) {
	checkLRNBackward(s, x, y, scale, dy, dx)
	ls := lrnShape(s)
	buf := ws.Floats(int(C.ss_lrn_workspace(e.threads, &ls)))
	yieldSlice()
	C.ss_lrn_backward(e.isa, e.threads, &ls, fptr(x), fptr(y), fptr(scale), fptr(dy), fptr(dx), fptr(buf), C.ptrdiff_t(len(buf)))
}

func (e native) DropoutForward(d Dropout, x, y []float32) {
	checkDropoutForward(d, x, y)
	e.dropout(d, x, y)
}

func (e native) DropoutBackward(d Dropout, dy, dx []float32) {
	checkDropoutBackward(d, dy, dx)
	e.dropout(d, dy, dx)
}

func (e native) dropout(d Dropout, in, out []float32) {
	if len(in) == 0 {
		return
	}
	yieldSlice()
	C.ss_dropout(e.isa, e.threads, C.ptrdiff_t(len(in)), fptr(in), fptr(out), C.ulonglong(d.Seed),
		C.ulonglong(d.Offset), C.uint(d.threshold()), C.float(d.scale()))
}

func bnShape(s BNShape) C.ss_bn_shape {
	fits32("BN", s.N, s.C)
	return C.ss_bn_shape{n: C.int(s.N), c: C.int(s.C), hw: C.ptrdiff_t(s.HW), eps: C.float(s.Eps)}
}

func (e native) BNForwardTrain(s BNShape, x, gamma, beta, y, mean, variance []float32) {
	checkBNForward("BNForwardTrain", s, x, gamma, beta, mean, variance, y)
	bs := bnShape(s)
	yieldSlice()
	C.ss_bn_forward_train(e.isa, e.threads, &bs, fptr(x), fptr(gamma), fptr(beta), fptr(y), fptr(mean), fptr(variance))
}

func (e native) BNForwardInfer(s BNShape, x, gamma, beta, mean, variance, y []float32) {
	checkBNForward("BNForwardInfer", s, x, gamma, beta, mean, variance, y)
	bs := bnShape(s)
	yieldSlice()
	C.ss_bn_forward_infer(e.isa, e.threads, &bs, fptr(x), fptr(gamma), fptr(beta), fptr(mean), fptr(variance), fptr(y))
}

func (e native) BNBackward(s BNShape, x, gamma, mean, variance, dy, dx, dgamma, dbeta []float32) {
	checkBNBackward(s, x, gamma, mean, variance, dy, dx, dgamma, dbeta)
	bs := bnShape(s)
	yieldSlice()
	C.ss_bn_backward(e.isa, e.threads, &bs, fptr(x), fptr(gamma), fptr(mean), fptr(variance), fptr(dy), fptr(dx),
		fptr(dgamma), fptr(dbeta))
}

func (e native) Add(a, b, y []float32) {
	checkAdd(a, b, y)
	if len(a) > 0 {
		yieldSlice()
		C.ss_add(e.isa, e.threads, C.ptrdiff_t(len(a)), fptr(a), fptr(b), fptr(y))
	}
}

func (e native) FCForward(n, in, out int, x, w, b, y []float32) {
	checkFCForward(n, in, out, x, w, b, y)
	fits32("FCForward", n, in, out)
	yieldSlice()
	C.ss_fc_forward(e.isa, e.threads, C.int(n), C.int(in), C.int(out), fptr(x), fptr(w), fptr(b), fptr(y))
}

func (e native) FCBackward(n, in, out int, x, w, dy, dx, dw, db []float32) {
	checkFCBackward(n, in, out, x, w, dy, dx, dw, db)
	fits32("FCBackward", n, in, out)
	yieldSlice()
	C.ss_fc_backward(e.isa, e.threads, C.int(n), C.int(in), C.int(out), fptr(x), fptr(w), fptr(dy), fptr(dx), fptr(dw), fptr(db))
}

func (native) SoftmaxCrossEntropy(n, k int, logits []float32, labels []int32, prob, dlogits []float32) float32 {
	checkSoftmax(n, k, logits, labels, prob, dlogits)
	fits32("SoftmaxCrossEntropy", n, k)
	yieldSlice()
	return float32(C.ss_softmax_xent(C.int(n), C.int(k), fptr(logits), iptr(labels), fptr(prob), fptr(dlogits)))
}

// setMinParallelFloats sets how much work a range of a C kernel needs
// before it runs on another thread (tests lower it to reach the parallel
// paths with small shapes).
func setMinParallelFloats(n int) { C.ss_set_min_parallel_floats(C.ptrdiff_t(n)) }

// setWinogradTest sets the tiles of one block of the Winograd convolution
// (0 restores the default), so that tests cross blocks inside images with
// small shapes. No kernel may run meanwhile.
func setWinogradTest(tiles int) { C.ss_winograd_set_test(C.ptrdiff_t(tiles)) }

// setWgradTest bounds the chunks of the AVX2 weight-gradient GEMM (floats
// of a group's channel-last images and of a thread's packed output
// gradient; 0 restores the defaults) and, with all set, runs it for every
// shape, so that tests reach all its paths with small shapes. No kernel
// may run meanwhile.
func setWgradTest(xt, dy int, all bool) {
	C.ss_wgrad_set_test(C.ptrdiff_t(xt), C.ptrdiff_t(dy), cbool(all))
}

// parallelMaxParts returns the most threads a C kernel's job run by the
// calling OS thread was split over since the previous call, 0 if none
// ran (tests lock the goroutine to its thread around the calls).
func parallelMaxParts() int { return int(C.ss_parallel_max_parts()) }

// blasThreads returns OpenBLAS's thread count now.
func blasThreads() int { return int(C.ss_blas_threads()) }
