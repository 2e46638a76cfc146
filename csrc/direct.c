/* Direct convolution for stride 1 at level AVX2 (AVX2 and FMA): no column
 * matrix, no GEMM library. The AVX-512 level has kernels and a layout of
 * its own (direct512.c); the ss_conv_direct_* entry points below pick
 * one or the other.
 *
 * A unit is 8 consecutive output pixels of one output row (the last unit
 * of a row may be partial). Each image's input planes are first copied
 * into a zero-bordered buffer (padded planes of hp x wp floats, wp covering
 * the units' full width), so that the input window of tap (c, i, j) for
 * a unit is 8 consecutive floats at
 *   buffer + koff[tap] + oh*wp + ow0,   koff[tap] = c*plane + i*wp + j.
 * The forward micro-kernel keeps a 4 x 3 tile of output vectors (4 output
 * channels x 3 units) in 12 AVX registers and runs over all C*kh*kw taps,
 * loading 3 input vectors and broadcasting 4 weights per tap (12 FMAs);
 * the weights are packed 4 output channels interleaved. The input
 * gradient is the same correlation run on the output gradient, padded by
 * kh-1-pad_h and kw-1-pad_w, with the kernel rotated by 180 degrees and
 * its channel axes swapped. The weight gradient keeps a 4 x 3 tile of
 * (output channel, tap) dot products over the units of a chunk of images,
 * vectorised along the 8 pixels of a unit.
 *
 * Activations are addressed through plane strides, so NCHW and CNHW cost
 * the same. */
#include <limits.h>
#include <string.h>

#include "internal.h"


/* dgeom is the geometry of one stride-1 correlation: input planes, output
 * planes, kernel and padding (negative padding crops), and the padded
 * input plane the kernels read. */
typedef struct {
	int ci, hi, wi;   /* input channels, plane height and width */
	int co, ho, wo;   /* output channels, plane height and width */
	int kh, kw, ph, pw;
	int ur;           /* units per output row */
	int hp, wp;       /* padded input plane */
	ptrdiff_t plane;  /* floats per padded plane */
	ptrdiff_t k;      /* taps: ci*kh*kw */
} dgeom;

static dgeom dgeom_make(int ci, int hi, int wi, int co, int ho, int wo, int kh, int kw, int ph, int pw)
{
	dgeom g = {.ci = ci, .hi = hi, .wi = wi, .co = co, .ho = ho, .wo = wo, .kh = kh, .kw = kw, .ph = ph, .pw = pw};
	g.ur = (wo + 7) / 8;
	g.hp = ho + kh - 1;
	g.wp = g.ur * 8 + kw - 1;
	g.plane = (ptrdiff_t)g.hp * g.wp;
	g.k = (ptrdiff_t)ci * kh * kw;
	return g;
}

/* The forward correlation and the input gradient of a convolution. */
static dgeom dgeom_forward(const ss_conv_shape *s)
{
	return dgeom_make(s->c, s->h, s->w, s->oc, ss_conv_out_h(s), ss_conv_out_w(s), s->kh, s->kw,
	                  s->pad_h, s->pad_w);
}

static dgeom dgeom_data(const ss_conv_shape *s)
{
	return dgeom_make(s->oc, ss_conv_out_h(s), ss_conv_out_w(s), s->c, s->h, s->w, s->kh, s->kw,
	                  s->kh - 1 - s->pad_h, s->kw - 1 - s->pad_w);
}

static ptrdiff_t round4(ptrdiff_t n) { return (n + 3) / 4 * 4; }

/* image_floats is the size of one image's padded planes. */
static ptrdiff_t image_floats(const dgeom *g) { return g->ci * g->plane; }

/* Images of a weight-gradient chunk: about 64 Ki floats of padded input,
 * which stays in the L2 cache while every tile reads it. */
static int dw_chunk(const dgeom *g, int n)
{
	ptrdiff_t c = (ptrdiff_t)(1 << 17) / image_floats(g);
	return (int)(c < 1 ? 1 : c > n ? n : c);
}

/* Floats of the forward pass: packed weights, packed bias, tap offsets
 * (ints), then a padded image per part. */
static ptrdiff_t fwd_fixed(const dgeom *g) { return round4(g->co) * g->k + round4(g->co) + g->k; }

/* corr_chunk is the number of images a part pads at once (at most n), so
 * that a tile of 3 units may span images: about 32 Ki floats, which stay
 * in the L2 cache while every block of output channels reads them. */
static int corr_chunk(const dgeom *g, int n)
{
	ptrdiff_t c = (ptrdiff_t)(1 << 15) / image_floats(g);
	return (int)(c < 1 ? 1 : c > n ? n : c);
}

static ptrdiff_t fwd_part(const dgeom *g, int n) { return corr_chunk(g, n) * image_floats(g); }

/* Floats of the weight gradient: tap offsets, unit offsets (ints), the
 * padded chunk, and the row-padded output gradient of a chunk when its
 * rows are not whole units. */
static ptrdiff_t dw_floats(const ss_conv_shape *s, const dgeom *g)
{
	const int nc = dw_chunk(g, s->n);
	ptrdiff_t need = g->k + (ptrdiff_t)g->ho * g->ur + nc * g->ci * g->plane;
	if (g->wo % 8 != 0)
		need += (ptrdiff_t)s->oc * nc * g->ho * g->ur * 8;
	return need;
}

int ss_conv_direct_supported(int isa, const ss_conv_shape *s)
{
	isa = ss_isa(isa);
	if (isa < SS_ISA_AVX2 || s->stride_h != 1 || s->stride_w != 1)
		return 0;
#ifdef SS_HAVE_AVX512
	if (isa >= SS_ISA_AVX512)
		return ss_d512_fits(s);
#endif
	/* Tap offsets are ints: an image's padded planes must be indexable. */
	const dgeom f = dgeom_forward(s), d = dgeom_data(s);
	return image_floats(&f) < INT_MAX / 2 && image_floats(&d) < INT_MAX / 2;
}

/* The input gradient either runs the correlation on the padded output
 * gradient (dgeom_data), which computes every input pixel from all its
 * taps, or scatters: each output-gradient unit adds its contribution
 * through every tap into a padded input-gradient buffer. Both do the same
 * FLOPs per computed vector; the correlation computes H*ur(W) vectors per
 * plane, the scatter OH*ur(OW) and a read-modify-write per tap. The
 * scatter wins when the padding is narrower than the kernel (a "valid"
 * convolution, whose full correlation is mostly zero padding). */
static int dx_scatter(const ss_conv_shape *s, const dgeom *f, const dgeom *d)
{
	(void)s;
	return (ptrdiff_t)d->ho * d->ur > (ptrdiff_t)f->ho * f->ur * 5 / 4;
}

/* Floats of the scatter: packed weights, then per part the padded input
 * gradient of an image (f->hp x f->wp planes, C of them) and its output
 * gradient in rows of whole units. */
static ptrdiff_t scatter_fixed_floats(const ss_conv_shape *s) { return round4(s->c) * s->kh * s->kw * s->oc; }
static ptrdiff_t scatter_floats(const ss_conv_shape *s, const dgeom *f)
{
	return s->c * f->plane + (ptrdiff_t)s->oc * f->ho * f->ur * 8;
}

ptrdiff_t ss_conv_direct_workspace(int isa, int threads, const ss_conv_shape *s, int backward)
{
#ifdef SS_HAVE_AVX512
	if (ss_isa(isa) >= SS_ISA_AVX512)
		return ss_d512_workspace(threads, s, backward);
#else
	(void)isa;
#endif
	const ptrdiff_t t = ss_threads_of(threads);
	dgeom f = dgeom_forward(s);
	if (!backward)
		return fwd_fixed(&f) + t * fwd_part(&f, s->n);
	dgeom d = dgeom_data(s);
	ptrdiff_t a = dw_floats(s, &f);
	ptrdiff_t b = dx_scatter(s, &f, &d) ? scatter_fixed_floats(s) + t * scatter_floats(s, &f)
	                                    : fwd_fixed(&d) + t * fwd_part(&d, s->n);
	return a > b ? a : b;
}

void ss_pack_scatter(const ss_conv_shape *s, const float *w, float *wpk)
{
	const int kk = s->kh * s->kw;
	for (int c = 0; c < round4(s->c); c++)
		for (int t = 0; t < kk; t++)
			for (int o = 0; o < s->oc; o++)
				wpk[(((ptrdiff_t)(c / 4) * kk + t) * s->oc + o) * 4 + c % 4] =
				    c < s->c ? w[((ptrdiff_t)o * s->c + c) * kk + t] : 0.0f;
}

#ifdef SS_HAVE_AVX2

/* taps writes koff[(c*kh + i)*kw + j] = c*plane + i*wp + j. */
static void taps(const dgeom *g, int *koff)
{
	ptrdiff_t t = 0;
	for (int c = 0; c < g->ci; c++)
		for (int i = 0; i < g->kh; i++)
			for (int j = 0; j < g->kw; j++)
				koff[t++] = (int)(c * g->plane + (ptrdiff_t)i * g->wp + j);
}

/* pad_rows copies the input planes of one image (plane c at src + c*cs,
 * rows of wi floats) into the interior of the padded planes at dst,
 * whose borders are already zero. */
static void pad_rows(const dgeom *g, const float *src, ptrdiff_t cs, float *dst)
{
	const int lo = ss_imax(0, g->pw), hi = ss_imin(g->wp, g->wi + g->pw);
	const int r0 = ss_imax(0, g->ph), r1 = ss_imin(g->hp, g->hi + g->ph);
	if (hi <= lo)
		return;
	for (int c = 0; c < g->ci; c++) {
		const float *sp = src + c * cs + (lo - g->pw);
		float *dp = dst + c * g->plane + lo;
		for (int r = r0; r < r1; r++) {
			const float *s = sp + (ptrdiff_t)(r - g->ph) * g->wi;
			float *d = dp + (ptrdiff_t)r * g->wp;
			for (int q = 0; q < hi - lo; q++)
				d[q] = s[q];
		}
	}
}

/* fwd_kernel computes a 4 x 3 tile: output channel m of unit u is
 * bias[m] + sum over taps t of w[4t + m] * x_u[koff[t] + 0..7], stored at
 * y[u] + m*ys (rows m < mr, units u < nu, the first cnt[u] pixels). */
SS_AVX2 static void fwd_kernel(ptrdiff_t k, const int *koff, const float *w, const float *bias,
                               const float *const x[3], float *const y[3], ptrdiff_t ys, int mr, int nu,
                               const int cnt[3])
{
	__m256 c00 = _mm256_broadcast_ss(bias), c01 = c00, c02 = c00;
	__m256 c10 = _mm256_broadcast_ss(bias + 1), c11 = c10, c12 = c10;
	__m256 c20 = _mm256_broadcast_ss(bias + 2), c21 = c20, c22 = c20;
	__m256 c30 = _mm256_broadcast_ss(bias + 3), c31 = c30, c32 = c30;
	const float *x0 = x[0], *x1 = x[1], *x2 = x[2];
	for (ptrdiff_t t = 0; t < k; t++, w += 4) {
		const int o = koff[t];
		const __m256 b0 = _mm256_loadu_ps(x0 + o), b1 = _mm256_loadu_ps(x1 + o), b2 = _mm256_loadu_ps(x2 + o);
		__m256 a = _mm256_broadcast_ss(w);
		c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01), c02 = _mm256_fmadd_ps(a, b2, c02);
		a = _mm256_broadcast_ss(w + 1);
		c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11), c12 = _mm256_fmadd_ps(a, b2, c12);
		a = _mm256_broadcast_ss(w + 2);
		c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21), c22 = _mm256_fmadd_ps(a, b2, c22);
		a = _mm256_broadcast_ss(w + 3);
		c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31), c32 = _mm256_fmadd_ps(a, b2, c32);
	}
	float *y0 = y[0], *y1 = y[1], *y2 = y[2];
	if (mr == 4 && nu == 3 && (cnt[0] & cnt[1] & cnt[2]) == 8) {
		_mm256_storeu_ps(y0, c00), _mm256_storeu_ps(y1, c01), _mm256_storeu_ps(y2, c02);
		_mm256_storeu_ps(y0 + ys, c10), _mm256_storeu_ps(y1 + ys, c11), _mm256_storeu_ps(y2 + ys, c12);
		_mm256_storeu_ps(y0 + 2 * ys, c20), _mm256_storeu_ps(y1 + 2 * ys, c21), _mm256_storeu_ps(y2 + 2 * ys, c22);
		_mm256_storeu_ps(y0 + 3 * ys, c30), _mm256_storeu_ps(y1 + 3 * ys, c31), _mm256_storeu_ps(y2 + 3 * ys, c32);
		return;
	}
	float tile[4][3][8];
	_mm256_storeu_ps(tile[0][0], c00), _mm256_storeu_ps(tile[0][1], c01), _mm256_storeu_ps(tile[0][2], c02);
	_mm256_storeu_ps(tile[1][0], c10), _mm256_storeu_ps(tile[1][1], c11), _mm256_storeu_ps(tile[1][2], c12);
	_mm256_storeu_ps(tile[2][0], c20), _mm256_storeu_ps(tile[2][1], c21), _mm256_storeu_ps(tile[2][2], c22);
	_mm256_storeu_ps(tile[3][0], c30), _mm256_storeu_ps(tile[3][1], c31), _mm256_storeu_ps(tile[3][2], c32);
	for (int m = 0; m < mr; m++)
		for (int u = 0; u < nu; u++)
			memcpy(y[u] + m * ys, tile[m][u], sizeof(float) * (size_t)cnt[u]);
}

typedef struct {
	const dgeom *g;
	int nc;                  /* images padded at once */
	const float *in;
	ptrdiff_t in_n, in_c;    /* input plane (n, c) at in + n*in_n + c*in_c */
	float *out;
	ptrdiff_t out_n, out_c;  /* output plane (n, c) at out + n*out_n + c*out_c */
	const float *w, *bias;   /* packed: [block][tap][4], [block][4] */
	const int *koff;
	float *buf;              /* nc padded images per part */
} corr_job;

/* corr_part runs the correlation for images [lo, hi), nc at a time: for
 * each block of 4 output channels, tiles of 3 units over the chunk's
 * units (image-major), so that only the chunk's last tile may be short. */
SS_AVX2 static void corr_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const corr_job *j = ctx;
	const dgeom *g = j->g;
	const ptrdiff_t img = image_floats(g);
	float *buf = j->buf + part * j->nc * img;
	memset(buf, 0, sizeof(float) * (size_t)(j->nc * img));
	const ptrdiff_t units = (ptrdiff_t)g->ho * g->ur;
	const int blocks = (g->co + 3) / 4;
	for (ptrdiff_t n0 = lo; n0 < hi; n0 += j->nc) {
		const int nc = (int)(hi - n0 < j->nc ? hi - n0 : j->nc);
		for (int n = 0; n < nc; n++)
			pad_rows(g, j->in + (n0 + n) * j->in_n, j->in_c, buf + n * img);
		const ptrdiff_t all = nc * units;
		for (int ob = 0; ob < blocks; ob++) {
			const int mr = ss_imin(4, g->co - 4 * ob);
			const float *w = j->w + ob * 4 * g->k;
			float *yb = j->out + n0 * j->out_n + 4 * ob * j->out_c;
			for (ptrdiff_t u0 = 0; u0 < all; u0 += 3) {
				const int nu = (int)(all - u0 < 3 ? all - u0 : 3);
				const float *x[3];
				float *y[3];
				int cnt[3];
				for (int u = 0; u < 3; u++) {
					const ptrdiff_t uu = u0 + ss_imin(u, nu - 1), n = uu / units, un = uu % units;
					const int oh = (int)(un / g->ur), ow = (int)(un % g->ur) * 8;
					x[u] = buf + n * img + (ptrdiff_t)oh * g->wp + ow;
					y[u] = yb + n * j->out_n + (ptrdiff_t)oh * g->wo + ow;
					cnt[u] = ss_imin(8, g->wo - ow);
				}
				fwd_kernel(g->k, j->koff, w, j->bias + 4 * ob, x, y, j->out_c, mr, nu, cnt);
			}
		}
	}
}

/* corr runs the correlation over n images with weights already packed,
 * koff and the padded images in ws. */
static void corr(int threads, const dgeom *g, int n, const float *in, ptrdiff_t in_n, ptrdiff_t in_c, float *out,
                 ptrdiff_t out_n, ptrdiff_t out_c, const float *wpk, const float *bias, int *koff,
                 float *bufs, ptrdiff_t buf_len)
{
	taps(g, koff);
	corr_job j = {.g = g, .nc = corr_chunk(g, n), .in = in, .in_n = in_n, .in_c = in_c, .out = out,
	              .out_n = out_n, .out_c = out_c, .w = wpk, .bias = bias, .koff = koff, .buf = bufs};
	ss_parallel_for(ss_ws_threads(threads, buf_len, fwd_part(g, n)), n, 1, corr_part, &j);
}

/* corr_ws splits the workspace of a correlation (see fwd_fixed): packed
 * weights, packed bias, tap offsets, padded images. */
static void corr_ws(const dgeom *g, float *ws, float **wpk, float **bias, int **koff, float **bufs)
{
	*wpk = ws;
	*bias = ws + round4(g->co) * g->k;
	*koff = (int *)(*bias + round4(g->co));
	*bufs = (float *)(*koff + g->k);
}

void ss_conv_direct_forward(int isa, int threads, const ss_conv_shape *s, const float *x, const float *w,
                            const float *b, float *y, float *ws, ptrdiff_t ws_len)
{
#ifdef SS_HAVE_AVX512
	if (ss_isa(isa) >= SS_ISA_AVX512) {
		ss_d512_forward(threads, s, x, w, b, y, ws, ws_len);
		return;
	}
#else
	(void)isa;
#endif
	const dgeom g = dgeom_forward(s);
	ptrdiff_t xn, xc, yn, yc;
	ss_conv_planes(s, &xn, &xc, &yn, &yc);
	/* Weights packed [block of 4 output channels][tap][4], zero rows past
	 * oc, and the bias likewise. */
	float *wpk, *bias, *bufs;
	int *koff;
	corr_ws(&g, ws, &wpk, &bias, &koff, &bufs);
	for (int o = 0; o < round4(g.co); o++) {
		float *d = wpk + (o / 4) * 4 * g.k + o % 4;
		for (ptrdiff_t t = 0; t < g.k; t++)
			d[4 * t] = o < g.co ? w[o * g.k + t] : 0.0f;
		bias[o] = o < g.co && b ? b[o] : 0.0f;
	}
	corr(threads, &g, s->n, x, xn, xc, y, yn, yc, wpk, bias, koff, bufs, ws_len - fwd_fixed(&g));
}

/* ---- weight gradient ---- */

/* dw_kernel accumulates into out[m*3 + t] the dot products, over the units
 * of nc images, of output-gradient rows d[m] (unit u of image n at
 * d[m] + n*dn + 8u) with the inputs of taps x[t] (at x[t] + n*xn +
 * uoff[u]). */
SS_AVX2 static void dw_kernel(int nc, ptrdiff_t units, const int *uoff, const float *const d[4], ptrdiff_t dn,
                              const float *const x[3], ptrdiff_t xn, float out[12])
{
	__m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
	__m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
	for (int n = 0; n < nc; n++) {
		const float *d0 = d[0] + n * dn, *d1 = d[1] + n * dn, *d2 = d[2] + n * dn, *d3 = d[3] + n * dn;
		const float *x0 = x[0] + n * xn, *x1 = x[1] + n * xn, *x2 = x[2] + n * xn;
		for (ptrdiff_t u = 0; u < units; u++) {
			const int o = uoff[u];
			const __m256 b0 = _mm256_loadu_ps(x0 + o), b1 = _mm256_loadu_ps(x1 + o), b2 = _mm256_loadu_ps(x2 + o);
			__m256 a = _mm256_loadu_ps(d0 + 8 * u);
			c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01), c02 = _mm256_fmadd_ps(a, b2, c02);
			a = _mm256_loadu_ps(d1 + 8 * u);
			c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11), c12 = _mm256_fmadd_ps(a, b2, c12);
			a = _mm256_loadu_ps(d2 + 8 * u);
			c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21), c22 = _mm256_fmadd_ps(a, b2, c22);
			a = _mm256_loadu_ps(d3 + 8 * u);
			c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31), c32 = _mm256_fmadd_ps(a, b2, c32);
		}
	}
	out[0] = ss_hsum(c00), out[1] = ss_hsum(c01), out[2] = ss_hsum(c02);
	out[3] = ss_hsum(c10), out[4] = ss_hsum(c11), out[5] = ss_hsum(c12);
	out[6] = ss_hsum(c20), out[7] = ss_hsum(c21), out[8] = ss_hsum(c22);
	out[9] = ss_hsum(c30), out[10] = ss_hsum(c31), out[11] = ss_hsum(c32);
}

typedef struct {
	const dgeom *g;
	const float *x;
	ptrdiff_t x_n, x_c;
	const float *dy;         /* the chunk's output gradient */
	ptrdiff_t dy_n, dy_c;    /* plane (n, oc) of the chunk at dy + n*dy_n + oc*dy_c; units contiguous */
	float *buf;              /* the chunk's padded images */
	int n0, nc;
	const int *koff, *uoff;
	float *dw;
} dw_job;

/* dw_pad_part pads images [lo, hi) of the chunk. */
SS_AVX2 static void dw_pad_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const dw_job *j = ctx;
	const ptrdiff_t per = image_floats(j->g);
	for (ptrdiff_t n = lo; n < hi; n++)
		pad_rows(j->g, j->x + (j->n0 + n) * j->x_n, j->x_c, j->buf + n * per);
}

/* dw_tile_part adds the chunk's share of tiles [lo, hi) to dw: tile
 * ob*triples + t3 covers output channels 4ob.. and taps 3t3... */
SS_AVX2 static void dw_tile_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const dw_job *j = ctx;
	const dgeom *g = j->g;
	const ptrdiff_t triples = (g->k + 2) / 3, units = (ptrdiff_t)g->ho * g->ur;
	for (ptrdiff_t t = lo; t < hi; t++) {
		const int ob = (int)(t / triples);
		const ptrdiff_t k0 = t % triples * 3;
		const int mr = ss_imin(4, g->co - 4 * ob), nt = (int)(g->k - k0 < 3 ? g->k - k0 : 3);
		const float *d[4], *x[3];
		for (int m = 0; m < 4; m++)
			d[m] = j->dy + (4 * ob + ss_imin(m, mr - 1)) * j->dy_c;
		for (int u = 0; u < 3; u++)
			x[u] = j->buf + j->koff[k0 + ss_imin(u, nt - 1)];
		float out[12];
		dw_kernel(j->nc, units, j->uoff, d, j->dy_n, x, image_floats(g), out);
		for (int m = 0; m < mr; m++)
			for (int u = 0; u < nt; u++)
				j->dw[(4 * ob + m) * g->k + k0 + u] += out[m * 3 + u];
	}
}

static void weight_grad(int threads, const ss_conv_shape *s, const float *x, const float *dy, float *dw, float *ws)
{
	const dgeom g = dgeom_forward(s);
	ptrdiff_t xn, xc, yn, yc;
	ss_conv_planes(s, &xn, &xc, &yn, &yc);
	const int nc = dw_chunk(&g, s->n);
	const ptrdiff_t units = (ptrdiff_t)g.ho * g.ur, rowu = (ptrdiff_t)g.ur * 8;
	int *koff = (int *)ws, *uoff = koff + g.k;
	float *buf = (float *)(uoff + units);
	float *rows = buf + nc * image_floats(&g); /* used when rows are not whole units */
	taps(&g, koff);
	for (ptrdiff_t u = 0; u < units; u++)
		uoff[u] = (int)((u / g.ur) * g.wp + (u % g.ur) * 8);
	memset(dw, 0, sizeof(float) * (size_t)(s->oc * g.k));
	memset(buf, 0, sizeof(float) * (size_t)(nc * image_floats(&g)));
	const ptrdiff_t tiles = (ptrdiff_t)((g.co + 3) / 4) * ((g.k + 2) / 3);
	for (int n0 = 0; n0 < s->n; n0 += nc) {
		const int cn = ss_imin(nc, s->n - n0);
		dw_job j = {.g = &g, .x = x, .x_n = xn, .x_c = xc, .buf = buf, .n0 = n0, .nc = cn,
		            .koff = koff, .uoff = uoff, .dw = dw};
		if (g.wo % 8 == 0) {
			j.dy = dy + n0 * yn, j.dy_n = yn, j.dy_c = yc;
		} else {
			/* Rows of whole units, zero beyond wo: [oc][n][ho][ur*8]. */
			for (int o = 0; o < s->oc; o++)
				for (int n = 0; n < cn; n++) {
					const float *sp = dy + (n0 + n) * yn + o * yc;
					float *dp = rows + ((ptrdiff_t)o * nc + n) * g.ho * rowu;
					for (int r = 0; r < g.ho; r++) {
						memcpy(dp + r * rowu, sp + (ptrdiff_t)r * g.wo, sizeof(float) * (size_t)g.wo);
						memset(dp + r * rowu + g.wo, 0, sizeof(float) * (size_t)(rowu - g.wo));
					}
				}
			j.dy = rows, j.dy_n = g.ho * rowu, j.dy_c = nc * g.ho * rowu;
		}
		ss_parallel_for(threads, cn, 1, dw_pad_part, &j);
		ss_parallel_for(threads, tiles, 1, dw_tile_part, &j);
	}
}

/* ---- input gradient by scattering ---- */

/* scatter_kernel adds to the 4 x 3 tile of input-gradient vectors o[u] +
 * m*os (rows m < mr, units u < nu) the sums over oc < noc of w[4oc + m]
 * times the output-gradient vector d[u] + oc*dc. */
SS_AVX2 static void scatter_kernel(int noc, const float *w, const float *const d[3], ptrdiff_t dc,
                                   float *const o[3], ptrdiff_t os, int mr, int nu)
{
	__m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
	__m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
	const float *d0 = d[0], *d1 = d[1], *d2 = d[2];
	for (int oc = 0; oc < noc; oc++, w += 4, d0 += dc, d1 += dc, d2 += dc) {
		const __m256 b0 = _mm256_loadu_ps(d0), b1 = _mm256_loadu_ps(d1), b2 = _mm256_loadu_ps(d2);
		__m256 a = _mm256_broadcast_ss(w);
		c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01), c02 = _mm256_fmadd_ps(a, b2, c02);
		a = _mm256_broadcast_ss(w + 1);
		c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11), c12 = _mm256_fmadd_ps(a, b2, c12);
		a = _mm256_broadcast_ss(w + 2);
		c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21), c22 = _mm256_fmadd_ps(a, b2, c22);
		a = _mm256_broadcast_ss(w + 3);
		c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31), c32 = _mm256_fmadd_ps(a, b2, c32);
	}
	const __m256 acc[4][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32}};
	for (int m = 0; m < mr; m++)
		for (int u = 0; u < nu; u++) {
			float *p = o[u] + m * os;
			_mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), acc[m][u]));
		}
}

typedef struct {
	const ss_conv_shape *s;
	const dgeom *f;          /* the forward geometry: its padded planes hold the input gradient */
	const float *dy;
	ptrdiff_t yn, yc;
	float *dx;
	ptrdiff_t xn, xc;
	const float *w;          /* packed [block of 4 input channels][tap][oc][4] */
	float *bufs;
} scatter_job;

SS_AVX2 static void scatter_image_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const scatter_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const dgeom *f = j->f;
	const int kk = s->kh * s->kw, blocks = (s->c + 3) / 4;
	const ptrdiff_t row = (ptrdiff_t)f->ur * 8, dplane = f->ho * row, units = (ptrdiff_t)f->ho * f->ur;
	float *gx = j->bufs + part * scatter_floats(s, f), *gy = gx + s->c * f->plane;
	for (ptrdiff_t n = lo; n < hi; n++) {
		/* The image's output gradient in rows of whole units, zero
		 * beyond OW, and a zeroed padded input gradient. */
		for (int o = 0; o < s->oc; o++) {
			const float *sp = j->dy + n * j->yn + o * j->yc;
			float *dp = gy + o * dplane;
			for (int r = 0; r < f->ho; r++, dp += row, sp += f->wo) {
				for (int q = 0; q < f->wo; q++)
					dp[q] = sp[q];
				for (ptrdiff_t q = f->wo; q < row; q++)
					dp[q] = 0.0f;
			}
		}
		memset(gx, 0, sizeof(float) * (size_t)(s->c * f->plane));
		for (int cb = 0; cb < blocks; cb++) {
			const int mr = ss_imin(4, s->c - 4 * cb);
			float *ob = gx + 4 * cb * f->plane;
			for (ptrdiff_t u0 = 0; u0 < units; u0 += 3) {
				const int nu = (int)(units - u0 < 3 ? units - u0 : 3);
				const float *d[3];
				float *o[3];
				for (int u = 0; u < 3; u++) {
					const ptrdiff_t uu = u0 + ss_imin(u, nu - 1);
					const int oh = (int)(uu / f->ur), ow = (int)(uu % f->ur) * 8;
					d[u] = gy + oh * row + ow;
					o[u] = ob + (ptrdiff_t)oh * f->wp + ow;
				}
				const float *w = j->w + (ptrdiff_t)cb * kk * s->oc * 4;
				for (int i = 0; i < s->kh; i++)
					for (int jj = 0; jj < s->kw; jj++, w += 4 * s->oc) {
						float *ot[3] = {o[0] + i * f->wp + jj, o[1] + i * f->wp + jj, o[2] + i * f->wp + jj};
						scatter_kernel(s->oc, w, d, dplane, ot, f->plane, mr, nu);
					}
			}
		}
		/* Crop the padding. */
		for (int c = 0; c < s->c; c++) {
			const float *sp = gx + c * f->plane + (ptrdiff_t)f->ph * f->wp + f->pw;
			float *dp = j->dx + n * j->xn + c * j->xc;
			for (int r = 0; r < s->h; r++, sp += f->wp, dp += s->w)
				for (int q = 0; q < s->w; q++)
					dp[q] = sp[q];
		}
	}
}

static void scatter(int threads, const ss_conv_shape *s, const dgeom *f, const float *w, const float *dy, float *dx,
                    float *ws, ptrdiff_t ws_len)
{
	float *wpk = ws;
	ss_pack_scatter(s, w, wpk);
	scatter_job j = {.s = s, .f = f, .dy = dy, .dx = dx, .w = wpk, .bufs = wpk + scatter_fixed_floats(s)};
	ss_conv_planes(s, &j.xn, &j.xc, &j.yn, &j.yc);
	ss_parallel_for(ss_ws_threads(threads, ws_len - scatter_fixed_floats(s), scatter_floats(s, f)), s->n, 1,
	                scatter_image_part, &j);
}

void ss_conv_direct_backward(int isa, int threads, const ss_conv_shape *s, const float *x, const float *w,
                             const float *dy, float *dx, float *dw, float *db, float *ws, ptrdiff_t ws_len)
{
#ifdef SS_HAVE_AVX512
	if (ss_isa(isa) >= SS_ISA_AVX512) {
		ss_d512_backward(threads, s, x, w, dy, dx, dw, db, ws, ws_len);
		return;
	}
#else
	(void)isa;
#endif
	if (db)
		ss_conv_bias_grad(threads, s, dy, db);
	if (dw)
		weight_grad(threads, s, x, dy, dw, ws);
	if (dx == NULL)
		return;
	const dgeom f = dgeom_forward(s), g = dgeom_data(s);
	if (dx_scatter(s, &f, &g)) {
		scatter(threads, s, &f, w, dy, dx, ws, ws_len);
		return;
	}
	ptrdiff_t xn, xc, yn, yc;
	ss_conv_planes(s, &xn, &xc, &yn, &yc);
	/* Rotated kernel with swapped channel axes, packed [block of 4 input
	 * channels][tap (oc, i, j)][4]. */
	float *wpk, *bias, *bufs;
	int *koff;
	corr_ws(&g, ws, &wpk, &bias, &koff, &bufs);
	const int kk = s->kh * s->kw;
	for (int c = 0; c < round4(g.co); c++) {
		float *d = wpk + (c / 4) * 4 * g.k + c % 4;
		for (int o = 0; o < s->oc; o++)
			for (int t = 0; t < kk; t++)
				d[4 * (o * kk + t)] = c < g.co ? w[((ptrdiff_t)o * s->c + c) * kk + kk - 1 - t] : 0.0f;
		bias[c] = 0.0f;
	}
	corr(threads, &g, s->n, dy, yn, yc, dx, xn, xc, wpk, bias, koff, bufs, ws_len - fwd_fixed(&g));
}

#else /* !SS_HAVE_AVX2 */

void ss_conv_direct_forward(int isa, int threads, const ss_conv_shape *s, const float *x, const float *w,
                            const float *b, float *y, float *ws, ptrdiff_t ws_len)
{
	(void)isa, (void)threads, (void)s, (void)x, (void)w, (void)b, (void)y, (void)ws, (void)ws_len;
}

void ss_conv_direct_backward(int isa, int threads, const ss_conv_shape *s, const float *x, const float *w,
                             const float *dy, float *dx, float *dw, float *db, float *ws, ptrdiff_t ws_len)
{
	(void)isa, (void)threads, (void)s, (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)db, (void)ws, (void)ws_len;
}

#endif
