/* im2col and its adjoint col2im over g images stored batch innermost
 * (CHWN; g = 1 is a plain CHW image), and the transposes between NCHW and
 * that layout.
 *
 * With the batch innermost, the column entries of all g images for one
 * (kernel tap, output pixel) are contiguous in the input, so im2col copies
 * runs of g floats (whole output rows of them at stride 1) instead of
 * one short image row at a time, and col2im adds them back the same way. */
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

void ss_im2col(const ss_conv_shape *s, int g, const float *x, ptrdiff_t cs, float *col, ptrdiff_t ld,
               ptrdiff_t r0, ptrdiff_t r1)
{
	const int oh = ss_conv_out_h(s), ow = ss_conv_out_w(s);
	const int sh = s->stride_h, sw = s->stride_w, kk = s->kh * s->kw;
	const ptrdiff_t row = (ptrdiff_t)s->w * g;
	const size_t run = sizeof(float) * (size_t)g;
	for (ptrdiff_t r = r0; r < r1; r++) {
		const int c = (int)(r / kk), i = (int)(r % kk) / s->kw, j = (int)(r % s->kw);
		const float *plane = x + c * cs;
		float *dst = col + r * ld;
		int lo, hi;
		col_range(ow, s->w, s->pad_w, sw, j, &lo, &hi);
		const int off = j - s->pad_w; /* input column of output o: o*sw + off */
		for (int y = 0; y < oh; y++, dst += (ptrdiff_t)ow * g) {
			const int h = y * sh - s->pad_h + i;
			if (h < 0 || h >= s->h) {
				memset(dst, 0, run * (size_t)ow);
				continue;
			}
			const float *src = plane + (ptrdiff_t)h * row;
			memset(dst, 0, run * (size_t)lo);
			if (sw == 1) {
				if (hi > lo)
					memcpy(dst + (ptrdiff_t)lo * g, src + (ptrdiff_t)(lo + off) * g,
					       run * (size_t)(hi - lo));
			} else if (g == 1) {
				for (int o = lo; o < hi; o++)
					dst[o] = src[o * sw + off];
			} else {
				for (int o = lo; o < hi; o++)
					memcpy(dst + (ptrdiff_t)o * g, src + (ptrdiff_t)(o * sw + off) * g, run);
			}
			memset(dst + (ptrdiff_t)hi * g, 0, run * (size_t)(ow - hi));
		}
	}
}

/* add_run: dst[i] += src[i] for i < n. */
SS_MULTIVERSION
static void add_run(float *restrict dst, const float *restrict src, ptrdiff_t n)
{
	for (ptrdiff_t i = 0; i < n; i++)
		dst[i] += src[i];
}

void ss_col2im(const ss_conv_shape *s, int g, const float *col, ptrdiff_t ld, float *x, ptrdiff_t cs,
               int c0, int c1)
{
	const int oh = ss_conv_out_h(s), ow = ss_conv_out_w(s);
	const int sh = s->stride_h, sw = s->stride_w;
	const ptrdiff_t row = (ptrdiff_t)s->w * g;
	const ptrdiff_t plane_len = (ptrdiff_t)s->h * row;
	for (int c = c0; c < c1; c++) {
		float *plane = x + c * cs;
		memset(plane, 0, sizeof(float) * (size_t)plane_len);
		ptrdiff_t r = (ptrdiff_t)c * s->kh * s->kw;
		for (int i = 0; i < s->kh; i++) {
			for (int j = 0; j < s->kw; j++, r++) {
				const float *src = col + r * ld;
				int lo, hi;
				col_range(ow, s->w, s->pad_w, sw, j, &lo, &hi);
				const int off = j - s->pad_w;
				for (int y = 0; y < oh; y++, src += (ptrdiff_t)ow * g) {
					const int h = y * sh - s->pad_h + i;
					if (h < 0 || h >= s->h)
						continue;
					float *dst = plane + (ptrdiff_t)h * row;
					if (sw == 1) {
						add_run(dst + (ptrdiff_t)(lo + off) * g, src + (ptrdiff_t)lo * g,
						        (ptrdiff_t)(hi - lo) * g);
					} else if (g == 1) {
						for (int o = lo; o < hi; o++)
							dst[o * sw + off] += src[o];
					} else {
						for (int o = lo; o < hi; o++)
							add_run(dst + (ptrdiff_t)(o * sw + off) * g, src + (ptrdiff_t)o * g, g);
					}
				}
			}
		}
	}
}

/* Tile edge of the blocked transpose: a 16 x 16 float tile is 1 KiB of
 * source and 1 KiB of destination, well inside L1. The loop runs near
 * memory bandwidth as scalar code; the AVX2 build is no faster, so it is
 * not multiversioned. */
enum { TILE = 16 };

void ss_transpose(const float *src, ptrdiff_t src_ld, float *dst, ptrdiff_t dst_ld,
                  ptrdiff_t rows, ptrdiff_t cols, float add)
{
	for (ptrdiff_t i0 = 0; i0 < rows; i0 += TILE) {
		const ptrdiff_t i1 = i0 + TILE < rows ? i0 + TILE : rows;
		for (ptrdiff_t j0 = 0; j0 < cols; j0 += TILE) {
			const ptrdiff_t j1 = j0 + TILE < cols ? j0 + TILE : cols;
			for (ptrdiff_t j = j0; j < j1; j++)
				for (ptrdiff_t i = i0; i < i1; i++)
					dst[j * dst_ld + i] = src[i * src_ld + j] + add;
		}
	}
}
