/*
 * Image kernels of the data pipeline: a separable resize of packed RGB
 * bytes, its output either bytes (ss_img_resize_u8) or float32 planes with
 * the input normalisation fused into the last pass (ss_img_resize_f32).
 * See softsync.h for the filter tables.
 *
 * Both passes multiply bytes by 16-bit coefficients and sum in 32 bits, as
 * PIL-SIMD does: the AVX2 variants pair taps for _mm256_madd_epi16, the
 * generic ones loop in C; the sums are exact, so every variant (and the Go
 * reference) gives the same bytes and the same floats.
 *
 * The horizontal pass (source rows into tmp, x->n RGB pixels a row,
 * mirrored when asked) runs over the rows the vertical filter reads; the
 * vertical pass then makes one output row at a time. The float output
 * de-interleaves a row of bytes into the three planes.
 */
#include <stdint.h>
#include <string.h>

#include "internal.h"

static uint8_t clamp_u8(int32_t v, int bits)
{
	v >>= bits;
	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The scratch: the horizontal pass's rows, a row of output bytes (with 16
 * bytes of slack), a copy of the source's last row with 16 bytes of slack
 * (the AVX2 loads read up to 13 bytes past the pixels they use) and the
 * horizontal coefficients in pairs, 4-byte aligned (h_pairs). */
typedef struct {
	uint8_t *rows, *row, *last;
	int32_t *pairs;
} img_tmp;

static void rows_of(const ss_img_axis *y, int *r0, int *r1)
{
	*r0 = y->start[0];
	*r1 = y->start[y->n - 1] + y->taps;
}

size_t ss_img_tmp_size(int sw, const ss_img_axis *x, const ss_img_axis *y)
{
	int r0, r1;
	rows_of(y, &r0, &r1);
	return (size_t)(r1 - r0) * 3 * (size_t)x->n + (3 * (size_t)x->n + 16) + (3 * (size_t)sw + 16) +
	       (size_t)x->n * (size_t)((x->taps + 3) / 4) * 8 + 4;
}

static img_tmp tmp_of(void *tmp, int sw, const ss_img_axis *x, const ss_img_axis *y)
{
	int r0, r1;
	rows_of(y, &r0, &r1);
	img_tmp t;
	t.rows = tmp;
	t.row = t.rows + (size_t)(r1 - r0) * 3 * (size_t)x->n;
	t.last = t.row + 3 * (size_t)x->n + 16;
	uintptr_t p = (uintptr_t)(t.last + 3 * (size_t)sw + 16);
	t.pairs = (int32_t *)((p + 3) & ~(uintptr_t)3);
	return t;
}

/* ---- generic C ---- */

/* Horizontal pass, rows [r0, r1) of src into rows: output pixel i of row r
 * at (r - r0)*3n + 3*(mirror ? n-1-i : i). PASS_H instantiates it for small
 * constant tap counts, which the compiler unrolls. */
#define PASS_H(name, TAPS)                                                                                         \
	static void name(const uint8_t *restrict src, int sw, int r0, int r1, const ss_img_axis *x, int mirror,         \
	                 uint8_t *restrict rows, int taps)                                                              \
	{                                                                                                               \
		const int n = x->n, bits = x->bits;                                                                     \
		const int *restrict start = x->start;                                                                   \
		const int16_t *restrict coef = x->coef;                                                                 \
		(void)taps;                                                                                             \
		for (int r = r0; r < r1; r++) {                                                                         \
			const uint8_t *restrict row = src + (ptrdiff_t)r * 3 * sw;                                      \
			uint8_t *restrict out = rows + (ptrdiff_t)(r - r0) * 3 * n;                                     \
			for (int i = 0; i < n; i++) {                                                                   \
				const uint8_t *restrict p = row + 3 * start[i];                                         \
				const int16_t *restrict k = coef + (ptrdiff_t)i * (TAPS);                               \
				int32_t a = 1 << (bits - 1), b = a, c = a;                                              \
				for (int t = 0; t < (TAPS); t++) {                                                      \
					const int32_t w = k[t];                                                         \
					a += w * p[3 * t];                                                              \
					b += w * p[3 * t + 1];                                                          \
					c += w * p[3 * t + 2];                                                          \
				}                                                                                       \
				uint8_t *o = out + 3 * (mirror ? n - 1 - i : i);                                        \
				o[0] = clamp_u8(a, bits);                                                               \
				o[1] = clamp_u8(b, bits);                                                               \
				o[2] = clamp_u8(c, bits);                                                               \
			}                                                                                               \
		}                                                                                                       \
	}
PASS_H(pass_h2, 2)
PASS_H(pass_h3, 3)
PASS_H(pass_h4, 4)
PASS_H(pass_h5, 5)
PASS_H(pass_hn, taps)

static void pass_h_generic(const uint8_t *src, int sw, int sh, int r0, int r1, const ss_img_axis *x, int mirror,
                           uint8_t *rows, img_tmp *t)
{
	(void)sh;
	(void)t;
	switch (x->taps) {
	case 2: pass_h2(src, sw, r0, r1, x, mirror, rows, 2); break;
	case 3: pass_h3(src, sw, r0, r1, x, mirror, rows, 3); break;
	case 4: pass_h4(src, sw, r0, r1, x, mirror, rows, 4); break;
	case 5: pass_h5(src, sw, r0, r1, x, mirror, rows, 5); break;
	default: pass_hn(src, sw, r0, r1, x, mirror, rows, x->taps);
	}
}

/* Vertical filter of output row j over rows (first source row r0) into
 * out (3n bytes). */
static void pass_v_generic(const uint8_t *restrict rows, int n, int r0, const ss_img_axis *y, int j,
                           uint8_t *restrict out)
{
	const int m3 = 3 * n, taps = y->taps, bits = y->bits;
	const int16_t *restrict k = y->coef + (ptrdiff_t)j * taps;
	const uint8_t *restrict first = rows + (ptrdiff_t)(y->start[j] - r0) * m3;
	for (int i = 0; i < m3; i++) {
		int32_t a = 1 << (bits - 1);
		for (int t = 0; t < taps; t++)
			a += (int32_t)k[t] * first[(ptrdiff_t)t * m3 + i];
		out[i] = clamp_u8(a, bits);
	}
}

/* Planes of one output row: value i of plane c at out[c*plane + i] =
 * scale*row[3i+c] - mean[c*plane + i] (mean NULL: no subtraction). */
static void to_planes_generic(const uint8_t *restrict row, int n, float scale, const float *restrict mean,
                              ptrdiff_t plane, float *restrict out)
{
	for (int c = 0; c < 3; c++) {
		float *restrict o = out + c * plane;
		for (int i = 0; i < n; i++)
			o[i] = scale * (float)row[3 * i + c];
		if (mean)
			for (int i = 0; i < n; i++)
				o[i] -= mean[c * plane + i];
	}
}

/* ---- AVX2 ---- */
#ifdef SS_HAVE_AVX2

/* Byte shuffles of a 16-byte load at a source pixel (RGB RGB RGB RGB ...)
 * into 16-bit pairs of taps for _mm_madd_epi16: taps 0 and 1 (R0 R1 G0 G1
 * B0 B1 0 0) and taps 2 and 3. */
#define SHUF_T01 0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1
#define SHUF_T23 6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1

/* coef_pair broadcasts coefficients a, b as the 16-bit pair (a, b). */
SS_AVX2 static inline __m256i coef_pair(int16_t a, int16_t b)
{
	return _mm256_set1_epi32((int32_t)((uint32_t)(uint16_t)a | (uint32_t)(uint16_t)b << 16));
}

/* load2 loads 16 bytes at off of rows a and b into the two lanes. */
SS_AVX2 static inline __m256i load2(const uint8_t *a, const uint8_t *b, ptrdiff_t off)
{
	return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + off))),
	                               _mm_loadu_si128((const __m128i *)(b + off)), 1);
}

/* store3 writes the 3 bytes of v's low 32 bits at p. */
static inline void store3(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
}

/* h_pairs writes the coefficients of x as 16-bit pairs, groups of four
 * taps a group (zeros beyond taps): pair h of group g of output i at
 * kp[(i*groups + g)*2 + h]. */
static void h_pairs(const ss_img_axis *x, int groups, int32_t *kp)
{
	for (int i = 0; i < x->n; i++)
		for (int g = 0; g < groups; g++)
			for (int h = 0; h < 2; h++) {
				const int t = 4 * g + 2 * h;
				const int16_t *k = x->coef + (ptrdiff_t)i * x->taps;
				const uint16_t lo = t < x->taps ? (uint16_t)k[t] : 0, hi = t + 1 < x->taps ? (uint16_t)k[t + 1] : 0;
				kp[((ptrdiff_t)i * groups + g) * 2 + h] = (int32_t)((uint32_t)lo | (uint32_t)hi << 16);
			}
}

/* Horizontal pass of two source rows a and b (one in each 128-bit lane)
 * into oa and ob: each group of four taps is one 16-byte load, two byte
 * shuffles and two madds; GROUPS is the group count, constant in the
 * instances the compiler unrolls. Outputs are written in memory order, 4
 * bytes at a time (the fourth overwritten by the next output), the last
 * one byte by byte. */
#define PASS_H2(name, GROUPS)                                                                                       \
	SS_AVX2 static void name(const uint8_t *a, const uint8_t *b, const ss_img_axis *x, const int32_t *kp, int mirror, \
	                         int bits, uint8_t *oa, uint8_t *ob, int groups)                                         \
	{                                                                                                            \
		const int n = x->n;                                                                                  \
		const int *start = x->start;                                                                         \
		const __m256i m01 = _mm256_setr_epi8(SHUF_T01, SHUF_T01), m23 = _mm256_setr_epi8(SHUF_T23, SHUF_T23); \
		const __m256i init = _mm256_set1_epi32(1 << (bits - 1));                                             \
		(void)groups;                                                                                        \
		for (int o = 0; o < n; o++) {                                                                        \
			const int i = mirror ? n - 1 - o : o;                                                        \
			const int32_t *k = kp + (ptrdiff_t)i * (GROUPS) * 2;                                         \
			const ptrdiff_t p = 3 * (ptrdiff_t)start[i];                                                 \
			__m256i acc = init;                                                                          \
			for (int g = 0; g < (GROUPS); g++) {                                                         \
				const __m256i v = load2(a, b, p + 12 * g);                                           \
				acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, m01),           \
				                                              _mm256_set1_epi32(k[2 * g])));         \
				acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, m23),           \
				                                              _mm256_set1_epi32(k[2 * g + 1])));     \
			}                                                                                            \
			acc = _mm256_srai_epi32(acc, bits);                                                          \
			acc = _mm256_packus_epi16(_mm256_packs_epi32(acc, acc), acc);                                \
			const uint32_t va = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(acc));                \
			const uint32_t vb = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(acc, 1));           \
			if (o < n - 1) {                                                                             \
				memcpy(oa + 3 * o, &va, 4);                                                          \
				memcpy(ob + 3 * o, &vb, 4);                                                          \
			} else {                                                                                     \
				store3(oa + 3 * o, va);                                                              \
				store3(ob + 3 * o, vb);                                                              \
			}                                                                                            \
		}                                                                                                    \
	}
PASS_H2(pass_h2_g1, 1)
PASS_H2(pass_h2_g2, 2)
PASS_H2(pass_h2_gn, groups)

/* Horizontal pass, two source rows at a time (an odd last row paired with
 * itself). A group's load reads up to 13 bytes beyond the pixels it uses:
 * within the image but for its last row, which is read from a copy with
 * slack (t->last). The coefficient pairs live after it in the scratch. */
SS_AVX2 static void pass_h_avx2(const uint8_t *src, int sw, int sh, int r0, int r1, const ss_img_axis *x, int mirror,
                                uint8_t *rows, img_tmp *t)
{
	const int n = x->n, groups = (x->taps + 3) / 4;
	int32_t *kp = t->pairs;
	h_pairs(x, groups, kp);
	const uint8_t *last = NULL;
	if (r1 == sh) {
		memcpy(t->last, src + (ptrdiff_t)(sh - 1) * 3 * sw, 3 * (size_t)sw);
		memset(t->last + 3 * (size_t)sw, 0, 16);
		last = t->last;
	}
	for (int r = r0; r < r1; r += 2) {
		const int rb = r + 1 < r1 ? r + 1 : r;
		const uint8_t *a = r == sh - 1 ? last : src + (ptrdiff_t)r * 3 * sw;
		const uint8_t *b = rb == sh - 1 ? last : src + (ptrdiff_t)rb * 3 * sw;
		uint8_t *oa = rows + (ptrdiff_t)(r - r0) * 3 * n, *ob = rows + (ptrdiff_t)(rb - r0) * 3 * n;
		switch (groups) {
		case 1: pass_h2_g1(a, b, x, kp, mirror, x->bits, oa, ob, 1); break;
		case 2: pass_h2_g2(a, b, x, kp, mirror, x->bits, oa, ob, 2); break;
		default: pass_h2_gn(a, b, x, kp, mirror, x->bits, oa, ob, groups);
		}
	}
}

/* Vertical filter of output row j into out (3n bytes), 16 bytes at a time:
 * rows t and t+1 interleaved byte by byte, widened to 16 bits and summed
 * with the coefficient pair by _mm256_madd_epi16. */
SS_AVX2 static void pass_v_avx2(const uint8_t *rows, int n, int r0, const ss_img_axis *y, int j, uint8_t *out)
{
	const int m3 = 3 * n, taps = y->taps, bits = y->bits;
	const int16_t *k = y->coef + (ptrdiff_t)j * taps;
	const uint8_t *first = rows + (ptrdiff_t)(y->start[j] - r0) * m3;
	const __m256i init = _mm256_set1_epi32(1 << (bits - 1));
	int i = 0;
	for (; i + 16 <= m3; i += 16) {
		__m256i lo = init, hi = init;
		int t = 0;
		for (; t + 2 <= taps; t += 2) {
			const __m128i ra = _mm_loadu_si128((const __m128i *)(first + (ptrdiff_t)t * m3 + i));
			const __m128i rb = _mm_loadu_si128((const __m128i *)(first + (ptrdiff_t)(t + 1) * m3 + i));
			const __m256i w = coef_pair(k[t], k[t + 1]);
			lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(ra, rb)), w));
			hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(ra, rb)), w));
		}
		if (t < taps) {
			const __m128i ra = _mm_loadu_si128((const __m128i *)(first + (ptrdiff_t)t * m3 + i));
			const __m256i w = coef_pair(k[t], 0);
			lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(ra, _mm_setzero_si128())), w));
			hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(ra, _mm_setzero_si128())), w));
		}
		/* packs interleaves the lanes: [lo0-3 hi0-3 | lo4-7 hi4-7]. */
		__m256i s = _mm256_packs_epi32(_mm256_srai_epi32(lo, bits), _mm256_srai_epi32(hi, bits));
		s = _mm256_permute4x64_epi64(s, 0xd8);
		_mm_storeu_si128((__m128i *)(out + i),
		                 _mm_packus_epi16(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
	}
	for (; i < m3; i++) {
		int32_t a = 1 << (bits - 1);
		for (int t = 0; t < taps; t++)
			a += (int32_t)k[t] * first[(ptrdiff_t)t * m3 + i];
		out[i] = clamp_u8(a, bits);
	}
}

/* to_float writes scale*v - mean for the 8 bytes of v's low half; the
 * product is rounded before the subtraction (no fused multiply-add), as
 * in the generic code. */
SS_AVX2 static inline void to_float8(__m128i v, __m256 scale, const float *mean, float *out)
{
	__m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), scale);
	__asm__("" : "+x"(f)); /* keep the compiler from contracting into an FMA */
	if (mean)
		f = _mm256_sub_ps(f, _mm256_loadu_ps(mean));
	_mm256_storeu_ps(out, f);
}

/* Planes of one output row, 16 pixels (48 bytes) at a time de-interleaved
 * by byte shuffles. */
SS_AVX2 static void to_planes_avx2(const uint8_t *row, int n, float scale, const float *mean, ptrdiff_t plane,
                                   float *out)
{
	const __m128i ra = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
	const __m128i rb = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1);
	const __m128i rc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13);
	const __m128i ga = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
	const __m128i gb = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1);
	const __m128i gc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14);
	const __m128i ba = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
	const __m128i bb = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1);
	const __m128i bc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15);
	const __m256 s = _mm256_set1_ps(scale);
	int i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m128i a = _mm_loadu_si128((const __m128i *)(row + 3 * i));
		const __m128i b = _mm_loadu_si128((const __m128i *)(row + 3 * i + 16));
		const __m128i c = _mm_loadu_si128((const __m128i *)(row + 3 * i + 32));
		const __m128i ch[3] = {
		    _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ra), _mm_shuffle_epi8(b, rb)), _mm_shuffle_epi8(c, rc)),
		    _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ga), _mm_shuffle_epi8(b, gb)), _mm_shuffle_epi8(c, gc)),
		    _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ba), _mm_shuffle_epi8(b, bb)), _mm_shuffle_epi8(c, bc))};
		for (int k = 0; k < 3; k++) {
			const float *mu = mean ? mean + k * plane + i : NULL;
			to_float8(ch[k], s, mu, out + k * plane + i);
			to_float8(_mm_srli_si128(ch[k], 8), s, mu ? mu + 8 : NULL, out + k * plane + i + 8);
		}
	}
	for (int c = 0; c < 3; c++) {
		float *o = out + c * plane;
		for (int q = i; q < n; q++) {
			float f = scale * (float)row[3 * q + c];
			__asm__("" : "+x"(f));
			o[q] = mean ? f - mean[c * plane + q] : f;
		}
	}
}
#endif /* SS_HAVE_AVX2 */

/* ---- entry points ---- */

typedef void (*pass_h_fn)(const uint8_t *, int, int, int, int, const ss_img_axis *, int, uint8_t *, img_tmp *);
typedef void (*pass_v_fn)(const uint8_t *, int, int, const ss_img_axis *, int, uint8_t *);
typedef void (*planes_fn)(const uint8_t *, int, float, const float *, ptrdiff_t, float *);

typedef struct {
	pass_h_fn h;
	pass_v_fn v;
	planes_fn planes;
} img_fns;

static img_fns fns_of(int isa)
{
#ifdef SS_HAVE_AVX2
	if (ss_isa(isa) >= SS_ISA_AVX2)
		return (img_fns){pass_h_avx2, pass_v_avx2, to_planes_avx2};
#endif
	(void)isa;
	return (img_fns){pass_h_generic, pass_v_generic, to_planes_generic};
}

void ss_img_resize_u8(int isa, const uint8_t *src, int sw, int sh, const ss_img_axis *x, const ss_img_axis *y,
                      uint8_t *dst, void *tmp)
{
	const img_fns f = fns_of(isa);
	int r0, r1;
	rows_of(y, &r0, &r1);
	img_tmp t = tmp_of(tmp, sw, x, y);
	f.h(src, sw, sh, r0, r1, x, 0, t.rows, &t);
	for (int j = 0; j < y->n; j++)
		f.v(t.rows, x->n, r0, y, j, dst + (ptrdiff_t)j * 3 * x->n);
}

void ss_img_resize_f32(int isa, const uint8_t *src, int sw, int sh, const ss_img_axis *x, const ss_img_axis *y,
                       int mirror, float scale, const float *mean, float *dst, void *tmp)
{
	const img_fns f = fns_of(isa);
	const int n = x->n, m = y->n;
	const ptrdiff_t plane = (ptrdiff_t)m * n;
	int r0, r1;
	rows_of(y, &r0, &r1);
	img_tmp t = tmp_of(tmp, sw, x, y);
	f.h(src, sw, sh, r0, r1, x, mirror, t.rows, &t);
	for (int j = 0; j < m; j++) {
		f.v(t.rows, n, r0, y, j, t.row);
		f.planes(t.row, n, scale, mean ? mean + (ptrdiff_t)j * n : NULL, plane, dst + (ptrdiff_t)j * n);
	}
}
