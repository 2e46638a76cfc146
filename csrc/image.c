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
 * 3*sw) into tmp (x->n RGB pixels a row, row r at (r - r0)*3*x->n). */
static void pass_h(const uint8_t *src, int sw, int r0, int r1, const ss_img_axis *x, uint8_t *tmp)
{
	const int n = x->n, taps = x->taps;
	for (int r = r0; r < r1; r++) {
		const uint8_t *row = src + (ptrdiff_t)r * 3 * sw;
		uint8_t *out = tmp + (ptrdiff_t)(r - r0) * 3 * n;
		for (int i = 0; i < n; i++) {
			const uint8_t *p = row + 3 * x->start[i];
			const int *k = x->coef + (ptrdiff_t)i * taps;
			int32_t a = 1 << (SS_IMG_BITS - 1), b = a, c = a;
			for (int t = 0; t < x->len[i]; t++) {
				a += k[t] * p[3 * t];
				b += k[t] * p[3 * t + 1];
				c += k[t] * p[3 * t + 2];
			}
			out[3 * i] = clamp_u8(a);
			out[3 * i + 1] = clamp_u8(b);
			out[3 * i + 2] = clamp_u8(c);
		}
	}
}

/* Vertical filter of output row j over tmp (rows from r0), into acc
 * (3*n sums, rounding bias included). */
static void pass_v_row(const uint8_t *tmp, int n, int r0, const ss_img_axis *y, int j, int32_t *acc)
{
	const int m3 = 3 * n;
	const int *k = y->coef + (ptrdiff_t)j * y->taps;
	for (int i = 0; i < m3; i++)
		acc[i] = 1 << (SS_IMG_BITS - 1);
	for (int t = 0; t < y->len[j]; t++) {
		const uint8_t *row = tmp + (ptrdiff_t)(y->start[j] + t - r0) * m3;
		const int32_t w = k[t];
		for (int i = 0; i < m3; i++)
			acc[i] += w * row[i];
	}
}

size_t ss_img_tmp_size(const ss_img_axis *x, const ss_img_axis *y)
{
	int r0 = y->start[0], r1 = y->start[y->n - 1] + y->len[y->n - 1];
	/* the horizontal pass's rows, then one row of vertical sums */
	return (size_t)(r1 - r0) * 3 * (size_t)x->n + 3 * (size_t)x->n * sizeof(int32_t) + sizeof(int32_t);
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
	for (int j = 0; j < y->n; j++) {
		pass_v_row(rows, n, r0, y, j, acc);
		uint8_t *out = dst + (ptrdiff_t)j * 3 * n;
		for (int i = 0; i < 3 * n; i++)
			out[i] = clamp_u8(acc[i]);
	}
}

void ss_img_resize_f32(const uint8_t *src, int sw, const ss_img_axis *x, const ss_img_axis *y, int mirror,
                       float scale, const float *mean, float *dst, void *tmp)
{
	const int n = x->n, m = y->n, r0 = y->start[0], r1 = y->start[m - 1] + y->len[m - 1];
	const ptrdiff_t plane = (ptrdiff_t)m * n;
	uint8_t *rows = tmp;
	int32_t *acc = acc_of(tmp, x, y);
	pass_h(src, sw, r0, r1, x, rows);
	for (int j = 0; j < m; j++) {
		pass_v_row(rows, n, r0, y, j, acc);
		for (int c = 0; c < 3; c++) {
			float *out = dst + c * plane + (ptrdiff_t)j * n;
			const float *mu = mean ? mean + c * plane + (ptrdiff_t)j * n : NULL;
			for (int i = 0; i < n; i++) {
				int xi = mirror ? n - 1 - i : i;
				float v = scale * (float)clamp_u8(acc[3 * xi + c]);
				out[i] = mu ? v - mu[i] : v;
			}
		}
	}
}
