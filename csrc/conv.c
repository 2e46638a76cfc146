/* Batched convolution: one GEMM per group of g images.
 *
 * With P = OH*OW output pixels, K = C*kh*kw and L = C*H*W, a group is
 * transposed to batch-innermost order (xT, L x g, CHWN), expanded by
 * im2col into col (K x P*g, column p*g + n for pixel p of image n), and
 *   Y (OC x P*g) = W (OC x K) * col,     y[n][oc][p] = Y[oc][p*g + n] + b[oc].
 * Backward, with dY (OC x P*g) transposed from dy the same way:
 *   dW += dY * col^T,   dcol = W^T * dY,   dxT = col2im(dcol),   dx = dxT^T.
 * With g = 1 the transposes are identities and are skipped. The GEMMs run
 * on OpenBLAS's threads; everything else on ours (ss_parallel_for). */
#include <string.h>

#include "internal.h"

static ptrdiff_t conv_k(const ss_conv_shape *s) { return (ptrdiff_t)s->c * s->kh * s->kw; }
static ptrdiff_t conv_p(const ss_conv_shape *s) { return (ptrdiff_t)ss_conv_out_h(s) * ss_conv_out_w(s); }
static ptrdiff_t conv_l(const ss_conv_shape *s) { return (ptrdiff_t)s->c * s->h * s->w; }

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
 *   xT   L*g      (g > 1)
 *   dcol K*P*g    (backward)
 *   dxT  L*g      (backward, g > 1) */
ptrdiff_t ss_conv_workspace(const ss_conv_shape *s, int group, int backward)
{
	const ptrdiff_t gp = (ptrdiff_t)group * conv_p(s), gl = (ptrdiff_t)group * conv_l(s);
	ptrdiff_t need = conv_k(s) * gp;
	if (group > 1)
		need += (ptrdiff_t)s->oc * gp + gl;
	if (backward)
		need += conv_k(s) * gp + (group > 1 ? gl : 0);
	return need;
}

typedef struct {
	const ss_conv_shape *s;
	int g;
	ptrdiff_t p, l, out;      /* pixels, input and output floats per image */
	const float *src;
	float *dst;
	const float *bias;
} conv_job;

static void im2col_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	ss_im2col(j->s, j->g, j->src, j->dst, lo, hi);
}

static void col2im_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	ss_col2im(j->s, j->g, j->src, j->dst, (int)lo, (int)hi);
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

/* Y (row oc: P x g) into y[n][oc][:] (g x P, row stride out), plus bias. */
static void scatter_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t o = lo; o < hi; o++)
		ss_transpose(j->src + o * j->p * j->g, j->g, j->dst + o * j->p, j->out, j->p, j->g,
		             j->bias ? j->bias[o] : 0.0f);
}

/* dy[n][oc][:] (g x P, row stride out) into dY row oc (P x g). */
static void gather_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t o = lo; o < hi; o++)
		ss_transpose(j->src + o * j->p, j->out, j->dst + o * j->p * j->g, j->g, j->g, j->p, 0.0f);
}

SS_MULTIVERSION
static void bias_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t o = lo; o < hi; o++) {
		float *y = j->dst + o * j->p;
		const float b = j->bias[o];
		for (ptrdiff_t i = 0; i < j->p; i++)
			y[i] += b;
	}
}

void ss_conv_forward(const ss_conv_shape *s, int group, const float *x,
                     const float *w, const float *b, float *y, float *ws)
{
	const ptrdiff_t k = conv_k(s), p = conv_p(s), l = conv_l(s), out = (ptrdiff_t)s->oc * p;
	for (int n0 = 0; n0 < s->n; n0 += group) {
		const int g = ss_imin(group, s->n - n0);
		const ptrdiff_t ld = g * p;
		float *col = ws, *Y = NULL, *xT = NULL;
		conv_job j = {.s = s, .g = g, .p = p, .l = l, .out = out, .bias = b};
		const float *xg = x + n0 * l;
		if (g > 1) {
			Y = col + k * ld;
			xT = Y + s->oc * ld;
			j.src = xg;
			j.dst = xT;
			ss_parallel_for(0, l, ss_grain(g), to_chwn_part, &j);
			xg = xT;
		}
		j.src = xg;
		j.dst = col;
		ss_parallel_for(0, k, ss_grain(ld), im2col_part, &j);
		if (g == 1) {
			float *yn = y + n0 * out;
			ss_sgemm(0, 0, s->oc, (int)p, (int)k, 1.0f, w, (int)k, col, (int)ld, 0.0f, yn, (int)p);
			if (b) {
				j.dst = yn;
				ss_parallel_for(0, s->oc, ss_grain(p), bias_part, &j);
			}
			continue;
		}
		ss_sgemm(0, 0, s->oc, (int)ld, (int)k, 1.0f, w, (int)k, col, (int)ld, 0.0f, Y, (int)ld);
		j.src = Y;
		j.dst = y + n0 * out;
		ss_parallel_for(0, s->oc, ss_grain(ld), scatter_part, &j);
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

void ss_conv_backward(const ss_conv_shape *s, int group, const float *x,
                      const float *w, const float *dy, float *dx, float *dw,
                      float *db, float *ws)
{
	const ptrdiff_t k = conv_k(s), p = conv_p(s), l = conv_l(s), out = (ptrdiff_t)s->oc * p;
	for (int n0 = 0; n0 < s->n; n0 += group) {
		const int g = ss_imin(group, s->n - n0);
		const ptrdiff_t ld = g * p;
		/* See ss_conv_workspace for the layout. */
		float *col = ws, *dY = NULL, *xT = NULL, *dcol = col + k * ld, *dxT = NULL;
		conv_job j = {.s = s, .g = g, .p = p, .l = l, .out = out};
		const float *xg = x + n0 * l, *dYg = dy + n0 * out;
		if (g > 1) {
			dY = col + k * ld;
			xT = dY + s->oc * ld;
			dcol = xT + g * l;
			dxT = dcol + k * ld;
			j.src = xg;
			j.dst = xT;
			ss_parallel_for(0, l, ss_grain(g), to_chwn_part, &j);
			xg = xT;
			j.src = dYg;
			j.dst = dY;
			ss_parallel_for(0, s->oc, ss_grain(ld), gather_part, &j);
			dYg = dY;
		}
		j.src = xg;
		j.dst = col;
		ss_parallel_for(0, k, ss_grain(ld), im2col_part, &j);
		ss_sgemm(0, 1, s->oc, (int)k, (int)ld, 1.0f, dYg, (int)ld, col, (int)ld,
		         n0 == 0 ? 0.0f : 1.0f, dw, (int)k);
		if (dx == NULL)
			continue;
		ss_sgemm(1, 0, (int)k, (int)ld, s->oc, 1.0f, w, (int)k, dYg, (int)ld, 0.0f, dcol, (int)ld);
		j.src = dcol;
		j.dst = g > 1 ? dxT : dx + n0 * l;
		ss_parallel_for(0, s->c, ss_grain((ptrdiff_t)s->h * s->w * g), col2im_part, &j);
		if (g > 1) {
			j.src = dxT;
			j.dst = dx + n0 * l;
			ss_parallel_for(0, l, ss_grain(g), to_nchw_part, &j);
		}
	}
	if (db) {
		conv_job j = {.s = s, .p = p, .out = out, .src = dy, .dst = db};
		ss_parallel_for(0, s->oc, ss_grain(s->n * p), db_part, &j);
	}
}
