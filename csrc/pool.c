/* Max and average pooling with Caffe's window and rounding rules, split
 * over planes (image, channel) across threads. The loops are written to
 * vectorise and compiled once per instruction-set level
 * (SS_ISA_VARIANTS); every variant does the same operations in the same
 * order, so all give the same bits. */
#include <math.h>
#include <string.h>

#include "internal.h"

int ss_pool_out(int in, int k, int pad, int stride)
{
	int o = (in + 2 * pad - k + stride - 1) / stride + 1;
	if (pad > 0 && (o - 1) * stride >= in + pad)
		o--;
	return o;
}

/* pool_window returns Caffe's window of output index o along one axis:
 * [*lo, *hi) inside the input, and the extent before clipping to the
 * input but after clipping to the padded input (the average's divisor). */
static int pool_window(int o, int in, int k, int pad, int stride, int *lo, int *hi)
{
	int start = o * stride - pad;
	int end = ss_imin(start + k, in + pad);
	*lo = ss_imax(start, 0);
	*hi = ss_imin(end, in);
	return end - start;
}

typedef struct {
	const ss_pool_shape *s;
	int isa;
	int oh, ow;
	const float *x, *dy;
	float *y, *dx;
	int *mask;
	const int *cmask;
	ptrdiff_t bad[SS_MAX_THREADS]; /* backward: mask entries outside the plane, per part */
} pool_job;

/* Outputs per chunk of a row's interior, kept in registers or L1. */
enum { CHUNK = 256 };

/* pool_interior pools n outputs of one output row whose windows lie
 * wholly inside the image horizontally: output t reads input rows
 * [h0, h1) and columns base + t*sw + [0, kw). The taps are visited in
 * row-major order with a strict comparison, so that max pooling keeps
 * Caffe's first arg-max; the loop over t vectorises (the stride is a
 * compile-time constant in the calls below). */
static inline __attribute__((always_inline)) void
pool_interior(const ss_pool_shape *s, const float *xp, int h0, int h1, int base, const int sw,
              int n, float div, float *y, int *mask)
{
	float acc[CHUNK];
	int arg[CHUNK];
	const int w = s->w;
	if (s->mode == SS_POOL_MAX) {
		const float *r0 = xp + (ptrdiff_t)h0 * w + base;
		for (int t = 0; t < n; t++) {
			acc[t] = r0[t * sw];
			arg[t] = h0 * w + base + t * sw;
		}
		for (int h = h0; h < h1; h++)
			for (int j = 0; j < s->kw; j++) {
				if (h == h0 && j == 0)
					continue;
				const float *r = xp + (ptrdiff_t)h * w + base + j;
				const int i0 = h * w + base + j;
				for (int t = 0; t < n; t++) {
					const float v = r[t * sw], a = acc[t];
					const int ci = i0 + t * sw, ai = arg[t];
					acc[t] = v > a ? v : a;
					arg[t] = v > a ? ci : ai;
				}
			}
		for (int t = 0; t < n; t++) {
			y[t] = acc[t];
			mask[t] = arg[t];
		}
		return;
	}
	for (int t = 0; t < n; t++)
		acc[t] = 0.0f;
	for (int h = h0; h < h1; h++)
		for (int j = 0; j < s->kw; j++) {
			const float *r = xp + (ptrdiff_t)h * w + base + j;
			for (int t = 0; t < n; t++)
				acc[t] += r[t * sw];
		}
	for (int t = 0; t < n; t++)
		y[t] = acc[t] / div;
}

/* pool_one pools a single output (py, px) of plane xp: the general case,
 * used where a window is clipped by the image's left or right edge. */
static void pool_one(const ss_pool_shape *s, const float *xp, int h0, int h1, int eh, int px,
                     float *y, int *mask)
{
	int w0, w1;
	const int ew = pool_window(px, s->w, s->kw, s->pad_w, s->stride_w, &w0, &w1);
	if (s->mode == SS_POOL_MAX) {
		/* Windows are never empty (validated by the caller). */
		int arg = h0 * s->w + w0;
		float best = xp[arg];
		for (int h = h0; h < h1; h++)
			for (int w = w0; w < w1; w++)
				if (xp[h * s->w + w] > best) {
					best = xp[h * s->w + w];
					arg = h * s->w + w;
				}
		*y = best;
		*mask = arg;
		return;
	}
	float sum = 0.0f;
	for (int h = h0; h < h1; h++)
		for (int w = w0; w < w1; w++)
			sum += xp[h * s->w + w];
	*y = sum / (float)(eh * ew);
}

/* The flat path, for the pooling of the paper's networks: no horizontal
 * padding and W = OW*stride_w, so that input column px*S + j of row h is
 * element (h*OW + px)*S + j of the plane, an affine function of the flat
 * index e = h*OW + px. Pooling then splits into a horizontal pass over
 * all e at once (long vectorised loops) and a vertical pass over output
 * rows. Columns [pb, OW), whose windows the right edge clips, are
 * recomputed after the flat loops, which leave them wrong (they read
 * the next row) and skip them in the last row (they would read past the
 * plane). FLAT_PLANE bounds the flat path's h*OW, FLAT_MAX the per-plane
 * arrays kept on the stack (pool_flat_padded's copies of bands of rows
 * may be twice as large). */
enum { FLAT_MAX = 2048, FLAT_PLANE = 1024 };

static int pool_flat(const ss_pool_shape *s, int oh, int ow)
{
	(void)oh;
	return s->pad_w == 0 && (ptrdiff_t)ow * s->stride_w == s->w && (ptrdiff_t)s->h * ow <= FLAT_PLANE;
}

/* Max pooling whose rows do not fit the flat layout (horizontal padding,
 * as ResNet's 3x3/2 pooling with padding 1; rows longer than OW*S, as
 * Caffe's AlexNet's 55 -> 27, 27 -> 13 and 13 -> 6 with 3x3 windows of
 * stride 2, the last window reading one column more; or planes too large
 * for the flat path's buffers) runs the flat path on copies of bands of
 * each plane's rows, each row preceded by P = pad_w copies of its first
 * element and followed by -inf up to FW*S floats, FW = max(ceil((W +
 * P)/S), OW). A tap in the right padding never beats the window's first
 * tap (strict comparison), which is not in it; a window's left padding
 * only repeats the row's first element, which the window holds next, and
 * an equal (or NaN) tap never replaces the first: so every output and its
 * first arg-max are those of the clipped window, infinities included,
 * once an arg-max in the left padding is mapped to the element it
 * repeats. The flat path's vertical pass pools the rows (and the
 * vertical padding) as it does for unpadded planes; the outputs of
 * columns [OW, FW) are dropped and the arg-max indices mapped back to
 * rows of W floats. pool_flat_padded returns FW in *fw and the output
 * rows per band in *band: as many as fit the buffers. */
static int pool_flat_padded(const ss_pool_shape *s, int oh, int ow, int *fw, int *band)
{
	const int S = s->stride_w, w = ss_imax((s->w + s->pad_w + S - 1) / S, ow);
	const int rows = ss_imin(FLAT_MAX / w, 2 * FLAT_MAX / (w * S)); /* input rows per band */
	*fw = w;
	*band = rows >= s->kh ? ss_imin((rows - s->kh) / s->stride_h + 1, oh) : 0;
	return s->mode == SS_POOL_MAX && !pool_flat(s, oh, ow) && s->kw >= S && s->pad_w < s->kw && s->pad_h < s->kh &&
	       *band > 0;
}

/* flat_cols returns pb, the number of columns whose window the right edge
 * does not clip. */
static int flat_cols(const ss_pool_shape *s, int ow)
{
	return s->w >= s->kw ? ss_imin((s->w - s->kw) / s->stride_w + 1, ow) : 0;
}

/* flat_widths writes cw[px], the width of output column px's window
 * clipped to the input (the flat path has no horizontal padding): the
 * average's divisor is the window's height times it. */
static void flat_widths(const ss_pool_shape *s, int ow, float *cw)
{
	for (int px = 0; px < ow; px++) {
		int w0, w1;
		cw[px] = (float)pool_window(px, s->w, s->kw, 0, s->stride_w, &w0, &w1);
	}
}

/* flat_map maps the max path's arg-max indices, into rows of s->w
 * floats, to rows of rw floats whose first pl columns the rows of s->w
 * floats lack: index h*s->w + c becomes base + h*rw + max(c - pl, 0). */
typedef struct {
	int rw, pl, base;
} flat_map;

/* flat_forward_s is flat_forward for stride S, inlined with S constant
 * so that the strided loads of the horizontal pass vectorise. The max
 * passes write each tap's result to the other of two buffers: updating
 * a buffer in place with a select compiles to masked stores, which are
 * slow on some CPUs. With map, the arg-max indices are mapped before the
 * vertical pass (flat_forward_padded's planes). */
static inline __attribute__((always_inline)) void
flat_forward_s(const ss_pool_shape *s, int oh, int ow, const float *restrict xp,
               float *restrict yp, int *restrict mp, const flat_map *map, const int S)
{
	float hbuf[2][FLAT_MAX];
	int ibuf[2][FLAT_MAX];
	const int w = s->w;
	const int n = s->h * ow; /* <= FLAT_MAX */
	const int pb = flat_cols(s, ow);
	const int safe = n - (ow - pb); /* excludes the last row's clipped columns */
	if (s->mode == SS_POOL_MAX) {
		float *hm = hbuf[0];
		int *hi = ibuf[0];
		for (int e = 0; e < n; e++) {
			hm[e] = xp[e * S];
			hi[e] = e * S;
		}
		for (int j = 1; j < s->kw; j++) {
			float *nm = hbuf[j & 1];
			int *ni = ibuf[j & 1];
			for (int e = 0; e < safe; e++) {
				const float v = xp[e * S + j], a = hm[e];
				nm[e] = v > a ? v : a;
				ni[e] = v > a ? e * S + j : hi[e];
			}
			for (int e = safe; e < n; e++) {
				nm[e] = hm[e];
				ni[e] = hi[e];
			}
			hm = nm;
			hi = ni;
		}
		for (int h = 0; h < s->h; h++)
			for (int px = pb; px < ow; px++) {
				const int e = h * ow + px;
				int best = h * w + px * S;
				for (int c = px * S + 1; c < w; c++)
					if (xp[h * w + c] > xp[best])
						best = h * w + c;
				hm[e] = xp[best];
				hi[e] = best;
			}
		if (map)
			for (int h = 0; h < s->h; h++) {
				int *r = hi + (ptrdiff_t)h * ow;
				const int sub = h * (w - map->rw) + map->pl - map->base, first = map->base + h * map->rw;
				for (int px = 0; px < ow; px++)
					r[px] = ss_imax(r[px] - sub, first);
			}
		for (int py = 0; py < oh; py++) {
			int h0, h1;
			pool_window(py, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1);
			float *y = yp + (ptrdiff_t)py * ow;
			int *m = mp + (ptrdiff_t)py * ow;
			/* Fold rows h0+1 .. h1-1 into row h0's values, in a
			 * buffer the horizontal pass no longer needs. */
			float *vm = hm == hbuf[0] ? hbuf[1] : hbuf[0];
			int *vi = hi == ibuf[0] ? ibuf[1] : ibuf[0];
			const float *am = hm + h0 * ow;
			const int *ai = hi + h0 * ow;
			for (int h = h0 + 1; h < h1; h++) {
				const float *r = hm + h * ow;
				const int *ir = hi + h * ow;
				float *om = h + 1 < h1 ? vm + (h & 1) * ow : y;
				int *oi = h + 1 < h1 ? vi + (h & 1) * ow : m;
				for (int px = 0; px < ow; px++) {
					const float v = r[px], a = am[px];
					om[px] = v > a ? v : a;
					oi[px] = v > a ? ir[px] : ai[px];
				}
				am = om;
				ai = oi;
			}
			if (h1 == h0 + 1) {
				for (int px = 0; px < ow; px++) {
					y[px] = am[px];
					m[px] = ai[px];
				}
			}
		}
		return;
	}
	float *hs = hbuf[0], cw[FLAT_MAX];
	flat_widths(s, ow, cw);
	for (int e = 0; e < n; e++)
		hs[e] = xp[e * S];
	for (int j = 1; j < s->kw; j++)
		for (int e = 0; e < safe; e++)
			hs[e] += xp[e * S + j];
	for (int h = 0; h < s->h; h++)
		for (int px = pb; px < ow; px++) {
			float sum = 0.0f;
			for (int c = px * S; c < w; c++)
				sum += xp[h * w + c];
			hs[h * ow + px] = sum;
		}
	for (int py = 0; py < oh; py++) {
		int h0, h1;
		const int eh = pool_window(py, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1);
		float *y = yp + (ptrdiff_t)py * ow;
		for (int px = 0; px < ow; px++)
			y[px] = 0.0f;
		for (int h = h0; h < h1; h++) {
			const float *r = hs + h * ow;
			for (int px = 0; px < ow; px++)
				y[px] += r[px];
		}
		const float feh = (float)eh;
		for (int px = 0; px < ow; px++)
			y[px] /= feh * cw[px];
	}
}

SS_INLINE void flat_forward_at(int isa, const ss_pool_shape *s, int oh, int ow, const float *restrict xp,
                            float *restrict yp, int *restrict mp, const flat_map *map)
{
	(void)isa; /* the level each copy is compiled for (SS_LEVEL_FNS) */
	switch (s->stride_w) {
	case 1:
		flat_forward_s(s, oh, ow, xp, yp, mp, map, 1);
		break;
	case 2:
		flat_forward_s(s, oh, ow, xp, yp, mp, map, 2);
		break;
	case 3:
		flat_forward_s(s, oh, ow, xp, yp, mp, map, 3);
		break;
	default:
		flat_forward_s(s, oh, ow, xp, yp, mp, map, s->stride_w);
	}
}

/* flat_forward is compiled once per level, out of line: it pools a
 * whole plane (or band) per call, and both the flat and the padded path
 * call it. */
SS_LEVEL_FNS(flat_forward,
             (const ss_pool_shape *s, int oh, int ow, const float *restrict xp, float *restrict yp,
              int *restrict mp, const flat_map *map),
             s, oh, ow, xp, yp, mp, map);

/* flat_forward_padded is flat_forward for pool_flat_padded's planes:
 * bands of up to band output rows, each pooled by the flat path as a
 * plane of its own (fw output columns over rows of fw*S floats) whose
 * vertical padding is what remains of the plane's above the band. */
SS_INLINE void flat_forward_padded(int isa, const ss_pool_shape *s, int oh, int ow, int fw, int band,
                                   const float *restrict xp, float *restrict yp, int *restrict mp)
{
	float xbuf[2 * FLAT_MAX], ybuf[FLAT_MAX];
	int mbuf[FLAT_MAX];
	const int pl = s->pad_w, w = s->w;
	ss_pool_shape t = *s;
	t.w = fw * s->stride_w;
	t.pad_w = 0;
	for (int py0 = 0; py0 < oh; py0 += band) {
		const int py1 = ss_imin(py0 + band, oh);
		int r0, r1, h0, h1;
		pool_window(py0, s->h, s->kh, s->pad_h, s->stride_h, &r0, &h1);
		pool_window(py1 - 1, s->h, s->kh, s->pad_h, s->stride_h, &h0, &r1);
		t.h = r1 - r0;
		t.pad_h = s->pad_h + r0 - py0 * s->stride_h;
		for (int h = 0; h < t.h; h++) {
			const float *x = xp + (ptrdiff_t)(r0 + h) * w;
			float *row = xbuf + (ptrdiff_t)h * t.w;
			for (int c = 0; c < pl; c++)
				row[c] = x[0];
			memcpy(row + pl, x, sizeof(float) * (size_t)w);
			for (int c = pl + w; c < t.w; c++)
				row[c] = -INFINITY;
		}
		const flat_map map = {.rw = w, .pl = pl, .base = r0 * w};
		flat_forward_lv[isa](&t, py1 - py0, fw, xbuf, ybuf, mbuf, &map);
		for (int py = py0; py < py1; py++) {
			memcpy(yp + (ptrdiff_t)py * ow, ybuf + (ptrdiff_t)(py - py0) * fw, sizeof(float) * (size_t)ow);
			memcpy(mp + (ptrdiff_t)py * ow, mbuf + (ptrdiff_t)(py - py0) * fw, sizeof(int) * (size_t)ow);
		}
	}
}

/* flat_avg_backward: the adjoint of the average path of flat_forward. */
SS_INLINE void flat_avg_backward(const ss_pool_shape *s, int oh, int ow, const float *restrict dyp,
                              float *restrict dxp)
{
	float t[FLAT_MAX], cw[FLAT_MAX];
	const int S = s->stride_w, w = s->w;
	flat_widths(s, ow, cw);
	const ptrdiff_t n = (ptrdiff_t)s->h * ow;
	for (ptrdiff_t e = 0; e < n; e++)
		t[e] = 0.0f;
	for (int py = 0; py < oh; py++) {
		int h0, h1;
		const int eh = pool_window(py, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1);
		const float *dy = dyp + (ptrdiff_t)py * ow;
		float g[FLAT_MAX];
		const float feh = (float)eh;
		for (int px = 0; px < ow; px++)
			g[px] = dy[px] / (feh * cw[px]);
		for (int h = h0; h < h1; h++) {
			float *r = t + (ptrdiff_t)h * ow;
			for (int px = 0; px < ow; px++)
				r[px] += g[px];
		}
	}
	for (int h = 0; h < s->h; h++) {
		const float *r = t + (ptrdiff_t)h * ow;
		float *dx = dxp + (ptrdiff_t)h * w;
		for (int c = 0; c < w; c++)
			dx[c] = 0.0f;
		for (int j = 0; j < s->kw; j++) {
			/* Columns px with px*S + j < w. */
			const int end = ss_imin(ow, j < w ? (w - j + S - 1) / S : 0);
			for (int px = 0; px < end; px++)
				dx[px * S + j] += r[px];
		}
	}
}

#ifdef SS_HAVE_AVX512

/* The flat path at level AVX-512 for horizontal stride 2 (the pooling of
 * the paper's networks), written with intrinsics because the compiler's
 * own 16-lane version of the loops above is slower than its 8-lane one:
 * the same operations in the same order, so the same bits. */

/* s2_load returns p[0], p[2], ..., p[30], the lanes whose float lies
 * at or past p + avail zero (not read). */
SS_AVX512 static inline __m512 s2_load(const float *p, ptrdiff_t avail)
{
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	if (avail >= 32)
		return _mm512_permutex2var_ps(_mm512_loadu_ps(p), even, _mm512_loadu_ps(p + 16));
	return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(ss_lanes(avail), p), even,
	                              _mm512_maskz_loadu_ps(ss_lanes(avail - 16), p + 16));
}

/* flat_forward2 is flat_forward for stride_w = 2. */
SS_AVX512 static void flat_forward2(const ss_pool_shape *s, int oh, int ow, const float *restrict xp,
                                    float *restrict yp, int *restrict mp)
{
	float hs[FLAT_MAX + 16] __attribute__((aligned(64)));
	int hi[FLAT_MAX + 16] __attribute__((aligned(64)));
	const int w = s->w, n = s->h * ow, pb = flat_cols(s, ow), safe = n - (ow - pb);
	const ptrdiff_t plane = (ptrdiff_t)s->h * w;
	const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	const int max = s->mode == SS_POOL_MAX;
	/* Horizontal pass: hs[e] over the window of flat output e, for
	 * e < safe; the others keep tap 0 until the clipped columns are
	 * recomputed below. */
	for (int e0 = 0; e0 < n; e0 += 16) {
		const ptrdiff_t q0 = 2 * (ptrdiff_t)e0;
		const __mmask16 upd = ss_lanes(safe - e0);
		const __m512i i0 = _mm512_slli_epi32(_mm512_add_epi32(_mm512_set1_epi32(e0), lane), 1);
		__m512 a = s2_load(xp + q0, plane - q0);
		__m512i ai = i0;
		for (int j = 1; j < s->kw; j++) {
			const __m512 v = s2_load(xp + q0 + j, plane - q0 - j);
			if (max) {
				const __mmask16 gt = _mm512_mask_cmp_ps_mask(upd, v, a, _CMP_GT_OQ);
				a = _mm512_mask_mov_ps(a, gt, v);
				ai = _mm512_mask_mov_epi32(ai, gt, _mm512_add_epi32(i0, _mm512_set1_epi32(j)));
			} else {
				a = _mm512_mask_add_ps(a, upd, a, v);
			}
		}
		_mm512_store_ps(hs + e0, a);
		if (max)
			_mm512_store_si512(hi + e0, ai);
	}
	for (int h = 0; h < s->h; h++)
		for (int px = pb; px < ow; px++) {
			const int e = h * ow + px;
			if (max) {
				int best = h * w + px * 2;
				for (int c = px * 2 + 1; c < w; c++)
					if (xp[h * w + c] > xp[best])
						best = h * w + c;
				hs[e] = xp[best];
				hi[e] = best;
			} else {
				float sum = 0.0f;
				for (int c = px * 2; c < w; c++)
					sum += xp[h * w + c];
				hs[e] = sum;
			}
		}
	float cw[FLAT_MAX + 16];
	if (!max)
		flat_widths(s, ow, cw);
	/* Vertical pass: fold the window's rows, first arg-max in row order. */
	for (int py = 0; py < oh; py++) {
		int h0, h1;
		const int eh = pool_window(py, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1);
		for (int px0 = 0; px0 < ow; px0 += 16) {
			const __mmask16 m = ss_lanes(ow - px0);
			const ptrdiff_t o = (ptrdiff_t)py * ow + px0;
			/* hs and hi have 16 spare lanes: whole-vector loads, which
			 * the stores above can forward, and masked stores. */
			if (max) {
				__m512 a = _mm512_loadu_ps(hs + h0 * ow + px0);
				__m512i ai = _mm512_loadu_si512(hi + h0 * ow + px0);
				for (int h = h0 + 1; h < h1; h++) {
					const __m512 v = _mm512_loadu_ps(hs + h * ow + px0);
					const __mmask16 gt = _mm512_cmp_ps_mask(v, a, _CMP_GT_OQ);
					a = _mm512_mask_mov_ps(a, gt, v);
					ai = _mm512_mask_mov_epi32(ai, gt, _mm512_loadu_si512(hi + h * ow + px0));
				}
				_mm512_mask_storeu_ps(yp + o, m, a);
				_mm512_mask_storeu_epi32(mp + o, m, ai);
			} else {
				__m512 a = _mm512_setzero_ps();
				for (int h = h0; h < h1; h++)
					a = _mm512_add_ps(a, _mm512_loadu_ps(hs + h * ow + px0));
				const __m512 d = _mm512_mul_ps(_mm512_set1_ps((float)eh), _mm512_maskz_loadu_ps(m, cw + px0));
				_mm512_mask_storeu_ps(yp + o, m, _mm512_maskz_div_ps(m, a, d));
			}
		}
	}
}

/* flat_avg_backward2 is flat_avg_backward for stride_w = 2. The sums
 * t[h][px] over the windows holding row h are formed in registers, in
 * increasing py as there, from the gradients g[py][px] divided by the
 * window sizes (stored first), and kept in rows padded with 16 zeros on
 * each side, written whole: the shifted reads of the last loop then need
 * no masks, and no load waits on a masked store. */
SS_AVX512 static void flat_avg_backward2(const ss_pool_shape *s, int oh, int ow, const float *restrict dyp,
                                         float *restrict dxp)
{
	const int w = s->w, ob = (ow + 15) / 16, ts = 16 * (ob + 2); /* t row: 16 zeros, ow values, zeros */
	float g[FLAT_MAX + 16] __attribute__((aligned(64)));
	float t[(FLAT_MAX / 16 + 16) * 48] __attribute__((aligned(64)));
	float cw[FLAT_MAX + 16];
	flat_widths(s, ow, cw);
	if ((ptrdiff_t)oh * ob * 16 > FLAT_MAX + 16 || (ptrdiff_t)s->h * ts > (ptrdiff_t)(sizeof t / sizeof t[0])) {
		flat_avg_backward(s, oh, ow, dyp, dxp);
		return;
	}
	for (int py = 0; py < oh; py++) {
		int h0, h1;
		const int eh = pool_window(py, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1);
		for (int b = 0; b < ob; b++) {
			const __mmask16 m = ss_lanes(ow - 16 * b);
			const __m512 d = _mm512_mul_ps(_mm512_set1_ps((float)eh), _mm512_maskz_loadu_ps(m, cw + 16 * b));
			_mm512_store_ps(g + (py * ob + b) * 16,
			                _mm512_maskz_div_ps(m, _mm512_maskz_loadu_ps(m, dyp + (ptrdiff_t)py * ow + 16 * b), d));
		}
	}
	/* Windows are ranges of rows that move down with py: those holding
	 * row h are py in [p0, p1). */
	const __m512 zero = _mm512_setzero_ps();
	int p0 = 0, p1 = 0;
	for (int h = 0; h < s->h; h++) {
		float *r = t + (ptrdiff_t)h * ts;
		_mm512_store_ps(r, zero);
		_mm512_store_ps(r + 16 * (ob + 1), zero);
		int h0, h1;
		while (p0 < oh && (pool_window(p0, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1), h1 <= h))
			p0++;
		p1 = ss_imax(p1, p0);
		while (p1 < oh && (pool_window(p1, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1), h0 <= h))
			p1++;
		for (int b = 0; b < ob; b++) {
			__m512 a = zero;
			for (int py = p0; py < p1; py++)
				a = _mm512_add_ps(a, _mm512_load_ps(g + (py * ob + b) * 16));
			_mm512_store_ps(r + 16 * (b + 1), a);
		}
	}
	/* dx[c] = sum over taps j, in order, of t[px] for c = 2px + j:
	 * 32 columns at a time, tap j's values spread to every other lane
	 * (zeros elsewhere, which add nothing); columns past w are not
	 * stored. */
	const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 16, 2, 16, 3, 16, 4, 16, 5, 16, 6, 16, 7, 16);
	const __m512i ihi = _mm512_setr_epi32(8, 16, 9, 16, 10, 16, 11, 16, 12, 16, 13, 16, 14, 16, 15, 16);
	const __m512i jlo = _mm512_setr_epi32(16, 0, 16, 1, 16, 2, 16, 3, 16, 4, 16, 5, 16, 6, 16, 7);
	const __m512i jhi = _mm512_setr_epi32(16, 8, 16, 9, 16, 10, 16, 11, 16, 12, 16, 13, 16, 14, 16, 15);
	for (int h = 0; h < s->h; h++) {
		const float *r = t + (ptrdiff_t)h * ts + 16;
		float *dx = dxp + (ptrdiff_t)h * w;
		for (int c0 = 0; c0 < w; c0 += 32) {
			__m512 lo = zero, hi = zero;
			for (int j = 0; j < s->kw && j < 32; j++) {
				/* Columns c0 + 2l + j % 2 take t[c0/2 + l - j/2]. */
				const __m512 v = _mm512_loadu_ps(r + c0 / 2 - j / 2);
				lo = _mm512_add_ps(lo, _mm512_permutex2var_ps(v, j % 2 ? jlo : ilo, zero));
				hi = _mm512_add_ps(hi, _mm512_permutex2var_ps(v, j % 2 ? jhi : ihi, zero));
			}
			_mm512_mask_storeu_ps(dx + c0, ss_lanes(w - c0), lo);
			_mm512_mask_storeu_ps(dx + c0 + 16, ss_lanes(w - c0 - 16), hi);
		}
	}
}

#endif /* SS_HAVE_AVX512 */

/* flat2 reports whether the AVX-512 flat path runs the planes of s at
 * level isa. */
static inline int flat2(int isa, const ss_pool_shape *s)
{
#ifdef SS_HAVE_AVX512
	return isa >= SS_ISA_AVX512 && s->stride_w == 2;
#else
	(void)isa, (void)s;
	return 0;
#endif
}

SS_INLINE void forward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part, const int isa)
{
	(void)part;
	const pool_job *j = ctx;
	const ss_pool_shape *s = j->s;
	const int oh = j->oh, ow = j->ow, sw = s->stride_w;
	const ptrdiff_t plane = (ptrdiff_t)s->h * s->w, oplane = (ptrdiff_t)oh * ow;
	/* Outputs [pa, pb) have windows inside the image horizontally. */
	const int pa = ss_imin((s->pad_w + sw - 1) / sw, ow);
	const int pb = ss_imax(pa, ss_imin(s->w + s->pad_w >= s->kw ? (s->w + s->pad_w - s->kw) / sw + 1 : 0, ow));
	int scratch[CHUNK]; /* mask sink for average pooling */
	const int flat = pool_flat(s, oh, ow);
	int fw = 0, band = 0;
	const int padded = j->mask && pool_flat_padded(s, oh, ow, &fw, &band);
	for (ptrdiff_t q = lo; q < hi; q++) {
		const float *xp = j->x + q * plane;
		if (padded) {
			flat_forward_padded(isa, s, oh, ow, fw, band, xp, j->y + q * oplane, j->mask + q * oplane);
			continue;
		}
		if (flat) {
#ifdef SS_HAVE_AVX512
			if (flat2(isa, s)) {
				flat_forward2(s, oh, ow, xp, j->y + q * oplane, j->mask ? j->mask + q * oplane : NULL);
				continue;
			}
#endif
			flat_forward_lv[isa](s, oh, ow, xp, j->y + q * oplane, j->mask ? j->mask + q * oplane : NULL, NULL);
			continue;
		}
		for (int py = 0; py < oh; py++) {
			int h0, h1;
			const int eh = pool_window(py, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1);
			float *yr = j->y + q * oplane + (ptrdiff_t)py * ow;
			int *mr = j->mask ? j->mask + q * oplane + (ptrdiff_t)py * ow : NULL;
			for (int px = 0; px < pa; px++)
				pool_one(s, xp, h0, h1, eh, px, yr + px, mr ? mr + px : scratch);
			for (int px = pb; px < ow; px++)
				pool_one(s, xp, h0, h1, eh, px, yr + px, mr ? mr + px : scratch);
			const float div = (float)(eh * s->kw);
			for (int p0 = pa; p0 < pb; p0 += CHUNK) {
				const int n = ss_imin(CHUNK, pb - p0), base = p0 * sw - s->pad_w;
				int *m = mr ? mr + p0 : scratch;
				if (sw == 1)
					pool_interior(s, xp, h0, h1, base, 1, n, div, yr + p0, m);
				else if (sw == 2)
					pool_interior(s, xp, h0, h1, base, 2, n, div, yr + p0, m);
				else
					pool_interior(s, xp, h0, h1, base, sw, n, div, yr + p0, m);
			}
		}
	}
}

SS_INLINE void backward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const pool_job *j = ctx;
	const ss_pool_shape *s = j->s;
	const int oh = j->oh, ow = j->ow;
	const ptrdiff_t plane = (ptrdiff_t)s->h * s->w, oplane = (ptrdiff_t)oh * ow;
	const int flat = pool_flat(s, oh, ow);
	/* Every path adds into dx but the flat average one, which writes
	 * every element: each plane is cleared just before its gradients
	 * are added, while it is in cache (one clear of all the part's
	 * planes first wrote them to memory, and the additions read them
	 * back). */
	const int clear = s->mode == SS_POOL_MAX || !flat;
	for (ptrdiff_t q = lo; q < hi; q++) {
		const float *dyp = j->dy + q * oplane;
		float *dxp = j->dx + q * plane;
		if (clear)
			memset(dxp, 0, sizeof(float) * (size_t)plane);
		if (s->mode == SS_POOL_MAX) {
			const int *mp = j->cmask + q * oplane;
			ptrdiff_t bad = 0;
			for (ptrdiff_t o = 0; o < oplane; o++) {
				/* A corrupted mask must not write outside dx. */
				if (mp[o] >= 0 && mp[o] < plane)
					dxp[mp[o]] += dyp[o];
				else
					bad++;
			}
			((pool_job *)ctx)->bad[part] += bad;
			continue;
		}
		if (flat) {
#ifdef SS_HAVE_AVX512
			if (flat2(j->isa, s)) {
				flat_avg_backward2(s, oh, ow, dyp, dxp);
				continue;
			}
#endif
			flat_avg_backward(s, oh, ow, dyp, dxp);
			continue;
		}
		for (int py = 0; py < oh; py++) {
			int h0, h1;
			const int eh = pool_window(py, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1);
			for (int px = 0; px < ow; px++) {
				int w0, w1;
				const int ew = pool_window(px, s->w, s->kw, s->pad_w, s->stride_w, &w0, &w1);
				const float g = dyp[(ptrdiff_t)py * ow + px] / (float)(eh * ew);
				for (int h = h0; h < h1; h++)
					for (int w = w0; w < w1; w++)
						dxp[h * s->w + w] += g;
			}
		}
	}
}

SS_ISA_LEVEL_VARIANTS(forward_part);
SS_ISA_VARIANTS(backward_part);

void ss_pool_forward(int isa, int threads, const ss_pool_shape *s, const float *x, float *y, int *mask)
{
	pool_job j = {.s = s, .isa = ss_isa(isa), .x = x, .y = y, .mask = s->mode == SS_POOL_MAX ? mask : NULL,
	              .oh = ss_pool_out(s->h, s->kh, s->pad_h, s->stride_h),
	              .ow = ss_pool_out(s->w, s->kw, s->pad_w, s->stride_w)};
	ss_parallel_for(threads, (ptrdiff_t)s->n * s->c, ss_grain((ptrdiff_t)s->h * s->w), forward_part_isa[j.isa], &j);
}

ptrdiff_t ss_pool_backward(int isa, int threads, const ss_pool_shape *s, const float *dy, const int *mask,
                           float *dx)
{
	pool_job j = {.s = s, .isa = ss_isa(isa), .dy = dy, .dx = dx, .cmask = mask,
	              .oh = ss_pool_out(s->h, s->kh, s->pad_h, s->stride_h),
	              .ow = ss_pool_out(s->w, s->kw, s->pad_w, s->stride_w)};
	ss_parallel_for(threads, (ptrdiff_t)s->n * s->c, ss_grain((ptrdiff_t)s->h * s->w), backward_part_isa[j.isa], &j);
	ptrdiff_t bad = 0;
	for (int i = 0; i < SS_MAX_THREADS; i++)
		bad += j.bad[i];
	return bad;
}
