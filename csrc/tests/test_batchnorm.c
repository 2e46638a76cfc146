/* Batch normalisation against loops written from PyTorch's BatchNorm2d
 * formulas in double precision, with guard words around every buffer, at
 * every instruction-set level, serially and over three threads; every
 * run must give the first run's bits, in place too. */
#include "check.h"
#include "softsync.h"

static int isa, threads;

/* first holds the outputs of the first run of each shape, which every
 * later run must equal bit for bit. */
static float *first[7];

static void save_or_compare(int k, const float *got, size_t n, const char *name)
{
	if (first[k] == NULL) {
		first[k] = malloc(sizeof(float) * n);
		memcpy(first[k], got, sizeof(float) * n);
		return;
	}
	CHECK(memcmp(first[k], got, sizeof(float) * n) == 0, "%s at level %d over %d threads differs from the first run",
	      name, isa, threads);
}

static void test_bn(ss_bn_shape s)
{
	const size_t c = (size_t)s.c, n = (size_t)s.n * c * (size_t)s.hw;
	const double m = (double)s.n * (double)s.hw;
	float *x = guarded(n), *gamma = guarded(c), *beta = guarded(c), *y = guarded(n), *mean = guarded(c);
	float *var = guarded(c), *dy = guarded(n), *dx = guarded(n), *dgamma = guarded(c), *dbeta = guarded(c);
	float *yi = guarded(n);
	for (size_t i = 0; i < n; i++) {
		x[i] = 3.0f + 2.0f * uniform(); /* a mean far from zero */
		dy[i] = uniform();
	}
	for (size_t k = 0; k < c; k++) {
		gamma[k] = 1.0f + uniform();
		beta[k] = uniform();
	}
	ss_bn_forward_train(isa, threads, &s, x, gamma, beta, y, mean, var);
	ss_bn_forward_infer(isa, threads, &s, x, gamma, beta, mean, var, yi);
	ss_bn_backward(isa, threads, &s, x, gamma, mean, var, dy, dx, dgamma, dbeta);
	for (size_t k = 0; k < c; k++) {
		double mu = 0, v = 0, sdy = 0, sdyx = 0;
		for (int i = 0; i < s.n; i++)
			for (ptrdiff_t p = 0; p < s.hw; p++)
				mu += x[((size_t)i * c + k) * (size_t)s.hw + (size_t)p];
		mu /= m;
		for (int i = 0; i < s.n; i++)
			for (ptrdiff_t p = 0; p < s.hw; p++) {
				const size_t e = ((size_t)i * c + k) * (size_t)s.hw + (size_t)p;
				v += (x[e] - mu) * (x[e] - mu);
			}
		v /= m;
		CHECK(fabs(mean[k] - mu) <= 1e-6 * fabs(mu), "mean[%zu] = %g, want %g", k, mean[k], mu);
		CHECK(fabs(var[k] - v) <= 1e-5 * v, "var[%zu] = %g, want %g", k, var[k], v);
		/* The backward pass's formulas use the statistics it is given. */
		const double mf = mean[k], is = 1.0 / sqrt((double)var[k] + s.eps);
		for (int i = 0; i < s.n; i++)
			for (ptrdiff_t p = 0; p < s.hw; p++) {
				const size_t e = ((size_t)i * c + k) * (size_t)s.hw + (size_t)p;
				const double want = gamma[k] * (x[e] - mu) / sqrt(v + s.eps) + beta[k];
				CHECK(fabs(y[e] - want) <= 1e-5 * (1 + fabs(want)), "y[%zu] = %g, want %g", e, y[e], want);
				CHECK(yi[e] == y[e], "inference y[%zu] = %g, training %g", e, yi[e], y[e]);
				sdy += dy[e];
				sdyx += dy[e] * (x[e] - mf);
			}
		CHECK(fabs(dbeta[k] - sdy) <= 1e-5 * (1 + fabs(sdy)), "dbeta[%zu] = %g, want %g", k, dbeta[k], sdy);
		CHECK(fabs(dgamma[k] - sdyx * is) <= 1e-5 * (1 + fabs(sdyx * is)), "dgamma[%zu] = %g, want %g", k,
		      dgamma[k], sdyx * is);
		for (int i = 0; i < s.n; i++)
			for (ptrdiff_t p = 0; p < s.hw; p++) {
				const size_t e = ((size_t)i * c + k) * (size_t)s.hw + (size_t)p;
				const double want = gamma[k] * is * (dy[e] - sdy / m - (x[e] - mf) * is * is * sdyx / m);
				CHECK(fabs(dx[e] - want) <= 1e-5 * (1 + fabs(want)), "dx[%zu] = %g, want %g", e, dx[e], want);
			}
	}
	save_or_compare(0, y, n, "y");
	save_or_compare(1, mean, c, "mean");
	save_or_compare(2, var, c, "var");
	save_or_compare(3, dx, n, "dx");
	save_or_compare(4, dgamma, c, "dgamma");
	save_or_compare(5, dbeta, c, "dbeta");
	/* In place: y over x, dx over dy. */
	memcpy(yi, x, sizeof(float) * n);
	ss_bn_forward_train(isa, threads, &s, yi, gamma, beta, yi, mean, var);
	CHECK(memcmp(yi, y, sizeof(float) * n) == 0, "in-place forward differs");
	memcpy(yi, dy, sizeof(float) * n);
	ss_bn_backward(isa, threads, &s, x, gamma, mean, var, yi, yi, dgamma, dbeta);
	CHECK(memcmp(yi, dx, sizeof(float) * n) == 0, "in-place backward differs");
	ss_bn_backward(isa, threads, &s, x, gamma, mean, var, dy, NULL, dgamma, dbeta);
	save_or_compare(4, dgamma, c, "dgamma (dx NULL)");
	check_guards(y, n, "y"), check_guards(yi, n, "yi"), check_guards(dx, n, "dx");
	check_guards(mean, c, "mean"), check_guards(var, c, "var");
	check_guards(dgamma, c, "dgamma"), check_guards(dbeta, c, "dbeta");
	release(x), release(gamma), release(beta), release(y), release(mean), release(var);
	release(dy), release(dx), release(dgamma), release(dbeta), release(yi);
}

int main(void)
{
	static const ss_bn_shape shapes[] = {
		{4, 5, 1, 1e-5f},      /* after a fully connected layer */
		{3, 4, 37, 1e-5f},     /* runs of whole and partial vectors */
		{1, 6, 2 * 49, 1e-5f}, /* a CNHW tensor as one image */
		{2, 3, 300, 1e-3f},
	};
	ss_set_min_parallel_floats(1);
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		for (int k = 0; k < 7; k++) {
			free(first[k]);
			first[k] = NULL;
		}
		for (threads = 1; threads <= 3; threads += 2)
			for (isa = 0; isa < SS_ISA_LEVELS; isa++) {
				ss_threads_init(threads);
				rng_state = 0x9e3779b97f4a7c15u + i; /* the same inputs every run */
				test_bn(shapes[i]);
			}
	}
	return report("batchnorm");
}
