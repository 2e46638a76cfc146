/* Weight gradient of a convolution of any stride as one GEMM over the
 * batch's output pixels, at level AVX2:
 *   dW'[oc][t] = sum over pixels q of dY[oc][q] * X'[q][t],
 * where t runs over the taps in (i, j, c) order and X'[q][t] is the input
 * pixel that tap t of output pixel q reads. The input is first copied
 * channel-last and zero-bordered (Xt: [n][Hp][Wp][C], Hp = H + 2*pad_h,
 * Wp = W + 2*pad_w), so that for a pixel q the kw*C taps of kernel row i
 * are kw*C consecutive floats of Xt: a block of 24 taps is one or a few
 * contiguous runs whatever the stride. With kh*kw = 1 or C = 1 that order
 * is the weights' own; otherwise dW' is permuted into dw at the end.
 *
 * The micro-kernel keeps a 4 x 24 tile of dW' (4 output channels, 24 taps)
 * in 12 AVX registers and runs over a chunk of kc pixels, broadcasting 4
 * output-gradient values and loading 3 vectors of taps per pixel (12
 * FMAs): the output gradient is packed [block of 4 channels][pixel][4] for
 * a super-chunk of pixels, the taps [pixel][24] for one block of taps and
 * one chunk, which stays in L1 while every block of output channels reads
 * it. Work is split between threads by blocks of taps; every element of
 * dW' sums its pixels in the same order for any thread count. Images are
 * taken in groups whose Xt fits a budget. */
#include <string.h>

#include "internal.h"

enum {
	WG_NR = 24,  /* taps per tile */
	WG_KC = 128  /* pixels per chunk: the tap panel is WG_KC*WG_NR floats */
};

/* Xt of one group stays below wg_xt_budget floats (default 64 MiB), the
 * packed output gradient of a part below wg_dy_budget (256 KiB, in L2)
 * unless a chunk needs more; wg_all runs every shape at level AVX2. Set
 * only by tests (ss_wgrad_set_test), before any kernel runs. */
static ptrdiff_t wg_xt_budget = (ptrdiff_t)1 << 24, wg_dy_budget = (ptrdiff_t)1 << 16;
static int wg_all;

void ss_wgrad_set_test(ptrdiff_t xt_floats, ptrdiff_t dy_floats, int all)
{
	wg_xt_budget = xt_floats > 0 ? xt_floats : (ptrdiff_t)1 << 24;
	wg_dy_budget = dy_floats > 0 ? dy_floats : (ptrdiff_t)1 << 16;
	wg_all = all;
}

typedef struct {
	int hp, wp;          /* padded input plane (the output plane when decimated) */
	int sh, sw;          /* strides in Xt: the convolution's, or 1 when decimated */
	int decimated;       /* a 1 x 1 kernel: Xt holds only the pixels it reads */
	int oh, ow;          /* output plane */
	ptrdiff_t p;         /* output pixels per image */
	ptrdiff_t kt;        /* taps: kh*kw*C */
	ptrdiff_t row;       /* taps per kernel row: kw*C */
	int oc4;             /* output channels rounded up to 4 */
	int g;               /* images per group */
	ptrdiff_t sc;        /* pixels per super-chunk (a multiple of WG_KC) */
	int direct;          /* dW' is dw (taps already in the weights' order) */
} wg_geom;

static wg_geom wg_make(const ss_conv_shape *s)
{
	wg_geom g = {.hp = s->h + 2 * s->pad_h, .wp = s->w + 2 * s->pad_w, .oh = ss_conv_out_h(s),
	             .ow = ss_conv_out_w(s)};
	g.p = (ptrdiff_t)g.oh * g.ow;
	g.sh = s->stride_h, g.sw = s->stride_w;
	g.decimated = s->kh == 1 && s->kw == 1 && (s->stride_h > 1 || s->stride_w > 1 || s->pad_h || s->pad_w);
	if (g.decimated)
		g.hp = g.oh, g.wp = g.ow, g.sh = 1, g.sw = 1;
	g.row = (ptrdiff_t)s->kw * s->c;
	g.kt = g.row * s->kh;
	g.oc4 = (s->oc + 3) / 4 * 4;
	const ptrdiff_t img = (ptrdiff_t)g.hp * g.wp * s->c;
	ptrdiff_t n = wg_xt_budget / (img > 0 ? img : 1);
	g.g = (int)(n < 1 ? 1 : n > s->n ? s->n : n);
	ptrdiff_t sc = wg_dy_budget / g.oc4 / WG_KC * WG_KC;
	g.sc = sc < WG_KC ? WG_KC : sc;
	g.direct = s->kh * s->kw == 1 || s->c == 1;
	return g;
}

static ptrdiff_t wg_xt_floats(const ss_conv_shape *s, const wg_geom *g)
{
	return (ptrdiff_t)g->g * g->hp * g->wp * s->c;
}

/* Per part: the packed output gradient of a super-chunk, one tap panel. */
static ptrdiff_t wg_part_floats(const wg_geom *g) { return g->oc4 * g->sc + WG_KC * WG_NR; }

static ptrdiff_t wg_fixed_floats(const ss_conv_shape *s, const wg_geom *g)
{
	return wg_xt_floats(s, g) + (g->direct ? 0 : (ptrdiff_t)s->oc * g->kt);
}

/* The GEMM reuses each packed block of taps for every output channel and
 * each packed output gradient for every tap: with fewer than 96 output
 * channels or 128 taps the direct kernels' weight gradient (stride 1) or
 * OpenBLAS's over the column matrix does as well. */
int ss_wgrad_supported(int isa, const ss_conv_shape *s)
{
	return ss_isa(isa) == SS_ISA_AVX2 && (wg_all || (s->oc >= 96 && (ptrdiff_t)s->c * s->kh * s->kw >= 128));
}

ptrdiff_t ss_wgrad_workspace(int threads, const ss_conv_shape *s)
{
	const wg_geom g = wg_make(s);
	return wg_fixed_floats(s, &g) + ss_threads_of(threads) * wg_part_floats(&g);
}

#ifdef SS_HAVE_AVX2

typedef struct {
	const ss_conv_shape *s;
	const wg_geom *g;
	const float *x, *dy;
	ptrdiff_t xn, xc, yn, yc;
	float *xt;          /* the group's images, channel-last and zero-bordered */
	int n0, gn;         /* the group: images [n0, n0 + gn) */
	float *dwt;         /* dW' (OC x kt, row stride kt) */
	float *dw;
	float *parts;       /* per-part buffers */
	ptrdiff_t ntb;      /* blocks of taps */
} wg_job;

/* wg_rows transposes cols floats of rows rows (row r at src + r*sld, its
 * floats sstep apart) into dst (dst[c*rows + r]): 8 x 8 blocks in
 * registers when the floats are contiguous. */
SS_AVX2 static void wg_rows(const float *src, ptrdiff_t sld, int sstep, float *dst, int rows, int cols)
{
	int r0 = 0;
	if (sstep == 1)
		for (; r0 + 8 <= rows; r0 += 8) {
			int c0 = 0;
			for (; c0 + 8 <= cols; c0 += 8) {
				__m256 v[8], t[8];
				for (int r = 0; r < 8; r++)
					v[r] = _mm256_loadu_ps(src + (r0 + r) * sld + c0);
				for (int r = 0; r < 8; r += 2) {
					t[r] = _mm256_unpacklo_ps(v[r], v[r + 1]);
					t[r + 1] = _mm256_unpackhi_ps(v[r], v[r + 1]);
				}
				for (int r = 0; r < 8; r += 4) {
					v[r] = _mm256_shuffle_ps(t[r], t[r + 2], 0x44);
					v[r + 1] = _mm256_shuffle_ps(t[r], t[r + 2], 0xee);
					v[r + 2] = _mm256_shuffle_ps(t[r + 1], t[r + 3], 0x44);
					v[r + 3] = _mm256_shuffle_ps(t[r + 1], t[r + 3], 0xee);
				}
				for (int q = 0; q < 4; q++) {
					_mm256_storeu_ps(dst + (c0 + q) * rows + r0, _mm256_permute2f128_ps(v[q], v[q + 4], 0x20));
					_mm256_storeu_ps(dst + (c0 + q + 4) * rows + r0, _mm256_permute2f128_ps(v[q], v[q + 4], 0x31));
				}
			}
			for (; c0 < cols; c0++)
				for (int r = r0; r < r0 + 8; r++)
					dst[c0 * rows + r] = src[r * sld + c0];
		}
	for (int r = r0; r < rows; r++)
		for (int c = 0; c < cols; c++)
			dst[c * rows + r] = src[r * sld + (ptrdiff_t)c * sstep];
}

/* wg_fill_part copies rows [lo, hi) (items n*H + h of the group, or
 * n*OH + oh when decimated) of the input into Xt. */
SS_AVX2 static void wg_fill_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const wg_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const wg_geom *g = j->g;
	for (ptrdiff_t t = lo; t < hi; t++) {
		if (!g->decimated) {
			const ptrdiff_t n = t / s->h, h = t % s->h;
			const float *src = j->x + (j->n0 + n) * j->xn + h * s->w;
			float *dst = j->xt + ((n * g->hp + h + s->pad_h) * g->wp + s->pad_w) * s->c;
			wg_rows(src, j->xc, 1, dst, s->c, s->w);
			continue;
		}
		/* Output pixel (oh, ow) reads input pixel (oh*sh - ph, ow*sw - pw). */
		const ptrdiff_t n = t / g->oh, oh = t % g->oh, h = oh * s->stride_h - s->pad_h;
		if (h < 0 || h >= s->h)
			continue;
		const int w0 = (s->pad_w + s->stride_w - 1) / s->stride_w; /* first ow inside */
		const int w1 = ss_imin(g->ow, (s->w - 1 + s->pad_w) / s->stride_w + 1);
		if (w1 <= w0)
			continue;
		const float *src = j->x + (j->n0 + n) * j->xn + h * s->w + (ptrdiff_t)w0 * s->stride_w - s->pad_w;
		float *dst = j->xt + ((n * g->hp + oh) * g->wp + w0) * s->c;
		wg_rows(src, j->xc, s->stride_w, dst, s->c, w1 - w0);
	}
}

/* wg_pack_dy packs the output gradient of pixels [q0, q0 + len) of the
 * group (q = n*P + p) as [block of 4 channels][pixel][4], zero past OC. */
SS_AVX2 static void wg_pack_dy(const wg_job *j, ptrdiff_t q0, ptrdiff_t len, float *a)
{
	const ss_conv_shape *s = j->s;
	const wg_geom *g = j->g;
	for (int ob = 0; ob < g->oc4 / 4; ob++) {
		float *d = a + (ptrdiff_t)ob * len * 4;
		const float *rows[4];
		for (int m = 0; m < 4; m++) {
			const int o = 4 * ob + m < s->oc ? 4 * ob + m : -1;
			rows[m] = o < 0 ? NULL : j->dy + o * j->yc;
		}
		ptrdiff_t t = 0;
		while (t < len) {
			const ptrdiff_t q = q0 + t, n = q / g->p, p = q % g->p;
			const ptrdiff_t run = g->p - p < len - t ? g->p - p : len - t;
			const ptrdiff_t off = (j->n0 + n) * j->yn + p;
			ptrdiff_t u = 0;
			if (rows[3] != NULL) {
				const float *r0 = rows[0] + off, *r1 = rows[1] + off, *r2 = rows[2] + off, *r3 = rows[3] + off;
				for (; u + 8 <= run; u += 8) {
					const __m256 a0 = _mm256_loadu_ps(r0 + u), a1 = _mm256_loadu_ps(r1 + u);
					const __m256 a2 = _mm256_loadu_ps(r2 + u), a3 = _mm256_loadu_ps(r3 + u);
					const __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1);
					const __m256 t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
					const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
					const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
					float *o = d + (t + u) * 4;
					_mm256_storeu_ps(o, _mm256_permute2f128_ps(u0, u1, 0x20));
					_mm256_storeu_ps(o + 8, _mm256_permute2f128_ps(u2, u3, 0x20));
					_mm256_storeu_ps(o + 16, _mm256_permute2f128_ps(u0, u1, 0x31));
					_mm256_storeu_ps(o + 24, _mm256_permute2f128_ps(u2, u3, 0x31));
				}
			}
			for (; u < run; u++)
				for (int m = 0; m < 4; m++)
					d[(t + u) * 4 + m] = rows[m] ? rows[m][off + u] : 0.0f;
			t += run;
		}
	}
}

/* wg_pack_taps packs taps [t0, t0 + 24) (zero past kt) of pixels
 * [q0, q0 + len) of the group as [pixel][24]. */
SS_AVX2 static void wg_pack_taps(const wg_job *j, ptrdiff_t t0, ptrdiff_t q0, ptrdiff_t len, float *b)
{
	const ss_conv_shape *s = j->s;
	const wg_geom *g = j->g;
	const ptrdiff_t t1 = t0 + WG_NR < g->kt ? t0 + WG_NR : g->kt;
	const ptrdiff_t rowstride = (ptrdiff_t)g->wp * s->c; /* floats between kernel rows in Xt */
	/* The block as pieces within kernel rows: source offset from the
	 * pixel's first tap, destination column, length. */
	ptrdiff_t src[WG_NR], dst[WG_NR], cnt[WG_NR];
	int pieces = 0;
	for (ptrdiff_t t = t0; t < t1;) {
		const ptrdiff_t i = t / g->row, r = t % g->row;
		const ptrdiff_t l = g->row - r < t1 - t ? g->row - r : t1 - t;
		src[pieces] = i * rowstride + r, dst[pieces] = t - t0, cnt[pieces] = l;
		pieces++;
		t += l;
	}
	const int whole = pieces == 1 && cnt[0] == WG_NR;
	ptrdiff_t q = q0, n = q / g->p, p = q % g->p;
	int oh = (int)(p / g->ow), ow = (int)(p % g->ow);
	for (ptrdiff_t u = 0; u < len; u++) {
		const float *px = j->xt + ((n * g->hp + (ptrdiff_t)oh * g->sh) * g->wp + (ptrdiff_t)ow * g->sw) * s->c;
		float *d = b + u * WG_NR;
		if (whole) {
			const float *sp = px + src[0];
			_mm256_storeu_ps(d, _mm256_loadu_ps(sp));
			_mm256_storeu_ps(d + 8, _mm256_loadu_ps(sp + 8));
			_mm256_storeu_ps(d + 16, _mm256_loadu_ps(sp + 16));
		} else {
			for (int k = 0; k < pieces; k++)
				memcpy(d + dst[k], px + src[k], sizeof(float) * (size_t)cnt[k]);
			for (ptrdiff_t k = t1 - t0; k < WG_NR; k++)
				d[k] = 0.0f;
		}
		if (++ow == g->ow) {
			ow = 0;
			if (++oh == g->oh)
				oh = 0, n++;
		}
	}
}

/* wg_kernel adds to the tile c (rows m < mr, columns < nr, row stride ldc)
 * the products of a ([kc][4]) and b ([kc][24]) over kc pixels. */
SS_AVX2 static void wg_kernel(ptrdiff_t kc, const float *a, const float *b, float *c, ptrdiff_t ldc, int mr, int nr)
{
	__m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
	__m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
	for (ptrdiff_t t = 0; t < kc; t++, a += 4, b += WG_NR) {
		const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), b2 = _mm256_loadu_ps(b + 16);
		__m256 v = _mm256_broadcast_ss(a);
		c00 = _mm256_fmadd_ps(v, b0, c00), c01 = _mm256_fmadd_ps(v, b1, c01), c02 = _mm256_fmadd_ps(v, b2, c02);
		v = _mm256_broadcast_ss(a + 1);
		c10 = _mm256_fmadd_ps(v, b0, c10), c11 = _mm256_fmadd_ps(v, b1, c11), c12 = _mm256_fmadd_ps(v, b2, c12);
		v = _mm256_broadcast_ss(a + 2);
		c20 = _mm256_fmadd_ps(v, b0, c20), c21 = _mm256_fmadd_ps(v, b1, c21), c22 = _mm256_fmadd_ps(v, b2, c22);
		v = _mm256_broadcast_ss(a + 3);
		c30 = _mm256_fmadd_ps(v, b0, c30), c31 = _mm256_fmadd_ps(v, b1, c31), c32 = _mm256_fmadd_ps(v, b2, c32);
	}
	const __m256 acc[4][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32}};
	if (nr == WG_NR) {
		for (int m = 0; m < mr; m++)
			for (int v = 0; v < 3; v++) {
				float *p = c + m * ldc + 8 * v;
				_mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), acc[m][v]));
			}
		return;
	}
	float tile[4][WG_NR];
	for (int m = 0; m < 4; m++)
		for (int v = 0; v < 3; v++)
			_mm256_storeu_ps(tile[m] + 8 * v, acc[m][v]);
	for (int m = 0; m < mr; m++)
		for (int k = 0; k < nr; k++)
			c[m * ldc + k] += tile[m][k];
}

/* wg_tiles_part adds the group's share of tap blocks [lo, hi) to dW'. */
SS_AVX2 static void wg_tiles_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const wg_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const wg_geom *g = j->g;
	float *a = j->parts + part * wg_part_floats(g), *b = a + g->oc4 * g->sc;
	const ptrdiff_t cols = (ptrdiff_t)j->gn * g->p;
	for (ptrdiff_t q0 = 0; q0 < cols; q0 += g->sc) {
		const ptrdiff_t len = cols - q0 < g->sc ? cols - q0 : g->sc;
		wg_pack_dy(j, q0, len, a);
		for (ptrdiff_t tb = lo; tb < hi; tb++) {
			const ptrdiff_t t0 = tb * WG_NR;
			const int nr = (int)(g->kt - t0 < WG_NR ? g->kt - t0 : WG_NR);
			for (ptrdiff_t k0 = 0; k0 < len; k0 += WG_KC) {
				const ptrdiff_t kc = len - k0 < WG_KC ? len - k0 : WG_KC;
				wg_pack_taps(j, t0, q0 + k0, kc, b);
				for (int ob = 0; ob < g->oc4 / 4; ob++)
					wg_kernel(kc, a + (ob * len + k0) * 4, b, j->dwt + 4 * ob * g->kt + t0, g->kt,
					          ss_imin(4, s->oc - 4 * ob), nr);
			}
		}
	}
}

/* wg_permute_part writes rows [lo, hi) of dw from dW'. */
static void wg_permute_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const wg_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const ptrdiff_t kk = (ptrdiff_t)s->kh * s->kw, k = kk * s->c;
	for (ptrdiff_t o = lo; o < hi; o++)
		for (ptrdiff_t t = 0; t < kk; t++)
			for (int c = 0; c < s->c; c++)
				j->dw[o * k + c * kk + t] = j->dwt[o * k + t * s->c + c];
}

void ss_wgrad(int threads, const ss_conv_shape *s, const float *x, const float *dy, float *dw, float *ws,
              ptrdiff_t ws_len)
{
	const wg_geom g = wg_make(s);
	wg_job j = {.s = s, .g = &g, .x = x, .dy = dy, .xt = ws, .dw = dw, .ntb = (g.kt + WG_NR - 1) / WG_NR};
	ss_conv_planes(s, &j.xn, &j.xc, &j.yn, &j.yc);
	j.dwt = g.direct ? dw : ws + wg_xt_floats(s, &g);
	j.parts = ws + wg_fixed_floats(s, &g);
	const int parts = ss_ws_threads(threads, ws_len - wg_fixed_floats(s, &g), wg_part_floats(&g));
	memset(j.xt, 0, sizeof(float) * (size_t)wg_xt_floats(s, &g));
	memset(j.dwt, 0, sizeof(float) * (size_t)(s->oc * g.kt));
	for (int n0 = 0; n0 < s->n; n0 += g.g) {
		j.n0 = n0;
		j.gn = ss_imin(g.g, s->n - n0);
		const int rows = g.decimated ? g.oh : s->h;
		ss_parallel_for(threads, (ptrdiff_t)j.gn * rows, ss_grain((ptrdiff_t)s->c * s->w), wg_fill_part, &j);
		ss_parallel_for(parts, j.ntb, 1, wg_tiles_part, &j);
	}
	if (!g.direct)
		ss_parallel_for(threads, s->oc, ss_grain(g.kt), wg_permute_part, &j);
}

#else /* !SS_HAVE_AVX2 */

void ss_wgrad(int threads, const ss_conv_shape *s, const float *x, const float *dy, float *dw, float *ws,
              ptrdiff_t ws_len)
{
	(void)threads, (void)s, (void)x, (void)dy, (void)dw, (void)ws, (void)ws_len;
}

#endif
