/* im2col and its adjoint col2im, the data movement around the GEMM of a
 * convolution. */
#include <string.h>

#include "internal.h"

/* col_range returns in [*lo, *hi) the output columns ow whose input column
 * ow*stride - pad + j falls inside [0, w). */
static void col_range(int ow, int w, int pad, int stride, int j, int *lo, int *hi)
{
	int first = pad - j; /* ow*stride must be >= first */
	int a = first > 0 ? (first + stride - 1) / stride : 0;
	int end = w + pad - j; /* ow*stride must be < end */
	int b = end > 0 ? (end + stride - 1) / stride : 0;
	*lo = ss_imin(a, ow);
	*hi = ss_imax(*lo, ss_imin(b, ow));
}

/* ss_im2col_rows writes rows [r0, r1) of the column matrix of one image. */
SS_MULTIVERSION
void ss_im2col_rows(const ss_conv_shape *s, const float *x, float *col, ptrdiff_t ldcol,
                    ptrdiff_t r0, ptrdiff_t r1)
{
	const int oh = ss_conv_out_h(s), ow = ss_conv_out_w(s);
	const int sh = s->stride_h, sw = s->stride_w;
	const int kk = s->kh * s->kw;
	for (ptrdiff_t r = r0; r < r1; r++) {
		const int c = (int)(r / kk), i = (int)(r % kk) / s->kw, j = (int)(r % s->kw);
		const float *plane = x + (ptrdiff_t)c * s->h * s->w;
		float *dst = col + r * ldcol;
		int lo, hi;
		col_range(ow, s->w, s->pad_w, sw, j, &lo, &hi);
		/* Input column of output o is o*sw + off, inside [0, w) for
		 * o in [lo, hi). */
		const int off = j - s->pad_w;
		for (int y = 0; y < oh; y++, dst += ow) {
			const int h = y * sh - s->pad_h + i;
			if (h < 0 || h >= s->h) {
				memset(dst, 0, sizeof(float) * (size_t)ow);
				continue;
			}
			const float *src = plane + (ptrdiff_t)h * s->w;
			for (int o = 0; o < lo; o++)
				dst[o] = 0.0f;
			if (sw == 1) {
				for (int o = lo; o < hi; o++)
					dst[o] = src[o + off];
			} else {
				for (int o = lo; o < hi; o++)
					dst[o] = src[o * sw + off];
			}
			for (int o = hi; o < ow; o++)
				dst[o] = 0.0f;
		}
	}
}

void ss_im2col(const ss_conv_shape *s, const float *x, float *col, ptrdiff_t ldcol)
{
	ss_im2col_rows(s, x, col, ldcol, 0, (ptrdiff_t)s->c * s->kh * s->kw);
}

/* ss_col2im_channels overwrites planes [c0, c1) of the image x from the
 * column rows of those channels, which touch no other plane. */
SS_MULTIVERSION
void ss_col2im_channels(const ss_conv_shape *s, const float *col, ptrdiff_t ldcol, float *x,
                        int c0, int c1)
{
	const int oh = ss_conv_out_h(s), ow = ss_conv_out_w(s);
	const int sh = s->stride_h, sw = s->stride_w;
	const ptrdiff_t plane_len = (ptrdiff_t)s->h * s->w;
	memset(x + c0 * plane_len, 0, sizeof(float) * (size_t)((c1 - c0) * plane_len));
	for (int c = c0; c < c1; c++) {
		float *plane = x + c * plane_len;
		ptrdiff_t r = (ptrdiff_t)c * s->kh * s->kw;
		for (int i = 0; i < s->kh; i++) {
			for (int j = 0; j < s->kw; j++, r++) {
				const float *src = col + r * ldcol;
				int lo, hi;
				col_range(ow, s->w, s->pad_w, sw, j, &lo, &hi);
				const int off = j - s->pad_w;
				for (int y = 0; y < oh; y++, src += ow) {
					const int h = y * sh - s->pad_h + i;
					if (h < 0 || h >= s->h)
						continue;
					float *dst = plane + (ptrdiff_t)h * s->w;
					if (sw == 1) {
						for (int o = lo; o < hi; o++)
							dst[o + off] += src[o];
					} else {
						for (int o = lo; o < hi; o++)
							dst[o * sw + off] += src[o];
					}
				}
			}
		}
	}
}

void ss_col2im(const ss_conv_shape *s, const float *col, ptrdiff_t ldcol, float *x)
{
	ss_col2im_channels(s, col, ldcol, x, 0, s->c);
}
