/* Max and average pooling with Caffe's window and rounding rules, split
 * over planes (image, channel) across threads. */
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
	int oh, ow;
	const float *x, *dy;
	float *y, *dx;
	int *mask;
	const int *cmask;
} pool_job;

SS_MULTIVERSION
static void forward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const pool_job *j = ctx;
	const ss_pool_shape *s = j->s;
	const int oh = j->oh, ow = j->ow;
	const ptrdiff_t plane = (ptrdiff_t)s->h * s->w, oplane = (ptrdiff_t)oh * ow;
	for (ptrdiff_t q = lo; q < hi; q++) {
		const float *xp = j->x + q * plane;
		float *yp = j->y + q * oplane;
		int *mp = j->mask ? j->mask + q * oplane : NULL;
		for (int py = 0; py < oh; py++) {
			int h0, h1;
			const int eh = pool_window(py, s->h, s->kh, s->pad_h, s->stride_h, &h0, &h1);
			for (int px = 0; px < ow; px++) {
				int w0, w1;
				const int ew = pool_window(px, s->w, s->kw, s->pad_w, s->stride_w, &w0, &w1);
				const ptrdiff_t o = (ptrdiff_t)py * ow + px;
				if (s->mode == SS_POOL_MAX) {
					/* The first largest in row-major order; windows
					 * are never empty (validated by the caller). */
					int arg = h0 * s->w + w0;
					float best = xp[arg];
					for (int h = h0; h < h1; h++)
						for (int w = w0; w < w1; w++)
							if (xp[h * s->w + w] > best) {
								best = xp[h * s->w + w];
								arg = h * s->w + w;
							}
					yp[o] = best;
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
static void backward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const pool_job *j = ctx;
	const ss_pool_shape *s = j->s;
	const int oh = j->oh, ow = j->ow;
	const ptrdiff_t plane = (ptrdiff_t)s->h * s->w, oplane = (ptrdiff_t)oh * ow;
	memset(j->dx + lo * plane, 0, sizeof(float) * (size_t)((hi - lo) * plane));
	for (ptrdiff_t q = lo; q < hi; q++) {
		const float *dyp = j->dy + q * oplane;
		float *dxp = j->dx + q * plane;
		if (s->mode == SS_POOL_MAX) {
			const int *mp = j->cmask + q * oplane;
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

void ss_pool_forward(const ss_pool_shape *s, const float *x, float *y, int *mask)
{
	pool_job j = {.s = s, .x = x, .y = y, .mask = s->mode == SS_POOL_MAX ? mask : NULL,
	              .oh = ss_pool_out(s->h, s->kh, s->pad_h, s->stride_h),
	              .ow = ss_pool_out(s->w, s->kw, s->pad_w, s->stride_w)};
	ss_parallel_for(0, (ptrdiff_t)s->n * s->c, ss_grain((ptrdiff_t)s->h * s->w), forward_part, &j);
}

void ss_pool_backward(const ss_pool_shape *s, const float *dy, const int *mask, float *dx)
{
	pool_job j = {.s = s, .dy = dy, .dx = dx, .cmask = mask,
	              .oh = ss_pool_out(s->h, s->kh, s->pad_h, s->stride_h),
	              .ow = ss_pool_out(s->w, s->kw, s->pad_w, s->stride_w)};
	ss_parallel_for(0, (ptrdiff_t)s->n * s->c, ss_grain((ptrdiff_t)s->h * s->w), backward_part, &j);
}
