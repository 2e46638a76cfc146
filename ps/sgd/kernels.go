package sgd

// The memory passes of the solver. Each is one streaming pass over equal-
// length slices; callers guarantee the lengths. On amd64 with AVX2 and FMA
// the bulk of each pass (a multiple of eight floats) runs in assembly
// (kernels_amd64.s) and the tail in the Go loops below; elsewhere, or built
// with the purego tag, the Go loops do everything. The assembly uses fused
// multiply-adds, so the two paths agree to float32 rounding, not bit for bit.

// bulk returns the prefix length handled by the assembly: n rounded down to
// a multiple of 8, or 0 without it.
func bulk(n int) int {
	if !useAsm {
		return 0
	}
	return n &^ 7
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
		scaleAVX2(&dst[0], &x[0], k, a)
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
		axpyAVX2(&dst[0], &x[0], k, a)
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
		stepAVX2(&w[0], &v[0], &g[0], &l[0], k, m, a, al, b)
	}
	for i := k; i < len(w); i++ {
		t := m*v[i] + a*g[i] + al*l[i] + b*w[i]
		v[i] = t
		w[i] -= t
	}
}

// FirstNonFinite returns the index of the first NaN or ±Inf in x, or −1 if
// every element is finite. It is one read pass, at memory speed on AVX2.
func FirstNonFinite(x []float32) int {
	k := bulk(len(x))
	start := k
	if k > 0 && nonFiniteAVX2(&x[0], k) {
		start = 0
	}
	for i := start; i < len(x); i++ {
		if v := x[i]; v-v != 0 { // NaN for NaN and ±Inf, 0 otherwise
			return i
		}
	}
	return -1
}
