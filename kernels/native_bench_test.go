//go:build cgo && !noblas

package kernels_test

import (
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
)

// BenchmarkNetConvMethods runs the layers of BenchmarkNetConv on one
// thread over 16 images with each convolution method forced (direct where
// the stride allows it, Winograd F(2×2, 3×3) for 3×3 kernels of stride 1,
// Winograd on 6×6 tiles for 3×3 and 5×5 kernels of stride 1, space to
// depth for strided ones of one group, image-major and batch-innermost
// GEMMs) at the best level the CPU runs: the measurements that
// ss_conv_pass_method's choice rests on. Names: <layer>/<method>/<pass>; bwd is both gradients (the weight
// gradient alone for a first layer).
func BenchmarkNetConvMethods(b *testing.B) {
	fastestAt(b, 1) // loads OpenBLAS
	for _, l := range netConvs {
		s := l.s
		s.N = 16
		r := rand.New(rand.NewPCG(7, 8))
		x, w, bias := randSlice(r, s.InputLen()), randSlice(r, s.WeightLen()), randSlice(r, s.OC)
		y, dy := make([]float32, s.OutputLen()), randSlice(r, s.OutputLen())
		dw, db := make([]float32, s.WeightLen()), make([]float32, s.OC)
		var dx []float32
		passes := 1.0
		if !l.first {
			dx, passes = make([]float32, s.InputLen()), 2
		}
		flop := 2 * float64(s.OC) * float64(s.N*s.OutH()*s.OutW()) * float64(s.C*s.KH*s.KW)
		for _, m := range []string{"direct", "winograd", "winograd6", "s2d", "image", "chwn"} {
			if m == "direct" && (s.StrideH != 1 || s.StrideW != 1) {
				continue
			}
			if m == "s2d" && (s.StrideH == 1 && s.StrideW == 1 || s.Groups() > 1) {
				continue
			}
			if m == "winograd" && (s.KH != 3 || s.KW != 3 || s.StrideH != 1 || s.StrideW != 1) {
				continue
			}
			if m == "winograd6" && (s.KH != s.KW || s.KH != 3 && s.KH != 5 || s.PadH > s.KH/2 ||
				s.StrideH != 1 || s.StrideW != 1) {
				continue
			}
			e := kernels.NativeWithThreads(0, m, isa.Best(), 1)
			ws := &kernels.Workspace{}
			b.Run(l.name+"/"+m+"/fwd", func(b *testing.B) {
				timeOp(b, flop, func() { e.ConvForward(s, x, w, bias, y, ws) })
			})
			b.Run(l.name+"/"+m+"/bwd", func(b *testing.B) {
				timeOp(b, passes*flop, func() { e.ConvBackward(s, x, w, dy, dx, dw, db, ws) })
			})
		}
	}
}
