/* Batched convolution: im2col of a group of images side by side, one GEMM
 * for the whole group, and a scatter of its output into NCHW order.
 *
 * For a group of G images with P = OH*OW output pixels and K = C*kh*kw:
 *   col (K x G*P)  = [im2col(x_0) | im2col(x_1) | ... ]
 *   Y   (OC x G*P) = W (OC x K) * col
 *   y_g[oc][p]     = Y[oc][g*P + p] + b[oc]
 * Backward, with dY (OC x G*P) gathered from dy the same way:
 *   dW  += dY * col^T,   dcol = W^T * dY,   dx_g = col2im(dcol block g).
 * With G = 1 the GEMMs read and write y and dy in place. */
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

/* scatter copies block g of Y (OC x ld) into image g of y (OC x P), adding
 * the bias; gather is its inverse without bias. */
SS_MULTIVERSION
static void conv_scatter(int oc, ptrdiff_t p, const float *Y, ptrdiff_t ld, const float *b, float *y)
{
	for (int o = 0; o < oc; o++) {
		const float *src = Y + o * ld;
		float *dst = y + o * p;
		const float bias = b ? b[o] : 0.0f;
		for (ptrdiff_t i = 0; i < p; i++)
			dst[i] = src[i] + bias;
	}
}

static void conv_gather(int oc, ptrdiff_t p, const float *y, float *Y, ptrdiff_t ld)
{
	for (int o = 0; o < oc; o++)
		memcpy(Y + o * ld, y + o * p, sizeof(float) * (size_t)p);
}

SS_MULTIVERSION
static void conv_add_bias(int oc, ptrdiff_t p, const float *b, float *y)
{
	for (int o = 0; o < oc; o++)
		for (ptrdiff_t i = 0; i < p; i++)
			y[o * p + i] += b[o];
}

void ss_conv_forward(const ss_conv_shape *s, int group, const float *x,
                     const float *w, const float *b, float *y, float *ws)
{
	const ptrdiff_t k = conv_k(s), p = conv_p(s);
	const ptrdiff_t in = (ptrdiff_t)s->c * s->h * s->w, out = (ptrdiff_t)s->oc * p;
	for (int n0 = 0; n0 < s->n; n0 += group) {
		const int g = ss_imin(group, s->n - n0);
		const ptrdiff_t ld = g * p;
		float *col = ws;
		for (int i = 0; i < g; i++)
			ss_im2col(s, x + (n0 + i) * in, col + i * p, ld);
		if (g == 1) {
			float *yn = y + n0 * out;
			ss_sgemm(0, 0, s->oc, (int)p, (int)k, 1.0f, w, (int)k, col, (int)ld, 0.0f, yn, (int)p);
			if (b)
				conv_add_bias(s->oc, p, b, yn);
			continue;
		}
		float *Y = col + k * ld;
		ss_sgemm(0, 0, s->oc, (int)ld, (int)k, 1.0f, w, (int)k, col, (int)ld, 0.0f, Y, (int)ld);
		for (int i = 0; i < g; i++)
			conv_scatter(s->oc, p, Y + i * p, ld, b, y + (n0 + i) * out);
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
		const float *dY = dy + n0 * out; /* OC x P when g == 1 */
		if (g > 1) {
			float *buf = dcol + k * ld;
			for (int i = 0; i < g; i++)
				conv_gather(s->oc, p, dy + (n0 + i) * out, buf + i * p, ld);
			dY = buf;
		}
		for (int i = 0; i < g; i++)
			ss_im2col(s, x + (n0 + i) * in, col + i * p, ld);
		ss_sgemm(0, 1, s->oc, (int)k, (int)ld, 1.0f, dY, (int)ld, col, (int)ld,
		         n0 == 0 ? 0.0f : 1.0f, dw, (int)k);
		if (dx) {
			ss_sgemm(1, 0, (int)k, (int)ld, s->oc, 1.0f, w, (int)k, dY, (int)ld, 0.0f, dcol, (int)ld);
			for (int i = 0; i < g; i++)
				ss_col2im(s, dcol + i * p, ld, dx + (n0 + i) * in);
		}
	}
	if (db) {
		for (int o = 0; o < s->oc; o++) {
			float sum = 0.0f;
			for (int n = 0; n < s->n; n++) {
				const float *d = dy + n * out + o * p;
				for (ptrdiff_t i = 0; i < p; i++)
					sum += d[i];
			}
			db[o] = sum;
		}
	}
}
