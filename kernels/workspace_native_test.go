//go:build cgo && !noblas

package kernels

import (
	"testing"

	"github.com/softsync/softsync/kernels/isa"
)

// TestConvWorkspace: what a Workspace grows to in a call of each pass
// of a convolution is the engine's ConvWorkspace of that pass, for every
// method the native engine runs (forced or chosen), at two levels and
// two thread counts, and for the reference engine; and LRNWorkspace is
// what the LRN kernels ask for.
func TestConvWorkspace(t *testing.T) {
	if _, info, err := New(Config{Threads: 1}); err != nil || info.Fallback {
		t.Skipf("no native engine: %v %v", err, info.FallbackErr)
	}
	engines := []Engine{Reference()}
	for _, l := range []isa.Level{isa.Best(), isa.AVX2} {
		for _, threads := range []int{1, 3} {
			for _, m := range []string{"", "chwn", "image", "direct", "winograd", "winograd6", "s2d"} {
				engines = append(engines, NativeWithThreads(0, m, l, threads))
			}
		}
	}
	shapes := []ConvShape{
		{N: 3, C: 3, H: 16, W: 16, OC: 16, KH: 4, KW: 4, PadH: 1, PadW: 1, StrideH: 2, StrideW: 2, Layout: CNHW},
		{N: 2, C: 64, H: 16, W: 16, OC: 64, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1, Layout: CNHW},
		{N: 2, C: 64, H: 6, W: 6, OC: 64, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1},
		{N: 2, C: 96, H: 20, W: 20, OC: 64, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1, Group: 2, Layout: CNHW},
		{N: 4, C: 8, H: 9, W: 9, OC: 12, KH: 1, KW: 1, StrideH: 1, StrideW: 1},
	}
	for _, e := range engines {
		for _, s := range shapes {
			x, w := make([]float32, s.InputLen()), make([]float32, s.WeightLen())
			y, dx, dw := make([]float32, s.OutputLen()), make([]float32, s.InputLen()), make([]float32, s.WeightLen())
			b, db := make([]float32, s.OC), make([]float32, s.OC)
			for _, c := range []struct {
				pass ConvPass
				run  func(ws *Workspace)
			}{
				{ConvForwardPass, func(ws *Workspace) { e.ConvForward(s, x, w, b, y, ws) }},
				{ConvBackwardPass, func(ws *Workspace) { e.ConvBackward(s, x, w, y, dx, dw, db, ws) }},
				{ConvWeightsPass, func(ws *Workspace) { e.ConvBackward(s, x, w, y, nil, dw, db, ws) }},
			} {
				ws := &Workspace{}
				c.run(ws)
				if got, want := ws.Size(), ConvWorkspace(e, s, c.pass); got != want {
					t.Errorf("%s %v %+v: pass %d grew the workspace to %d floats, ConvWorkspace says %d", e.Name(), e, s, c.pass, got, want)
				}
			}
		}
	}
	for _, e := range []Engine{Reference(), NativeWithThreads(0, "", isa.Best(), 3)} {
		s := LRNShape{N: 2, C: 16, H: 13, W: 13, Size: 5, Alpha: 1e-4, Beta: 0.75, K: 1, Region: AcrossChannels}
		x, y, scale, dx := make([]float32, s.Len()), make([]float32, s.Len()), make([]float32, s.Len()), make([]float32, s.Len())
		ws := &Workspace{}
		e.LRNForward(s, x, y, scale, ws)
		e.LRNBackward(s, x, y, scale, y, dx, ws)
		if got, want := ws.Size(), LRNWorkspace(e, s); got != want {
			t.Errorf("%s LRN: the workspace grew to %d floats, LRNWorkspace says %d", e.Name(), got, want)
		}
	}
}
