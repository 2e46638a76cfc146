/* Element-wise layers (ReLU, Add), LRN within and across channels, fully
 * connected layers and softmax cross-entropy. The element-wise and LRN
 * loops are written to vectorise and compiled once per instruction-set
 * level (SS_ISA_VARIANTS); LRN's power s^(-3/4) and its steps across
 * channels are written with GCC's generic vectors (lrn_lanes.h), its
 * other powers and the small fully connected layers with AVX2 and
 * AVX-512 intrinsics; ss_isa picks the variant each call runs. */
#include <math.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "internal.h"

typedef struct {
	const float *x, *y, *dy;
	float *out;
} relu_job;

/* An element-wise job's first input is x, its second (Add's b) dy. */

SS_INLINE void relu_forward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const relu_job *j = ctx;
	for (ptrdiff_t i = lo; i < hi; i++)
		j->out[i] = j->x[i] > 0.0f ? j->x[i] : 0.0f;
}

SS_INLINE void relu_backward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const relu_job *j = ctx;
	const float *y = j->y, *dy = j->dy;
	float *dx = j->out;
	for (ptrdiff_t i = lo; i < hi; i++) {
		const float d = dy[i]; /* loaded unconditionally, so the loop vectorises */
		dx[i] = y[i] > 0.0f ? d : 0.0f;
	}
}

SS_INLINE void add_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const relu_job *j = ctx;
	const float *a = j->x, *b = j->dy;
	float *y = j->out;
	for (ptrdiff_t i = lo; i < hi; i++)
		y[i] = a[i] + b[i];
}

/* Element-wise jobs are bound by memory bandwidth, which the cores share:
 * split only very large ones (`go test -bench Layers ./kernels` compares
 * the ReLU at one thread and at two). */
static ptrdiff_t relu_grain(void) { return 256 * ss_grain(1); }

SS_ISA_VARIANTS(relu_forward_part);
SS_ISA_VARIANTS(relu_backward_part);
SS_ISA_VARIANTS(add_part);

/* ReLU streams memory: at level AVX-512 it runs the 256-bit loops, which
 * move more bytes per second than 512-bit ones on AMD's Zen 5, written out
 * with intrinsics or not (`go test -bench Layers ./kernels`). Add, the
 * same kind of loop, follows it. */
static int relu_level(int isa) { return isa > SS_ISA_AVX2 ? SS_ISA_AVX2 : isa; }

void ss_add(int isa, int threads, ptrdiff_t n, const float *a, const float *b, float *y)
{
	relu_job j = {.x = a, .dy = b, .out = y};
	ss_parallel_for(threads, n, relu_grain(), add_part_isa[relu_level(ss_isa(isa))], &j);
}

void ss_relu_forward(int isa, int threads, ptrdiff_t n, const float *x, float *y)
{
	relu_job j = {.x = x, .out = y};
	ss_parallel_for(threads, n, relu_grain(), relu_forward_part_isa[relu_level(ss_isa(isa))], &j);
}

void ss_relu_backward(int isa, int threads, ptrdiff_t n, const float *y, const float *dy, float *dx)
{
	relu_job j = {.y = y, .dy = dy, .out = dx};
	ss_parallel_for(threads, n, relu_grain(), relu_backward_part_isa[relu_level(ss_isa(isa))], &j);
}

SS_MULTIVERSION
float ss_sum(const float *x, ptrdiff_t n)
{
	float acc[8] = {0};
	ptrdiff_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++)
			acc[l] += x[i + l];
	for (; i < n; i++)
		acc[i % 8] += x[i];
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* ---- LRN ---- */

/* lrn_box_rows writes, for each pixel of the h x w plane in, the sum of
 * the 2r+1 pixels of its row centred on it (zero outside the plane). The
 * sums run over the plane as one flat array, in long vectorised loops that
 * wrongly wrap the r pixels nearest each row end into the next or
 * previous row; those columns are then recomputed. */
SS_INLINE void lrn_box_rows(const float *restrict in, float *restrict out, int h, int w, int r)
{
	const ptrdiff_t n = (ptrdiff_t)h * w;
	for (ptrdiff_t e = 0; e < n; e++)
		out[e] = in[e];
	for (int d = 1; d <= r && d < n; d++) {
		for (ptrdiff_t e = 0; e < n - d; e++)
			out[e] += in[e + d];
		for (ptrdiff_t e = d; e < n; e++)
			out[e] += in[e - d];
	}
	for (int y = 0; y < h; y++) {
		const float *a = in + (ptrdiff_t)y * w;
		float *o = out + (ptrdiff_t)y * w;
		for (int x = 0; x < w; x++) {
			if (x == r && w - r > r) {
				x = w - r - 1; /* skip the correct interior */
				continue;
			}
			float sum = 0.0f;
			for (int j = ss_imax(x - r, 0); j <= ss_imin(x + r, w - 1); j++)
				sum += a[j];
			o[x] = sum;
		}
	}
}

/* lrn_box_cols writes out = k + c * (sum of the 2r+1 rows of in centred
 * on each row, zero outside the plane); shifting by whole rows never
 * wraps, so flat loops are exact. */
SS_INLINE void lrn_box_cols(const float *restrict in, float *restrict out, int h, int w, int r, float k, float c)
{
	const ptrdiff_t n = (ptrdiff_t)h * w;
	for (ptrdiff_t e = 0; e < n; e++)
		out[e] = in[e];
	for (int d = 1; d <= r && d < h; d++) {
		const ptrdiff_t sh = (ptrdiff_t)d * w;
		for (ptrdiff_t e = 0; e < n - sh; e++)
			out[e] += in[e + sh];
		for (ptrdiff_t e = sh; e < n; e++)
			out[e] += in[e - sh];
	}
	for (ptrdiff_t e = 0; e < n; e++)
		out[e] = k + c * out[e];
}

/* LRN's power s^(-3/4) and its steps across channels (lrn_lanes.h) work
 * on vectors of 4 or 8 floats in GCC's generic vectors, the same operations
 * lane by lane: each level's variant compiles them to its own instructions
 * and runs 4 lanes (SSE2) at the generic level, 8 (AVX) at AVX2 and
 * AVX-512, so every level gives the same bits. Partial vectors at the
 * ends of rows are loaded padded and stored in part.
 *
 * LRN_POW_LO and LRN_POW_HI bound the scales whose power lrn_pow075v
 * computes (normal floats far from both ends of the range, so that t^4
 * below neither underflows nor overflows); others, NaN too, take powf. */
#define LRN_POW_LO 0x1p-120f
#define LRN_POW_HI 0x1p120f
#define LRN_POW_LO_BITS 0x03800000 /* the bits of LRN_POW_LO and LRN_POW_HI */
#define LRN_POW_HI_BITS 0x7b800000

#define LRN_OK(s) ((s) >= LRN_POW_LO && (s) <= LRN_POW_HI)

/* lrn_step holds one step's arrays, all np floats of channel k (x, y,
 * scale or scale_in, dy, out) or k + r (the nx, ny, nscale, ndy of the
 * new term, NULL past the last channel), and old, the ring slots of
 * channels k - r .. k + r - 1 in that order (or, for a window of more than
 * 5, one slot holding their sum); slot receives the new term. */
typedef struct {
	const float *x, *dy, *scale_in, *nx, *ny, *nscale, *ndy;
	float *y, *scale, *out, *slot;
	const float *old[4];
} lrn_step;

SS_INLINE void lrn_pow(int isa, ptrdiff_t n, const float *a, const float *s, float beta, float *out);

#if defined(__GNUC__) && !defined(__clang__)
/* The functions taking and returning vectors are always inlined: no
 * calling convention applies. (GCC reports them at the end of the
 * translation unit, so the warning stays off to its end.) */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#define LRN_CAT_(a, b) a##b
#define LRN_CAT(a, b) LRN_CAT_(a, b)
#define LRN_N(name) LRN_CAT(name, LRN_V)
#define LRN_LEVEL_FNS(name, ...) SS_LEVEL_FNS(name, __VA_ARGS__) /* name expanded first */
#define LRN_V 4
#include "lrn_lanes.h"
#undef LRN_V
#define LRN_V 8
#include "lrn_lanes.h"
#undef LRN_V

/* lrn_pow075 writes out[i] = a[i] * s[i]^(-3/4), eight lanes at a time at
 * levels AVX2 and AVX-512, four at the generic level. */
SS_INLINE void lrn_pow075(int isa, ptrdiff_t n, const float *a, const float *s, float *out)
{
	if (isa >= SS_ISA_AVX2)
		lrn_pow0758(n, a, s, out);
	else
		lrn_pow0754(n, a, s, out);
}

/* lrn_step_lanes runs lrn_forward_step or lrn_backward_step (lrn_lanes.h)
 * for a window of w channels, 1 to 5, eight lanes at a time at levels
 * AVX2 and AVX-512, four at the generic level. */
SS_INLINE void lrn_step_lanes(int isa, const int backward, const lrn_step *st, const int w, ptrdiff_t np, float k0,
                              float coef, float beta, const int fast)
{
	if (isa >= SS_ISA_AVX2) {
		if (backward)
			lrn_backward_step8(isa, st, w, np, coef, beta, fast);
		else
			lrn_forward_step8(isa, st, w, np, k0, coef, beta, fast);
	} else {
		if (backward)
			lrn_backward_step4(isa, st, w, np, coef, beta, fast);
		else
			lrn_forward_step4(isa, st, w, np, k0, coef, beta, fast);
	}
}

/* lrn_step_run runs a step with w, the window's channels (1, 2, 3 or 5),
 * made a constant of the loops it runs, so that they vectorise. */
SS_INLINE void lrn_step_run(int isa, const int backward, const lrn_step *st, int w, ptrdiff_t np, float k0,
                            float coef, float beta, const int fast)
{
	if (w == 5)
		lrn_step_lanes(isa, backward, st, 5, np, k0, coef, beta, fast);
	else if (w == 3)
		lrn_step_lanes(isa, backward, st, 3, np, k0, coef, beta, fast);
	else if (w == 2)
		lrn_step_lanes(isa, backward, st, 2, np, k0, coef, beta, fast);
	else
		lrn_step_lanes(isa, backward, st, 1, np, k0, coef, beta, fast);
}

/* lrn_pow writes out[i] = a[i] * s[i]^(-beta) for s[i] > 0. beta = 0.75
 * (Caffe's usual value) runs lrn_pow075; 0.5 and 1 use square roots and
 * divisions, sixteen lanes at a time at level AVX-512, eight at AVX2,
 * four where SSE2 exists; other values call powf. Vector and scalar loops
 * do the same correctly rounded operations in the same order, so every
 * element gets the same value whichever loop computes it. */
#ifdef SS_HAVE_AVX2
SS_AVX2 static ptrdiff_t lrn_pow_half_avx2(ptrdiff_t n, const float *a, const float *s, float beta, float *out)
{
	ptrdiff_t i = 0;
	if (beta == 0.5f) {
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(out + i, _mm256_div_ps(_mm256_loadu_ps(a + i), _mm256_sqrt_ps(_mm256_loadu_ps(s + i))));
	}
	return i;
}
#endif

#ifdef SS_HAVE_AVX512
SS_AVX512 static ptrdiff_t lrn_pow_half_avx512(ptrdiff_t n, const float *a, const float *s, float beta, float *out)
{
	ptrdiff_t i = 0;
	if (beta == 0.5f) {
		for (; i + 16 <= n; i += 16)
			_mm512_storeu_ps(out + i, _mm512_div_ps(_mm512_loadu_ps(a + i), _mm512_sqrt_ps(_mm512_loadu_ps(s + i))));
	}
	return i;
}
#endif

SS_INLINE void lrn_pow_at(int isa, ptrdiff_t n, const float *a, const float *s, float beta, float *out)
{
	if (beta == 0.75f) {
		lrn_pow075(isa, n, a, s, out);
		return;
	}
	ptrdiff_t i = 0;
#ifdef SS_HAVE_AVX512
	if (isa >= SS_ISA_AVX512)
		i = lrn_pow_half_avx512(n, a, s, beta, out);
#endif
#ifdef SS_HAVE_AVX2
	if (isa >= SS_ISA_AVX2)
		i += lrn_pow_half_avx2(n - i, a + i, s + i, beta, out + i);
#endif
	if (beta == 0.5f) {
#if defined(__SSE2__)
		for (; i + 4 <= n; i += 4)
			_mm_storeu_ps(out + i, _mm_div_ps(_mm_loadu_ps(a + i), _mm_sqrt_ps(_mm_loadu_ps(s + i))));
#endif
		for (; i < n; i++)
			out[i] = a[i] / sqrtf(s[i]);
	} else if (beta == 1.0f) {
		for (; i < n; i++)
			out[i] = a[i] / s[i];
	} else {
		for (; i < n; i++)
			out[i] = a[i] * powf(s[i], -beta);
	}
}

/* lrn_pow is compiled once per level, out of line: it runs over whole
 * planes or steps, which a call costs nothing against, and the LRN steps
 * that call it are specialised many times over. */
SS_LEVEL_FNS(lrn_pow, (ptrdiff_t n, const float *a, const float *s, float beta, float *out), n, a, s, beta, out);

SS_INLINE void lrn_pow(int isa, ptrdiff_t n, const float *a, const float *s, float beta, float *out)
{
	lrn_pow_lv[isa](n, a, s, beta, out);
}

typedef struct {
	const ss_lrn_shape *s;
	int isa;
	const float *x, *y, *scale_in, *dy;
	float *out, *scale, *ws;
} lrn_job;

/* Each part uses 2*H*W floats of scratch at ws + part*2*H*W. */
SS_INLINE void lrn_forward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const lrn_job *j = ctx;
	const ss_lrn_shape *s = j->s;
	const ptrdiff_t plane = (ptrdiff_t)s->h * s->w;
	const float coef = s->alpha / (float)(s->size * s->size);
	float *sq = j->ws + 2 * plane * part, *rows = sq + plane;
	for (ptrdiff_t q = lo; q < hi; q++) {
		const float *xp = j->x + q * plane;
		float *sp = j->scale + q * plane;
		for (ptrdiff_t i = 0; i < plane; i++)
			sq[i] = xp[i] * xp[i];
		lrn_box_rows(sq, rows, s->h, s->w, s->size / 2);
		lrn_box_cols(rows, sp, s->h, s->w, s->size / 2, s->k, coef);
		lrn_pow(j->isa, plane, xp, sp, s->beta, j->out + q * plane);
	}
}

SS_INLINE void lrn_backward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const lrn_job *j = ctx;
	const ss_lrn_shape *s = j->s;
	const ptrdiff_t plane = (ptrdiff_t)s->h * s->w;
	const float coef = 2.0f * s->alpha * s->beta / (float)(s->size * s->size);
	float *t = j->ws + 2 * plane * part, *rows = t + plane;
	for (ptrdiff_t q = lo; q < hi; q++) {
		const ptrdiff_t o = q * plane;
		for (ptrdiff_t i = 0; i < plane; i++)
			t[i] = j->dy[o + i] * j->y[o + i] / j->scale_in[o + i];
		lrn_box_rows(t, rows, s->h, s->w, s->size / 2);
		lrn_box_cols(rows, t, s->h, s->w, s->size / 2, 0.0f, 1.0f);
		lrn_pow(j->isa, plane, j->dy + o, j->scale_in + o, s->beta, j->out + o);
		for (ptrdiff_t i = 0; i < plane; i++)
			j->out[o + i] -= coef * j->x[o + i] * t[i];
	}
}

/* Across channels, the work is split into items of one image's block of
 * at most LRN_BLOCK pixels in every channel (so that a CNHW tensor,
 * passed as one image, still splits). An item walks the channels once:
 * step k computes the per-element term of channel k + r (x^2 forward,
 * dy*y/scale backward), keeps it in a ring of size slots of LRN_BLOCK
 * floats (channel c in slot c mod size, channels outside 0..C-1 holding
 * zeros) and finishes channel k in the same loop, summing the window's
 * terms in ascending channel order (the zeros leave the sums exact), so
 * that x, y, scale and dy are read from memory once and each output
 * written once. LRN_BLOCK pixels make runs of 4 KB per channel, long
 * enough for the hardware prefetchers; the ring and the channels read
 * again r steps later stay in L1 and L2. */
enum { LRN_BLOCK = 1024 };

/* lrn_across_block returns the pixels of an item and the floats of one
 * ring slot. */
static ptrdiff_t lrn_across_block(const ss_lrn_shape *s)
{
	const ptrdiff_t hw = (ptrdiff_t)s->h * s->w;
	return hw < LRN_BLOCK ? hw : LRN_BLOCK;
}

/* lrn_across_item returns the offset of item t's first element in
 * channel 0 and its number of pixels. */
static ptrdiff_t lrn_across_item(const ss_lrn_shape *s, ptrdiff_t t, ptrdiff_t *np)
{
	const ptrdiff_t hw = (ptrdiff_t)s->h * s->w, blocks = (hw + LRN_BLOCK - 1) / LRN_BLOCK;
	const ptrdiff_t n = t / blocks, p0 = t % blocks * LRN_BLOCK;
	*np = hw - p0 < LRN_BLOCK ? hw - p0 : LRN_BLOCK;
	return n * s->c * hw + p0;
}

/* lrn_term writes the term of one channel into a ring slot. */
SS_INLINE void lrn_term(const lrn_job *j, ptrdiff_t off, ptrdiff_t np, float *restrict slot, const int backward)
{
	if (backward) {
		const float *restrict dy = j->dy + off, *restrict y = j->y + off, *restrict sc = j->scale_in + off;
		for (ptrdiff_t i = 0; i < np; i++)
			slot[i] = dy[i] * y[i] / sc[i];
	} else {
		const float *restrict x = j->x + off;
		for (ptrdiff_t i = 0; i < np; i++)
			slot[i] = x[i] * x[i];
	}
}

/* lrn_across runs items [lo, hi) forward (scale and y are written) or
 * backward (dx is written). Each part uses (size + 1) slots of scratch at
 * ws + part*(size + 1)*slot: the ring, then the partial sums of windows
 * wider than 5. The steps are specialised for windows of 1, 3 and 5
 * channels and for beta = 0.75, so that their loops vectorise. */
SS_INLINE void lrn_across(const lrn_job *j, ptrdiff_t lo, ptrdiff_t hi, int part, const int backward,
                          const int isa)
{
	const ss_lrn_shape *s = j->s;
	const ptrdiff_t hw = (ptrdiff_t)s->h * s->w, bl = lrn_across_block(s);
	const int r = s->size / 2, size = s->size, nc = s->c;
	/* In locals: stores to float may alias *s. */
	const float k0 = s->k, beta = s->beta;
	const float coef = backward ? 2.0f * s->alpha * s->beta / (float)s->size : s->alpha / (float)s->size;
	const int fast = beta == 0.75f;
	float *ring = j->ws + (ptrdiff_t)(size + 1) * bl * part, *acc = ring + (ptrdiff_t)size * bl;
	for (ptrdiff_t t = lo; t < hi; t++) {
		ptrdiff_t np;
		const ptrdiff_t o = lrn_across_item(s, t, &np);
		/* Channels -r .. -1 are zeros; 0 .. r - 1 are brought in. */
		for (int c = -r; c < r; c++) {
			float *slot = ring + (ptrdiff_t)((c + size) % size) * bl;
			if (c < 0 || c >= nc)
				memset(slot, 0, (size_t)np * sizeof *slot);
			else
				lrn_term(j, o + (ptrdiff_t)c * hw, np, slot, backward);
		}
		for (int k = 0; k < nc; k++) {
			const ptrdiff_t oc = o + (ptrdiff_t)k * hw, on = oc + (ptrdiff_t)r * hw;
			const int has_new = k + r < nc;
			lrn_step st = {
				.x = j->x + oc,
				.dy = backward ? j->dy + oc : NULL,
				.nx = !backward && has_new ? j->x + on : NULL,
				.ny = backward && has_new ? j->y + on : NULL,
				.nscale = backward && has_new ? j->scale_in + on : NULL,
				.ndy = backward && has_new ? j->dy + on : NULL,
				.y = backward ? NULL : j->out + oc,
				.scale = backward ? NULL : j->scale + oc,
				.scale_in = backward ? j->scale_in + oc : NULL,
				.out = backward ? j->out + oc : NULL,
				.slot = ring + (ptrdiff_t)((k + r) % size) * bl,
			};
			int w = size;
			if (size > 5) {
				/* Sum the old terms into acc; the step adds the new one. */
				const float *first = ring + (ptrdiff_t)((k - r + size) % size) * bl;
				for (ptrdiff_t i = 0; i < np; i++)
					acc[i] = first[i];
				for (int c = k - r + 1; c < k + r; c++) {
					const float *u = ring + (ptrdiff_t)((c + size) % size) * bl;
					for (ptrdiff_t i = 0; i < np; i++)
						acc[i] += u[i];
				}
				st.old[0] = acc, w = 2;
			} else {
				for (int m = 0; m < size - 1; m++)
					st.old[m] = ring + (ptrdiff_t)((k - r + m + size) % size) * bl;
			}
/* beta = 0.75 (fast) as a constant too. */
			if (fast)
				lrn_step_run(isa, backward, &st, w, np, k0, coef, beta, 1);
			else
				lrn_step_run(isa, backward, &st, w, np, k0, coef, beta, 0);
		}
	}
}

SS_INLINE void lrn_across_forward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part, const int isa)
{
	lrn_across(ctx, lo, hi, part, 0, isa);
}

SS_INLINE void lrn_across_backward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part, const int isa)
{
	lrn_across(ctx, lo, hi, part, 1, isa);
}

/* lrn_per_thread returns the floats of scratch one thread uses. */
static ptrdiff_t lrn_per_thread(const ss_lrn_shape *s)
{
	if (s->region == SS_LRN_ACROSS)
		return (ptrdiff_t)(s->size + 1) * lrn_across_block(s);
	return 2 * (ptrdiff_t)s->h * s->w;
}

ptrdiff_t ss_lrn_workspace(int threads, const ss_lrn_shape *s)
{
	return lrn_per_thread(s) * ss_threads_of(threads);
}

SS_ISA_VARIANTS(lrn_forward_part);
SS_ISA_VARIANTS(lrn_backward_part);
SS_ISA_LEVEL_VARIANTS(lrn_across_forward_part);
SS_ISA_LEVEL_VARIANTS(lrn_across_backward_part);

/* lrn_run splits a job over the planes (within channels) or the blocks
 * of pixels (across) of the tensor, over as many threads as the
 * workspace has room for. */
static void lrn_run(int threads, const ss_lrn_shape *s, ptrdiff_t ws_len, const ss_range_fn within[],
                    const ss_range_fn across[], lrn_job *j)
{
	const int t = ss_ws_threads(threads, ws_len, lrn_per_thread(s));
	const ptrdiff_t hw = (ptrdiff_t)s->h * s->w;
	if (s->region == SS_LRN_ACROSS) {
		const ptrdiff_t items = s->n * ((hw + LRN_BLOCK - 1) / LRN_BLOCK);
		ss_parallel_for(t, items, ss_grain(s->c * lrn_across_block(s)), across[j->isa], j);
		return;
	}
	ss_parallel_for(t, (ptrdiff_t)s->n * s->c, ss_grain(hw), within[j->isa], j);
}

void ss_lrn_forward(int isa, int threads, const ss_lrn_shape *s, const float *x, float *y, float *scale,
                    float *ws, ptrdiff_t ws_len)
{
	lrn_job j = {.s = s, .isa = ss_isa(isa), .x = x, .out = y, .scale = scale, .ws = ws};
	lrn_run(threads, s, ws_len, lrn_forward_part_isa, lrn_across_forward_part_isa, &j);
}

void ss_lrn_backward(int isa, int threads, const ss_lrn_shape *s, const float *x, const float *y,
                     const float *scale, const float *dy, float *dx, float *ws, ptrdiff_t ws_len)
{
	lrn_job j = {.s = s, .isa = ss_isa(isa), .x = x, .y = y, .scale_in = scale, .dy = dy, .out = dx, .ws = ws};
	lrn_run(threads, s, ws_len, lrn_backward_part_isa, lrn_across_backward_part_isa, &j);
}

/* ---- fully connected ---- */

/* Batches of at most FC_SMALL rows skip the GEMM library at levels AVX2
 * and AVX-512: with so few rows a GEMM is bound by reading the weights,
 * which OpenBLAS also packs (a copy as large as the weights) on every
 * call. The kernels below read the weights once per up to 6 rows forward
 * and once backward, where the weight gradient and the input gradient
 * come from the same pass; the AVX-512 ones are the AVX2 ones with 16
 * lanes and masked tails. */
enum { FC_SMALL = 8 };

#ifdef SS_HAVE_AVX2

/* fc_dots computes the dot products of weight rows w0, w1 with input rows
 * x[0..5] (in floats each) into out[0..5] and out[6..11]. */
SS_AVX2 static void fc_dots(int in, const float *w0, const float *w1, const float *const x[6], float out[12])
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
	__m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0;
	const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3], *x4 = x[4], *x5 = x[5];
	int i = 0;
	for (; i + 8 <= in; i += 8) {
		const __m256 v = _mm256_loadu_ps(w0 + i), u = _mm256_loadu_ps(w1 + i);
		__m256 t = _mm256_loadu_ps(x0 + i);
		a0 = _mm256_fmadd_ps(v, t, a0), b0 = _mm256_fmadd_ps(u, t, b0);
		t = _mm256_loadu_ps(x1 + i);
		a1 = _mm256_fmadd_ps(v, t, a1), b1 = _mm256_fmadd_ps(u, t, b1);
		t = _mm256_loadu_ps(x2 + i);
		a2 = _mm256_fmadd_ps(v, t, a2), b2 = _mm256_fmadd_ps(u, t, b2);
		t = _mm256_loadu_ps(x3 + i);
		a3 = _mm256_fmadd_ps(v, t, a3), b3 = _mm256_fmadd_ps(u, t, b3);
		t = _mm256_loadu_ps(x4 + i);
		a4 = _mm256_fmadd_ps(v, t, a4), b4 = _mm256_fmadd_ps(u, t, b4);
		t = _mm256_loadu_ps(x5 + i);
		a5 = _mm256_fmadd_ps(v, t, a5), b5 = _mm256_fmadd_ps(u, t, b5);
	}
	if (i < in) {
		const __m256i m = ss_mask8(in - i);
		const __m256 v = _mm256_maskload_ps(w0 + i, m), u = _mm256_maskload_ps(w1 + i, m);
		__m256 t = _mm256_maskload_ps(x0 + i, m);
		a0 = _mm256_fmadd_ps(v, t, a0), b0 = _mm256_fmadd_ps(u, t, b0);
		t = _mm256_maskload_ps(x1 + i, m);
		a1 = _mm256_fmadd_ps(v, t, a1), b1 = _mm256_fmadd_ps(u, t, b1);
		t = _mm256_maskload_ps(x2 + i, m);
		a2 = _mm256_fmadd_ps(v, t, a2), b2 = _mm256_fmadd_ps(u, t, b2);
		t = _mm256_maskload_ps(x3 + i, m);
		a3 = _mm256_fmadd_ps(v, t, a3), b3 = _mm256_fmadd_ps(u, t, b3);
		t = _mm256_maskload_ps(x4 + i, m);
		a4 = _mm256_fmadd_ps(v, t, a4), b4 = _mm256_fmadd_ps(u, t, b4);
		t = _mm256_maskload_ps(x5 + i, m);
		a5 = _mm256_fmadd_ps(v, t, a5), b5 = _mm256_fmadd_ps(u, t, b5);
	}
	out[0] = ss_hsum(a0), out[1] = ss_hsum(a1), out[2] = ss_hsum(a2);
	out[3] = ss_hsum(a3), out[4] = ss_hsum(a4), out[5] = ss_hsum(a5);
	out[6] = ss_hsum(b0), out[7] = ss_hsum(b1), out[8] = ss_hsum(b2);
	out[9] = ss_hsum(b3), out[10] = ss_hsum(b4), out[11] = ss_hsum(b5);
}

/* fc_backward_small computes dw (and dx, zeroed first, unless NULL) two
 * weight rows at a time: dw[o] = sum_r dy[r][o] x[r], dx[r] += dy[r][o]
 * w[o]. */
SS_AVX2 static void fc_backward_small(int n, int in, int out, const float *x, const float *w,
                                      const float *dy, float *dx, float *dw)
{
	if (dx)
		memset(dx, 0, sizeof(float) * (size_t)n * (size_t)in);
	const int full = in / 8 * 8;
	const __m256i m = ss_mask8(in - full > 0 ? in - full : 1);
	for (int o = 0; o < out; o += 2) {
		const int no = ss_imin(2, out - o);
		__m256 g0[FC_SMALL], g1[FC_SMALL];
		for (int r = 0; r < n; r++) {
			g0[r] = _mm256_set1_ps(dy[(ptrdiff_t)r * out + o]);
			g1[r] = _mm256_set1_ps(no > 1 ? dy[(ptrdiff_t)r * out + o + 1] : 0.0f);
		}
		const float *w0 = w + (ptrdiff_t)o * in, *w1 = w + (ptrdiff_t)(o + no - 1) * in;
		float *d0 = dw + (ptrdiff_t)o * in, *d1 = dw + (ptrdiff_t)(o + no - 1) * in;
		for (int i = 0; i < in; i += 8) {
			const int tail = i + 8 > in;
			__m256 s0 = _mm256_setzero_ps(), s1 = s0;
			for (int r = 0; r < n; r++) {
				const float *xr = x + (ptrdiff_t)r * in + i;
				const __m256 t = tail ? _mm256_maskload_ps(xr, m) : _mm256_loadu_ps(xr);
				s0 = _mm256_fmadd_ps(g0[r], t, s0), s1 = _mm256_fmadd_ps(g1[r], t, s1);
			}
			if (tail) {
				_mm256_maskstore_ps(d1 + i, m, s1), _mm256_maskstore_ps(d0 + i, m, s0);
			} else {
				_mm256_storeu_ps(d1 + i, s1), _mm256_storeu_ps(d0 + i, s0);
			}
			if (dx == NULL)
				continue;
			const __m256 v = tail ? _mm256_maskload_ps(w0 + i, m) : _mm256_loadu_ps(w0 + i);
			const __m256 u = tail ? _mm256_maskload_ps(w1 + i, m) : _mm256_loadu_ps(w1 + i);
			for (int r = 0; r < n; r++) {
				float *p = dx + (ptrdiff_t)r * in + i;
				__m256 a = tail ? _mm256_maskload_ps(p, m) : _mm256_loadu_ps(p);
				a = _mm256_fmadd_ps(g0[r], v, _mm256_fmadd_ps(g1[r], u, a));
				if (tail)
					_mm256_maskstore_ps(p, m, a);
				else
					_mm256_storeu_ps(p, a);
			}
		}
	}
}

#endif /* SS_HAVE_AVX2 */

#ifdef SS_HAVE_AVX512

/* fc_dots16 is fc_dots with 16 lanes. */
SS_AVX512 static void fc_dots16(int in, const float *w0, const float *w1, const float *const x[6], float out[12])
{
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
	__m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0;
	const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3], *x4 = x[4], *x5 = x[5];
	for (int i = 0; i < in; i += 16) {
		const __mmask16 m = ss_lanes(in - i);
		const __m512 v = _mm512_maskz_loadu_ps(m, w0 + i), u = _mm512_maskz_loadu_ps(m, w1 + i);
		__m512 t = _mm512_maskz_loadu_ps(m, x0 + i);
		a0 = _mm512_fmadd_ps(v, t, a0), b0 = _mm512_fmadd_ps(u, t, b0);
		t = _mm512_maskz_loadu_ps(m, x1 + i);
		a1 = _mm512_fmadd_ps(v, t, a1), b1 = _mm512_fmadd_ps(u, t, b1);
		t = _mm512_maskz_loadu_ps(m, x2 + i);
		a2 = _mm512_fmadd_ps(v, t, a2), b2 = _mm512_fmadd_ps(u, t, b2);
		t = _mm512_maskz_loadu_ps(m, x3 + i);
		a3 = _mm512_fmadd_ps(v, t, a3), b3 = _mm512_fmadd_ps(u, t, b3);
		t = _mm512_maskz_loadu_ps(m, x4 + i);
		a4 = _mm512_fmadd_ps(v, t, a4), b4 = _mm512_fmadd_ps(u, t, b4);
		t = _mm512_maskz_loadu_ps(m, x5 + i);
		a5 = _mm512_fmadd_ps(v, t, a5), b5 = _mm512_fmadd_ps(u, t, b5);
	}
	out[0] = _mm512_reduce_add_ps(a0), out[1] = _mm512_reduce_add_ps(a1), out[2] = _mm512_reduce_add_ps(a2);
	out[3] = _mm512_reduce_add_ps(a3), out[4] = _mm512_reduce_add_ps(a4), out[5] = _mm512_reduce_add_ps(a5);
	out[6] = _mm512_reduce_add_ps(b0), out[7] = _mm512_reduce_add_ps(b1), out[8] = _mm512_reduce_add_ps(b2);
	out[9] = _mm512_reduce_add_ps(b3), out[10] = _mm512_reduce_add_ps(b4), out[11] = _mm512_reduce_add_ps(b5);
}

/* fc_backward_small16 is fc_backward_small with 16 lanes. */
SS_AVX512 static void fc_backward_small16(int n, int in, int out, const float *x, const float *w,
                                          const float *dy, float *dx, float *dw)
{
	if (dx)
		memset(dx, 0, sizeof(float) * (size_t)n * (size_t)in);
	for (int o = 0; o < out; o += 2) {
		const int no = ss_imin(2, out - o);
		__m512 g0[FC_SMALL], g1[FC_SMALL];
		for (int r = 0; r < n; r++) {
			g0[r] = _mm512_set1_ps(dy[(ptrdiff_t)r * out + o]);
			g1[r] = _mm512_set1_ps(no > 1 ? dy[(ptrdiff_t)r * out + o + 1] : 0.0f);
		}
		const float *w0 = w + (ptrdiff_t)o * in, *w1 = w + (ptrdiff_t)(o + no - 1) * in;
		float *d0 = dw + (ptrdiff_t)o * in, *d1 = dw + (ptrdiff_t)(o + no - 1) * in;
		for (int i = 0; i < in; i += 16) {
			const __mmask16 m = ss_lanes(in - i);
			__m512 s0 = _mm512_setzero_ps(), s1 = s0;
			for (int r = 0; r < n; r++) {
				const __m512 t = _mm512_maskz_loadu_ps(m, x + (ptrdiff_t)r * in + i);
				s0 = _mm512_fmadd_ps(g0[r], t, s0), s1 = _mm512_fmadd_ps(g1[r], t, s1);
			}
			_mm512_mask_storeu_ps(d1 + i, m, s1), _mm512_mask_storeu_ps(d0 + i, m, s0);
			if (dx == NULL)
				continue;
			const __m512 v = _mm512_maskz_loadu_ps(m, w0 + i), u = _mm512_maskz_loadu_ps(m, w1 + i);
			for (int r = 0; r < n; r++) {
				float *p = dx + (ptrdiff_t)r * in + i;
				const __m512 a = _mm512_maskz_loadu_ps(m, p);
				_mm512_mask_storeu_ps(p, m, _mm512_fmadd_ps(g0[r], v, _mm512_fmadd_ps(g1[r], u, a)));
			}
		}
	}
}

#endif /* SS_HAVE_AVX512 */

#if defined(SS_HAVE_AVX2) || defined(SS_HAVE_AVX512)
/* fc_dots_fn is fc_dots or fc_dots16: the dot products of two weight
 * rows with six input rows. */
typedef void (*fc_dots_fn)(int in, const float *w0, const float *w1, const float *const x[6], float out[12]);

/* fc_forward_small computes y = x w^T + b for at most FC_SMALL rows, two
 * weight rows against up to six input rows per call of dots. */
static void fc_forward_small(fc_dots_fn dots, int n, int in, int out, const float *x, const float *w,
                             const float *b, float *y)
{
	for (int r0 = 0; r0 < n; r0 += 6) {
		const int nr = ss_imin(6, n - r0);
		const float *xs[6];
		for (int r = 0; r < 6; r++)
			xs[r] = x + (ptrdiff_t)(r0 + ss_imin(r, nr - 1)) * in;
		for (int o = 0; o < out; o += 2) {
			const int no = ss_imin(2, out - o);
			float d[12];
			dots(in, w + (ptrdiff_t)o * in, w + (ptrdiff_t)(o + no - 1) * in, xs, d);
			for (int k = 0; k < no; k++)
				for (int r = 0; r < nr; r++)
					y[(ptrdiff_t)(r0 + r) * out + o + k] = d[6 * k + r] + (b ? b[o + k] : 0.0f);
		}
	}
}
#endif

void ss_fc_forward(int isa, int threads, int n, int in, int out, const float *x, const float *w,
                   const float *b, float *y)
{
	isa = ss_isa(isa);
#ifdef SS_HAVE_AVX512
	if (n <= FC_SMALL && isa >= SS_ISA_AVX512) {
		fc_forward_small(fc_dots16, n, in, out, x, w, b, y);
		return;
	}
#endif
#ifdef SS_HAVE_AVX2
	if (n <= FC_SMALL && isa >= SS_ISA_AVX2) {
		fc_forward_small(fc_dots, n, in, out, x, w, b, y);
		return;
	}
#endif
	if (ss_fc_mid_forward(isa, threads, n, in, out, x, w, b, y))
		return;
	ss_sgemm(threads, 0, 1, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
	if (b == NULL)
		return;
	for (int r = 0; r < n; r++) {
		float *row = y + (ptrdiff_t)r * out;
		for (int j = 0; j < out; j++)
			row[j] += b[j];
	}
}

void ss_fc_backward(int isa, int threads, int n, int in, int out, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, float *db)
{
	isa = ss_isa(isa);
#ifdef SS_HAVE_AVX512
	if (n <= FC_SMALL && isa >= SS_ISA_AVX512) {
		fc_backward_small16(n, in, out, x, w, dy, dx, dw);
	} else
#endif
#ifdef SS_HAVE_AVX2
	if (n <= FC_SMALL && isa >= SS_ISA_AVX2) {
		fc_backward_small(n, in, out, x, w, dy, dx, dw);
	} else
#endif
	{
		if (!ss_fc_mid_wgrad(isa, threads, n, in, out, x, dy, dw))
			ss_sgemm(threads, 1, 0, out, in, n, 1.0f, dy, out, x, in, 0.0f, dw, in);
		if (dx)
			ss_sgemm(threads, 0, 0, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
	}
	if (db == NULL)
		return;
	memset(db, 0, sizeof(float) * (size_t)out);
	for (int r = 0; r < n; r++) {
		const float *row = dy + (ptrdiff_t)r * out;
		for (int j = 0; j < out; j++)
			db[j] += row[j];
	}
}

/* ---- softmax cross-entropy ---- */

float ss_softmax_xent(int n, int k, const float *logits, const int *labels,
                      float *prob, float *dlogits)
{
	double loss = 0.0;
	for (int r = 0; r < n; r++) {
		const float *z = logits + (ptrdiff_t)r * k;
		float *p = prob + (ptrdiff_t)r * k;
		float m = z[0];
		for (int j = 1; j < k; j++)
			m = z[j] > m ? z[j] : m;
		float sum = 0.0f;
		for (int j = 0; j < k; j++) {
			p[j] = expf(z[j] - m);
			sum += p[j];
		}
		for (int j = 0; j < k; j++)
			p[j] /= sum;
		const int l = labels[r];
		/* log p_l from the logits stays finite when p_l underflows. */
		loss -= (double)(z[l] - m) - log((double)sum);
		if (dlogits) {
			float *d = dlogits + (ptrdiff_t)r * k;
			for (int j = 0; j < k; j++)
				d[j] = p[j] / (float)n;
			d[l] -= 1.0f / (float)n;
		}
	}
	return (float)(loss / n);
}
