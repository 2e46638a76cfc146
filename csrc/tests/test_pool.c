/* ss_pool_out against Caffe's sizes worked out by hand, and
 * ss_pool_forward / ss_pool_backward against loops written from Caffe's
 * definitions, with guard words around every buffer. */
#include <float.h>

#include "check.h"
#include "softsync.h"

static void test_sizes(void)
{
	static const int cases[][5] = {
		/* in k s pad want */
		{24, 2, 2, 0, 12}, {8, 2, 2, 0, 4}, {32, 3, 2, 0, 16}, {16, 3, 2, 0, 8},
		{8, 3, 2, 0, 4}, {7, 3, 2, 0, 3}, {5, 2, 2, 0, 3}, {8, 3, 2, 1, 5},
		{5, 3, 2, 1, 3}, {3, 3, 3, 2, 2}, {1, 1, 1, 0, 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const int *c = cases[i];
		int got = ss_pool_out(c[0], c[1], c[3], c[2]);
		CHECK(got == c[4], "pool_out(in=%d k=%d s=%d pad=%d) = %d, want %d", c[0], c[1], c[2], c[3], got, c[4]);
	}
}

/* isa is the instruction-set level the kernels are called at and threads
 * the threads they split their work over; main runs the tests at each
 * level (levels above the CPU's run as its best), serially and over three
 * threads. */
static int isa, threads;

static void test_shape(ss_pool_shape s)
{
	const int oh = ss_pool_out(s.h, s.kh, s.pad_h, s.stride_h);
	const int ow = ss_pool_out(s.w, s.kw, s.pad_w, s.stride_w);
	if (oh <= 0 || ow <= 0) {
		CHECK(0, "empty output %d x %d", oh, ow);
		return;
	}
	const size_t planes = (size_t)s.n * (size_t)s.c;
	const size_t in = planes * (size_t)s.h * (size_t)s.w, out = planes * (size_t)oh * (size_t)ow;
	float *x = guarded(in), *y = guarded(out), *dy = guarded(out), *dx = guarded(in);
	int *mask = malloc(sizeof(int) * (out + 1));
	double *want = zeros(in);
	mask[out] = -77;
	for (size_t i = 0; i < in; i++)
		x[i] = uniform();
	for (size_t i = 0; i < out; i++)
		dy[i] = uniform();
	ss_pool_forward(isa, threads, &s, x, y, s.mode == SS_POOL_MAX ? mask : NULL);
	for (size_t q = 0; q < planes; q++) {
		const float *xp = x + q * s.h * s.w;
		for (int py = 0; py < oh; py++)
			for (int px = 0; px < ow; px++) {
				size_t o = (q * oh + py) * ow + px;
				int hs = py * s.stride_h - s.pad_h, ws = px * s.stride_w - s.pad_w;
				int he = hs + s.kh < s.h + s.pad_h ? hs + s.kh : s.h + s.pad_h;
				int we = ws + s.kw < s.w + s.pad_w ? ws + s.kw : s.w + s.pad_w;
				int size = (he - hs) * (we - ws);
				double best = -INFINITY, sum = 0.0;
				int arg = -1;
				for (int h = hs < 0 ? 0 : hs; h < (he < s.h ? he : s.h); h++)
					for (int w = ws < 0 ? 0 : ws; w < (we < s.w ? we : s.w); w++) {
						sum += xp[h * s.w + w];
						if (arg < 0 || xp[h * s.w + w] > best) {
							best = xp[h * s.w + w];
							arg = h * s.w + w;
						}
					}
				if (s.mode == SS_POOL_MAX) {
					CHECK(y[o] == (float)best && mask[o] == arg,
					      "max y[%zu] = %g (arg %d), want %g (arg %d)", o, y[o], mask[o], best, arg);
					want[q * s.h * s.w + (size_t)arg] += dy[o];
				} else {
					CHECK(fabs(y[o] - sum / size) <= 1e-6, "avg y[%zu] = %g, want %g", o, y[o], sum / size);
					for (int h = hs < 0 ? 0 : hs; h < (he < s.h ? he : s.h); h++)
						for (int w = ws < 0 ? 0 : ws; w < (we < s.w ? we : s.w); w++)
							want[q * s.h * s.w + (size_t)(h * s.w + w)] += (double)dy[o] / size;
				}
			}
	}
	CHECK(mask[out] == -77, "mask written past its end");
	for (size_t i = 0; i < in; i++)
		dx[i] = NAN;
	CHECK(ss_pool_backward(isa, threads, &s, dy, s.mode == SS_POOL_MAX ? mask : NULL, dx) == 0, "bad mask entries reported");
	for (size_t i = 0; i < in; i++)
		CHECK(fabs(dx[i] - want[i]) <= 1e-6 * (1.0 + fabs(want[i])), "dx[%zu] = %g, want %g", i, dx[i], want[i]);
	if (s.mode == SS_POOL_MAX && out >= 2) {
		/* A corrupted mask is skipped and counted, never followed. */
		mask[0] = -5;
		mask[out - 1] = s.h * s.w;
		CHECK(ss_pool_backward(isa, threads, &s, dy, mask, dx) == 2, "corrupted mask entries not counted");
		check_guards(dx, in, "dx after a corrupted mask");
	}
	check_guards(x, in, "x");
	check_guards(y, out, "y");
	check_guards(dy, out, "dy");
	check_guards(dx, in, "dx");
	release(x);
	release(y);
	release(dy);
	release(dx);
	free(mask);
	free(want);
}

int main(void)
{
	static const ss_pool_shape shapes[] = {
		/* mode n c h w kh kw ph pw sh sw */
		{0, 2, 3, 7, 7, 3, 3, 0, 0, 2, 2},
		{0, 1, 2, 6, 5, 2, 2, 0, 0, 2, 2},
		{0, 2, 2, 8, 8, 3, 3, 1, 1, 2, 2},
		{0, 1, 3, 5, 6, 3, 2, 1, 1, 2, 1},
		{0, 2, 1, 3, 3, 3, 3, 2, 2, 3, 3},
		{0, 2, 4, 32, 32, 3, 3, 0, 0, 2, 2},
		{0, 2, 5, 24, 24, 2, 2, 0, 0, 2, 2},
		{0, 2, 2, 9, 12, 5, 5, 0, 0, 3, 3},
		{0, 1, 2, 5, 8, 3, 3, 1, 0, 2, 2},
		{0, 1, 1, 6, 6, 1, 1, 0, 0, 1, 1},
		/* Caffe's AlexNet (pool1, pool2): a last column only the last
		 * window reads; then the same with stride 3. */
		{0, 1, 2, 55, 55, 3, 3, 0, 0, 2, 2},
		{0, 2, 3, 27, 27, 3, 3, 0, 0, 2, 2},
		{0, 1, 2, 10, 13, 4, 4, 0, 0, 3, 3},
		/* Horizontal padding: ResNet's 3x3/2 with padding 1 on a
		 * smaller plane, odd sizes, padding 2, stride 1, several bands
		 * of rows. */
		{0, 1, 2, 28, 28, 3, 3, 1, 1, 2, 2},
		{0, 1, 2, 13, 11, 3, 3, 1, 1, 2, 2},
		{0, 2, 1, 11, 9, 4, 5, 2, 2, 2, 2},
		{0, 1, 1, 70, 61, 3, 3, 1, 1, 1, 1},
	};
	test_sizes();
	/* Serially, then split over three threads down to single planes. */
	for (threads = 1; threads <= 3; threads += 2)
		for (isa = 0; isa < SS_ISA_LEVELS; isa++) {
			CHECK(ss_threads_init(threads) == 0 && ss_threads() == threads, "ss_threads_init(%d)", threads);
			ss_set_min_parallel_floats(1);
			for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
				ss_pool_shape s = shapes[i];
				test_shape(s);
				s.mode = SS_POOL_AVG;
				test_shape(s);
			}
		}
	return report("pool");
}
