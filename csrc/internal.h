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
