/* The instruction-set level of the running CPU. */
#include "internal.h"

int ss_isa_best(void)
{
#if defined(SS_HAVE_AVX2)
	static int best = -1; /* a racing first call computes the same value */
	if (best < 0) {
		/* __builtin_cpu_supports also checks that the operating
		 * system saves the AVX and AVX-512 registers (XCR0). */
		__builtin_cpu_init();
		int l = SS_ISA_GENERIC;
		if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
			l = SS_ISA_AVX2;
#if defined(SS_HAVE_AVX512)
		if (l == SS_ISA_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
		    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
		    __builtin_cpu_supports("avx512vl"))
			l = SS_ISA_AVX512;
#endif
		best = l;
	}
	return best;
#else
	return SS_ISA_GENERIC;
#endif
}
