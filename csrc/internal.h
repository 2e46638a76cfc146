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

/* ss_range_fn processes items [lo, hi) of a job; ctx is the job's data
 * and part the index, below ss_threads(), of the range (for per-thread
 * scratch memory). */
typedef void (*ss_range_fn)(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part);

/* ss_parallel_for runs fn over [0, n), split into contiguous ranges of at
 * least grain items over the threads of ss_threads_init (at most
 * max_parts ranges unless max_parts is 0), the caller included, and
 * returns when all are done. Ranges never overlap, so fn
 * may write per-item outputs without synchronisation. If another thread's
 * job is running, fn runs serially on the caller instead. */
void ss_parallel_for(int max_parts, ptrdiff_t n, ptrdiff_t grain, ss_range_fn fn, void *ctx);

/* ss_grain returns the minimum number of items of ss_item_floats floats
 * each that make a range worth running on another thread. */
ptrdiff_t ss_grain(ptrdiff_t item_floats);

/* Row and channel ranges of im2col.c, for the parallel convolution. */
void ss_im2col_rows(const ss_conv_shape *s, const float *x, float *col, ptrdiff_t ldcol,
                    ptrdiff_t r0, ptrdiff_t r1);
void ss_col2im_channels(const ss_conv_shape *s, const float *col, ptrdiff_t ldcol, float *x,
                        int c0, int c1);

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

#endif /* SOFTSYNC_INTERNAL_H */
