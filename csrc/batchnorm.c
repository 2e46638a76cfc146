/* Batch normalisation per channel (PyTorch's BatchNorm2d), split over
 * channels (training, backward) or planes (inference) across threads.
 *
 * The statistics are sums over a channel's n*hw values in double
 * precision: each of the channel's runs of hw floats is summed in eight
 * interleaved lanes (lane l takes the run's elements i with i % 8 == l),
 * runs in order, lanes added pairwise at the end. That order is fixed, so
 * every thread count gives the same bits, and the loops vectorise without
 * reassociation; they are compiled once per instruction-set level
 * (SS_ISA_VARIANTS) and every level gives the same bits. The variance is
 * E[x^2] - E[x]^2 from one pass: in double precision its cancellation
 * stays below float rounding unless |mean|/std exceeds about 10^4, where
 * the float inputs themselves no longer resolve the spread. */
#include <math.h>

#include "internal.h"

typedef struct {
	const ss_bn_shape *s;
	const float *x, *gamma, *beta, *mean_in, *var_in, *dy;
	float *y, *mean, *var, *dx, *dgamma, *dbeta;
} bn_job;

/* bn_lanes adds x[i] to a[i % 8] and x[i]*x[i] to a2[i % 8] for i < n
 * (b == NULL), or b[i] to a[i % 8] and b[i]*(x[i] - m) to a2[i % 8]. */
SS_INLINE void bn_lanes(const float *restrict x, const float *restrict b, double m, ptrdiff_t n,
                        double *restrict a, double *restrict a2)
{
	ptrdiff_t i = 0;
	if (b == NULL) {
		for (; i + 8 <= n; i += 8)
			for (int l = 0; l < 8; l++) {
				const double v = x[i + l];
				a[l] += v;
				a2[l] += v * v;
			}
		for (; i < n; i++) {
			const double v = x[i];
			a[i % 8] += v;
			a2[i % 8] += v * v;
		}
		return;
	}
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++) {
			const double g = b[i + l];
			a[l] += g;
			a2[l] += g * ((double)x[i + l] - m);
		}
	for (; i < n; i++) {
		const double g = b[i];
		a[i % 8] += g;
		a2[i % 8] += g * ((double)x[i] - m);
	}
}

static inline double bn_reduce(const double a[8])
{
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* bn_apply writes y[i] = (x[i] - m)*sc + b for i < n; y may alias x. */
SS_INLINE void bn_apply(const float *x, float *y, ptrdiff_t n, float m, float sc, float b)
{
	for (ptrdiff_t i = 0; i < n; i++)
		y[i] = (x[i] - m) * sc + b;
}

static inline float bn_invstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }

/* Channels [lo, hi): statistics, then y. */
SS_INLINE void bn_train_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const bn_job *j = ctx;
	const ss_bn_shape *s = j->s;
	const double m = (double)s->n * (double)s->hw;
	for (ptrdiff_t c = lo; c < hi; c++) {
		double a[8] = {0}, a2[8] = {0};
		for (int n = 0; n < s->n; n++)
			bn_lanes(j->x + ((ptrdiff_t)n * s->c + c) * s->hw, NULL, 0.0, s->hw, a, a2);
		const double mu = bn_reduce(a) / m, v = bn_reduce(a2) / m - mu * mu;
		const float mf = (float)mu, vf = v > 0.0 ? (float)v : 0.0f;
		j->mean[c] = mf;
		j->var[c] = vf;
		const float sc = j->gamma[c] * bn_invstd(vf, s->eps);
		for (int n = 0; n < s->n; n++) {
			const ptrdiff_t o = ((ptrdiff_t)n * s->c + c) * s->hw;
			bn_apply(j->x + o, j->y + o, s->hw, mf, sc, j->beta[c]);
		}
	}
}

/* Planes [lo, hi) (q = n*C + c) with the given statistics. */
SS_INLINE void bn_infer_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const bn_job *j = ctx;
	const ss_bn_shape *s = j->s;
	for (ptrdiff_t q = lo; q < hi; q++) {
		const ptrdiff_t c = q % s->c;
		const float sc = j->gamma[c] * bn_invstd(j->var_in[c], s->eps);
		bn_apply(j->x + q * s->hw, j->y + q * s->hw, s->hw, j->mean_in[c], sc, j->beta[c]);
	}
}

/* dx[i] = ((dy[i] - mdy) - (x[i] - m)*k)*a for i < n; dx may alias dy. */
SS_INLINE void bn_dx(const float *x, const float *dy, float *dx, ptrdiff_t n, float m, float mdy, float k,
                     float a)
{
	for (ptrdiff_t i = 0; i < n; i++)
		dx[i] = ((dy[i] - mdy) - (x[i] - m) * k) * a;
}

/* Channels [lo, hi): dgamma, dbeta, then dx. */
SS_INLINE void bn_backward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const bn_job *j = ctx;
	const ss_bn_shape *s = j->s;
	const double m = (double)s->n * (double)s->hw;
	for (ptrdiff_t c = lo; c < hi; c++) {
		const float mf = j->mean_in[c], is = bn_invstd(j->var_in[c], s->eps);
		double a[8] = {0}, a2[8] = {0};
		for (int n = 0; n < s->n; n++) {
			const ptrdiff_t o = ((ptrdiff_t)n * s->c + c) * s->hw;
			bn_lanes(j->x + o, j->dy + o, mf, s->hw, a, a2);
		}
		const double sdy = bn_reduce(a), sdyx = bn_reduce(a2);
		j->dgamma[c] = (float)(sdyx * is);
		j->dbeta[c] = (float)sdy;
		if (j->dx == NULL)
			continue;
		const float mdy = (float)(sdy / m), k = (float)(sdyx * is * is / m), sc = j->gamma[c] * is;
		for (int n = 0; n < s->n; n++) {
			const ptrdiff_t o = ((ptrdiff_t)n * s->c + c) * s->hw;
			bn_dx(j->x + o, j->dy + o, j->dx + o, s->hw, mf, mdy, k, sc);
		}
	}
}

SS_ISA_VARIANTS(bn_train_part);
SS_ISA_VARIANTS(bn_infer_part);
SS_ISA_VARIANTS(bn_backward_part);

void ss_bn_forward_train(int isa, int threads, const ss_bn_shape *s, const float *x, const float *gamma,
                         const float *beta, float *y, float *mean, float *var)
{
	bn_job j = {.s = s, .x = x, .gamma = gamma, .beta = beta, .y = y, .mean = mean, .var = var};
	ss_parallel_for(threads, s->c, ss_grain(s->n * s->hw), bn_train_part_isa[ss_isa(isa)], &j);
}

void ss_bn_forward_infer(int isa, int threads, const ss_bn_shape *s, const float *x, const float *gamma,
                         const float *beta, const float *mean, const float *var, float *y)
{
	bn_job j = {.s = s, .x = x, .gamma = gamma, .beta = beta, .mean_in = mean, .var_in = var, .y = y};
	ss_parallel_for(threads, (ptrdiff_t)s->n * s->c, ss_grain(s->hw), bn_infer_part_isa[ss_isa(isa)], &j);
}

void ss_bn_backward(int isa, int threads, const ss_bn_shape *s, const float *x, const float *gamma,
                    const float *mean, const float *var, const float *dy, float *dx, float *dgamma,
                    float *dbeta)
{
	bn_job j = {.s = s, .x = x, .gamma = gamma, .mean_in = mean, .var_in = var, .dy = dy, .dx = dx,
	            .dgamma = dgamma, .dbeta = dbeta};
	ss_parallel_for(threads, s->c, ss_grain(s->n * s->hw), bn_backward_part_isa[ss_isa(isa)], &j);
}
