/* Element-wise layers, within-channel LRN, fully connected layers and
 * softmax cross-entropy. */
#include <math.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "internal.h"

typedef struct {
	const float *x, *y, *dy;
	float *out;
} relu_job;

SS_MULTIVERSION
static void relu_forward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const relu_job *j = ctx;
	for (ptrdiff_t i = lo; i < hi; i++)
		j->out[i] = j->x[i] > 0.0f ? j->x[i] : 0.0f;
}

SS_MULTIVERSION
static void relu_backward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const relu_job *j = ctx;
	for (ptrdiff_t i = lo; i < hi; i++)
		j->out[i] = j->y[i] > 0.0f ? j->dy[i] : 0.0f;
}

/* Element-wise jobs are memory bound: split only large ones. */
static ptrdiff_t relu_grain(void) { return 8 * ss_grain(1); }

void ss_relu_forward(ptrdiff_t n, const float *x, float *y)
{
	relu_job j = {.x = x, .out = y};
	ss_parallel_for(0, n, relu_grain(), relu_forward_part, &j);
}

void ss_relu_backward(ptrdiff_t n, const float *y, const float *dy, float *dx)
{
	relu_job j = {.y = y, .dy = dy, .out = dx};
	ss_parallel_for(0, n, relu_grain(), relu_backward_part, &j);
}

/* ---- LRN ---- */

/* lrn_box_rows writes, for each pixel of the h x w plane in, the sum of
 * the 2r+1 pixels of its row centred on it (zero outside the plane). */
SS_MULTIVERSION
static void lrn_box_rows(const float *in, float *out, int h, int w, int r)
{
	for (int y = 0; y < h; y++) {
		const float *a = in + (ptrdiff_t)y * w;
		float *o = out + (ptrdiff_t)y * w;
		memcpy(o, a, sizeof(float) * (size_t)w);
		for (int d = 1; d <= r && d < w; d++) {
			for (int x = 0; x < w - d; x++)
				o[x] += a[x + d];
			for (int x = d; x < w; x++)
				o[x] += a[x - d];
		}
	}
}

/* lrn_box_cols writes out = k + c * (sum of the 2r+1 rows of in centred
 * on each row, zero outside the plane). */
SS_MULTIVERSION
static void lrn_box_cols(const float *in, float *out, int h, int w, int r, float k, float c)
{
	for (int y = 0; y < h; y++) {
		float *o = out + (ptrdiff_t)y * w;
		memcpy(o, in + (ptrdiff_t)y * w, sizeof(float) * (size_t)w);
		for (int i = ss_imax(y - r, 0); i <= ss_imin(y + r, h - 1); i++) {
			if (i == y)
				continue;
			const float *a = in + (ptrdiff_t)i * w;
			for (int x = 0; x < w; x++)
				o[x] += a[x];
		}
		for (int x = 0; x < w; x++)
			o[x] = k + c * o[x];
	}
}

/* lrn_pow writes out[i] = a[i] * s[i]^(-beta) for s[i] > 0. beta = 0.75
 * (Caffe's usual value), 0.5 and 1 use square roots and divisions, four
 * lanes at a time where SSE2 exists; other values call powf. */
SS_MULTIVERSION
static void lrn_pow(ptrdiff_t n, const float *a, const float *s, float beta, float *out)
{
	ptrdiff_t i = 0;
	if (beta == 0.75f) {
#if defined(__SSE2__)
		const __m128 one = _mm_set1_ps(1.0f);
		for (; i + 4 <= n; i += 4) {
			__m128 v = _mm_loadu_ps(s + i);
			__m128 r = _mm_sqrt_ps(v);
			__m128 d = _mm_mul_ps(r, _mm_sqrt_ps(r));
			_mm_storeu_ps(out + i, _mm_mul_ps(_mm_loadu_ps(a + i), _mm_div_ps(one, d)));
		}
#endif
		for (; i < n; i++)
			out[i] = a[i] / (sqrtf(s[i]) * sqrtf(sqrtf(s[i])));
	} else if (beta == 0.5f) {
#if defined(__SSE2__)
		for (; i + 4 <= n; i += 4)
			_mm_storeu_ps(out + i, _mm_div_ps(_mm_loadu_ps(a + i), _mm_sqrt_ps(_mm_loadu_ps(s + i))));
#endif
		for (; i < n; i++)
			out[i] = a[i] / sqrtf(s[i]);
	} else if (beta == 1.0f) {
		for (; i < n; i++)
			out[i] = a[i] / s[i];
	} else {
		for (; i < n; i++)
			out[i] = a[i] * powf(s[i], -beta);
	}
}

typedef struct {
	const ss_lrn_shape *s;
	const float *x, *y, *scale_in, *dy;
	float *out, *scale, *ws;
} lrn_job;

/* Each part uses 2*H*W floats of scratch at ws + part*2*H*W. */
SS_MULTIVERSION
static void lrn_forward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const lrn_job *j = ctx;
	const ss_lrn_shape *s = j->s;
	const ptrdiff_t plane = (ptrdiff_t)s->h * s->w;
	const float coef = s->alpha / (float)(s->size * s->size);
	float *sq = j->ws + 2 * plane * part, *rows = sq + plane;
	for (ptrdiff_t q = lo; q < hi; q++) {
		const float *xp = j->x + q * plane;
		float *sp = j->scale + q * plane;
		for (ptrdiff_t i = 0; i < plane; i++)
			sq[i] = xp[i] * xp[i];
		lrn_box_rows(sq, rows, s->h, s->w, s->size / 2);
		lrn_box_cols(rows, sp, s->h, s->w, s->size / 2, s->k, coef);
		lrn_pow(plane, xp, sp, s->beta, j->out + q * plane);
	}
}

SS_MULTIVERSION
static void lrn_backward_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const lrn_job *j = ctx;
	const ss_lrn_shape *s = j->s;
	const ptrdiff_t plane = (ptrdiff_t)s->h * s->w;
	const float coef = 2.0f * s->alpha * s->beta / (float)(s->size * s->size);
	float *t = j->ws + 2 * plane * part, *rows = t + plane;
	for (ptrdiff_t q = lo; q < hi; q++) {
		const ptrdiff_t o = q * plane;
		for (ptrdiff_t i = 0; i < plane; i++)
			t[i] = j->dy[o + i] * j->y[o + i] / j->scale_in[o + i];
		lrn_box_rows(t, rows, s->h, s->w, s->size / 2);
		lrn_box_cols(rows, t, s->h, s->w, s->size / 2, 0.0f, 1.0f);
		lrn_pow(plane, j->dy + o, j->scale_in + o, s->beta, j->out + o);
		for (ptrdiff_t i = 0; i < plane; i++)
			j->out[o + i] -= coef * j->x[o + i] * t[i];
	}
}

ptrdiff_t ss_lrn_workspace(const ss_lrn_shape *s)
{
	return 2 * (ptrdiff_t)s->h * s->w * ss_threads();
}

static int lrn_parts(const ss_lrn_shape *s, ptrdiff_t ws_len)
{
	ptrdiff_t per = 2 * (ptrdiff_t)s->h * s->w;
	ptrdiff_t parts = ws_len / per;
	return parts < 1 ? 1 : parts > 1 << 20 ? 1 << 20 : (int)parts;
}

void ss_lrn_forward(const ss_lrn_shape *s, const float *x, float *y, float *scale,
                    float *ws, ptrdiff_t ws_len)
{
	lrn_job j = {.s = s, .x = x, .out = y, .scale = scale, .ws = ws};
	ss_parallel_for(lrn_parts(s, ws_len), (ptrdiff_t)s->n * s->c, ss_grain((ptrdiff_t)s->h * s->w), lrn_forward_part, &j);
}

void ss_lrn_backward(const ss_lrn_shape *s, const float *x, const float *y,
                     const float *scale, const float *dy, float *dx, float *ws, ptrdiff_t ws_len)
{
	lrn_job j = {.s = s, .x = x, .y = y, .scale_in = scale, .dy = dy, .out = dx, .ws = ws};
	ss_parallel_for(lrn_parts(s, ws_len), (ptrdiff_t)s->n * s->c, ss_grain((ptrdiff_t)s->h * s->w), lrn_backward_part, &j);
}

/* ---- fully connected ---- */

void ss_fc_forward(int n, int in, int out, const float *x, const float *w,
                   const float *b, float *y)
{
	ss_sgemm(0, 1, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
	if (b == NULL)
		return;
	for (int r = 0; r < n; r++) {
		float *row = y + (ptrdiff_t)r * out;
		for (int j = 0; j < out; j++)
			row[j] += b[j];
	}
}

void ss_fc_backward(int n, int in, int out, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, float *db)
{
	ss_sgemm(1, 0, out, in, n, 1.0f, dy, out, x, in, 0.0f, dw, in);
	if (dx)
		ss_sgemm(0, 0, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
	if (db == NULL)
		return;
	memset(db, 0, sizeof(float) * (size_t)out);
	for (int r = 0; r < n; r++) {
		const float *row = dy + (ptrdiff_t)r * out;
		for (int j = 0; j < out; j++)
			db[j] += row[j];
	}
}

/* ---- softmax cross-entropy ---- */

float ss_softmax_xent(int n, int k, const float *logits, const int *labels,
                      float *prob, float *dlogits)
{
	double loss = 0.0;
	for (int r = 0; r < n; r++) {
		const float *z = logits + (ptrdiff_t)r * k;
		float *p = prob + (ptrdiff_t)r * k;
		float m = z[0];
		for (int j = 1; j < k; j++)
			m = z[j] > m ? z[j] : m;
		float sum = 0.0f;
		for (int j = 0; j < k; j++) {
			p[j] = expf(z[j] - m);
			sum += p[j];
		}
		for (int j = 0; j < k; j++)
			p[j] /= sum;
		const int l = labels[r];
		/* log p_l from the logits stays finite when p_l underflows. */
		loss -= (double)(z[l] - m) - log((double)sum);
		if (dlogits) {
			float *d = dlogits + (ptrdiff_t)r * k;
			for (int j = 0; j < k; j++)
				d[j] = p[j] / (float)n;
			d[l] -= 1.0f / (float)n;
		}
	}
	return (float)(loss / n);
}
