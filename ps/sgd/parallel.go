package sgd

import (
	"math"
	"slices"
	"sync"
)

// Parallel runs body over [0, n) in contiguous, non-empty ranges [lo, hi)
// that together cover [0, n) once each, concurrently or not, and returns
// when every call has returned. It is how a Solver (SetParallel) and a
// shard spread their long passes over several cores; the nil Parallel
// runs them serially on the calling goroutine.
//
// The solver never starts goroutines: its owner's runtime supplies the
// runner (Spread, or one of its own). The n a solver hands a runner
// counts pieces, not elements: each pass is cut into pieces of
// parPiece elements (the last one shorter), a multiple of every kernel's
// block, so that every piece but a span's last runs wholly in assembly and
// the scalar tail falls on the same elements as in a serial pass. The
// passes are element-wise and a maximum does not depend on the order it
// is taken in, so a parallel update gives the same bits as a serial one,
// whatever ranges the runner makes and in whatever order it runs them.
type Parallel func(n int, body func(lo, hi int))

const (
	// parPiece is the elements of one piece of a parallel pass.
	parPiece = 1 << 16
	// parMin is the shortest pass that is spread: below it, a pass
	// runs serially.
	parMin = 1 << 18
)

// Spread returns a runner that splits [0, n) into at most threads ranges
// of nearly equal length and runs them on as many goroutines (the
// calling one among them), started anew at every call; nil for threads ≤
// 1. It is safe for concurrent use: shards of one server may share it.
func Spread(threads int) Parallel {
	if threads <= 1 {
		return nil
	}
	return func(n int, body func(lo, hi int)) {
		k := min(threads, n)
		var wg sync.WaitGroup
		for i := 1; i < k; i++ {
			wg.Go(func() { body(i*n/k, (i+1)*n/k) })
		}
		if k > 0 {
			body(0, n/k)
		}
		wg.Wait()
	}
}

// spreads reports whether a pass over n elements goes through p: the
// passes below create the closures they hand p only then, so that a
// serial pass allocates nothing.
func (p Parallel) spreads(n int) bool { return p != nil && n >= parMin }

// each runs body over the elements [0, n) through p, in ranges of whole
// pieces.
func (p Parallel) each(n int, body func(lo, hi int)) {
	p((n+parPiece-1)/parPiece, func(a, b int) { body(a*parPiece, min(b*parPiece, n)) })
}

// maxBits returns the largest of f over ranges covering [0, n) (f gives
// the largest absBits of its range), through p: each range's result is
// kept in the slot of its first piece, and the slots are reduced once
// every range is done.
func (p Parallel) maxBits(n int, f func(lo, hi int) uint32) uint32 {
	slots := make([]uint32, (n+parPiece-1)/parPiece)
	p.each(n, func(lo, hi int) { slots[lo/parPiece] = f(lo, hi) })
	return slices.Max(slots)
}

// The passes of kernels.go and correct.go, spread through p when long.

// MaxAbs is the package's MaxAbs, its pass spread through p.
func (p Parallel) MaxAbs(x []float32) float32 {
	if !p.spreads(len(x)) {
		return MaxAbs(x)
	}
	return math.Float32frombits(p.maxBits(len(x), func(lo, hi int) uint32 { return maxAbsBits(x[lo:hi]) }))
}

func (p Parallel) step(w, v, g, l []float32, m, a, al, b float32) {
	if !p.spreads(len(w)) {
		step(w, v, g, l, m, a, al, b)
		return
	}
	p.each(len(w), func(lo, hi int) { step(w[lo:hi], v[lo:hi], g[lo:hi], l[lo:hi], m, a, al, b) })
}

func (p Parallel) scaleTo(dst, x []float32, a float32) {
	if !p.spreads(len(dst)) {
		scaleTo(dst, x, a)
		return
	}
	p.each(len(dst), func(lo, hi int) { scaleTo(dst[lo:hi], x[lo:hi], a) })
}

func (p Parallel) axpy(dst, x []float32, a float32) {
	if !p.spreads(len(dst)) {
		axpy(dst, x, a)
		return
	}
	p.each(len(dst), func(lo, hi int) { axpy(dst[lo:hi], x[lo:hi], a) })
}

func (p Parallel) observeSteps(sq, v []float32) {
	if !p.spreads(len(sq)) {
		observeSteps(sq, v)
		return
	}
	p.each(len(sq), func(lo, hi int) { observeSteps(sq[lo:hi], v[lo:hi]) })
}

// copy2 copies x to dx and y to dy, all four of one length.
func (p Parallel) copy2(dx, dy, x, y []float32) {
	if !p.spreads(len(x)) {
		copy(dx, x)
		copy(dy, y)
		return
	}
	p.each(len(x), func(lo, hi int) {
		copy(dx[lo:hi], x[lo:hi])
		copy(dy[lo:hi], y[lo:hi])
	})
}
