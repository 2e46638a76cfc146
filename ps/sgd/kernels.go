package sgd

import (
	"math"

	"github.com/softsync/softsync/kernels/isa"
)

// The memory passes of the solver. Each is one streaming pass over equal-
// length slices; callers guarantee the lengths. On amd64 the bulk of each
// pass (a multiple of 8 floats) runs in assembly (kernels_amd64.s) at the
// level isa.Best() reports, lowered by LimitISA: AVX-512, or AVX2 and
// FMA; the tail, and everything elsewhere or with the purego build tag,
// runs in the Go loops below. Both assembly levels do the same fused
// multiply-adds in the same order on the same elements, so they agree bit
// for bit; with the Go loops they agree to float32 rounding.

// asm is the assembly of one level: the passes on a multiple of block
// floats.
type asm struct {
	level  isa.Level
	block  int
	scale  func(dst, x *float32, n int, a float32)
	axpy   func(dst, x *float32, n int, a float32)
	step   func(w, v, g, l *float32, n int, m, a, al, b float32)
	maxAbs func(x *float32, n int) uint32 // the largest bits&0x7fffffff of x
}

// kern is the assembly in use (level isa.Generic: none).
var kern = asmFor(isa.Best())

// LimitISA caps the instruction-set level of the solver's passes, for the
// whole process, at l (isa.Auto: the best this CPU and build run), and
// returns the level they now run at. It is for tests and for comparing
// levels on one machine (softsync's --isa): call it before the passes
// run, not while they do.
func LimitISA(l isa.Level) isa.Level {
	kern = asmFor(isa.Cap(l))
	return kern.level
}

// ISA returns the instruction-set level the solver's passes run at.
func ISA() isa.Level { return kern.level }

// bulk returns the prefix length handled by the assembly: n rounded down
// to a multiple of its block, or 0 without it.
func bulk(n int) int {
	if kern.block == 0 {
		return 0
	}
	return n - n%kern.block
}

// scaleTo sets dst = a·x.
func scaleTo(dst, x []float32, a float32) {
	if a == 1 {
		copy(dst, x)
		return
	}
	x = x[:len(dst)]
	k := bulk(len(dst))
	if k > 0 {
		kern.scale(&dst[0], &x[0], k, a)
	}
	for i := k; i < len(dst); i++ {
		dst[i] = a * x[i]
	}
}

// axpy sets dst += a·x.
func axpy(dst, x []float32, a float32) {
	x = x[:len(dst)]
	k := bulk(len(dst))
	if k > 0 {
		kern.axpy(&dst[0], &x[0], k, a)
	}
	for i := k; i < len(dst); i++ {
		dst[i] += a * x[i]
	}
}

// step sets v = m·v + a·g + al·l + b·w, then w −= v: the fused update pass
// over two gradient streams (the accumulator and the last gradient). With
// one stream the caller passes it twice with al = 0; the second load hits
// L1 and costs no memory traffic.
func step(w, v, g, l []float32, m, a, al, b float32) {
	v, g, l = v[:len(w)], g[:len(w)], l[:len(w)]
	k := bulk(len(w))
	if k > 0 {
		kern.step(&w[0], &v[0], &g[0], &l[0], k, m, a, al, b)
	}
	for i := k; i < len(w); i++ {
		t := m*v[i] + a*g[i] + al*l[i] + b*w[i]
		v[i] = t
		w[i] -= t
	}
}

// absBits is the bit pattern of |x|: finite magnitudes order as unsigned
// integers as their values do, +Inf (infBits) is above them and every NaN
// above +Inf.
func absBits(x float32) uint32 { return math.Float32bits(x) &^ (1 << 31) }

const infBits = 0x7f800000

// maxAbsBits returns the largest absBits of x (0 for none): one read pass,
// at memory speed with the assembly.
func maxAbsBits(x []float32) uint32 {
	var m uint32
	k := bulk(len(x))
	if k > 0 {
		m = kern.maxAbs(&x[0], k)
	}
	x = x[k:]
	var m1, m2, m3 uint32 // four running maxima, so that the loop does not wait on one
	for ; len(x) >= 4; x = x[4:] {
		m, m1 = max(m, absBits(x[0])), max(m1, absBits(x[1]))
		m2, m3 = max(m2, absBits(x[2])), max(m3, absBits(x[3]))
	}
	for _, v := range x {
		m = max(m, absBits(v))
	}
	return max(m, m1, m2, m3)
}

// MaxAbs returns the largest magnitude |x[k]| (0 for an empty x): +Inf if
// x holds an infinity, a NaN if it holds a NaN. It is one read pass, at
// memory speed with the assembly: the check a shard runs on every gradient
// it receives, whose result bounds the update the gradient goes into (see
// the package doc).
func MaxAbs(x []float32) float32 { return math.Float32frombits(maxAbsBits(x)) }

// FirstNonFinite returns the index of the first NaN or ±Inf in x, or −1 if
// every element is finite. It is the pass of MaxAbs, then, only if x is
// not finite, a scan for the index.
func FirstNonFinite(x []float32) int {
	if maxAbsBits(x) < infBits {
		return -1
	}
	for i, v := range x {
		if absBits(v) >= infBits {
			return i
		}
	}
	return -1
}
