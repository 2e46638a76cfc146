/* The LRN kernels' vector code (layers.c), included once per lane count:
 * LRN_V (4 or 8) floats per vector, names suffixed with it by LRN_N. All
 * operations are lane by lane, so both lane counts give the same bits. */

typedef float LRN_N(lrn_v) __attribute__((vector_size(4 * LRN_V)));
typedef uint32_t LRN_N(lrn_vu) __attribute__((vector_size(4 * LRN_V)));
typedef int32_t LRN_N(lrn_vi) __attribute__((vector_size(4 * LRN_V)));

SS_INLINE LRN_N(lrn_v) LRN_N(lrn_ld)(const float *p)
{
	LRN_N(lrn_v) v;
	memcpy(&v, p, sizeof v);
	return v;
}

SS_INLINE void LRN_N(lrn_st)(float *p, const LRN_N(lrn_v) *v) { memcpy(p, v, sizeof *v); }

/* lrn_ldn loads n < LRN_V floats, the other lanes set to fill. */
SS_INLINE LRN_N(lrn_v) LRN_N(lrn_ldn)(const float *p, ptrdiff_t n, float fill)
{
	float b[LRN_V];
	for (int l = 0; l < LRN_V; l++)
		b[l] = l < n ? p[l] : fill;
	return LRN_N(lrn_ld)(b);
}

SS_INLINE void LRN_N(lrn_stn)(float *p, ptrdiff_t n, const LRN_N(lrn_v) *v)
{
	float b[LRN_V];
	LRN_N(lrn_st)(b, v);
	for (ptrdiff_t l = 0; l < n; l++)
		p[l] = b[l];
}

/* lrn_pow075v returns s^(-3/4) = t^3 for t = s^(-1/4) and sets the lanes
 * of *bad where s is outside [LRN_POW_LO, LRN_POW_HI]. t starts from an
 * estimate read off s's bits (the exponent and mantissa as an integer,
 * shifted and subtracted from a constant: within 3.2%) and takes three
 * Newton steps for t^-4 = s, t <- t*(5/4 - s/4*t^4), each of which
 * squares the relative error (times 2.5): t within 1.6e-7 of s^(-1/4),
 * t^3 within 6e-7 of s^(-3/4). Only correctly rounded multiplications and
 * subtractions, never fused (C99 mode contracts nothing), so the bits are
 * the same on every CPU. */
SS_INLINE LRN_N(lrn_v) LRN_N(lrn_pow075v)(const LRN_N(lrn_v) *sp, LRN_N(lrn_vi) *bad)
{
	const LRN_N(lrn_v) s = *sp;
	LRN_N(lrn_vu) u;
	LRN_N(lrn_v) t;
	memcpy(&u, &s, sizeof u);
	/* In range as signed integers (NaNs and negatives are outside). */
	*bad |= ((LRN_N(lrn_vi))u < LRN_POW_LO_BITS) | ((LRN_N(lrn_vi))u > LRN_POW_HI_BITS);
	u = 0x4f586000u - (u >> 2);
	memcpy(&t, &u, sizeof t);
	const LRN_N(lrn_v) q = 0.25f * s;
	for (int i = 0; i < 3; i++) {
		const LRN_N(lrn_v) t2 = t * t;
		t = t * (1.25f - q * (t2 * t2));
	}
	return t * (t * t);
}

/* lrn_any returns whether a lane of v is set. */
SS_INLINE int LRN_N(lrn_any)(const LRN_N(lrn_vi) *v)
{
	int32_t b[LRN_V], any = 0;
	memcpy(b, v, sizeof b);
	for (int l = 0; l < LRN_V; l++)
		any |= b[l];
	return any != 0;
}

/* lrn_pow075 writes out[i] = a[i] * s[i]^(-3/4) with lrn_pow075v, then
 * redoes the elements whose scales it does not handle with powf. */
SS_INLINE void LRN_N(lrn_pow075)(ptrdiff_t n, const float *a, const float *s, float *out)
{
	LRN_N(lrn_vi) bad = {0};
	ptrdiff_t i = 0;
	for (; i + LRN_V <= n; i += LRN_V) {
		const LRN_N(lrn_v) si = LRN_N(lrn_ld)(s + i);
		const LRN_N(lrn_v) yi = LRN_N(lrn_ld)(a + i) * LRN_N(lrn_pow075v)(&si, &bad);
		LRN_N(lrn_st)(out + i, &yi);
	}
	if (i < n) {
		const LRN_N(lrn_v) si = LRN_N(lrn_ldn)(s + i, n - i, 1.0f);
		const LRN_N(lrn_v) yi = LRN_N(lrn_ldn)(a + i, n - i, 0.0f) * LRN_N(lrn_pow075v)(&si, &bad);
		LRN_N(lrn_stn)(out + i, n - i, &yi);
	}
	if (LRN_N(lrn_any)(&bad))
		for (i = 0; i < n; i++)
			if (!LRN_OK(s[i]))
				out[i] = a[i] * powf(s[i], -0.75f);
}

/* lrn_window returns the window sums of lanes at i (n of them when n <
 * LRN_V): the w - 1 old terms (w a constant of each call, at most 5) in
 * channel order, then q. */
SS_INLINE LRN_N(lrn_v) LRN_N(lrn_window)(const lrn_step *st, int w, ptrdiff_t i, ptrdiff_t n, const LRN_N(lrn_v) *q)
{
	if (w == 1)
		return *q;
	LRN_N(lrn_v) sum = n < LRN_V ? LRN_N(lrn_ldn)(st->old[0] + i, n, 0.0f) : LRN_N(lrn_ld)(st->old[0] + i);
	for (int m = 1; m < w - 1; m++)
		sum += n < LRN_V ? LRN_N(lrn_ldn)(st->old[m] + i, n, 0.0f) : LRN_N(lrn_ld)(st->old[m] + i);
	return sum + *q;
}

/* lrn_forward_lanes does the forward step for the lanes at i; fast
 * (beta = 0.75) writes y too. */
SS_INLINE void LRN_N(lrn_forward_lanes)(const lrn_step *st, int w, ptrdiff_t i, ptrdiff_t n, float k0, float coef,
                                 const int fast, LRN_N(lrn_vi) *bad)
{
	const int part = n < LRN_V;
	LRN_N(lrn_v) q = {0};
	if (st->nx) {
		const LRN_N(lrn_v) v = part ? LRN_N(lrn_ldn)(st->nx + i, n, 0.0f) : LRN_N(lrn_ld)(st->nx + i);
		q = v * v;
	}
	const LRN_N(lrn_v) s = k0 + coef * LRN_N(lrn_window)(st, w, i, n, &q);
	if (part)
		LRN_N(lrn_stn)(st->slot + i, n, &q), LRN_N(lrn_stn)(st->scale + i, n, &s);
	else
		LRN_N(lrn_st)(st->slot + i, &q), LRN_N(lrn_st)(st->scale + i, &s);
	if (fast) {
		const LRN_N(lrn_v) p = LRN_N(lrn_pow075v)(&s, bad);
		const LRN_N(lrn_v) y = (part ? LRN_N(lrn_ldn)(st->x + i, n, 0.0f) : LRN_N(lrn_ld)(st->x + i)) * p;
		if (part)
			LRN_N(lrn_stn)(st->y + i, n, &y);
		else
			LRN_N(lrn_st)(st->y + i, &y);
	}
}

/* lrn_backward_lanes does the backward step for the lanes at i: dx =
 * dy*scale^(-beta) (computed here when fast, by lrn_pow into out before
 * otherwise) minus coef*x*sum. */
SS_INLINE void LRN_N(lrn_backward_lanes)(const lrn_step *st, int w, ptrdiff_t i, ptrdiff_t n, float coef, const int fast,
                                  LRN_N(lrn_vi) *bad)
{
	const int part = n < LRN_V;
#define LRN_LD(p, fill) (part ? LRN_N(lrn_ldn)((p) + i, n, fill) : LRN_N(lrn_ld)((p) + i))
	LRN_N(lrn_v) q = {0};
	if (st->ndy)
		q = LRN_LD(st->ndy, 0.0f) * LRN_LD(st->ny, 0.0f) / LRN_LD(st->nscale, 1.0f);
	const LRN_N(lrn_v) sum = LRN_N(lrn_window)(st, w, i, n, &q);
	LRN_N(lrn_v) d;
	if (fast) {
		const LRN_N(lrn_v) s = LRN_LD(st->scale_in, 1.0f);
		d = LRN_LD(st->dy, 0.0f) * LRN_N(lrn_pow075v)(&s, bad);
	} else {
		d = LRN_LD(st->out, 0.0f);
	}
	const LRN_N(lrn_v) dx = d - coef * LRN_LD(st->x, 0.0f) * sum;
#undef LRN_LD
	if (part)
		LRN_N(lrn_stn)(st->slot + i, n, &q), LRN_N(lrn_stn)(st->out + i, n, &dx);
	else
		LRN_N(lrn_st)(st->slot + i, &q), LRN_N(lrn_st)(st->out + i, &dx);
}

/* lrn_forward_tail and lrn_backward_tail run the lanes step of the last
 * n < LRN_V pixels, at i, out of line and once per level, with w and fast
 * as arguments: they run once per step, and their partial loads and
 * stores, inlined into every specialisation of the steps, made up most
 * of the steps' code. The same operations as the inlined lanes, so the
 * same bits. */
SS_INLINE void LRN_CAT(LRN_N(lrn_forward_tail), _at)(int isa, const lrn_step *st, int w, ptrdiff_t i, ptrdiff_t n,
                                                     float k0, float coef, int fast, LRN_N(lrn_vi) *bad)
{
	(void)isa;
	LRN_N(lrn_forward_lanes)(st, w, i, n, k0, coef, fast, bad);
}

LRN_LEVEL_FNS(LRN_N(lrn_forward_tail), (const lrn_step *st, int w, ptrdiff_t i, ptrdiff_t n, float k0, float coef,
                                        int fast, LRN_N(lrn_vi) *bad),
              st, w, i, n, k0, coef, fast, bad);

SS_INLINE void LRN_CAT(LRN_N(lrn_backward_tail), _at)(int isa, const lrn_step *st, int w, ptrdiff_t i, ptrdiff_t n,
                                                      float coef, int fast, LRN_N(lrn_vi) *bad)
{
	(void)isa;
	LRN_N(lrn_backward_lanes)(st, w, i, n, coef, fast, bad);
}

LRN_LEVEL_FNS(LRN_N(lrn_backward_tail),
              (const lrn_step *st, int w, ptrdiff_t i, ptrdiff_t n, float coef, int fast, LRN_N(lrn_vi) *bad), st, w,
              i, n, coef, fast, bad);

/* lrn_forward_step writes scale and y of channel k (y with lrn_pow after
 * the loop unless fast), lrn_backward_step dx. */
SS_INLINE void LRN_N(lrn_forward_step)(int isa, const lrn_step *st, int w, ptrdiff_t np, float k0, float coef, float beta,
                                const int fast)
{
	LRN_N(lrn_vi) bad = {0};
	ptrdiff_t i = 0;
	for (; i + LRN_V <= np; i += LRN_V)
		LRN_N(lrn_forward_lanes)(st, w, i, LRN_V, k0, coef, fast, &bad);
	if (i < np)
		LRN_CAT(LRN_N(lrn_forward_tail), _lv)[isa](st, w, i, np - i, k0, coef, fast, &bad);
	if (!fast)
		lrn_pow(isa, np, st->x, st->scale, beta, st->y);
	else if (LRN_N(lrn_any)(&bad))
		for (i = 0; i < np; i++)
			if (!LRN_OK(st->scale[i]))
				st->y[i] = st->x[i] * powf(st->scale[i], -0.75f);
}

SS_INLINE void LRN_N(lrn_backward_step)(int isa, const lrn_step *st, int w, ptrdiff_t np, float coef, float beta,
                                 const int fast)
{
	LRN_N(lrn_vi) bad = {0};
	ptrdiff_t i = 0;
	if (!fast)
		lrn_pow(isa, np, st->dy, st->scale_in, beta, st->out);
	for (; i + LRN_V <= np; i += LRN_V)
		LRN_N(lrn_backward_lanes)(st, w, i, LRN_V, coef, fast, &bad);
	if (i < np)
		LRN_CAT(LRN_N(lrn_backward_tail), _lv)[isa](st, w, i, np - i, coef, fast, &bad);
	if (fast && LRN_N(lrn_any)(&bad))
		for (i = 0; i < np; i++)
			if (!LRN_OK(st->scale_in[i])) {
				float sum = w == 1 ? 0.0f : st->old[0][i];
				for (int m = 1; m < w - 1; m++)
					sum += st->old[m][i];
				sum = w == 1 ? st->slot[i] : sum + st->slot[i];
				st->out[i] = st->dy[i] * powf(st->scale_in[i], -0.75f) - coef * st->x[i] * sum;
			}
}

