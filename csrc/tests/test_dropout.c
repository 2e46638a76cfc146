/* Dropout against the mask written from its definition (the hashes of
 * the Go package's Dropout), its kept fraction, masks of a tensor split at
 * uneven offsets (also across a multiple of 2^32), in place, and ss_add,
 * with guard words, at every instruction-set level, serially and over
 * three threads. */
#include <stdint.h>

#include "check.h"
#include "softsync.h"

static int isa, threads;

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static uint32_t hash32(uint32_t x)
{
	x ^= x >> 17, x *= 0xed5ad4bbu;
	x ^= x >> 11, x *= 0xac4c1b51u;
	x ^= x >> 15, x *= 0x31848babu;
	return x ^ (x >> 14);
}

static int kept(uint64_t seed, uint64_t c, uint32_t threshold)
{
	const uint32_t key = (uint32_t)mix64(mix64(seed) + (c >> 32));
	return hash32((uint32_t)c ^ key) >= threshold;
}

static void test_dropout(size_t n, uint64_t seed, uint64_t offset, float ratio)
{
	const uint32_t thr = (uint32_t)((double)ratio * 4294967296.0);
	const float scale = 1.0f / (1.0f - ratio);
	float *x = guarded(n), *y = guarded(n), *z = guarded(n);
	for (size_t i = 0; i < n; i++)
		x[i] = uniform();
	ss_dropout(isa, threads, (ptrdiff_t)n, x, y, seed, offset, thr, scale);
	size_t nk = 0;
	for (size_t i = 0; i < n; i++) {
		const int k = kept(seed, offset + i, thr);
		nk += (size_t)k;
		const float want = x[i] * (k ? scale : 0.0f);
		CHECK(y[i] == want, "dropout y[%zu] = %g, want %g", i, y[i], want);
	}
	const double p = 1.0 - ratio, se = sqrt(p * (1 - p) / (double)n);
	CHECK(fabs((double)nk / (double)n - p) <= 5 * se + 1e-12, "kept %zu of %zu, want a fraction %g", nk, n, p);
	/* Split at uneven points, each part with its own offset. */
	for (size_t lo = 0, step = 1; lo < n; lo += step, step = 3 * step + 1) {
		const size_t len = lo + step < n ? step : n - lo;
		ss_dropout(isa, threads, (ptrdiff_t)len, x + lo, z + lo, seed, offset + lo, thr, scale);
	}
	CHECK(memcmp(y, z, sizeof(float) * n) == 0, "dropout of a split tensor differs");
	memcpy(z, x, sizeof(float) * n);
	ss_dropout(isa, threads, (ptrdiff_t)n, z, z, seed, offset, thr, scale);
	CHECK(memcmp(y, z, sizeof(float) * n) == 0, "dropout in place differs");
	check_guards(y, n, "y"), check_guards(z, n, "z");
	release(x), release(y), release(z);
}

static void test_add(size_t n)
{
	float *a = guarded(n), *b = guarded(n), *y = guarded(n);
	for (size_t i = 0; i < n; i++)
		a[i] = uniform(), b[i] = uniform();
	ss_add(isa, threads, (ptrdiff_t)n, a, b, y);
	for (size_t i = 0; i < n; i++)
		CHECK(y[i] == a[i] + b[i], "add y[%zu] = %g, want %g", i, y[i], a[i] + b[i]);
	ss_add(isa, threads, (ptrdiff_t)n, a, b, a);
	CHECK(memcmp(a, y, sizeof(float) * n) == 0, "add in place differs");
	check_guards(y, n, "add y"), check_guards(a, n, "add a");
	release(a), release(b), release(y);
}

int main(void)
{
	ss_set_min_parallel_floats(1);
	for (threads = 1; threads <= 3; threads += 2)
		for (isa = 0; isa < SS_ISA_LEVELS; isa++) {
			ss_threads_init(threads);
			test_dropout(1, 1, 0, 0.5f);
			test_dropout(4099, 42, 0, 0.5f);
			test_dropout(3001, 7, 12345, 0.1f);
			test_dropout(2000, 1u << 20, ((uint64_t)1 << 32) - 1000, 0.9f);
			test_dropout(1037, 3, 0, 0.0f);
			test_add(1);
			test_add(4099);
		}
	return report("dropout");
}
