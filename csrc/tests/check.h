/* Minimal test harness for the C tests: deterministic random numbers,
 * guarded buffers and a failure counter. */
#ifndef SOFTSYNC_TEST_CHECK_H
#define SOFTSYNC_TEST_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		if (!(cond)) {                                            \
			failures++;                                       \
			fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);   \
			fprintf(stderr, __VA_ARGS__);                     \
			fputc('\n', stderr);                              \
		}                                                         \
	} while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

/* uniform returns a value in [-1, 1) (xorshift64*). */
static inline float uniform(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	uint64_t r = rng_state * 2685821657736338717u;
	return (float)((double)(r >> 40) / (double)(1u << 24) * 2.0 - 1.0);
}

/* guard words surround each buffer to catch writes past either end even
 * without AddressSanitizer. */
#define GUARD 8
#define GUARD_VALUE 4242.0f

static inline float *guarded(size_t n)
{
	float *p = n < ((size_t)1 << 40) ? malloc(sizeof(float) * (n + 2 * GUARD)) : NULL;
	if (p == NULL) {
		perror("malloc");
		exit(2);
	}
	for (size_t i = 0; i < n + 2 * GUARD; i++)
		p[i] = GUARD_VALUE;
	return p + GUARD;
}

static inline void check_guards(const float *p, size_t n, const char *name)
{
	for (int i = 1; i <= GUARD; i++) {
		CHECK(p[-i] == GUARD_VALUE, "%s: write before the buffer", name);
		CHECK(p[n + (size_t)i - 1] == GUARD_VALUE, "%s: write past the buffer", name);
	}
}

static inline void release(float *p) { free(p - GUARD); }

/* zeros returns n zeroed doubles. */
static inline double *zeros(size_t n)
{
	double *p = n < ((size_t)1 << 40) ? calloc(n ? n : 1, sizeof(double)) : NULL;
	if (p == NULL) {
		perror("calloc");
		exit(2);
	}
	return p;
}

static inline int report(const char *name)
{
	if (failures) {
		fprintf(stderr, "%s: %d failures\n", name, failures);
		return 1;
	}
	printf("%s: all checks passed\n", name);
	return 0;
}

#endif
