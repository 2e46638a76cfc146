/* Max and average pooling with Caffe's window and rounding rules. */
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
	int extent = end - start;
	*lo = ss_imax(start, 0);
	*hi = ss_imin(end, in);
	return extent;
}

SS_MULTIVERSION
void ss_pool_forward(const ss_pool_shape *s, const float *x, float *y, int *mask)
{
	const int oh = ss_pool_out(s->h, s->kh, s->pad_h, s->stride_h);
	const int ow = ss_pool_out(s->w, s->kw, s->pad_w, s->stride_w);
	const ptrdiff_t plane = (ptrdiff_t)s->h * s->w, oplane = (ptrdiff_t)oh * ow;
	const ptrdiff_t planes = (ptrdiff_t)s->n * s->c;
	for (ptrdiff_t q = 0; q < planes; q++) {
		const float *xp = x + q * plane;
		float *yp = y + q * oplane;
		int *mp = mask ? mask + q * oplane : NULL;
		for (int py = 0; py < oh; py++) {
			int h0, h1;
			const int eh = pool_window(py, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1);
			for (int px = 0; px < ow; px++) {
				int w0, w1;
				const int ew = pool_window(px, s->w, s->kw, s->pad_w, s->stride_w, &w0, &w1);
				const ptrdiff_t o = (ptrdiff_t)py * ow + px;
				if (s->mode == SS_POOL_MAX) {
					/* The first largest in row-major order; windows
					 * are never empty since pad < k. */
					int arg = h0 * s->w + w0;
					float best = xp[arg];
					for (int h = h0; h < h1; h++)
						for (int w = w0; w < w1; w++)
							if (xp[h * s->w + w] > best) {
								best = xp[h * s->w + w];
								arg = h * s->w + w;
							}
					yp[o] = xp[arg];
					mp[o] = arg;
				} else {
					float sum = 0.0f;
					for (int h = h0; h < h1; h++)
						for (int w = w0; w < w1; w++)
							sum += xp[h * s->w + w];
					yp[o] = sum / (float)(eh * ew);
				}
			}
		}
	}
}

SS_MULTIVERSION
void ss_pool_backward(const ss_pool_shape *s, const float *dy, const int *mask, float *dx)
{
	const int oh = ss_pool_out(s->h, s->kh, s->pad_h, s->stride_h);
	const int ow = ss_pool_out(s->w, s->kw, s->pad_w, s->stride_w);
	const ptrdiff_t plane = (ptrdiff_t)s->h * s->w, oplane = (ptrdiff_t)oh * ow;
	const ptrdiff_t planes = (ptrdiff_t)s->n * s->c;
	memset(dx, 0, sizeof(float) * (size_t)(planes * plane));
	for (ptrdiff_t q = 0; q < planes; q++) {
		const float *dyp = dy + q * oplane;
		float *dxp = dx + q * plane;
		if (s->mode == SS_POOL_MAX) {
			const int *mp = mask + q * oplane;
			for (ptrdiff_t o = 0; o < oplane; o++)
				dxp[mp[o]] += dyp[o];
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
