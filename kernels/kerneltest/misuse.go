package kerneltest

import (
	"math"
	"slices"
	"testing"

	"github.com/softsync/softsync/kernels"
)

// testMisuse checks that bad shapes and short slices panic, naming the
// offending argument, before anything is written.
func testMisuse(t *testing.T, e kernels.Engine) {
	f := func(n int) []float32 { return make([]float32, n) }
	ws := &kernels.Workspace{}
	cs := kernels.ConvShape{N: 2, C: 3, H: 6, W: 6, OC: 4, KH: 3, KW: 3, StrideH: 1, StrideW: 1}
	x, w, y := f(cs.InputLen()), f(cs.WeightLen()), f(cs.OutputLen())
	ps := kernels.PoolShape{Mode: kernels.MaxPool, N: 2, C: 3, H: 6, W: 6, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
	px, py, pm := f(ps.InputLen()), f(ps.OutputLen()), make([]int32, ps.OutputLen())
	ls := kernels.LRNShape{N: 1, C: 2, H: 4, W: 4, Size: 3, Alpha: 1, Beta: 0.75, K: 1}
	lx := f(ls.Len())
	gs := kernels.ConvShape{N: 2, C: 4, H: 6, W: 6, OC: 6, KH: 3, KW: 3, StrideH: 1, StrideW: 1, Group: 2}
	gx, gw, gy := f(gs.InputLen()), f(gs.WeightLen()), f(gs.OutputLen())
	bs := kernels.BNShape{N: 2, C: 3, HW: 5, Eps: 1e-5}
	bx, bc := f(bs.Len()), f(bs.C)
	do := kernels.Dropout{Ratio: 0.5, Seed: 1}

	cases := []struct {
		op, want string
		call     func()
	}{
		{"Gemm", "lda", func() { e.Gemm(false, false, 2, 3, 4, 1, f(8), 3, f(12), 3, 0, f(6), 3) }},
		{"Gemm", "ldc", func() { e.Gemm(false, false, 2, 3, 4, 1, f(8), 4, f(12), 3, 0, f(6), 2) }},
		{"Gemm", "len(a)", func() { e.Gemm(true, false, 2, 3, 4, 1, f(7), 2, f(12), 3, 0, f(6), 3) }},
		{"Gemm", "len(b)", func() { e.Gemm(false, true, 2, 3, 4, 1, f(8), 4, f(11), 4, 0, f(6), 3) }},
		{"Gemm", "len(c)", func() { e.Gemm(false, false, 2, 3, 4, 1, f(8), 4, f(12), 3, 0, f(5), 3) }},
		{"Gemm", "m = -1", func() { e.Gemm(false, false, -1, 3, 4, 1, f(8), 4, f(12), 3, 0, f(6), 3) }},
		{"ConvForward", "len(x)", func() { e.ConvForward(cs, x[1:], w, nil, y, ws) }},
		{"ConvForward", "len(w)", func() { e.ConvForward(cs, x, w[1:], nil, y, ws) }},
		{"ConvForward", "len(b)", func() { e.ConvForward(cs, x, w, f(3), y, ws) }},
		{"ConvForward", "len(y)", func() { e.ConvForward(cs, x, w, nil, y[1:], ws) }},
		{"ConvForward", "StrideH", func() { s := cs; s.StrideH = 0; e.ConvForward(s, x, w, nil, y, ws) }},
		{"ConvForward", "KW", func() { s := cs; s.KW = 7; e.ConvForward(s, x, w, nil, y, ws) }},
		{"ConvForward", "PadW", func() { s := cs; s.PadW = -1; e.ConvForward(s, x, w, nil, y, ws) }},
		{"ConvForward", "Layout", func() { s := cs; s.Layout = 2; e.ConvForward(s, x, w, nil, y, ws) }},
		{"ConvBackward", "len(dy)", func() { e.ConvBackward(cs, x, w, y[1:], x, w, nil, ws) }},
		{"ConvBackward", "len(dx)", func() { e.ConvBackward(cs, x, w, y, x[1:], f(cs.WeightLen()), nil, ws) }},
		{"ConvBackward", "len(dw)", func() { e.ConvBackward(cs, x, w, y, nil, w[1:], nil, ws) }},
		{"ConvBackward", "len(db)", func() { e.ConvBackward(cs, x, w, y, nil, f(cs.WeightLen()), f(1), ws) }},
		{"ConvForward", "ConvShape.Group = 4 does not divide C = 4 and OC = 6", func() {
			s := gs
			s.Group = 4
			e.ConvForward(s, gx, f(s.WeightLen()), nil, gy, ws)
		}},
		{"ConvForward", "ConvShape.Group = 3 does not divide C = 4", func() {
			s := gs
			s.Group = 3
			e.ConvForward(s, gx, f(s.WeightLen()), nil, gy, ws)
		}},
		{"ConvForward", "ConvShape.Group = -2", func() { s := gs; s.Group = -2; e.ConvForward(s, gx, gw, nil, gy, ws) }},
		{"ConvForward", "len(w) = 107, need 108", func() { e.ConvForward(gs, gx, gw[1:], nil, gy, ws) }},
		{"ConvBackward", "len(dw) = 107, need 108", func() { e.ConvBackward(gs, gx, gw, gy, nil, gw[1:], nil, ws) }},
		{"PoolForward", "len(mask)", func() { e.PoolForward(ps, px, py, pm[1:]) }},
		{"PoolForward", "len(y)", func() { e.PoolForward(ps, px, py[1:], pm) }},
		{"PoolForward", "PadH", func() { s := ps; s.PadH = 2; e.PoolForward(s, px, py, pm) }},
		{"PoolForward", "StrideW", func() {
			s := ps
			s.W, s.KW, s.StrideW = 8, 1, 3
			e.PoolForward(s, f(s.InputLen()), f(s.OutputLen()), make([]int32, s.OutputLen()))
		}},
		{"PoolForward", "Mode", func() { s := ps; s.Mode = 7; e.PoolForward(s, px, py, pm) }},
		{"PoolBackward", "len(dx)", func() { e.PoolBackward(ps, py, pm, px[1:]) }},
		{"PoolBackward", "mask entry", func() {
			m := make([]int32, ps.OutputLen())
			m[3] = int32(ps.H * ps.W)
			e.PoolBackward(ps, py, m, f(ps.InputLen()))
		}},
		{"ReLUForward", "len(y)", func() { e.ReLUForward(f(5), f(4)) }},
		{"ReLUBackward", "len(dy)", func() { e.ReLUBackward(f(5), f(4), f(5)) }},
		{"ReLUBackward", "len(dx)", func() { e.ReLUBackward(f(5), f(5), f(4)) }},
		{"LRNForward", "Size", func() { s := ls; s.Size = 2; e.LRNForward(s, lx, f(ls.Len()), f(ls.Len()), ws) }},
		{"LRNForward", "len(scale)", func() { e.LRNForward(ls, lx, f(ls.Len()), f(ls.Len()-1), ws) }},
		{"LRNBackward", "len(dy)", func() { e.LRNBackward(ls, lx, lx, lx, lx[1:], f(ls.Len()), ws) }},
		{"LRNForward", "LRNShape.Region = 2", func() {
			s := ls
			s.Region = 2
			e.LRNForward(s, lx, f(ls.Len()), f(ls.Len()), ws)
		}},
		{"LRNBackward", "len(dx)", func() {
			s := ls
			s.Region = kernels.AcrossChannels
			e.LRNBackward(s, lx, lx, lx, lx, f(ls.Len()-1), ws)
		}},
		{"DropoutForward", "Dropout.Ratio = 1", func() { d := do; d.Ratio = 1; e.DropoutForward(d, f(4), f(4)) }},
		{"DropoutForward", "Dropout.Ratio = -0.1", func() { d := do; d.Ratio = -0.1; e.DropoutForward(d, f(4), f(4)) }},
		{"DropoutForward", "Dropout.Ratio = NaN", func() {
			d := do
			d.Ratio = float32(math.NaN())
			e.DropoutForward(d, f(4), f(4))
		}},
		{"DropoutForward", "len(y) = 3, need 4", func() { e.DropoutForward(do, f(4), f(3)) }},
		{"DropoutBackward", "len(dx) = 3, need 4", func() { e.DropoutBackward(do, f(4), f(3)) }},
		{"DropoutBackward", "Dropout.Ratio = 1.5", func() { d := do; d.Ratio = 1.5; e.DropoutBackward(d, f(4), f(4)) }},
		{"BNForwardTrain", "BNShape.C = 0", func() { s := bs; s.C = 0; e.BNForwardTrain(s, bx, bc, bc, bx, bc, bc) }},
		{"BNForwardTrain", "BNShape.HW = -1", func() { s := bs; s.HW = -1; e.BNForwardTrain(s, bx, bc, bc, bx, bc, bc) }},
		{"BNForwardTrain", "BNShape.Eps = 0", func() { s := bs; s.Eps = 0; e.BNForwardTrain(s, bx, bc, bc, bx, bc, bc) }},
		{"BNForwardTrain", "len(gamma) = 2, need 3", func() { e.BNForwardTrain(bs, bx, bc[1:], bc, bx, bc, bc) }},
		{"BNForwardTrain", "len(variance) = 2, need 3", func() { e.BNForwardTrain(bs, bx, bc, bc, bx, bc, bc[1:]) }},
		{"BNForwardTrain", "len(y) = 29, need 30", func() { e.BNForwardTrain(bs, bx, bc, bc, bx[1:], bc, bc) }},
		{"BNForwardInfer", "len(mean) = 2, need 3", func() { e.BNForwardInfer(bs, bx, bc, bc, bc[1:], bc, f(bs.Len())) }},
		{"BNForwardInfer", "len(x) = 29, need 30", func() { e.BNForwardInfer(bs, bx[1:], bc, bc, bc, bc, f(bs.Len())) }},
		{"BNBackward", "len(dgamma) = 2, need 3", func() { e.BNBackward(bs, bx, bc, bc, bc, bx, nil, bc[1:], f(3)) }},
		{"BNBackward", "len(dbeta) = 2, need 3", func() { e.BNBackward(bs, bx, bc, bc, bc, bx, nil, f(3), bc[1:]) }},
		{"BNBackward", "len(dx) = 29, need 30", func() { e.BNBackward(bs, bx, bc, bc, bc, bx, f(29), f(3), f(3)) }},
		{"BNBackward", "len(dy) = 29, need 30", func() { e.BNBackward(bs, bx, bc, bc, bc, bx[1:], nil, f(3), f(3)) }},
		{"Add", "len(b) = 4, need 5", func() { e.Add(f(5), f(4), f(5)) }},
		{"Add", "len(y) = 4, need 5", func() { e.Add(f(5), f(5), f(4)) }},
		{"FCForward", "len(w)", func() { e.FCForward(2, 3, 4, f(6), f(11), nil, f(8)) }},
		{"FCForward", "n = 0", func() { e.FCForward(0, 3, 4, f(6), f(12), nil, f(8)) }},
		{"FCBackward", "len(dw)", func() { e.FCBackward(2, 3, 4, f(6), f(12), f(8), nil, f(11), nil) }},
		{"SoftmaxCrossEntropy", "labels[1]", func() { e.SoftmaxCrossEntropy(2, 3, f(6), []int32{0, 3}, f(6), nil) }},
		{"SoftmaxCrossEntropy", "len(prob)", func() { e.SoftmaxCrossEntropy(2, 3, f(6), []int32{0, 1}, f(5), nil) }},
	}
	for _, c := range cases {
		mustPanic(t, c.op, c.want, c.call)
	}
}

// testAllocs checks that, once a workspace has grown, no call allocates.
// The reference engine is exempt: gonum's Sgemm allocates the goroutines it
// splits large products over.
func testAllocs(t *testing.T, e kernels.Engine) {
	if e.Name() == "reference" {
		t.Skip("gonum's parallel Sgemm allocates")
	}
	r := newRand(1000)
	ws := &kernels.Workspace{}
	cs := kernels.ConvShape{N: 4, C: 3, H: 12, W: 12, OC: 8, KH: 5, KW: 5, PadH: 2, PadW: 2, StrideH: 1, StrideW: 1}
	x, w, b, y := uniform(r, cs.InputLen()), uniform(r, cs.WeightLen()), uniform(r, cs.OC), make([]float32, cs.OutputLen())
	dx, dw, db := make([]float32, cs.InputLen()), make([]float32, cs.WeightLen()), make([]float32, cs.OC)
	ps := kernels.PoolShape{Mode: kernels.MaxPool, N: 4, C: 8, H: 12, W: 12, KH: 3, KW: 3, StrideH: 2, StrideW: 2}
	py, pm, pdx := make([]float32, ps.OutputLen()), make([]int32, ps.OutputLen()), make([]float32, ps.InputLen())
	ls := kernels.LRNShape{N: 4, C: 8, H: 12, W: 12, Size: 3, Alpha: 5e-5, Beta: 0.75, K: 1}
	ly, lscale, ldx := make([]float32, ls.Len()), make([]float32, ls.Len()), make([]float32, ls.Len())
	labels := []int32{1, 2, 3, 4}
	prob := make([]float32, 40)
	gs := cs
	gs.C, gs.OC, gs.Group = 4, 8, 2
	gx, gw := uniform(r, gs.InputLen()), uniform(r, gs.WeightLen())
	gdx, gdw := make([]float32, gs.InputLen()), make([]float32, gs.WeightLen())
	la := ls
	la.Region = kernels.AcrossChannels
	bs := kernels.BNShape{N: 4, C: 8, HW: 144, Eps: 1e-5}
	bc, bm, bv := uniform(r, bs.C), make([]float32, bs.C), make([]float32, bs.C)
	dg, dbt := make([]float32, bs.C), make([]float32, bs.C)
	step := func() {
		e.ConvForward(gs, gx, gw, b, y, ws)
		e.ConvBackward(gs, gx, gw, y, gdx, gdw, db, ws)
		e.LRNForward(la, y, ly, lscale, ws)
		e.LRNBackward(la, y, ly, lscale, ly, ldx, ws)
		e.DropoutForward(kernels.Dropout{Ratio: 0.5}, y, ly)
		e.DropoutBackward(kernels.Dropout{Ratio: 0.5}, ly, ldx)
		e.BNForwardTrain(bs, y, bc, bc, ly, bm, bv)
		e.BNForwardInfer(bs, y, bc, bc, bm, bv, ly)
		e.BNBackward(bs, y, bc, bm, bv, ly, ldx, dg, dbt)
		e.Add(y, ly, ldx)
		e.ConvForward(cs, x, w, b, y, ws)
		e.ConvBackward(cs, x, w, y, dx, dw, db, ws)
		e.PoolForward(ps, y, py, pm)
		e.PoolBackward(ps, py, pm, pdx)
		e.LRNForward(ls, y, ly, lscale, ws)
		e.LRNBackward(ls, y, ly, lscale, ly, ldx, ws)
		e.ReLUForward(y, y)
		e.ReLUBackward(y, ly, ly)
		e.FCForward(4, 10, 8, x, w, b, y)
		e.FCBackward(4, 10, 8, x, w, y, dx, dw, db)
		e.SoftmaxCrossEntropy(4, 8, y, labels, prob, dx)
	}
	step()
	if n := testing.AllocsPerRun(3, step); n != 0 {
		t.Errorf("a steady-state step allocates %v times, want 0", n)
	}
}

// testConcurrent runs forward and backward passes from two goroutines on
// the same engine, each with its own workspace: each must give the bits
// it gives alone (how the engine's threads are shared between callers
// must not change a summation order), and the right results.
func testConcurrent(t *testing.T, e kernels.Engine) {
	s := kernels.ConvShape{N: 6, C: 4, H: 10, W: 10, OC: 6, KH: 3, KW: 3, PadH: 1, PadW: 1, StrideH: 1, StrideW: 1}
	type out struct{ y, dx, dw, db []float32 }
	type job struct {
		x, w, dy  []float32
		alone, at out
	}
	newOut := func() out {
		return out{make([]float32, s.OutputLen()), make([]float32, s.InputLen()), make([]float32, s.WeightLen()),
			make([]float32, s.OC)}
	}
	run := func(j *job, o out, ws *kernels.Workspace) {
		e.ConvForward(s, j.x, j.w, nil, o.y, ws)
		e.ConvBackward(s, j.x, j.w, j.dy, o.dx, o.dw, o.db, ws)
	}
	jobs := make([]job, 2)
	for i := range jobs {
		r := newRand(uint64(1100 + i))
		jobs[i] = job{x: uniform(r, s.InputLen()), w: uniform(r, s.WeightLen()), dy: uniform(r, s.OutputLen()),
			alone: newOut(), at: newOut()}
		run(&jobs[i], jobs[i].alone, &kernels.Workspace{})
	}
	done := make(chan struct{})
	for i := range jobs {
		go func(j *job) {
			defer func() { done <- struct{}{} }()
			ws := &kernels.Workspace{}
			for range 5 {
				run(j, j.at, ws)
			}
		}(&jobs[i])
	}
	for range jobs {
		<-done
	}
	for i, j := range jobs {
		for _, c := range []struct {
			name      string
			got, want []float32
		}{{"y", j.at.y, j.alone.y}, {"dx", j.at.dx, j.alone.dx}, {"dw", j.at.dw, j.alone.dw}, {"db", j.at.db, j.alone.db}} {
			if !slices.Equal(c.got, c.want) {
				t.Errorf("caller %d: %s of concurrent calls differs from the same call alone", i, c.name)
			}
		}
		want, mag := naiveConvForward(s, j.x, j.w, nil)
		approx(t, "y", j.at.y, want, mag, sumTol(s.C*s.KH*s.KW))
		g := naiveConvBackward(s, j.x, j.w, j.dy)
		approx(t, "dw", j.at.dw, g.dw, g.dwMag, sumTol(s.N*s.OutH()*s.OutW()))
	}
}
