/* Batched convolution: one GEMM per group of g images.
 *
 * With P = OH*OW output pixels, K = C*kh*kw and L = C*H*W, the group's
 * column matrix col (K x P*g) feeds
 *   Y (OC x P*g) = W (OC x K) * col,
 * and backward, with dY (OC x P*g) holding dy in the same column order,
 *   dW += dY * col^T,   dcol = W^T * dY,   dx = col2im(dcol).
 * Two column orders (layouts):
 *   SS_CONV_CHWN  column p*g + n. The group is first transposed to batch
 *                 innermost (xT, L x g), so that im2col copies runs of g
 *                 floats per kernel tap; Y is transposed back to NCHW (with
 *                 the bias) and dy transposed into dY. Best for small images.
 *   SS_CONV_NCHW  column n*P + p. im2col works image by image, copying
 *                 output rows; Y[oc] splits into contiguous per-image rows
 *                 of y. Best when output rows are long (first layers).
 * With g = 1 both are the plain per-image algorithm and Y is y itself.
 * The GEMMs run on OpenBLAS's threads; everything else on ours
 * (ss_parallel_for). */
#include <string.h>

#include "internal.h"

static ptrdiff_t conv_k(const ss_conv_shape *s) { return (ptrdiff_t)s->c * s->kh * s->kw; }
static ptrdiff_t conv_p(const ss_conv_shape *s) { return (ptrdiff_t)ss_conv_out_h(s) * ss_conv_out_w(s); }
static ptrdiff_t conv_l(const ss_conv_shape *s) { return (ptrdiff_t)s->c * s->h * s->w; }

int ss_conv_layout(const ss_conv_shape *s)
{
	return ss_conv_out_w(s) >= 24 ? SS_CONV_NCHW : SS_CONV_CHWN;
}

int ss_conv_group(const ss_conv_shape *s, ptrdiff_t budget)
{
	ptrdiff_t per = conv_k(s) * conv_p(s);
	ptrdiff_t g = per > 0 ? budget / per : 1;
	if (g < 1)
		g = 1;
	if (g > s->n)
		g = s->n;
	return (int)g;
}

/* Workspace layout for a group of g images, in floats:
 *   col  K*P*g
 *   Y    OC*P*g   (Y forward, dY backward; g > 1)
 *   xT   L*g      (g > 1, CHWN)
 *   dcol K*P*g    (backward)
 *   dxT  L*g      (backward, g > 1, CHWN) */
ptrdiff_t ss_conv_workspace(const ss_conv_shape *s, int group, int layout, int backward)
{
	const ptrdiff_t gp = (ptrdiff_t)group * conv_p(s);
	const ptrdiff_t gl = group > 1 && layout == SS_CONV_CHWN ? (ptrdiff_t)group * conv_l(s) : 0;
	ptrdiff_t need = conv_k(s) * gp + gl;
	if (group > 1)
		need += (ptrdiff_t)s->oc * gp;
	if (backward)
		need += conv_k(s) * gp + gl;
	return need;
}

typedef struct {
	const ss_conv_shape *s;
	int g;
	ptrdiff_t k, p, l, out, ld; /* rows of col, pixels, floats per image in and out, row stride */
	const float *src;
	float *dst;
	const float *bias;
} conv_job;

/* CHWN: rows [lo, hi) of the whole group's column matrix. */
static void im2col_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	ss_im2col(j->s, j->g, j->src, j->dst, j->ld, lo, hi);
}

/* NCHW: items t = image*K + row. */
static void im2col_img_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t t = lo; t < hi;) {
		const ptrdiff_t n = t / j->k, r = t % j->k;
		const ptrdiff_t end = hi - t < j->k - r ? r + (hi - t) : j->k;
		ss_im2col(j->s, 1, j->src + n * j->l, j->dst + n * j->p, j->ld, r, end);
		t += end - r;
	}
}

/* CHWN: channels [lo, hi) of the whole group. */
static void col2im_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	ss_col2im(j->s, j->g, j->src, j->ld, j->dst, (int)lo, (int)hi);
}

/* NCHW: items t = image*C + channel. */
static void col2im_img_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const int c = j->s->c;
	for (ptrdiff_t t = lo; t < hi;) {
		const ptrdiff_t n = t / c, c0 = t % c;
		const ptrdiff_t c1 = hi - t < c - c0 ? c0 + (hi - t) : c;
		ss_col2im(j->s, 1, j->src + n * j->p, j->ld, j->dst + n * j->l, (int)c0, (int)c1);
		t += c1 - c0;
	}
}

/* NCHW group (g x L) to CHWN (L x g), rows [lo, hi) of the L side. */
static void to_chwn_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	ss_transpose(j->src + lo, j->l, j->dst + lo * j->g, j->g, j->g, hi - lo, 0.0f);
}

/* CHWN (L x g) back to NCHW (g x L). */
static void to_nchw_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	ss_transpose(j->src + lo * j->g, j->g, j->dst + lo, j->l, hi - lo, j->g, 0.0f);
}

/* CHWN: Y row oc (P x g) into y[n][oc][:] (g x P, row stride out), plus bias. */
static void scatter_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t o = lo; o < hi; o++)
		ss_transpose(j->src + o * j->ld, j->g, j->dst + o * j->p, j->out, j->p, j->g,
		             j->bias ? j->bias[o] : 0.0f);
}

/* CHWN: dy[n][oc][:] (g x P, row stride out) into dY row oc (P x g). */
static void gather_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t o = lo; o < hi; o++)
		ss_transpose(j->src + o * j->p, j->out, j->dst + o * j->ld, j->g, j->g, j->p, 0.0f);
}

/* NCHW: items t = image*OC + oc, y[n][oc][:] = Y[oc][n*P ...] + bias. With
 * src == dst (g = 1) it adds the bias in place. */
SS_MULTIVERSION
static void scatter_img_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const int oc = j->s->oc;
	for (ptrdiff_t t = lo; t < hi; t++) {
		const ptrdiff_t n = t / oc, o = t % oc;
		const float *src = j->src + o * j->ld + n * j->p;
		float *dst = j->dst + t * j->p;
		const float b = j->bias ? j->bias[o] : 0.0f;
		for (ptrdiff_t i = 0; i < j->p; i++)
			dst[i] = src[i] + b;
	}
}

/* NCHW: items t = image*OC + oc, dY[oc][n*P ...] = dy[n][oc][:]. */
static void gather_img_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const int oc = j->s->oc;
	for (ptrdiff_t t = lo; t < hi; t++) {
		const ptrdiff_t n = t / oc, o = t % oc;
		memcpy(j->dst + o * j->ld + n * j->p, j->src + t * j->p, sizeof(float) * (size_t)j->p);
	}
}

/* expand writes the group's column matrix into j->dst from the group's
 * images at x (NCHW), using xT (L x g floats) for the CHWN layout. */
static void expand(conv_job *j, int layout, const float *x, float *xT, float *col)
{
	if (j->g > 1 && layout == SS_CONV_CHWN) {
		j->src = x;
		j->dst = xT;
		ss_parallel_for(0, j->l, ss_grain(j->g), to_chwn_part, j);
		j->src = xT;
		j->dst = col;
		ss_parallel_for(0, j->k, ss_grain(j->ld), im2col_part, j);
		return;
	}
	j->src = x;
	j->dst = col;
	ss_parallel_for(0, j->g * j->k, ss_grain(j->p), im2col_img_part, j);
}

void ss_conv_forward(const ss_conv_shape *s, int group, int layout, const float *x,
                     const float *w, const float *b, float *y, float *ws)
{
	const ptrdiff_t k = conv_k(s), p = conv_p(s), l = conv_l(s), out = (ptrdiff_t)s->oc * p;
	for (int n0 = 0; n0 < s->n; n0 += group) {
		const int g = ss_imin(group, s->n - n0);
		const ptrdiff_t ld = g * p;
		const int chwn = g > 1 && layout == SS_CONV_CHWN;
		/* See ss_conv_workspace for the layout; with g = 1 the GEMM
		 * writes y directly. */
		float *col = ws, *Y = g > 1 ? col + k * ld : y + n0 * out;
		float *xT = chwn ? Y + s->oc * ld : NULL;
		conv_job j = {.s = s, .g = g, .k = k, .p = p, .l = l, .out = out, .ld = ld, .bias = b};
		expand(&j, layout, x + n0 * l, xT, col);
		ss_sgemm(0, 0, s->oc, (int)ld, (int)k, 1.0f, w, (int)k, col, (int)ld, 0.0f, Y, (int)ld);
		j.src = Y;
		j.dst = y + n0 * out;
		if (chwn)
			ss_parallel_for(0, s->oc, ss_grain(ld), scatter_part, &j);
		else if (g > 1 || b)
			ss_parallel_for(0, (ptrdiff_t)g * s->oc, ss_grain(p), scatter_img_part, &j);
	}
}

static void db_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t o = lo; o < hi; o++) {
		float sum = 0.0f;
		for (int n = 0; n < j->s->n; n++)
			sum += ss_sum(j->src + n * j->out + o * j->p, j->p);
		j->dst[o] = sum;
	}
}

void ss_conv_backward(const ss_conv_shape *s, int group, int layout, const float *x,
                      const float *w, const float *dy, float *dx, float *dw,
                      float *db, float *ws)
{
	const ptrdiff_t k = conv_k(s), p = conv_p(s), l = conv_l(s), out = (ptrdiff_t)s->oc * p;
	for (int n0 = 0; n0 < s->n; n0 += group) {
		const int g = ss_imin(group, s->n - n0);
		const ptrdiff_t ld = g * p;
		const int chwn = g > 1 && layout == SS_CONV_CHWN;
		/* See ss_conv_workspace for the layout. */
		float *col = ws, *dY = g > 1 ? col + k * ld : NULL;
		float *xT = chwn ? dY + s->oc * ld : NULL;
		float *dcol = chwn ? xT + g * l : g > 1 ? dY + s->oc * ld : col + k * ld;
		float *dxT = chwn ? dcol + k * ld : NULL;
		conv_job j = {.s = s, .g = g, .k = k, .p = p, .l = l, .out = out, .ld = ld};
		const float *dYg = dy + n0 * out;
		if (g > 1) {
			j.src = dYg;
			j.dst = dY;
			if (chwn)
				ss_parallel_for(0, s->oc, ss_grain(ld), gather_part, &j);
			else
				ss_parallel_for(0, (ptrdiff_t)g * s->oc, ss_grain(p), gather_img_part, &j);
			dYg = dY;
		}
		expand(&j, layout, x + n0 * l, xT, col);
		ss_sgemm(0, 1, s->oc, (int)k, (int)ld, 1.0f, dYg, (int)ld, col, (int)ld,
		         n0 == 0 ? 0.0f : 1.0f, dw, (int)k);
		if (dx == NULL)
			continue;
		ss_sgemm(1, 0, (int)k, (int)ld, s->oc, 1.0f, w, (int)k, dYg, (int)ld, 0.0f, dcol, (int)ld);
		j.src = dcol;
		if (chwn) {
			j.dst = dxT;
			ss_parallel_for(0, s->c, ss_grain((ptrdiff_t)s->h * s->w * g), col2im_part, &j);
			j.src = dxT;
			j.dst = dx + n0 * l;
			ss_parallel_for(0, l, ss_grain(g), to_nchw_part, &j);
		} else {
			j.dst = dx + n0 * l;
			ss_parallel_for(0, (ptrdiff_t)g * s->c, ss_grain((ptrdiff_t)s->h * s->w), col2im_img_part, &j);
		}
	}
	if (db) {
		conv_job j = {.s = s, .p = p, .out = out, .src = dy, .dst = db};
		ss_parallel_for(0, s->oc, ss_grain(s->n * p), db_part, &j);
	}
}
