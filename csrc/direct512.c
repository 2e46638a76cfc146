/* Direct convolution for stride 1 at level AVX-512: the method of
 * direct.c reshaped for 16-lane vectors and 32 registers.
 *
 * A unit is 16 consecutive output pixels of one output plane in
 * row-major order: units run across output rows, so that narrow planes
 * waste no lanes (an 8 x 8 plane is 4 units); only a plane's last unit
 * may be partial. For the inputs of a unit to be 16 consecutive floats at
 * every tap, each image is copied into kw shifted planes per channel:
 * copy j of channel c has hp = OH + kh - 1 rows of OW floats,
 *   S[j][c][r][q] = xpad[c][r][q + j],
 * xpad being the zero-padded input, so that the input of tap (c, i, j)
 * for output pixel f = oh*OW + ow is S[j][c][i*OW + f], and unit u reads
 * the 16 floats at
 *   S + koff[tap] + 16u,   koff[(c*kh + i)*kw + j] = j*js + c*pls + i*OW
 * (js floats between copies, pls per plane). The copy writes kw floats
 * per input pixel, little beside the C*kh*kw multiply-adds of each output
 * pixel for each output channel. When OW is a multiple of 16 no unit
 * crosses a row, and a single zero-padded plane per channel serves (see
 * sgeom).
 *
 * Forward: a tile of 4 output channels x up to 6 units, 24 accumulators,
 * loads 6 input vectors and broadcasts 4 weights per tap (24 FMAs); the
 * weights are packed 4 output channels interleaved, and tiles may span the
 * images of a chunk. Each tile runs its taps in blocks of input channels
 * sized so that the tile's inputs and the block's weights stay in L1
 * while every block of output channels reads them, each block adding to
 * the partial sums the one before stored. The input gradient is the same
 * correlation run on the output gradient (padded by kh-1-pad_h,
 * kw-1-pad_w, kernel rotated, channel axes swapped), or, when the padding
 * is narrower than the kernel, a scatter: the contribution of an
 * output-gradient unit through tap (i, j) to input channel c is added to
 * Z[j][c] + i*OW + 16u, Z having the shape of S (the adjoint of the
 * shifted copy), and dx sums the kw planes of Z shifted back.
 *
 * The weight gradient puts output channels in the lanes instead (see the
 * comment at its section): broadcast inputs times the output gradient
 * transposed pixel-major, summed in registers, no horizontal sums.
 *
 * Activations are addressed through plane strides, so NCHW and CNHW cost
 * the same. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

#ifdef SS_HAVE_AVX512

/* sgeom is the geometry of one stride-1 correlation: input planes,
 * output planes, kernel and padding (negative padding crops), and the
 * layout of the copied input. When OW is a multiple of 16, units never
 * cross a row and the copy is a plain zero-padded plane per channel
 * (rows = 1: hp x wpad floats, wpad = OW + kw - 1, unit u of a plane at
 * (u / ur)*wpad + 16*(u % ur), tap (c, i, j) at c*pls + i*wpad + j);
 * otherwise it is the kw shifted copies described above (rows = 0). */
typedef struct {
	int ci, hi, wi;   /* input channels, plane height and width */
	int co, ho, wo;   /* output channels, plane height and width */
	int kh, kw, ph, pw;
	int rows;         /* 1: padded planes, units within rows; 0: shifted copies */
	int hp;           /* rows of a copied plane: ho + kh - 1 */
	int wpad;         /* floats per row of a copied plane: wo (shifted) or wo + kw - 1 (padded) */
	int ur;           /* units per output row (rows = 1) */
	ptrdiff_t p;      /* pixels per output plane */
	ptrdiff_t units;  /* units per output plane: ceil(p / 16) */
	ptrdiff_t pls;    /* floats per copied plane: hp*wpad rounded up to 16 */
	ptrdiff_t js;     /* floats between shifted copies j and j + 1: ci*pls (rows = 0) */
	ptrdiff_t img;    /* floats per image */
	ptrdiff_t k;      /* taps: ci*kh*kw */
} sgeom;

static ptrdiff_t s16_round_up(ptrdiff_t n, ptrdiff_t m) { return (n + m - 1) / m * m; }

/* s16_sgeom_make returns the geometry, with padded planes where OW allows
 * them and rows_ok is set. */
static sgeom s16_sgeom_make(int ci, int hi, int wi, int co, int ho, int wo, int kh, int kw, int ph, int pw,
                            int rows_ok)
{
	sgeom g = {.ci = ci, .hi = hi, .wi = wi, .co = co, .ho = ho, .wo = wo, .kh = kh, .kw = kw, .ph = ph, .pw = pw};
	g.rows = rows_ok && wo % 16 == 0;
	g.hp = ho + kh - 1;
	g.wpad = g.rows ? wo + kw - 1 : wo;
	g.ur = wo / 16;
	g.p = (ptrdiff_t)ho * wo;
	g.units = (g.p + 15) / 16;
	g.pls = s16_round_up((ptrdiff_t)g.hp * g.wpad, 16);
	g.js = ci * g.pls;
	g.img = g.rows ? g.js : kw * g.js;
	g.k = (ptrdiff_t)ci * kh * kw;
	return g;
}

/* s16_uoff returns the offset of unit u's inputs within an image's copy
 * (its output pixels are 16u on in the output plane). */
static ptrdiff_t s16_uoff(const sgeom *g, ptrdiff_t u)
{
	return g->rows ? u / g->ur * g->wpad + u % g->ur * 16 : 16 * u;
}

/* The forward correlation of a convolution, and the correlation that
 * computes its input gradient. */
static sgeom s16_sgeom_forward(const ss_conv_shape *s, int rows_ok)
{
	return s16_sgeom_make(s->c, s->h, s->w, s->oc, ss_conv_out_h(s), ss_conv_out_w(s), s->kh, s->kw, s->pad_h,
	                      s->pad_w, rows_ok);
}

static sgeom s16_sgeom_data(const ss_conv_shape *s)
{
	return s16_sgeom_make(s->oc, ss_conv_out_h(s), ss_conv_out_w(s), s->c, s->h, s->w, s->kh, s->kw,
	                      s->kh - 1 - s->pad_h, s->kw - 1 - s->pad_w, 1);
}

/* Reads of a plane's last unit run up to 15 floats past the plane, and
 * buffers of shifted images start on a 64-byte boundary (align64), so
 * that planes whose size is a multiple of 16 floats are read with aligned
 * loads: every such buffer has this many spare floats. */
enum { SLACK = 32 };

/* align64 rounds p up to a multiple of 64 bytes. */
static float *align64(float *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* s16_tail_mask enables the lanes of unit u (0 <= u < units) of a plane. */
static __mmask16 s16_tail_mask(const sgeom *g, ptrdiff_t u)
{
	return ss_lanes(g->p - 16 * u);
}

int ss_d512_fits(const ss_conv_shape *s)
{
	/* Tap offsets are ints: an image's copy must be indexable. */
	const sgeom f = s16_sgeom_forward(s, 0), d = s16_sgeom_data(s);
	return f.img < INT_MAX / 2 && d.img < INT_MAX / 2;
}

static ptrdiff_t s16_round4(ptrdiff_t n) { return (n + 3) / 4 * 4; }

/* Images per chunk of a correlation part: about floats floats of copied
 * images (kept in the L2 cache while the tiles read them), at least 1,
 * at most n, and where possible a few more so that the chunk's units
 * fill whole tiles of 6. */
static int s16_chunk(const sgeom *g, int n, ptrdiff_t floats)
{
	ptrdiff_t c = floats / g->img;
	c = c < 1 ? 1 : c;
	for (ptrdiff_t d = c; d <= 2 * c + 1 && d <= n; d++)
		if (d * g->units % 6 == 0) {
			c = d;
			break;
		}
	return (int)(c > n ? n : c);
}

static int s16_corr_chunk(const sgeom *g, int n) { return s16_chunk(g, n, 1 << 15); }

/* Floats of a correlation: packed weights, packed bias and tap offsets
 * (ints), then per part a chunk of shifted images. */
static ptrdiff_t s16_corr_fixed(const sgeom *g) { return s16_round4(g->co) * g->k + s16_round4(g->co) + g->k; }
static ptrdiff_t s16_corr_part_floats(const sgeom *g, int n) { return s16_corr_chunk(g, n) * g->img + SLACK; }

/* The input gradient scatters when the correlation would compute many
 * more units than the output gradient has (a "valid" convolution, whose
 * full correlation is mostly zero padding): both do the same FLOPs per
 * unit computed. */
static int s16_dx_scatter(const sgeom *f, const sgeom *d) { return d->units > f->units * 5 / 4; }

/* Floats of the scatter: packed weights and output-channel offsets (ints),
 * then per part the image's Z
 * planes (the forward geometry's shifted planes, s16_sgeom_forward(s, 0))
 * and its output gradient in whole units. */
static ptrdiff_t s16_scatter_fixed(const ss_conv_shape *s) { return s16_round4(s->c) * s->kh * s->kw * s->oc + s->oc; }
static ptrdiff_t s16_scatter_part_floats(const ss_conv_shape *s, const sgeom *f)
{
	return f->img + SLACK + (ptrdiff_t)s->oc * f->units * 16;
}

static ptrdiff_t s16_dw_floats(const ss_conv_shape *s);

ptrdiff_t ss_d512_workspace(int threads, const ss_conv_shape *s, int backward)
{
	const ptrdiff_t t = ss_threads_of(threads);
	const sgeom f = s16_sgeom_forward(s, 1);
	if (!backward)
		return s16_corr_fixed(&f) + t * s16_corr_part_floats(&f, s->n);
	const sgeom d = s16_sgeom_data(s), fs = s16_sgeom_forward(s, 0);
	const ptrdiff_t a = s16_dw_floats(s);
	const ptrdiff_t b = s16_dx_scatter(&f, &d) ? s16_scatter_fixed(s) + t * s16_scatter_part_floats(s, &fs)
	                                           : s16_corr_fixed(&d) + t * s16_corr_part_floats(&d, s->n);
	return a > b ? a : b;
}

/* s16_taps writes koff[(c*kh + i)*kw + j], the offset of tap (c, i, j)
 * within an image's copy: j*js + c*pls + i*wo (shifted copies) or
 * c*pls + i*wpad + j (padded planes). */
static void s16_taps(const sgeom *g, int *koff)
{
	ptrdiff_t t = 0;
	for (int c = 0; c < g->ci; c++)
		for (int i = 0; i < g->kh; i++)
			for (int j = 0; j < g->kw; j++)
				koff[t++] = (int)(c * g->pls + (ptrdiff_t)i * g->wpad + (g->rows ? j : j * g->js));
}

/* s16_shift_image writes the copy of one image (input plane c at src +
 * c*cs, rows of wi floats) to dst: its shifted or padded planes. Rows
 * wholly in the vertical padding are left alone: the caller zeroes the
 * buffer once, and no image writes them. Each input row is loaded once,
 * zero-padded, into registers (masked loads); the shifted rows are cut
 * from them with two-register permutes. */
SS_AVX512 static void s16_shift_image(const sgeom *g, const float *src, ptrdiff_t cs, float *dst)
{
	const int wr = g->wo + g->kw - 1;                  /* a padded input row */
	const int nb = (wr + 15) / 16 + 1 + (g->kw - 1) / 16; /* its blocks of 16, and zero blocks past it */
	const int ob = (g->wo + 15) / 16;                  /* blocks of a shifted row */
	__mmask16 lm[nb], sm[nb];
	for (int b = 0; b < nb; b++) {
		/* Load lanes q = 16b + l with pw <= q < wi + pw; store lanes q < wr. */
		const int q = 16 * b, lo = ss_imin(ss_imax(g->pw - q, 0), 16), hi = ss_imin(ss_imax(g->wi + g->pw - q, 0), 16);
		lm[b] = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
		sm[b] = (__mmask16)((1u << ss_imin(ss_imax(wr - q, 0), 16)) - 1);
	}
	const __mmask16 tail = (__mmask16)((1u << (g->wo - 16 * (ob - 1))) - 1);
	__m512i idx[16]; /* lanes j.. of two registers */
	for (int j = 0; j < 16; j++)
		idx[j] = _mm512_setr_epi32(j, j + 1, j + 2, j + 3, j + 4, j + 5, j + 6, j + 7, j + 8, j + 9, j + 10, j + 11,
		                           j + 12, j + 13, j + 14, j + 15);
	/* Locals, so that the stores need not be assumed to change g. */
	const int r0 = ss_imax(0, g->ph), r1 = ss_imin(g->hp, g->hi + g->ph), kw = g->kw, ci = g->ci;
	const ptrdiff_t js = g->js, pls = g->pls, wpad = g->wpad, wi = g->wi, ph = g->ph, pw = g->pw;
	const ptrdiff_t plane = (ptrdiff_t)g->hi * wi;
	for (int c = 0; c < ci; c++) {
		/* Planes of one image lie apart (a stride of whole images in
		 * CNHW): fetch the next one while this one is copied. */
		if (c + 1 < ci)
			for (ptrdiff_t q = 0; q < plane; q += 16)
				_mm_prefetch((const char *)(src + (c + 1) * cs + q), _MM_HINT_T0);
		for (int r = r0; r < r1; r++) {
			const float *sp = src + c * cs + (r - ph) * wi - pw;
			float *d = dst + c * pls + r * wpad;
			if (g->rows) {
				for (int b = 0; 16 * b < wr; b++)
					_mm512_mask_storeu_ps(d + 16 * b, sm[b], _mm512_maskz_loadu_ps(lm[b], sp + 16 * b));
				continue;
			}
			/* Output block b of copy j takes lanes j % 16.. of input
			 * blocks b + j/16 and the next. */
			for (int b = 0; b < ob; b++) {
				const __mmask16 m = b == ob - 1 ? tail : (__mmask16)0xffff;
				for (int j0 = 0; j0 < kw; j0 += 16) {
					const int ib = b + j0 / 16, j1 = ss_imin(kw, j0 + 16);
					const __m512 lo = _mm512_maskz_loadu_ps(lm[ib], sp + 16 * ib);
					const __m512 hi = _mm512_maskz_loadu_ps(lm[ib + 1], sp + 16 * ib + 16);
					float *dj = d + j0 * js + 16 * b;
					for (int j = j0; j < j1; j++, dj += js)
						_mm512_mask_storeu_ps(dj, m, _mm512_permutex2var_ps(lo, idx[j - j0], hi));
				}
			}
		}
	}
}

/* SS_AVX512_INLINE marks AVX-512 bodies that wrappers instantiate with
 * constant tile sizes. */
#define SS_AVX512_INLINE SS_AVX512 static inline __attribute__((always_inline))

/* s16_fwd_body computes a 4 x NU tile: output channel m of unit u is the sum
 * over taps t < k of w[4t + m] * x_u[koff[t] + 0..15], plus bias[m] when
 * acc is 0 or plus the partial sum already at y[u] + m*ys when acc is 1;
 * the result is stored at y[u] + m*ys through mask msk[u] (rows m < mr). */
SS_AVX512_INLINE void s16_fwd_body(const int NU, ptrdiff_t k, const int *koff, const float *w, const float *bias,
                               int acc, const float *const x[6], float *const y[6], ptrdiff_t ys, int mr,
                               const __mmask16 msk[6])
{
	__m512 c[4][6];
	const float *xp[6];
#pragma GCC unroll 6
	for (int u = 0; u < NU; u++) {
		xp[u] = x[u];
#pragma GCC unroll 4
		for (int m = 0; m < 4; m++)
			c[m][u] = acc ? _mm512_maskz_loadu_ps(m < mr ? msk[u] : 0, y[u] + m * ys) : _mm512_set1_ps(bias[m]);
	}
	for (ptrdiff_t t = 0; t < k; t++, w += 4) {
		const ptrdiff_t o = koff[t];
		__m512 a[4];
#pragma GCC unroll 4
		for (int m = 0; m < 4; m++)
			a[m] = _mm512_set1_ps(w[m]);
#pragma GCC unroll 6
		for (int u = 0; u < NU; u++) {
			const __m512 b = _mm512_loadu_ps(xp[u] + o);
#pragma GCC unroll 4
			for (int m = 0; m < 4; m++)
				c[m][u] = _mm512_fmadd_ps(a[m], b, c[m][u]);
		}
	}
	for (int m = 0; m < mr; m++)
#pragma GCC unroll 6
		for (int u = 0; u < NU; u++)
			_mm512_mask_storeu_ps(y[u] + m * ys, msk[u], c[m][u]);
}

typedef void (*s16_fwd_fn)(ptrdiff_t k, const int *koff, const float *w, const float *bias, int acc,
                       const float *const x[6], float *const y[6], ptrdiff_t ys, int mr, const __mmask16 msk[6]);

#define FWD_N(NU)                                                                                          \
	SS_AVX512 static void s16_fwd_##NU(ptrdiff_t k, const int *koff, const float *w, const float *bias, int acc, \
	                               const float *const x[6], float *const y[6], ptrdiff_t ys, int mr,         \
	                               const __mmask16 msk[6])                                                   \
	{                                                                                                        \
		s16_fwd_body(NU, k, koff, w, bias, acc, x, y, ys, mr, msk);                                          \
	}
FWD_N(1)
FWD_N(2)
FWD_N(3)
FWD_N(4)
FWD_N(5)
FWD_N(6)

/* s16_fwd_kernel[nu] computes tiles of nu units. */
static const s16_fwd_fn s16_fwd_kernel[7] = {NULL, s16_fwd_1, s16_fwd_2, s16_fwd_3, s16_fwd_4, s16_fwd_5, s16_fwd_6};

/* s16_pack4 interleaves 4 rows of k floats: d[4t + m] = r[m][t] for t < k,
 * or r[m][-t] when rev is set (r[m] then points at the row's last
 * float); a NULL row gives zeros. 16 values of each row at a time, a 4 x
 * 16 transpose in registers. */
SS_AVX512 static void s16_pack4(const float *const r[4], int rev, ptrdiff_t k, float *d)
{
	const __m512i back = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
	for (ptrdiff_t t0 = 0; t0 < k; t0 += 16) {
		const ptrdiff_t n = k - t0 < 16 ? k - t0 : 16;
		__m512 v[4];
		for (int m = 0; m < 4; m++) {
			if (r[m] == NULL)
				v[m] = _mm512_setzero_ps();
			else if (!rev)
				v[m] = _mm512_maskz_loadu_ps(ss_lanes(n), r[m] + t0);
			else /* the 16 floats ending at r[m] - t0, lanes reversed */
				v[m] = _mm512_permutexvar_ps(back, _mm512_mask_loadu_ps(_mm512_setzero_ps(),
				                                                        (__mmask16)~ss_lanes(16 - n), r[m] - t0 - 15));
		}
		const __m512 ab0 = _mm512_unpacklo_ps(v[0], v[1]), ab1 = _mm512_unpackhi_ps(v[0], v[1]);
		const __m512 cd0 = _mm512_unpacklo_ps(v[2], v[3]), cd1 = _mm512_unpackhi_ps(v[2], v[3]);
#define PD(x) _mm512_castps_pd(x)
#define PS(x) _mm512_castpd_ps(x)
		/* x_j holds taps j, j + 4, j + 8, j + 12, four floats each. */
		const __m512 x0 = PS(_mm512_unpacklo_pd(PD(ab0), PD(cd0))), x1 = PS(_mm512_unpackhi_pd(PD(ab0), PD(cd0)));
		const __m512 x2 = PS(_mm512_unpacklo_pd(PD(ab1), PD(cd1))), x3 = PS(_mm512_unpackhi_pd(PD(ab1), PD(cd1)));
#undef PD
#undef PS
		/* A 4 x 4 transpose of 128-bit lanes: output j holds taps 4j..4j+3. */
		const __m512 y0 = _mm512_shuffle_f32x4(x0, x1, 0x44), y1 = _mm512_shuffle_f32x4(x0, x1, 0xee);
		const __m512 y2 = _mm512_shuffle_f32x4(x2, x3, 0x44), y3 = _mm512_shuffle_f32x4(x2, x3, 0xee);
		const __m512 o[4] = {_mm512_shuffle_f32x4(y0, y2, 0x88), _mm512_shuffle_f32x4(y0, y2, 0xdd),
		                     _mm512_shuffle_f32x4(y1, y3, 0x88), _mm512_shuffle_f32x4(y1, y3, 0xdd)};
		for (int j = 0; j < 4; j++)
			_mm512_mask_storeu_ps(d + 4 * t0 + 16 * j, ss_lanes(4 * n - 16 * j), o[j]);
	}
}

/* Floats of input and weights a block of channels may read per tile,
 * kept well inside the L1 cache so that every block of 4 output channels
 * finds its weights and the tile's inputs there. */
enum { L1_FLOATS = 8192 };

/* s16_channel_block returns how many input channels a tile's taps cover
 * at a time: as many as keep the inputs a 6-unit tile reads (per
 * channel: the rows its units span plus kh - 1, of wpad floats, once or,
 * for shifted copies, kw times) and the weights of those channels for
 * every output channel within L1_FLOATS. */
static int s16_channel_block(const sgeom *g)
{
	const ptrdiff_t per = (g->rows ? ((6 + g->ur - 1) / g->ur + g->kh) * (ptrdiff_t)g->wpad
	                               : g->kw * (6 * 16 + (ptrdiff_t)(g->kh - 1) * g->wo + 16)) +
	                      s16_round4(g->co) * g->kh * g->kw;
	const ptrdiff_t cb = L1_FLOATS / per;
	return (int)(cb < 1 ? 1 : cb > g->ci ? g->ci : cb);
}

typedef struct {
	const sgeom *g;
	int nc;                  /* images shifted at once */
	int cb;                  /* input channels per block of taps */
	const float *in;
	ptrdiff_t in_n, in_c;    /* input plane (n, c) at in + n*in_n + c*in_c */
	float *out;
	ptrdiff_t out_n, out_c;  /* output plane (n, c) at out + n*out_n + c*out_c */
	const float *w, *bias;   /* packed: [block][tap][4], [block][4] */
	const int *koff;
	float *buf;              /* per part: nc shifted images and SLACK floats */
} s16_corr_job;

/* s16_corr_part runs the correlation for images [lo, hi), nc at a time,
 * in tiles of up to 6 units over the chunk's units (image-major, so that
 * only the chunk's last tile may be short). For each tile, the taps run
 * in blocks of cb input channels, each block for every block of 4 output
 * channels (the tile's inputs stay in L1 while the output blocks read
 * them), each block after the first adding to the partial sums the one
 * before stored. */
SS_AVX512 static void s16_corr_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const s16_corr_job *j = ctx;
	const sgeom *g = j->g;
	float *buf = align64(j->buf + part * (j->nc * g->img + SLACK));
	/* Zero once, so that the floats between planes, which no stored
	 * lane depends on, are never NaN or denormal garbage. */
	memset(buf, 0, sizeof(float) * (size_t)(j->nc * g->img + SLACK - 16));
	const int blocks = (g->co + 3) / 4, kk = g->kh * g->kw;
	for (ptrdiff_t n0 = lo; n0 < hi; n0 += j->nc) {
		const int nc = (int)(hi - n0 < j->nc ? hi - n0 : j->nc);
		for (int n = 0; n < nc; n++)
			s16_shift_image(g, j->in + (n0 + n) * j->in_n, j->in_c, buf + n * g->img);
		const ptrdiff_t all = nc * g->units;
		for (ptrdiff_t u0 = 0; u0 < all; u0 += 6) {
			const int nu = (int)(all - u0 < 6 ? all - u0 : 6);
			const float *x[6];
			float *y0[6], *y[6];
			__mmask16 msk[6];
			for (int u = 0; u < 6; u++) {
				const ptrdiff_t uu = u0 + ss_imin(u, nu - 1), n = uu / g->units, un = uu % g->units;
				x[u] = buf + n * g->img + s16_uoff(g, un);
				y0[u] = j->out + (n0 + n) * j->out_n + 16 * un;
				msk[u] = s16_tail_mask(g, un);
			}
			for (int c0 = 0; c0 < g->ci; c0 += j->cb) {
				const ptrdiff_t t0 = (ptrdiff_t)c0 * kk, t1 = (ptrdiff_t)ss_imin(g->ci, c0 + j->cb) * kk;
				for (int ob = 0; ob < blocks; ob++) {
					for (int u = 0; u < 6; u++)
						y[u] = y0[u] + 4 * ob * j->out_c;
					s16_fwd_kernel[nu](t1 - t0, j->koff + t0, j->w + ob * 4 * g->k + 4 * t0, j->bias + 4 * ob,
					               c0 > 0, x, y, j->out_c, ss_imin(4, g->co - 4 * ob), msk);
				}
			}
		}
	}
}

/* s16_corr runs the correlation over n images with the weights already
 * packed; koff and the parts' buffers are in ws (see s16_corr_ws). */
static void s16_corr(int threads, const sgeom *g, int n, const float *in, ptrdiff_t in_n, ptrdiff_t in_c, float *out,
                 ptrdiff_t out_n, ptrdiff_t out_c, const float *wpk, const float *bias, int *koff,
                 float *bufs, ptrdiff_t buf_len)
{
	s16_taps(g, koff);
	s16_corr_job j = {.g = g, .nc = s16_corr_chunk(g, n), .cb = s16_channel_block(g), .in = in, .in_n = in_n, .in_c = in_c, .out = out,
	              .out_n = out_n, .out_c = out_c, .w = wpk, .bias = bias, .koff = koff, .buf = bufs};
	ss_parallel_for(ss_ws_threads(threads, buf_len, s16_corr_part_floats(g, n)), n, 1, s16_corr_part, &j);
}

/* s16_corr_ws splits the workspace of a correlation (see s16_corr_fixed): packed
 * weights, packed bias, tap offsets, the parts' buffers. */
static void s16_corr_ws(const sgeom *g, float *ws, float **wpk, float **bias, int **koff, float **bufs)
{
	*wpk = ws;
	*bias = ws + s16_round4(g->co) * g->k;
	*koff = (int *)(*bias + s16_round4(g->co));
	*bufs = (float *)(*koff + g->k);
}

void ss_d512_forward(int threads, const ss_conv_shape *s, const float *x, const float *w, const float *b,
                     float *y, float *ws, ptrdiff_t ws_len)
{
	const sgeom g = s16_sgeom_forward(s, 1);
	ptrdiff_t xn, xc, yn, yc;
	ss_conv_planes(s, &xn, &xc, &yn, &yc);
	/* Weights packed [block of 4 output channels][tap][4], zero rows
	 * past oc, and the bias likewise. */
	float *wpk, *bias, *bufs;
	int *koff;
	s16_corr_ws(&g, ws, &wpk, &bias, &koff, &bufs);
	for (int o = 0; o < s16_round4(g.co); o += 4) {
		const float *r[4];
		for (int m = 0; m < 4; m++) {
			r[m] = o + m < g.co ? w + (o + m) * g.k : NULL;
			bias[o + m] = o + m < g.co && b ? b[o + m] : 0.0f;
		}
		s16_pack4(r, 0, g.k, wpk + o * g.k);
	}
	s16_corr(threads, &g, s->n, x, xn, xc, y, yn, yc, wpk, bias, koff, bufs, ws_len - s16_corr_fixed(&g));
}

/* ---- weight gradient ----
 *
 * The weight gradient puts output channels in the lanes instead of
 * pixels: with the output gradient transposed to pixel-major rows
 * (dyT[n][f][oc], oc rounded up to ocp, a multiple of 16, zero past OC)
 * and each image padded into planes of hp x wp floats (wp = OW + kw - 1),
 *   dwT[tap][oc] += dyT[n][f][oc] * xpad[c][oh + i][ow + j]
 * is a vector of output-gradient channels times a broadcast input value,
 * summed in registers over every pixel of a chunk of images: no
 * horizontal sums and no shifted copies. A tile holds OCV vectors of
 * output channels times the taps of R kernel rows (segments of up to 7
 * taps of a row, so that each row is one pointer and its taps are
 * immediate offsets); at the end of a chunk the tile adds its
 * accumulators to dwT (tap-major, ocp floats per tap), which is
 * transposed into dw once all chunks are done. */

typedef struct {
	int ci, co, ocp;   /* input channels, output channels, the latter rounded up to 16 */
	int ho, wo, kh, kw, ph, pw, hi, wi;
	int hp, wp;        /* padded input plane */
	int sw, segs;      /* taps per row segment (at most 7), segments per kernel row */
	ptrdiff_t plane;   /* hp*wp */
	ptrdiff_t img;     /* floats per padded image: ci*plane */
	ptrdiff_t p;       /* output pixels per plane */
	ptrdiff_t k;       /* taps: ci*kh*kw */
} wgeom;

static wgeom s16_wgeom(const ss_conv_shape *s)
{
	wgeom g = {.ci = s->c, .co = s->oc, .ocp = (s->oc + 15) / 16 * 16, .ho = ss_conv_out_h(s),
	           .wo = ss_conv_out_w(s), .kh = s->kh, .kw = s->kw, .ph = s->pad_h, .pw = s->pad_w,
	           .hi = s->h, .wi = s->w};
	g.hp = g.ho + g.kh - 1;
	g.wp = g.wo + g.kw - 1;
	g.segs = (g.kw + 6) / 7;
	g.sw = (g.kw + g.segs - 1) / g.segs;
	g.plane = (ptrdiff_t)g.hp * g.wp;
	g.img = g.ci * g.plane;
	g.p = (ptrdiff_t)g.ho * g.wo;
	g.k = (ptrdiff_t)g.ci * g.kh * g.kw;
	return g;
}

/* Images per chunk: padded images and transposed output gradients of
 * about 128 Ki floats. */
static int s16_wchunk(const wgeom *g, int n)
{
	ptrdiff_t c = (ptrdiff_t)(1 << 17) / (g->img + g->p * g->ocp);
	return (int)(c < 1 ? 1 : c > n ? n : c);
}

/* Floats of the weight gradient: dwT, then (64-byte aligned) a chunk of
 * padded images with slack for the segments' reads past kw, the chunk's
 * transposed output gradient, and the parts' sums for db. */
static ptrdiff_t s16_dw_floats(const ss_conv_shape *s)
{
	const wgeom g = s16_wgeom(s);
	const int nc = s16_wchunk(&g, s->n);
	return g.k * g.ocp + 16 + nc * g.img + SLACK + nc * g.p * g.ocp + nc * g.ocp;
}

/* DW_R is the kernel rows of a tile of OCV vectors and segments of SW
 * taps: as many as keep at most 24 accumulators, 1 to 8. */
#define DW_R(OCV, SW) (24 / ((OCV) * (SW)) < 1 ? 1 : 24 / ((OCV) * (SW)) > 8 ? 8 : 24 / ((OCV) * (SW)))

/* s16_dw_body accumulates a tile over the pixels of nc images: row q of
 * the tile reads xr[q] (image n at xr[q] + n*img, output pixel (oh, ow)
 * and tap j at + oh*wp + ow + j), the output gradient of pixel f of
 * image n is the OCV vectors at dyt + (n*p + f)*ocp; tap j of row q is
 * added to the OCV vectors at out[q] + j*ocp, for rows q < nr and taps
 * j < nj. */
SS_AVX512_INLINE void s16_dw_body(const int OCV, const int SW, const int R, int nc, const wgeom *g,
                                  const float *const xr[8], const float *dyt, float *const out[8], int nr,
                                  int nj)
{
	__m512 c[28]; /* R*SW*OCV <= 24, or 28 for 4 vectors of 7 taps */
#pragma GCC unroll 28
	for (int i = 0; i < R * SW * OCV; i++)
		c[i] = _mm512_setzero_ps();
	const int ho = g->ho, wo = g->wo;
	const ptrdiff_t ocp = g->ocp;
	for (int n = 0; n < nc; n++)
		for (int oh = 0; oh < ho; oh++) {
			const float *d = dyt + ((ptrdiff_t)n * ho + oh) * wo * ocp;
			const ptrdiff_t base = n * g->img + (ptrdiff_t)oh * g->wp;
			const float *rp[8];
#pragma GCC unroll 8
			for (int q = 0; q < R; q++)
				rp[q] = xr[q] + base;
			for (int ow = 0; ow < wo; ow++, d += ocp) {
				__m512 a[4];
#pragma GCC unroll 4
				for (int v = 0; v < OCV; v++)
					a[v] = _mm512_loadu_ps(d + 16 * v);
#pragma GCC unroll 8
				for (int q = 0; q < R; q++)
#pragma GCC unroll 7
					for (int j = 0; j < SW; j++) {
						const __m512 b = _mm512_set1_ps(rp[q][ow + j]);
#pragma GCC unroll 4
						for (int v = 0; v < OCV; v++)
							c[(q * SW + j) * OCV + v] = _mm512_fmadd_ps(a[v], b, c[(q * SW + j) * OCV + v]);
					}
			}
		}
	for (int q = 0; q < nr; q++)
		for (int j = 0; j < nj; j++)
#pragma GCC unroll 4
			for (int v = 0; v < OCV; v++) {
				float *o = out[q] + j * ocp + 16 * v;
				_mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), c[(q * SW + j) * OCV + v]));
			}
}

typedef void (*s16_dw_fn)(int nc, const wgeom *g, const float *const xr[8], const float *dyt,
                          float *const out[8], int nr, int nj);

#define DW_N(OCV, SW)                                                                                   \
	SS_AVX512 static void s16_dw_##OCV##_##SW(int nc, const wgeom *g, const float *const xr[8],          \
	                                          const float *dyt, float *const out[8], int nr, int nj)    \
	{                                                                                                   \
		s16_dw_body(OCV, SW, DW_R(OCV, SW), nc, g, xr, dyt, out, nr, nj);                           \
	}
#define DW_SW(OCV) DW_N(OCV, 1) DW_N(OCV, 2) DW_N(OCV, 3) DW_N(OCV, 4) DW_N(OCV, 5) DW_N(OCV, 6) DW_N(OCV, 7)
DW_SW(1)
DW_SW(2)
DW_SW(3)
DW_SW(4)
#define DW_ROW(OCV)                                                                                       \
	{NULL, s16_dw_##OCV##_1, s16_dw_##OCV##_2, s16_dw_##OCV##_3, s16_dw_##OCV##_4, s16_dw_##OCV##_5, \
	 s16_dw_##OCV##_6, s16_dw_##OCV##_7}
/* s16_dw_kernel[OCV][SW] and its rows per tile. */
static const s16_dw_fn s16_dw_kernel[5][8] = {{NULL}, DW_ROW(1), DW_ROW(2), DW_ROW(3), DW_ROW(4)};

/* s16_transpose transposes the 16 x 16 matrix whose row i is r[i]. */
SS_AVX512_INLINE void s16_transpose(__m512 r[16])
{
	__m512 t[16];
	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 4; i++) {
		const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
		const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
		r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
		r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
		r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
		r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
	}
	for (int i = 0; i < 4; i++) {
		t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
		t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
		t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
		t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
	}
	for (int i = 0; i < 4; i++) {
		r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
		r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
		r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
		r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
	}
}

typedef struct {
	const wgeom *g;
	const float *x;
	ptrdiff_t x_n, x_c;
	const float *dy;
	ptrdiff_t dy_n, dy_c;    /* plane (n, oc) at dy + n*dy_n + oc*dy_c */
	float *buf, *dyt;        /* the chunk's padded images and transposed output gradient */
	float *dbp;              /* per image slot of a chunk: ocp sums of dy, for db (NULL: no db) */
	int n0, nc;
	int rows, vblocks;       /* tiles: row groups per segment, blocks of up to 4 output-channel vectors */
	float *dwt;              /* [tap][ocp] */
} s16_dw_job;

/* s16_dw_prep_part pads and transposes images [lo, hi) of the chunk,
 * adding the output gradient's sums per channel to the image slot's
 * dbp: per slot, not per part, so that db's summation order does not
 * depend on which thread took which image. */
SS_AVX512 static void s16_dw_prep_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const s16_dw_job *j = ctx;
	const wgeom *g = j->g;
	for (ptrdiff_t n = lo; n < hi; n++) {
		const float *xs = j->x + (j->n0 + n) * j->x_n;
		float *xp = j->buf + n * g->img;
		/* The interior of the padded planes; the borders stay zero. */
		const int c0 = ss_imax(0, g->pw), c1 = ss_imin(g->wp, g->wi + g->pw);
		const int r0 = ss_imax(0, g->ph), r1 = ss_imin(g->hp, g->hi + g->ph);
		for (int c = 0; c < g->ci && c1 > c0; c++)
			for (int r = r0; r < r1; r++) {
				const float *sp = xs + c * j->x_c + (ptrdiff_t)(r - g->ph) * g->wi + (c0 - g->pw);
				float *dp = xp + c * g->plane + (ptrdiff_t)r * g->wp + c0;
				for (int q = 0; q < c1 - c0; q++)
					dp[q] = sp[q];
			}
		/* dyT[f][oc], zero past co, in blocks of 16 x 16. */
		float *dt = j->dyt + n * g->p * g->ocp;
		const float *ds = j->dy + (j->n0 + n) * j->dy_n;
		for (int oc0 = 0; oc0 < g->co; oc0 += 16) {
			const int nr = ss_imin(16, g->co - oc0);
			for (ptrdiff_t f0 = 0; f0 < g->p; f0 += 16) {
				const int nf = (int)(g->p - f0 < 16 ? g->p - f0 : 16);
				const __mmask16 m = (__mmask16)((1u << nf) - 1);
				__m512 r[16];
				for (int i = 0; i < 16; i++) {
					const float *row = ds + (oc0 + i) * j->dy_c;
					/* 16 rows of planes far apart: fetch ahead. */
					if (i < nr && f0 + 64 < g->p)
						_mm_prefetch((const char *)(row + f0 + 64), _MM_HINT_T0);
					r[i] = i < nr ? _mm512_maskz_loadu_ps(m, row + f0) : _mm512_setzero_ps();
				}
				s16_transpose(r);
				__m512 sum = _mm512_setzero_ps();
				for (int i = 0; i < nf; i++) {
					_mm512_storeu_ps(dt + (f0 + i) * g->ocp + oc0, r[i]);
					sum = _mm512_add_ps(sum, r[i]);
				}
				if (j->dbp) {
					float *p = j->dbp + n * g->ocp + oc0;
					_mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), sum));
				}
			}
		}
	}
}

/* s16_dw_tile_part adds the chunk's share of tiles [lo, hi) to dwT:
 * tile ((vb*segs + s)*rows + rg) covers output-channel vectors 4vb..,
 * segment s of every kernel row, kernel rows rg*R... (rows r = c*kh + i
 * of all channels, one after another). */
SS_AVX512 static void s16_dw_tile_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const s16_dw_job *j = ctx;
	const wgeom *g = j->g;
	const int vecs = g->ocp / 16, allrows = g->ci * g->kh;
	for (ptrdiff_t t = lo; t < hi; t++) {
		const int rg = (int)(t % j->rows), s = (int)(t / j->rows % g->segs), vb = (int)(t / j->rows / g->segs);
		const int ocv = ss_imin(4, vecs - 4 * vb), R = DW_R(ocv, g->sw);
		const int r0 = rg * R, nr = ss_imin(R, allrows - r0);
		if (nr <= 0)
			continue;
		const int nj = ss_imin(g->sw, g->kw - s * g->sw);
		const float *xr[8];
		float *out[8];
		for (int q = 0; q < 8; q++) {
			const int r = r0 + ss_imin(q, nr - 1), c = r / g->kh, i = r % g->kh;
			xr[q] = j->buf + c * g->plane + (ptrdiff_t)i * g->wp + s * g->sw;
			out[q] = j->dwt + ((ptrdiff_t)r * g->kw + s * g->sw) * g->ocp + 64 * vb;
		}
		s16_dw_kernel[ocv][g->sw](j->nc, g, xr, j->dyt + 64 * vb, out, nr, nj);
	}
}

/* s16_weight_grad computes dw and, unless db is NULL, db (from the sums
 * the transposition makes on its way). */
SS_AVX512 static void s16_weight_grad(int threads, const ss_conv_shape *s, const float *x, const float *dy, float *dw, float *db,
                                      float *ws)
{
	const wgeom g = s16_wgeom(s);
	ptrdiff_t xn, xc, yn, yc;
	ss_conv_planes(s, &xn, &xc, &yn, &yc);
	const int nc = s16_wchunk(&g, s->n);
	float *dwt = ws, *buf = align64(dwt + g.k * g.ocp), *dyt = buf + nc * g.img + SLACK;
	float *dbp = db ? dyt + nc * g.p * g.ocp : NULL;
	memset(dwt, 0, sizeof(float) * (size_t)(g.k * g.ocp));
	memset(buf, 0, sizeof(float) * (size_t)(nc * g.img + SLACK + nc * g.p * g.ocp + (db ? nc * g.ocp : 0)));
	/* Tiles: row groups sized for the widest block of vectors (4, or
	 * fewer when ocp has fewer), so that every block's tiles cover all
	 * rows (a narrower last block has more rows per tile and skips the
	 * empty groups). */
	const int vecs = g.ocp / 16, vblocks = (vecs + 3) / 4, rmin = DW_R(ss_imin(4, vecs), g.sw);
	const int rows = (g.ci * g.kh + rmin - 1) / rmin;
	const ptrdiff_t tiles = (ptrdiff_t)vblocks * g.segs * rows;
	for (int n0 = 0; n0 < s->n; n0 += nc) {
		s16_dw_job j = {.g = &g, .x = x, .x_n = xn, .x_c = xc, .dy = dy, .dy_n = yn, .dy_c = yc, .buf = buf,
		                .dyt = dyt, .dbp = dbp, .n0 = n0, .nc = ss_imin(nc, s->n - n0), .rows = rows,
		                .vblocks = vblocks, .dwt = dwt};
		ss_parallel_for(threads, j.nc, 1, s16_dw_prep_part, &j);
		ss_parallel_for(threads, tiles, 1, s16_dw_tile_part, &j);
	}
	for (int oc = 0; db && oc < g.co; oc++) {
		float sum = 0.0f;
		for (int i = 0; i < nc; i++)
			sum += dbp[i * g.ocp + oc];
		db[oc] = sum;
	}
	/* dw[oc][t] = dwT[t][oc], in blocks of 16 x 16. */
	for (int oc0 = 0; oc0 < g.co; oc0 += 16)
		for (ptrdiff_t t0 = 0; t0 < g.k; t0 += 16) {
			__m512 r[16];
			for (int i = 0; i < 16; i++)
				r[i] = t0 + i < g.k ? _mm512_loadu_ps(dwt + (t0 + i) * g.ocp + oc0) : _mm512_setzero_ps();
			s16_transpose(r);
			for (int i = 0; i < 16 && oc0 + i < g.co; i++)
				_mm512_mask_storeu_ps(dw + (oc0 + i) * g.k + t0, ss_lanes(g.k - t0), r[i]);
		}
}

/* ---- input gradient by scattering ---- */

typedef struct {
	const ss_conv_shape *s;
	const sgeom *f;          /* the forward geometry: Z has its shifted planes */
	const float *dy;
	ptrdiff_t yn, yc;
	float *dx;
	ptrdiff_t xn, xc;
	const float *w;          /* packed [block of 4 input channels][tap][oc][4] */
	const int *ooff;         /* ooff[oc]: oc planes of whole units on */
	float *bufs;
} s16_scatter_job;

SS_AVX512 static void s16_scatter_image_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const s16_scatter_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const sgeom *f = j->f;
	const int kk = s->kh * s->kw, blocks = (s->c + 3) / 4;
	const ptrdiff_t dplane = f->units * 16;
	float *z = align64(j->bufs + part * s16_scatter_part_floats(s, f)), *gy = z + f->img + SLACK - 16;
	for (ptrdiff_t n = lo; n < hi; n++) {
		/* The image's output gradient in whole units, zero past each
		 * plane, so that the lanes past a plane add zeros to Z. */
		for (int o = 0; o < s->oc; o++) {
			const float *sp = j->dy + n * j->yn + o * j->yc;
			float *dp = gy + o * dplane;
			for (ptrdiff_t q = 0; q < f->p; q++)
				dp[q] = sp[q];
			for (ptrdiff_t q = f->p; q < dplane; q++)
				dp[q] = 0.0f;
		}
		memset(z, 0, sizeof(float) * (size_t)(f->img + SLACK - 16));
		for (int cb = 0; cb < blocks; cb++) {
			const int mr = ss_imin(4, s->c - 4 * cb);
			float *zb = z + 4 * cb * f->pls;
			for (ptrdiff_t u0 = 0; u0 < f->units; u0 += 6) {
				const int nu = (int)(f->units - u0 < 6 ? f->units - u0 : 6);
				const float *d[6];
				for (int u = 0; u < 6; u++)
					d[u] = gy + 16 * (u0 + ss_imin(u, nu - 1));
				const float *w = j->w + (ptrdiff_t)cb * kk * s->oc * 4;
				static const __mmask16 all[6] = {0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff};
				static const float nobias[4];
				for (int i = 0; i < s->kh; i++)
					for (int jj = 0; jj < s->kw; jj++, w += 4 * s->oc) {
						/* The forward kernel with the output channels as
						 * its taps, adding to Z (whole units: the lanes
						 * past a plane add zeros). */
						float *o[6];
						for (int u = 0; u < 6; u++)
							o[u] = zb + jj * f->js + (ptrdiff_t)i * f->wo + 16 * (u0 + ss_imin(u, nu - 1));
						s16_fwd_kernel[nu](s->oc, j->ooff, w, nobias, 1, d, o, f->pls, mr, all);
					}
			}
		}
		/* dx[c][y][x] = sum over j of Z[j][c][(y + ph)*wo + x + pw - j],
		 * for the j that keep x + pw - j inside [0, wo): 16 x at a
		 * time, each j through the mask of its valid lanes. */
		for (int c = 0; c < s->c; c++)
			for (int y = 0; y < s->h; y++) {
				float *dr = j->dx + n * j->xn + c * j->xc + (ptrdiff_t)y * s->w;
				const float *zr = z + c * f->pls + (ptrdiff_t)(y + f->ph) * f->wo + f->pw;
				for (int x0 = 0; x0 < s->w; x0 += 16) {
					__m512 acc = _mm512_setzero_ps();
					for (int jj = 0; jj < s->kw; jj++) {
						const int a = ss_imin(ss_imax(jj - f->pw - x0, 0), 16);
						const int b = ss_imin(ss_imax(f->wo + jj - f->pw - x0, 0), 16);
						const __mmask16 m = (__mmask16)(((1u << b) - 1) & ~((1u << a) - 1));
						acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, zr + jj * (f->js - 1) + x0));
					}
					_mm512_mask_storeu_ps(dr + x0, (__mmask16)((1u << ss_imin(16, s->w - x0)) - 1), acc);
				}
			}
	}
}

static void s16_scatter(int threads, const ss_conv_shape *s, const sgeom *f, const float *w, const float *dy, float *dx,
                    float *ws, ptrdiff_t ws_len)
{
	float *wpk = ws;
	ss_pack_scatter(s, w, wpk);
	int *ooff = (int *)(wpk + s16_scatter_fixed(s) - s->oc);
	for (int o = 0; o < s->oc; o++)
		ooff[o] = (int)(o * f->units * 16);
	s16_scatter_job j = {.s = s, .f = f, .dy = dy, .dx = dx, .w = wpk, .ooff = ooff,
	                     .bufs = wpk + s16_scatter_fixed(s)};
	ss_conv_planes(s, &j.xn, &j.xc, &j.yn, &j.yc);
	ss_parallel_for(ss_ws_threads(threads, ws_len - s16_scatter_fixed(s), s16_scatter_part_floats(s, f)), s->n,
	                1, s16_scatter_image_part, &j);
}

void ss_d512_backward(int threads, const ss_conv_shape *s, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float *db, float *ws, ptrdiff_t ws_len)
{
	if (dw)
		s16_weight_grad(threads, s, x, dy, dw, db, ws);
	else if (db)
		ss_conv_bias_grad(threads, s, dy, db);
	if (dx == NULL)
		return;
	const sgeom f = s16_sgeom_forward(s, 0), g = s16_sgeom_data(s);
	if (s16_dx_scatter(&f, &g)) {
		s16_scatter(threads, s, &f, w, dy, dx, ws, ws_len);
		return;
	}
	ptrdiff_t xn, xc, yn, yc;
	ss_conv_planes(s, &xn, &xc, &yn, &yc);
	/* Rotated kernel with swapped channel axes, packed [block of 4 input
	 * channels][tap (oc, i, j)][4]. */
	float *wpk, *bias, *bufs;
	int *koff;
	s16_corr_ws(&g, ws, &wpk, &bias, &koff, &bufs);
	const int kk = s->kh * s->kw;
	for (int c = 0; c < s16_round4(g.co); c += 4)
		for (int o = 0; o < s->oc; o++) {
			const float *r[4];
			for (int m = 0; m < 4; m++) {
				r[m] = c + m < g.co ? w + ((ptrdiff_t)o * s->c + c + m) * kk + kk - 1 : NULL;
				bias[c + m] = 0.0f;
			}
			s16_pack4(r, 1, kk, wpk + c * g.k + 4 * (ptrdiff_t)o * kk);
		}
	s16_corr(threads, &g, s->n, dy, yn, yc, dx, xn, xc, wpk, bias, koff, bufs, ws_len - s16_corr_fixed(&g));
}

#else /* !SS_HAVE_AVX512: never called (ss_isa stays below SS_ISA_AVX512) */

int ss_d512_fits(const ss_conv_shape *s)
{
	(void)s;
	return 0;
}

static ptrdiff_t s16_dw_floats(const ss_conv_shape *s);

ptrdiff_t ss_d512_workspace(int threads, const ss_conv_shape *s, int backward)
{
	(void)threads, (void)s, (void)backward;
	return 0;
}

void ss_d512_forward(int threads, const ss_conv_shape *s, const float *x, const float *w, const float *b,
                     float *y, float *ws, ptrdiff_t ws_len)
{
	(void)threads, (void)s, (void)x, (void)w, (void)b, (void)y, (void)ws, (void)ws_len;
}

void ss_d512_backward(int threads, const ss_conv_shape *s, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float *db, float *ws, ptrdiff_t ws_len)
{
	(void)threads, (void)s, (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)db, (void)ws, (void)ws_len;
}

#endif
