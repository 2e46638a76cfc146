/* Matrix products with one small dimension (9 to 64) and a large
 * operand (a million floats or more), at level AVX2: AlexNet's fc6 and
 * fc7 at batch 32 (and each worker's share of their outputs). With so few
 * rows or columns OpenBLAS spends as much time packing the large operand
 * (a copy as large as it on every call) and, with beta = 0, clearing C
 * before it accumulates into it, as multiplying; these kernels read the
 * large operand where it lies and write C once.
 *
 * c = a b^T with n (b's rows, c's columns) small (a fully connected
 * layer's forward pass, a = w, b = x, computed as y^T): b is first copied
 * transposed into bt (k x n16, zero columns up to n16, a multiple of 16).
 * A tile of the result is 3 rows of a by 32 columns (or 6 by 16 when n16
 * is not a multiple of 32) in 12 AVX registers; per k it broadcasts the
 * rows' values a[o][k] and loads a row of the tile's columns of bt (12
 * FMAs). k is taken in blocks of SM_KB, so that a block of bt (SM_KB x
 * n16 floats) stays in L2 while every tile of the block reads it; a tile's
 * partial sums wait in ct (m x n16) between blocks. Each element sums its
 * k terms in order whatever the thread count (threads split a's rows).
 *
 * c = a^T b with k (a's and b's rows) small (a layer's weight gradient,
 * a = dy, b = x): a tile is 6 rows of c by 16 columns in 12 registers, run
 * over the k rows: it broadcasts 6 values of at (a transposed, m x k) and
 * loads 16 floats of row r of b. Columns are taken in chunks of SM_NB,
 * copied out of b first, with zeros past its last column (b's rows lie
 * a multiple of 4 KB apart in AlexNet's layers, so that one chunk's rows
 * in place would share a set of the L1 cache), and stay in L1 while the tiles of every row of c read
 * them; each tile's rows are written once, with streaming stores where
 * aligned. Threads split the chunks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum {
	SM_MIN = 9,       /* the small dimension: at least */
	SM_MAX = 64,      /* and at most */
	SM_KB = 512,      /* k per block of c = a b^T */
	SM_NB = 128,      /* columns per chunk of c = a^T b */
	SM_MR = 6         /* rows of c per step */
};

int ss_gemm_small(int isa, int small, int p, int q)
{
	/* Below about a million floats (4 MB) the large operand stays in
	 * cache and OpenBLAS's packing costs little. */
	return ss_isa(isa) == SS_ISA_AVX2 && small >= SM_MIN && small <= SM_MAX && (ptrdiff_t)p * q >= (1 << 20);
}

#ifdef SS_HAVE_AVX2

/* fc_job is one product: for c = a b^T, w = a (out rows of in floats,
 * lda apart) and xt = bt (in x n16); for c = a^T b, dyt = at (out rows of
 * n floats), x = b (n rows of in floats, ldb apart), dw = c (rows ldc
 * apart) and xp the parts' chunks. */
typedef struct {
	int n, in, out, n16;
	ptrdiff_t lda, ldb, ldc;
	const float *x, *w, *dyt;
	float *xt, *yt, *dw, *xp;
} fc_job;

/* fc_tile3x32 adds to (or, with first, writes) the 3 x 32 tile of yt at
 * yt (rows n16 apart) the products of 3 rows of weights w[0..2] with kn
 * rows of xt at xk (n16 apart): each weight is broadcast once. */
SS_AVX2 static inline void fc_tile3x32(float *yt, ptrdiff_t n16, const float *const w[3], const float *xk,
                                       ptrdiff_t kn, int first)
{
	__m256 a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3;
	if (first) {
		a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = c0 = c1 = c2 = c3 = _mm256_setzero_ps();
	} else {
		a0 = _mm256_load_ps(yt), a1 = _mm256_load_ps(yt + 8);
		a2 = _mm256_load_ps(yt + 16), a3 = _mm256_load_ps(yt + 24);
		b0 = _mm256_load_ps(yt + n16), b1 = _mm256_load_ps(yt + n16 + 8);
		b2 = _mm256_load_ps(yt + n16 + 16), b3 = _mm256_load_ps(yt + n16 + 24);
		c0 = _mm256_load_ps(yt + 2 * n16), c1 = _mm256_load_ps(yt + 2 * n16 + 8);
		c2 = _mm256_load_ps(yt + 2 * n16 + 16), c3 = _mm256_load_ps(yt + 2 * n16 + 24);
	}
	const float *w0 = w[0], *w1 = w[1], *w2 = w[2];
	for (ptrdiff_t k = 0; k < kn; k++, xk += n16) {
		const __m256 x0 = _mm256_load_ps(xk), x1 = _mm256_load_ps(xk + 8);
		const __m256 x2 = _mm256_load_ps(xk + 16), x3 = _mm256_load_ps(xk + 24);
		__m256 t = _mm256_broadcast_ss(w0 + k);
		a0 = _mm256_fmadd_ps(t, x0, a0), a1 = _mm256_fmadd_ps(t, x1, a1);
		a2 = _mm256_fmadd_ps(t, x2, a2), a3 = _mm256_fmadd_ps(t, x3, a3);
		t = _mm256_broadcast_ss(w1 + k);
		b0 = _mm256_fmadd_ps(t, x0, b0), b1 = _mm256_fmadd_ps(t, x1, b1);
		b2 = _mm256_fmadd_ps(t, x2, b2), b3 = _mm256_fmadd_ps(t, x3, b3);
		t = _mm256_broadcast_ss(w2 + k);
		c0 = _mm256_fmadd_ps(t, x0, c0), c1 = _mm256_fmadd_ps(t, x1, c1);
		c2 = _mm256_fmadd_ps(t, x2, c2), c3 = _mm256_fmadd_ps(t, x3, c3);
	}
	_mm256_store_ps(yt, a0), _mm256_store_ps(yt + 8, a1);
	_mm256_store_ps(yt + 16, a2), _mm256_store_ps(yt + 24, a3);
	_mm256_store_ps(yt + n16, b0), _mm256_store_ps(yt + n16 + 8, b1);
	_mm256_store_ps(yt + n16 + 16, b2), _mm256_store_ps(yt + n16 + 24, b3);
	_mm256_store_ps(yt + 2 * n16, c0), _mm256_store_ps(yt + 2 * n16 + 8, c1);
	_mm256_store_ps(yt + 2 * n16 + 16, c2), _mm256_store_ps(yt + 2 * n16 + 24, c3);
}

/* fc_forward_part computes the rows of yt of output features [6*lo,
 * 6*hi) (rows past out read w's last row and are discarded). */
SS_AVX2 static void fc_forward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const fc_job *j = ctx;
	const ptrdiff_t in = j->in, n16 = j->n16;
	for (ptrdiff_t k0 = 0; k0 < in; k0 += SM_KB) {
		const ptrdiff_t kn = in - k0 < SM_KB ? in - k0 : SM_KB;
		const float *xb = j->xt + k0 * n16;
		for (ptrdiff_t s = lo; s < hi; s++) {
			const float *w[SM_MR];
			for (int q = 0; q < SM_MR; q++) {
				const ptrdiff_t o = s * SM_MR + q < j->out ? s * SM_MR + q : j->out - 1;
				w[q] = j->w + o * j->lda + k0;
			}
			if (n16 % 32 == 0) {
				for (int h = 0; h < SM_MR; h += 3)
					for (ptrdiff_t c = 0; c < n16; c += 32)
						fc_tile3x32(j->yt + (s * SM_MR + h) * n16 + c, n16, w + h, xb + c, kn, k0 == 0);
				continue;
			}
			for (ptrdiff_t c = 0; c < n16; c += 16) {
				float *yt = j->yt + s * SM_MR * n16 + c;
				__m256 a0, a1, a2, a3, a4, a5, b0, b1, b2, b3, b4, b5;
				if (k0 == 0) {
					a0 = a1 = a2 = a3 = a4 = a5 = _mm256_setzero_ps();
					b0 = b1 = b2 = b3 = b4 = b5 = a0;
				} else {
					a0 = _mm256_load_ps(yt), b0 = _mm256_load_ps(yt + 8);
					a1 = _mm256_load_ps(yt + n16), b1 = _mm256_load_ps(yt + n16 + 8);
					a2 = _mm256_load_ps(yt + 2 * n16), b2 = _mm256_load_ps(yt + 2 * n16 + 8);
					a3 = _mm256_load_ps(yt + 3 * n16), b3 = _mm256_load_ps(yt + 3 * n16 + 8);
					a4 = _mm256_load_ps(yt + 4 * n16), b4 = _mm256_load_ps(yt + 4 * n16 + 8);
					a5 = _mm256_load_ps(yt + 5 * n16), b5 = _mm256_load_ps(yt + 5 * n16 + 8);
				}
				const float *xk = xb + c;
				for (ptrdiff_t k = 0; k < kn; k++, xk += n16) {
					const __m256 u = _mm256_load_ps(xk), v = _mm256_load_ps(xk + 8);
					__m256 t = _mm256_broadcast_ss(w[0] + k);
					a0 = _mm256_fmadd_ps(t, u, a0), b0 = _mm256_fmadd_ps(t, v, b0);
					t = _mm256_broadcast_ss(w[1] + k);
					a1 = _mm256_fmadd_ps(t, u, a1), b1 = _mm256_fmadd_ps(t, v, b1);
					t = _mm256_broadcast_ss(w[2] + k);
					a2 = _mm256_fmadd_ps(t, u, a2), b2 = _mm256_fmadd_ps(t, v, b2);
					t = _mm256_broadcast_ss(w[3] + k);
					a3 = _mm256_fmadd_ps(t, u, a3), b3 = _mm256_fmadd_ps(t, v, b3);
					t = _mm256_broadcast_ss(w[4] + k);
					a4 = _mm256_fmadd_ps(t, u, a4), b4 = _mm256_fmadd_ps(t, v, b4);
					t = _mm256_broadcast_ss(w[5] + k);
					a5 = _mm256_fmadd_ps(t, u, a5), b5 = _mm256_fmadd_ps(t, v, b5);
				}
				_mm256_store_ps(yt, a0), _mm256_store_ps(yt + 8, b0);
				_mm256_store_ps(yt + n16, a1), _mm256_store_ps(yt + n16 + 8, b1);
				_mm256_store_ps(yt + 2 * n16, a2), _mm256_store_ps(yt + 2 * n16 + 8, b2);
				_mm256_store_ps(yt + 3 * n16, a3), _mm256_store_ps(yt + 3 * n16 + 8, b3);
				_mm256_store_ps(yt + 4 * n16, a4), _mm256_store_ps(yt + 4 * n16 + 8, b4);
				_mm256_store_ps(yt + 5 * n16, a5), _mm256_store_ps(yt + 5 * n16 + 8, b5);
			}
		}
	}
}

/* fc_store writes 16 floats a, b at p: streaming stores (around the
 * caches: dw is written once and read long after) when whole and
 * aligned, otherwise the lanes of masks m0, m1. */
SS_AVX2 static inline void fc_store(float *p, __m256 a, __m256 b, int whole, __m256i m0, __m256i m1)
{
	if (whole && ((uintptr_t)p & 31) == 0) {
		_mm256_stream_ps(p, a), _mm256_stream_ps(p + 8, b);
		return;
	}
	_mm256_maskstore_ps(p, m0, a), _mm256_maskstore_ps(p + 8, m1, b);
}

/* fc_wgrad_part computes the columns of dw of chunks [lo, hi) of SM_NB
 * input features. */
SS_AVX2 static void fc_wgrad_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const fc_job *j = ctx;
	const ptrdiff_t in = j->in, n = j->n, out = j->out;
	float *xp = j->xp + (ptrdiff_t)part * n * SM_NB;
	for (ptrdiff_t ch = lo; ch < hi; ch++) {
		const ptrdiff_t i0 = ch * SM_NB, i1 = (ch + 1) * SM_NB < in ? (ch + 1) * SM_NB : in;
		for (ptrdiff_t r = 0; r < n; r++) {
			memcpy(xp + r * SM_NB, j->x + r * j->ldb + i0, sizeof(float) * (size_t)(i1 - i0));
			memset(xp + r * SM_NB + (i1 - i0), 0, sizeof(float) * (size_t)(SM_NB - (i1 - i0)));
		}
		for (ptrdiff_t o = 0; o < out; o += SM_MR) {
			const float *d = j->dyt + o * n;
			const int rows = out - o < SM_MR ? (int)(out - o) : SM_MR;
			float *dw[SM_MR];
			for (int q = 0; q < SM_MR; q++)
				dw[q] = j->dw + (o + (q < rows ? q : 0)) * j->ldc;
			for (ptrdiff_t i = i0; i < i1; i += 16) {
				const __m256i m0 = ss_mask8(i1 - i), m1 = ss_mask8(i1 - i - 8);
				__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
				__m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0;
				const float *xr = xp + (i - i0);
				for (ptrdiff_t r = 0; r < n; r++, xr += SM_NB) {
					const __m256 u = _mm256_loadu_ps(xr), v = _mm256_loadu_ps(xr + 8);
					__m256 t = _mm256_broadcast_ss(d + r);
					a0 = _mm256_fmadd_ps(t, u, a0), b0 = _mm256_fmadd_ps(t, v, b0);
					t = _mm256_broadcast_ss(d + n + r);
					a1 = _mm256_fmadd_ps(t, u, a1), b1 = _mm256_fmadd_ps(t, v, b1);
					t = _mm256_broadcast_ss(d + 2 * n + r);
					a2 = _mm256_fmadd_ps(t, u, a2), b2 = _mm256_fmadd_ps(t, v, b2);
					t = _mm256_broadcast_ss(d + 3 * n + r);
					a3 = _mm256_fmadd_ps(t, u, a3), b3 = _mm256_fmadd_ps(t, v, b3);
					t = _mm256_broadcast_ss(d + 4 * n + r);
					a4 = _mm256_fmadd_ps(t, u, a4), b4 = _mm256_fmadd_ps(t, v, b4);
					t = _mm256_broadcast_ss(d + 5 * n + r);
					a5 = _mm256_fmadd_ps(t, u, a5), b5 = _mm256_fmadd_ps(t, v, b5);
				}
				fc_store(dw[0] + i, a0, b0, i + 16 <= i1, m0, m1);
				if (rows > 1)
					fc_store(dw[1] + i, a1, b1, i + 16 <= i1, m0, m1);
				if (rows > 2)
					fc_store(dw[2] + i, a2, b2, i + 16 <= i1, m0, m1);
				if (rows > 3)
					fc_store(dw[3] + i, a3, b3, i + 16 <= i1, m0, m1);
				if (rows > 4)
					fc_store(dw[4] + i, a4, b4, i + 16 <= i1, m0, m1);
				if (rows > 5)
					fc_store(dw[5] + i, a5, b5, i + 16 <= i1, m0, m1);
			}
		}
	}
	_mm_sfence(); /* the streaming stores before the part reports done */
}

/* fc_alloc returns floats floats aligned to 32 bytes, or NULL; *base
 * receives the block to free. */
static float *fc_alloc(ptrdiff_t floats, void **base)
{
	*base = malloc((size_t)floats * sizeof(float) + 32);
	return *base ? (float *)(((uintptr_t)*base + 31) & ~(uintptr_t)31) : NULL;
}

/* sm_nt computes a b^T (m x n, a: m x k, b: n x k) into c (ldc apart),
 * or, transposed, its transpose plus bias (b may be NULL) per column; 0
 * when out of memory. */
static int sm_nt(int threads, int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                 int ldc, int transposed, const float *bias)
{
	const ptrdiff_t n16 = (n + 15) / 16 * 16, steps = (m + SM_MR - 1) / SM_MR;
	void *bt_base, *ct_base;
	float *bt = fc_alloc((ptrdiff_t)k * n16, &bt_base), *ct = fc_alloc(steps * SM_MR * n16, &ct_base);
	if (bt == NULL || ct == NULL) {
		free(bt_base), free(ct_base);
		return 0;
	}
	ss_transpose(b, ldb, bt, n16, n, k, 0.0f);
	for (ptrdiff_t i = 0; i < k; i++)
		memset(bt + i * n16 + n, 0, sizeof(float) * (size_t)(n16 - n));
	fc_job j = {.n = n, .in = k, .out = m, .n16 = (int)n16, .lda = lda, .w = a, .xt = bt, .yt = ct};
	ss_parallel_for(threads, steps, 1, fc_forward_part, &j);
	for (ptrdiff_t o = 0; o < m; o++) {
		const float *row = ct + o * n16;
		if (!transposed) {
			memcpy(c + o * ldc, row, sizeof(float) * (size_t)n);
			continue;
		}
		const float add = bias ? bias[o] : 0.0f;
		for (ptrdiff_t r = 0; r < n; r++)
			c[r * ldc + o] = row[r] + add;
	}
	free(bt_base), free(ct_base);
	return 1;
}

int ss_gemm_small_nt(int isa, int threads, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                     float *c, int ldc)
{
	return ss_gemm_small(isa, n, m, k) && sm_nt(threads, m, n, k, a, lda, b, ldb, c, ldc, 0, NULL);
}

int ss_fc_mid_forward(int isa, int threads, int n, int in, int out, const float *x, const float *w,
                      const float *b, float *y)
{
	return ss_gemm_small(isa, n, out, in) && sm_nt(threads, out, n, in, w, in, x, in, y, out, 1, b);
}

int ss_gemm_small_tn(int isa, int threads, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                     float *c, int ldc)
{
	if (!ss_gemm_small(isa, k, m, n))
		return 0;
	const ptrdiff_t rows = (m + SM_MR - 1) / SM_MR * SM_MR;
	const int parts = ss_threads_of(threads);
	void *at_base, *bp_base;
	float *at = fc_alloc(rows * k, &at_base), *bp = fc_alloc((ptrdiff_t)parts * k * SM_NB, &bp_base);
	if (at == NULL || bp == NULL) {
		free(at_base), free(bp_base);
		return 0;
	}
	ss_transpose(a, lda, at, k, k, m, 0.0f);
	memset(at + (ptrdiff_t)m * k, 0, sizeof(float) * (size_t)((rows - m) * k));
	fc_job j = {.n = k, .in = n, .out = m, .ldb = ldb, .ldc = ldc, .x = b, .dyt = at, .dw = c, .xp = bp};
	ss_parallel_for(parts, (n + SM_NB - 1) / SM_NB, 1, fc_wgrad_part, &j);
	free(at_base), free(bp_base);
	return 1;
}

int ss_fc_mid_wgrad(int isa, int threads, int n, int in, int out, const float *x, const float *dy, float *dw)
{
	return ss_gemm_small_tn(isa, threads, out, in, n, dy, out, x, in, dw, in);
}

#else

int ss_gemm_small_nt(int isa, int threads, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                     float *c, int ldc)
{
	(void)isa, (void)threads, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
	return 0;
}

int ss_gemm_small_tn(int isa, int threads, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                     float *c, int ldc)
{
	(void)isa, (void)threads, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
	return 0;
}

int ss_fc_mid_forward(int isa, int threads, int n, int in, int out, const float *x, const float *w,
                      const float *b, float *y)
{
	(void)isa, (void)threads, (void)n, (void)in, (void)out, (void)x, (void)w, (void)b, (void)y;
	return 0;
}

int ss_fc_mid_wgrad(int isa, int threads, int n, int in, int out, const float *x, const float *dy, float *dw)
{
	(void)isa, (void)threads, (void)n, (void)in, (void)out, (void)x, (void)dy, (void)dw;
	return 0;
}

#endif /* SS_HAVE_AVX2 */

void ss_gemm(int isa, int threads, int trans_a, int trans_b, int m, int n, int k, float alpha,
             const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	if (alpha == 1.0f && beta == 0.0f && !trans_a && trans_b &&
	    ss_gemm_small_nt(isa, threads, m, n, k, a, lda, b, ldb, c, ldc))
		return;
	if (alpha == 1.0f && beta == 0.0f && trans_a && !trans_b &&
	    ss_gemm_small_tn(isa, threads, m, n, k, a, lda, b, ldb, c, ldc))
		return;
	ss_sgemm(threads, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
