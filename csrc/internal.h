/* Helpers shared by the softsync C sources; not part of the API. */
#ifndef SOFTSYNC_INTERNAL_H
#define SOFTSYNC_INTERNAL_H

#include "softsync.h"

/* SS_MULTIVERSION compiles a function twice on x86-64 with GCC or Clang,
 * for x86-64-v3 (AVX2, FMA) and for the baseline, and picks one at load
 * time from the CPU's features (an ifunc): vectorised loops get AVX2
 * without building for one machine. Elsewhere it expands to nothing. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
	!defined(SS_NO_MULTIVERSION)
#define SS_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SS_MULTIVERSION
#endif

/* Hand-written and vectorised kernels exist in up to three variants,
 * one per instruction-set level (SS_ISA_GENERIC, SS_ISA_AVX2,
 * SS_ISA_AVX512, see softsync.h); every kernel takes the level to run and
 * ss_isa() lowers it to what the CPU and this build support.
 *
 * SS_HAVE_AVX2 marks builds (x86-64, GCC or Clang) that contain the AVX2
 * variants: functions marked SS_AVX2, compiled for AVX2 and FMA
 * whatever the build's target. SS_HAVE_AVX512 marks those that also
 * contain the AVX-512 variants (SS_AVX512: AVX-512 F, CD, BW, DQ, VL on top
 * of AVX2), unless SS_NO_AVX512 is defined. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(SS_NO_AVX2)
#define SS_HAVE_AVX2 1
#define SS_AVX2 __attribute__((target("avx2,fma")))
#include <immintrin.h>
#if !defined(SS_NO_AVX512)
#define SS_HAVE_AVX512 1
#if defined(__clang__)
#define SS_AVX512 __attribute__((target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx2,fma")))
#else
#define SS_AVX512 \
	__attribute__((target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx2,fma,prefer-vector-width=512")))
#endif
#endif

#if defined(SS_HAVE_AVX512)
/* ss_lanes returns the AVX-512 mask of the first n lanes of 16 (none for
 * n <= 0, all for n >= 16). */
static inline __mmask16 ss_lanes(ptrdiff_t n)
{
	return (__mmask16)(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);
}
#endif

/* ss_mask8 returns the AVX2 load/store mask of the first r lanes of 8
 * (none for r <= 0, all for r >= 8). */
SS_AVX2 static inline __m256i ss_mask8(ptrdiff_t r)
{
	const int k = r < 0 ? 0 : r > 8 ? 8 : (int)r;
	return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* ss_hsum returns the sum of the 8 lanes of v. */
SS_AVX2 static inline float ss_hsum(__m256 v)
{
	__m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	a = _mm_add_ps(a, _mm_movehl_ps(a, a));
	a = _mm_add_ss(a, _mm_movehdup_ps(a));
	return _mm_cvtss_f32(a);
}
#endif

/* ss_isa returns the level a kernel asked to run at isa runs at: isa
 * itself, or the highest level below it that the CPU and the build
 * support (ss_isa_best). */
static inline int ss_isa(int isa)
{
	const int best = ss_isa_best();
	return isa < SS_ISA_GENERIC ? SS_ISA_GENERIC : isa > best ? best : isa;
}

/* SS_INLINE marks the bodies that SS_ISA_VARIANTS compiles once per
 * level: forced inline, so that each variant's copy is vectorised for its
 * own instruction set. Helpers they call must be SS_INLINE too. The
 * sanitizer build of the C tests (CMakeLists.txt, SOFTSYNC_SANITIZE)
 * defines it as plain static inline: unoptimised and instrumented, the
 * forced copies made layers.c alone take four minutes to compile, and at
 * -O0 no copy is vectorised anyway (the intrinsics are in functions of
 * their own level, which this does not change). */
#ifndef SS_INLINE
#define SS_INLINE static inline __attribute__((always_inline))
#endif

/* SS_LEVELS_(table, name, call, params, args...) defines, for each level
 * the build has, a function name##_<level>(params) compiled for that
 * level whose body is call(name, level, args...) (params names args), and
 * table[SS_ISA_LEVELS], the functions by level; levels the build lacks
 * get the highest one below, as ss_isa lowers them. The calls: */
#if defined(__GNUC__) && !defined(__clang__)
#define SS_NOCLONE_ __attribute__((noinline, noclone)) /* no copies specialised on constant arguments */
#else
#define SS_NOCLONE_ __attribute__((noinline))
#endif
#define SS_CALL_PLAIN_(name, level, ...) name(__VA_ARGS__)
#define SS_CALL_LAST_(name, level, ...) name(__VA_ARGS__, level)
#define SS_CALL_AT_(name, level, ...) name##_at(level, __VA_ARGS__)
#define SS_LEVEL_(name, suffix, attr, level, call, params, ...)        \
	attr SS_NOCLONE_ static void name##_##suffix params               \
	{                                                                 \
		call(name, level, __VA_ARGS__);                           \
	}
#if defined(SS_HAVE_AVX512)
#define SS_LEVELS_(table, name, call, params, ...)                                   \
	SS_LEVEL_(name, generic, , SS_ISA_GENERIC, call, params, __VA_ARGS__)        \
	SS_LEVEL_(name, avx2, SS_AVX2, SS_ISA_AVX2, call, params, __VA_ARGS__)       \
	SS_LEVEL_(name, avx512, SS_AVX512, SS_ISA_AVX512, call, params, __VA_ARGS__) \
	static void(*const table[SS_ISA_LEVELS]) params = {name##_generic, name##_avx2, name##_avx512}
#elif defined(SS_HAVE_AVX2)
#define SS_LEVELS_(table, name, call, params, ...)                             \
	SS_LEVEL_(name, generic, , SS_ISA_GENERIC, call, params, __VA_ARGS__)  \
	SS_LEVEL_(name, avx2, SS_AVX2, SS_ISA_AVX2, call, params, __VA_ARGS__) \
	static void(*const table[SS_ISA_LEVELS]) params = {name##_generic, name##_avx2, name##_avx2}
#else
#define SS_LEVELS_(table, name, call, params, ...)                            \
	SS_LEVEL_(name, generic, , SS_ISA_GENERIC, call, params, __VA_ARGS__) \
	static void(*const table[SS_ISA_LEVELS]) params = {name##_generic, name##_generic, name##_generic}
#endif

/* SS_ISA_VARIANTS(name) defines name##_isa[level], the range function
 * name (an ss_range_fn defined SS_INLINE) compiled for each level. */
#define SS_RANGE_PARAMS_ (void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
#define SS_ISA_VARIANTS(name) SS_LEVELS_(name##_isa, name, SS_CALL_PLAIN_, SS_RANGE_PARAMS_, ctx, lo, hi, part)

/* SS_ISA_LEVEL_VARIANTS(name) is SS_ISA_VARIANTS for a range function
 * that takes the level its variant is compiled for as a fifth argument,
 * name(ctx, lo, hi, part, level): a constant in each variant, so that
 * code for other levels (another vector width, another level's helper)
 * folds away instead of being compiled into every variant. */
#define SS_ISA_LEVEL_VARIANTS(name) SS_LEVELS_(name##_isa, name, SS_CALL_LAST_, SS_RANGE_PARAMS_, ctx, lo, hi, part)

/* SS_LEVEL_FNS(name, params, args...) compiles name##_at(level, args...),
 * an SS_INLINE function, out of line once per level, as functions of the
 * parameter list params (which names args), and defines name##_lv[level],
 * the table of them. Where many variants would inline the same large body
 * whose cost a call does not notice (one call per plane), they call
 * name##_lv[level] instead: with the level a constant, a direct call of
 * one copy per level. */
#define SS_LEVEL_FNS(name, params, ...) SS_LEVELS_(name##_lv, name, SS_CALL_AT_, params, __VA_ARGS__)

/* SS_MAX_THREADS bounds the thread count of a call (and the pool), so
 * that per-part results can live in fixed arrays. */
#define SS_MAX_THREADS 256

/* ss_threads_of returns the threads a call asked for with threads: at
 * least 1, at most SS_MAX_THREADS. Workspace sizes per thread use it. */
static inline int ss_threads_of(int threads)
{
	return threads < 1 ? 1 : threads > SS_MAX_THREADS ? SS_MAX_THREADS : threads;
}

/* ss_ws_threads returns the threads a call given threads can use when
 * each needs per floats of the floats of workspace it got: at most
 * ss_threads_of(threads), at least 1. */
static inline int ss_ws_threads(int threads, ptrdiff_t floats, ptrdiff_t per)
{
	const ptrdiff_t t = ss_threads_of(threads), fit = per > 0 ? floats / per : t;
	return fit < 1 ? 1 : fit < t ? (int)fit : (int)t;
}

/* ss_range_fn processes items [lo, hi) of a job; ctx is the job's data
 * and part the index of the range, below the threads the job was given
 * (for per-thread scratch memory). */
typedef void (*ss_range_fn)(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part);

/* ss_parallel_for runs fn over [0, n), split into at most threads
 * contiguous ranges of at least grain items each, run by the caller and
 * the pool's workers (ss_threads_init), and returns when all are done;
 * threads <= 1 runs fn serially on the caller. Kernels pass the thread
 * count their caller (the engine) gave them, never a process-wide one.
 * Ranges never overlap, so fn may write per-item outputs without
 * synchronisation. If another thread's job is running, fn runs serially on
 * the caller instead: results must not depend on how the items are split. */
void ss_parallel_for(int threads, ptrdiff_t n, ptrdiff_t grain, ss_range_fn fn, void *ctx);

/* ss_grain returns the minimum number of items of ss_item_floats floats
 * each that make a range worth running on another thread. */
ptrdiff_t ss_grain(ptrdiff_t item_floats);

/* ss_transpose writes dst[j*dst_ld + i] = src[i*src_ld + j] + add for
 * i < rows, j < cols, in cache-sized tiles. */
void ss_transpose(const float *src, ptrdiff_t src_ld, float *dst, ptrdiff_t dst_ld,
                  ptrdiff_t rows, ptrdiff_t cols, float add);

/* ss_sum returns the sum of x[0..n) accumulated in eight interleaved
 * partial sums (lane l takes x[i] with i % 8 == l), a fixed order that
 * vectorises without reassociation. */
float ss_sum(const float *x, ptrdiff_t n);

/* ss_conv_bias_grad writes db, the sums of dy's planes per output
 * channel, over threads threads (conv.c). */
void ss_conv_bias_grad(int threads, const ss_conv_shape *s, const float *dy, float *db);

/* ss_pack_scatter packs the weights of a direct convolution's input
 * gradient by scattering: wpk[cb][t][oc][m] = w[oc][4cb + m][t] for taps
 * t < kh*kw, zero for channels past C (round4(C)*kh*kw*OC floats). */
void ss_pack_scatter(const ss_conv_shape *s, const float *w, float *wpk);

/* The AVX-512 direct convolution (direct512.c), behind the
 * ss_conv_direct_* entry points at level SS_ISA_AVX512: whether a
 * stride-1 shape fits its int offsets, its workspace, its passes. */
int ss_d512_fits(const ss_conv_shape *s);
ptrdiff_t ss_d512_workspace(int threads, const ss_conv_shape *s, int backward);
void ss_d512_forward(int threads, const ss_conv_shape *s, const float *x, const float *w, const float *b,
                     float *y, float *ws, ptrdiff_t ws_len);
void ss_d512_backward(int threads, const ss_conv_shape *s, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float *db, float *ws, ptrdiff_t ws_len);

/* The weight gradient as one GEMM over the batch's pixels at level AVX2,
 * for any stride (wgrad.c): whether it runs the shape at level isa, its
 * workspace over threads threads, and the pass, which overwrites dw (with
 * less workspace than asked for, it uses fewer threads). */
int ss_wgrad_supported(int isa, const ss_conv_shape *s);
ptrdiff_t ss_wgrad_workspace(int threads, const ss_conv_shape *s);
void ss_wgrad(int threads, const ss_conv_shape *s, const float *x, const float *dy, float *dw, float *ws,
              ptrdiff_t ws_len);
/* ss_wgrad_set_test bounds the floats of the channel-last images of one
 * group and of a part's packed output gradient (0: the defaults) and, with
 * all nonzero, has ss_wgrad_supported accept every shape at level AVX2,
 * so that tests reach every path with small shapes. Not safe while a
 * kernel runs; the results stay within rounding of the defaults'. */
void ss_wgrad_set_test(ptrdiff_t xt_floats, ptrdiff_t dy_floats, int all);

/* Matrix products with one small dimension at level AVX2 (smallgemm.c).
 * ss_gemm_small reports whether they run a product whose small dimension
 * is small and whose large operand is p x q. ss_gemm_small_nt computes
 * c = a b^T (c: m x n, a: m x k, b: n x k, n small) and ss_gemm_small_tn
 * c = a^T b (a: k x m, b: k x n, k small), c's rows ldc apart and
 * overwritten; ss_fc_mid_forward is a fully connected layer's forward pass
 * (y = x w^T + b, b may be NULL; n rows small) and ss_fc_mid_wgrad its
 * weight gradient (dw = dy^T x). Each returns 0, having done nothing, for
 * a product ss_gemm_small declines or when out of memory. */
int ss_gemm_small(int isa, int small, int p, int q);
int ss_gemm_small_nt(int isa, int threads, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                     float *c, int ldc);
int ss_gemm_small_tn(int isa, int threads, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                     float *c, int ldc);
int ss_fc_mid_forward(int isa, int threads, int n, int in, int out, const float *x, const float *w,
                      const float *b, float *y);
int ss_fc_mid_wgrad(int isa, int threads, int n, int in, int out, const float *x, const float *dy, float *dw);

/* ss_s2d_pays reports whether SS_CONV_S2D (s2d.c) is the fastest method
 * for one pass of a shape it supports, at level isa. */
int ss_s2d_pays(int isa, const ss_conv_shape *s, int pass);

/* ss_winograd_set_test sets the tiles of one block of the Winograd
 * convolution (winograd.c; 0: the default), so that tests cross block
 * boundaries inside images with small shapes. Not safe while a kernel
 * runs. */
void ss_winograd_set_test(ptrdiff_t tiles);

static inline int ss_imin(int a, int b) { return a < b ? a : b; }
static inline int ss_imax(int a, int b) { return a > b ? a : b; }

static inline int ss_conv_out_h(const ss_conv_shape *s)
{
	return (s->h + 2 * s->pad_h - s->kh) / s->stride_h + 1;
}

static inline int ss_conv_out_w(const ss_conv_shape *s)
{
	return (s->w + 2 * s->pad_w - s->kw) / s->stride_w + 1;
}

/* ss_conv_planes returns the strides between the planes of consecutive
 * images (xn, yn) and channels (xc, yc) of x and y in the shape's layout:
 * plane (n, c) of x is at x + n*xn + c*xc. The tensors hold s->groups
 * blocks of s->c (x) and s->oc (y) channels (see ss_conv_shape): every
 * kernel addresses activations through these strides only, which is what
 * lets a grouped convolution run group by group. */
static inline void ss_conv_planes(const ss_conv_shape *s, ptrdiff_t *xn, ptrdiff_t *xc, ptrdiff_t *yn,
                                  ptrdiff_t *yc)
{
	const ptrdiff_t hw = (ptrdiff_t)s->h * s->w;
	const ptrdiff_t p = (ptrdiff_t)ss_conv_out_h(s) * ss_conv_out_w(s);
	const ptrdiff_t g = s->groups > 1 ? s->groups : 1;
	if (s->layout == SS_CNHW) {
		*xn = hw, *xc = s->n * hw, *yn = p, *yc = s->n * p;
	} else {
		*xn = g * s->c * hw, *xc = hw, *yn = g * s->oc * p, *yc = p;
	}
}

#endif /* SOFTSYNC_INTERNAL_H */
