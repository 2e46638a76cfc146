/* Batched convolution: im2col of a group of images side by side, one GEMM
 * for the whole group, and a scatter of its output into NCHW order.
 *
 * For a group of G images with P = OH*OW output pixels and K = C*kh*kw:
 *   col (K x G*P)  = [im2col(x_0) | im2col(x_1) | ... ]
 *   Y   (OC x G*P) = W (OC x K) * col
 *   y_g[oc][p]     = Y[oc][g*P + p] + b[oc]
 * Backward, with dY (OC x G*P) gathered from dy the same way:
 *   dW  += dY * col^T,   dcol = W^T * dY,   dx_g = col2im(dcol block g).
 * With G = 1 the GEMMs read and write y and dy in place. The GEMMs run on
 * OpenBLAS's threads; im2col, col2im, scatter and gather on ours
 * (ss_parallel_for), split over (image, row) or (image, channel) pairs. */
#include <string.h>

#include "internal.h"

static ptrdiff_t conv_k(const ss_conv_shape *s) { return (ptrdiff_t)s->c * s->kh * s->kw; }
static ptrdiff_t conv_p(const ss_conv_shape *s) { return (ptrdiff_t)ss_conv_out_h(s) * ss_conv_out_w(s); }

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

ptrdiff_t ss_conv_workspace(const ss_conv_shape *s, int group, int backward)
{
	const ptrdiff_t gp = (ptrdiff_t)group * conv_p(s);
	ptrdiff_t need = conv_k(s) * gp;        /* col */
	if (group > 1)
		need += (ptrdiff_t)s->oc * gp;  /* Y or dY */
	if (backward)
		need += conv_k(s) * gp;         /* dcol */
	return need;
}

/* A job over the images of one group. */
typedef struct {
	const ss_conv_shape *s;
	ptrdiff_t k, p, ld;       /* rows of col, pixels per image, row stride */
	const float *x;           /* first image of the group */
	float *col;
	const float *src;         /* scatter: Y, gather: dy of the first image */
	float *dst;               /* scatter: y of the first image, gather: dY */
	const float *bias;
} conv_job;

static void im2col_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const ptrdiff_t in = (ptrdiff_t)j->s->c * j->s->h * j->s->w;
	for (ptrdiff_t t = lo; t < hi;) { /* t = image*k + row */
		const ptrdiff_t g = t / j->k, r = t % j->k;
		const ptrdiff_t end = hi - t < j->k - r ? r + (hi - t) : j->k;
		ss_im2col_rows(j->s, j->x + g * in, j->col + g * j->p, j->ld, r, end);
		t += end - r;
	}
}

static void col2im_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const int c = j->s->c;
	const ptrdiff_t in = (ptrdiff_t)c * j->s->h * j->s->w;
	for (ptrdiff_t t = lo; t < hi;) { /* t = image*c + channel */
		const ptrdiff_t g = t / c, c0 = t % c;
		const ptrdiff_t c1 = hi - t < c - c0 ? c0 + (hi - t) : c;
		ss_col2im_channels(j->s, j->col + g * j->p, j->ld, j->dst + g * in, (int)c0, (int)c1);
		t += c1 - c0;
	}
}

/* scatter_part copies rows t = image*oc + channel of Y (src) into y (dst),
 * adding the bias; gather_part is its inverse, without bias. */
SS_MULTIVERSION
static void scatter_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const int oc = j->s->oc;
	for (ptrdiff_t t = lo; t < hi; t++) {
		const ptrdiff_t g = t / oc, o = t % oc;
		const float *src = j->src + o * j->ld + g * j->p;
		float *dst = j->dst + t * j->p;
		const float b = j->bias ? j->bias[o] : 0.0f;
		for (ptrdiff_t i = 0; i < j->p; i++)
			dst[i] = src[i] + b;
	}
}

static void gather_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const int oc = j->s->oc;
	for (ptrdiff_t t = lo; t < hi; t++) {
		const ptrdiff_t g = t / oc, o = t % oc;
		memcpy(j->dst + o * j->ld + g * j->p, j->src + t * j->p, sizeof(float) * (size_t)j->p);
	}
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
	const ptrdiff_t k = conv_k(s), p = conv_p(s);
	const ptrdiff_t in = (ptrdiff_t)s->c * s->h * s->w, out = (ptrdiff_t)s->oc * p;
	for (int n0 = 0; n0 < s->n; n0 += group) {
		const int g = ss_imin(group, s->n - n0);
		const ptrdiff_t ld = g * p;
		conv_job j = {.s = s, .k = k, .p = p, .ld = ld, .x = x + n0 * in, .col = ws, .bias = b};
		ss_parallel_for(0, g * k, ss_grain(p), im2col_part, &j);
		if (g == 1) {
			float *yn = y + n0 * out;
			ss_sgemm(0, 0, s->oc, (int)p, (int)k, 1.0f, w, (int)k, ws, (int)ld, 0.0f, yn, (int)p);
			if (b) {
				j.dst = yn;
				ss_parallel_for(0, s->oc, ss_grain(p), bias_part, &j);
			}
			continue;
		}
		float *Y = ws + k * ld;
		ss_sgemm(0, 0, s->oc, (int)ld, (int)k, 1.0f, w, (int)k, ws, (int)ld, 0.0f, Y, (int)ld);
		j.src = Y;
		j.dst = y + n0 * out;
		ss_parallel_for(0, (ptrdiff_t)g * s->oc, ss_grain(p), scatter_part, &j);
	}
}

static void db_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const ptrdiff_t out = (ptrdiff_t)j->s->oc * j->p;
	for (ptrdiff_t o = lo; o < hi; o++) {
		float sum = 0.0f;
		for (int n = 0; n < j->s->n; n++) {
			const float *d = j->src + n * out + o * j->p;
			for (ptrdiff_t i = 0; i < j->p; i++)
				sum += d[i];
		}
		j->dst[o] = sum;
	}
}

void ss_conv_backward(const ss_conv_shape *s, int group, const float *x,
                      const float *w, const float *dy, float *dx, float *dw,
                      float *db, float *ws)
{
	const ptrdiff_t k = conv_k(s), p = conv_p(s);
	const ptrdiff_t in = (ptrdiff_t)s->c * s->h * s->w, out = (ptrdiff_t)s->oc * p;
	for (int n0 = 0; n0 < s->n; n0 += group) {
		const int g = ss_imin(group, s->n - n0);
		const ptrdiff_t ld = g * p;
		float *col = ws, *dcol = ws + k * ld;
		conv_job j = {.s = s, .k = k, .p = p, .ld = ld, .x = x + n0 * in, .col = col};
		const float *dY = dy + n0 * out; /* OC x P when g == 1 */
		if (g > 1) {
			float *buf = dcol + k * ld;
			j.src = dY;
			j.dst = buf;
			ss_parallel_for(0, (ptrdiff_t)g * s->oc, ss_grain(p), gather_part, &j);
			dY = buf;
		}
		ss_parallel_for(0, g * k, ss_grain(p), im2col_part, &j);
		ss_sgemm(0, 1, s->oc, (int)k, (int)ld, 1.0f, dY, (int)ld, col, (int)ld,
		         n0 == 0 ? 0.0f : 1.0f, dw, (int)k);
		if (dx) {
			ss_sgemm(1, 0, (int)k, (int)ld, s->oc, 1.0f, w, (int)k, dY, (int)ld, 0.0f, dcol, (int)ld);
			j.col = dcol;
			j.dst = dx + n0 * in;
			ss_parallel_for(0, (ptrdiff_t)g * s->c, ss_grain((ptrdiff_t)s->h * s->w), col2im_part, &j);
		}
	}
	if (db) {
		conv_job j = {.s = s, .p = p, .src = dy, .dst = db};
		ss_parallel_for(0, s->oc, ss_grain(s->n * p), db_part, &j);
	}
}
