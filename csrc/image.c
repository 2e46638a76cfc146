/*
 * Image kernels of the data pipeline: a separable resize of packed RGB
 * bytes, its output either bytes (ss_img_resize_u8) or float32 planes with
 * a horizontal mirror and the input normalisation fused into the last pass
 * (ss_img_resize_f32). See softsync.h for the filter tables.
 */
#include <stdint.h>
#include <string.h>

#include "softsync.h"

static uint8_t clamp_u8(int32_t v)
{
	v >>= SS_IMG_BITS;
	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Horizontal pass: rows [r0, r1) of src (sw RGB pixels a row, stride
 * 3*sw) into tmp (x->n RGB pixels a row, row r at (r - r0)*3*x->n), every
 * output over taps taps (PASS_H instantiates it for small constant counts,
 * which the compiler unrolls). The tables are read into locals: tmp is
 * bytes, which may alias anything. */
#define PASS_H(name, TAPS)                                                                                   \
	static void name(const uint8_t *restrict src, int sw, int r0, int r1, const ss_img_axis *x,               \
	                 uint8_t *restrict tmp, int taps)                                                         \
	{                                                                                                         \
		const int n = x->n;                                                                               \
		const int *restrict start = x->start, *restrict coef = x->coef;                                   \
		(void)taps;                                                                                       \
		for (int r = r0; r < r1; r++) {                                                                   \
			const uint8_t *restrict row = src + (ptrdiff_t)r * 3 * sw;                                \
			uint8_t *restrict out = tmp + (ptrdiff_t)(r - r0) * 3 * n;                                \
			for (int i = 0; i < n; i++) {                                                             \
				const uint8_t *restrict p = row + 3 * start[i];                                   \
				const int *restrict k = coef + (ptrdiff_t)i * (TAPS);                             \
				int32_t a = 1 << (SS_IMG_BITS - 1), b = a, c = a;                                 \
				for (int t = 0; t < (TAPS); t++) {                                                \
					const int32_t w = k[t];                                                   \
					a += w * p[3 * t];                                                        \
					b += w * p[3 * t + 1];                                                    \
					c += w * p[3 * t + 2];                                                    \
				}                                                                                 \
				out[3 * i] = clamp_u8(a);                                                         \
				out[3 * i + 1] = clamp_u8(b);                                                     \
				out[3 * i + 2] = clamp_u8(c);                                                     \
			}                                                                                         \
		}                                                                                                 \
	}
PASS_H(pass_h1, 1)
PASS_H(pass_h2, 2)
PASS_H(pass_h3, 3)
PASS_H(pass_h4, 4)
PASS_H(pass_h5, 5)
PASS_H(pass_h6, 6)
PASS_H(pass_hn, taps)

static void pass_h(const uint8_t *src, int sw, int r0, int r1, const ss_img_axis *x, uint8_t *tmp)
{
	switch (x->taps) {
	case 1: pass_h1(src, sw, r0, r1, x, tmp, 1); break;
	case 2: pass_h2(src, sw, r0, r1, x, tmp, 2); break;
	case 3: pass_h3(src, sw, r0, r1, x, tmp, 3); break;
	case 4: pass_h4(src, sw, r0, r1, x, tmp, 4); break;
	case 5: pass_h5(src, sw, r0, r1, x, tmp, 5); break;
	case 6: pass_h6(src, sw, r0, r1, x, tmp, 6); break;
	default: pass_hn(src, sw, r0, r1, x, tmp, x->taps);
	}
}

/* Vertical filter of output row j over tmp (rows from r0), rounded into
 * row (3*n bytes); acc holds 3*n sums. */
static void pass_v_row(const uint8_t *restrict tmp, int n, int r0, const ss_img_axis *y, int j, int32_t *restrict acc,
                       uint8_t *restrict row)
{
	const int m3 = 3 * n, l = y->len[j];
	const int *restrict k = y->coef + (ptrdiff_t)j * y->taps;
	const uint8_t *restrict first = tmp + (ptrdiff_t)(y->start[j] - r0) * m3;
	const int32_t w0 = k[0];
	for (int i = 0; i < m3; i++)
		acc[i] = (1 << (SS_IMG_BITS - 1)) + w0 * first[i];
	for (int t = 1; t < l; t++) {
		const uint8_t *restrict src = first + (ptrdiff_t)t * m3;
		const int32_t w = k[t];
		for (int i = 0; i < m3; i++)
			acc[i] += w * src[i];
	}
	for (int i = 0; i < m3; i++)
		row[i] = clamp_u8(acc[i]);
}

size_t ss_img_tmp_size(const ss_img_axis *x, const ss_img_axis *y)
{
	int r0 = y->start[0], r1 = y->start[y->n - 1] + y->len[y->n - 1];
	/* the horizontal pass's rows, one row of vertical sums, one of bytes */
	return (size_t)(r1 - r0) * 3 * (size_t)x->n + 3 * (size_t)x->n * (sizeof(int32_t) + 1) + sizeof(int32_t);
}

/* The sums' row, aligned for int32_t after the byte rows. */
static int32_t *acc_of(void *tmp, const ss_img_axis *x, const ss_img_axis *y)
{
	int r0 = y->start[0], r1 = y->start[y->n - 1] + y->len[y->n - 1];
	uintptr_t p = (uintptr_t)tmp + (uintptr_t)(r1 - r0) * 3 * (uintptr_t)x->n;
	p = (p + sizeof(int32_t) - 1) & ~(uintptr_t)(sizeof(int32_t) - 1);
	return (int32_t *)p;
}

void ss_img_resize_u8(const uint8_t *src, int sw, const ss_img_axis *x, const ss_img_axis *y, uint8_t *dst, void *tmp)
{
	const int n = x->n, r0 = y->start[0], r1 = y->start[y->n - 1] + y->len[y->n - 1];
	uint8_t *rows = tmp;
	int32_t *acc = acc_of(tmp, x, y);
	pass_h(src, sw, r0, r1, x, rows);
	for (int j = 0; j < y->n; j++)
		pass_v_row(rows, n, r0, y, j, acc, dst + (ptrdiff_t)j * 3 * n);
}

void ss_img_resize_f32(const uint8_t *src, int sw, const ss_img_axis *x, const ss_img_axis *y, int mirror,
                       float scale, const float *mean, float *dst, void *tmp)
{
	const int n = x->n, m = y->n, r0 = y->start[0], r1 = y->start[m - 1] + y->len[m - 1];
	const ptrdiff_t plane = (ptrdiff_t)m * n;
	uint8_t *rows = tmp;
	int32_t *acc = acc_of(tmp, x, y);
	uint8_t *restrict row = (uint8_t *)(acc + 3 * n);
	pass_h(src, sw, r0, r1, x, rows);
	for (int j = 0; j < m; j++) {
		pass_v_row(rows, n, r0, y, j, acc, row);
		for (int c = 0; c < 3; c++) {
			float *restrict out = dst + c * plane + (ptrdiff_t)j * n;
			const uint8_t *restrict p = row + c;
			if (mirror)
				for (int i = 0; i < n; i++)
					out[i] = scale * (float)p[3 * (n - 1 - i)];
			else
				for (int i = 0; i < n; i++)
					out[i] = scale * (float)p[3 * i];
			if (mean) {
				const float *restrict mu = mean + c * plane + (ptrdiff_t)j * n;
				for (int i = 0; i < n; i++)
					out[i] -= mu[i];
			}
		}
	}
}
