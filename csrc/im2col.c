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

SS_MULTIVERSION
void ss_im2col(const ss_conv_shape *s, const float *x, float *col, ptrdiff_t ldcol)
{
	const int oh = ss_conv_out_h(s), ow = ss_conv_out_w(s);
	const int sh = s->stride_h, sw = s->stride_w;
	ptrdiff_t r = 0;
	for (int c = 0; c < s->c; c++) {
		const float *plane = x + (ptrdiff_t)c * s->h * s->w;
		for (int i = 0; i < s->kh; i++) {
			for (int j = 0; j < s->kw; j++, r++) {
				float *dst = col + r * ldcol;
				int lo, hi;
				col_range(ow, s->w, s->pad_w, sw, j, &lo, &hi);
				for (int y = 0; y < oh; y++, dst += ow) {
					const int h = y * sh - s->pad_h + i;
					if (h < 0 || h >= s->h) {
						memset(dst, 0, sizeof(float) * (size_t)ow);
						continue;
					}
					/* Input column of output o: o*sw + off, inside
					 * [0, w) for o in [lo, hi). */
					const float *src = plane + (ptrdiff_t)h * s->w;
					const int off = j - s->pad_w;
					memset(dst, 0, sizeof(float) * (size_t)lo);
					if (sw == 1) {
						if (hi > lo)
							memcpy(dst + lo, src + lo + off,
							       sizeof(float) * (size_t)(hi - lo));
					} else {
						for (int o = lo; o < hi; o++)
							dst[o] = src[o * sw + off];
					}
					memset(dst + hi, 0, sizeof(float) * (size_t)(ow - hi));
				}
			}
		}
	}
}

SS_MULTIVERSION
void ss_col2im(const ss_conv_shape *s, const float *col, ptrdiff_t ldcol, float *x)
{
	const int oh = ss_conv_out_h(s), ow = ss_conv_out_w(s);
	const int sh = s->stride_h, sw = s->stride_w;
	memset(x, 0, sizeof(float) * (size_t)s->c * (size_t)s->h * (size_t)s->w);
	ptrdiff_t r = 0;
	for (int c = 0; c < s->c; c++) {
		float *plane = x + (ptrdiff_t)c * s->h * s->w;
		for (int i = 0; i < s->kh; i++) {
			for (int j = 0; j < s->kw; j++, r++) {
				const float *src = col + r * ldcol;
				int lo, hi;
				col_range(ow, s->w, s->pad_w, sw, j, &lo, &hi);
				for (int y = 0; y < oh; y++, src += ow) {
					const int h = y * sh - s->pad_h + i;
					if (h < 0 || h >= s->h)
						continue;
					float *dst = plane + (ptrdiff_t)h * s->w;
					const int off = j - s->pad_w;
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
