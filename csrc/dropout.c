/* Inverted dropout whose mask is a hash of each element's position in a
 * seeded stream (see ss_dropout), so that nothing is stored between the
 * passes and every split of the work gives the same mask. The loop is
 * integer multiply-xorshift arithmetic that vectorises, compiled once per
 * instruction-set level (SS_ISA_VARIANTS). */
#include <stdint.h>

#include "internal.h"

/* fmix64 is SplitMix64's output function. */
static uint64_t fmix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

typedef struct {
	const float *x;
	float *y;
	uint64_t seed, offset;
	uint32_t threshold;
	float scale;
} dropout_job;

/* dropout_run writes y[i] for i < n, whose stream positions share the
 * upper word and so the key; the lower word of position i is c0 + i. */
SS_INLINE void dropout_run(const float *x, float *y, ptrdiff_t n, uint32_t c0, uint32_t key,
                           uint32_t threshold, float scale)
{
	/* A 32-bit counter beside i: deriving it from i costs 64-bit lanes. */
	uint32_t c = c0;
	for (ptrdiff_t i = 0; i < n; i++, c++) {
		uint32_t h = c ^ key; /* triple32 */
		h ^= h >> 17;
		h *= 0xed5ad4bbu;
		h ^= h >> 11;
		h *= 0xac4c1b51u;
		h ^= h >> 15;
		h *= 0x31848babu;
		h ^= h >> 14;
		/* A select of constants, then a multiply: the loop vectorises
		 * without branches, and a dropped element is x*0 as in
		 * PyTorch (x * mask). */
		const float m = h >= threshold ? scale : 0.0f;
		y[i] = x[i] * m;
	}
}

SS_INLINE void dropout_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const dropout_job *j = ctx;
	const uint64_t fs = fmix64(j->seed);
	for (ptrdiff_t i = lo; i < hi;) {
		const uint64_t c = j->offset + (uint64_t)i;
		const uint32_t c0 = (uint32_t)c;
		/* Positions up to the next multiple of 2^32 share the key. */
		const uint64_t left = ((uint64_t)1 << 32) - c0;
		const ptrdiff_t n = (uint64_t)(hi - i) < left ? hi - i : (ptrdiff_t)left;
		dropout_run(j->x + i, j->y + i, n, c0, (uint32_t)fmix64(fs + (c >> 32)), j->threshold, j->scale);
		i += n;
	}
}

SS_ISA_VARIANTS(dropout_part);

void ss_dropout(int isa, int threads, ptrdiff_t n, const float *x, float *y, unsigned long long seed,
                unsigned long long offset, unsigned threshold, float scale)
{
	dropout_job j = {.x = x, .y = y, .seed = seed, .offset = offset, .threshold = threshold, .scale = scale};
	ss_parallel_for(threads, n, 16 * ss_grain(1), dropout_part_isa[ss_isa(isa)], &j);
}
