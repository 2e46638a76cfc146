/* Winograd convolution for kernels of stride 1, all three passes:
 * F(2x2, 3x3) on 4 x 4 tiles (SS_CONV_WINOGRAD), and on 6 x 6 tiles
 * F(4x4, 3x3) and F(2x2, 5x5) (SS_CONV_WINOGRAD6, by kernel size).
 *
 * F(m x m, r x r) works on input tiles of a = m + r - 1 pixels a side.
 * The output plane (OH x OW) is cut into m x m tiles, TH = ceil(OH/m) by
 * TW = ceil(OW/m) per image, the last row and column of tiles cropped.
 * Output tile (th, tw) reads the a x a input tile d whose top left pixel
 * is (m*th - pad, m*tw - pad): input tiles overlap by r - 1 pixels and
 * read zeros outside the image. With the a x a input transform Bt, the
 * a x r weight transform G and the m x a output transform At, and
 * xi = a*k + j indexing the a*a positions of a transform:
 *   U[oc][xi][c] = (G w[oc][c] Gt)[k][j]      weights
 *   V[xi][c][t]  = (Bt d[c][t] B)[k][j]       input tiles
 *   M[xi]        = U[xi] V[xi]                a*a GEMMs (OC x C times C x T)
 *   y tile       = At M A (+ bias).
 * For a = 4 (points 0, 1, -1, infinity):
 *   Bt = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
 *   G  = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],   At = [1 1 1 0; 0 1 -1 -1].
 * For a = 6 (points 0, 1, -1, 2, -2, infinity) Bt is shared by both
 * kernel sizes:
 *   Bt = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0;
 *         0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1],
 *   G row i < 5 = s_i (1, p_i, ..., p_i^(r-1)) with the points
 *   p = (0, 1, -1, 2, -2) and s = (1/4, -1/6, -1/6, 1/24, 1/24), row 5 =
 *   (0, ..., 0, 1); At row i = (p_0^i, ..., p_4^i, [i = m - 1]).
 * F(4x4, 3x3) does 36 multiplications for 16 outputs, F(2x2, 5x5) 36 for
 * 4, F(2x2, 3x3) 16 for 4; the larger points of a = 6 cost precision:
 * the rounding error grows with the transforms' norms (csrc/tests
 * measure up to about 30 times that of a = 4, relative to a sum's
 * terms).
 * U[xi], the OC x C matrix of position xi, has rows a*a*C floats apart.
 * The gradients are those of this computation, so every pass shares the
 * transforms: with dM = A dy At (the m x m output-gradient tile, zero
 * where cropped),
 *   dV[xi] = U[xi]^T dM[xi],   dx = sum over tiles of B dV Bt (cropped),
 *   dU[xi] = sum over tiles of dM[xi] V[xi]^T,   dw = Gt dU G.
 *
 * Tiles are numbered t = (n*TH + th)*TW + tw and taken in blocks of whole
 * tile rows (n, th) (see wino_make for their size), so that one block's V and M
 * stay in cache between the transforms and the GEMMs: a block's matrix of
 * position xi holds rows of T tiles (T = rows*TW), V[xi] at V + xi*C*T and
 * M[xi] at M + xi*OC*T. The transforms run on our threads
 * (ss_parallel_for), items being (channel, tile row) pairs, and read and
 * write rows through copies of padded rows split into their m column
 * phases (padded column m*t + p at phase p, index t), so that every
 * loop over tiles is unit-stride and vectorises (ivdep: the rows a loop
 * reads and writes never overlap, which GCC cannot prove within the
 * scratch and V and M); they are compiled per instruction-set level
 * (SS_ISA_VARIANTS). The GEMMs run on OpenBLAS's
 * threads, so the bits depend on the thread count.
 *
 * The input gradient overlaps between tile rows: a tile row's last r - 1
 * padded rows are the next one's first r - 1. Within a block, they are
 * carried from tile row to tile row and written when complete; a block's
 * last ones are written to dx, and the next block's first tile row of the
 * same image adds to them (a = 4: its first two rows; a = 6: it reads
 * them back as its carry, as r - 1 may exceed m). */
#include <string.h>

#include "internal.h"

enum { WINO_POS_MAX = 36 }; /* positions xi of the largest transform (6 x 6) */

/* Tiles per block (a multiple of TW rounded down, at least one tile
 * row); set by tests only (ss_winograd_set_test). */
static ptrdiff_t wino_tiles_test;

void ss_winograd_set_test(ptrdiff_t tiles) { wino_tiles_test = tiles; }

int ss_conv_winograd_supported(int method, const ss_conv_shape *s)
{
	if (s->stride_h != 1 || s->stride_w != 1 || s->kh != s->kw || s->pad_h != s->pad_w || s->pad_h < 0 ||
	    s->h + 2 * s->pad_h < s->kh || s->w + 2 * s->pad_w < s->kw)
		return 0;
	if (method == SS_CONV_WINOGRAD)
		return s->kh == 3 && s->pad_h <= 1;
	if (method == SS_CONV_WINOGRAD6)
		return (s->kh == 3 && s->pad_h <= 1) || (s->kh == 5 && s->pad_h <= 2);
	return 0;
}

typedef struct {
	int th, tw;        /* tiles per column and per row of an image */
	ptrdiff_t e1;      /* floats of one column phase of a padded row: TW + (a - 1)/m */
	int rows;          /* tile rows per block */
	ptrdiff_t scratch; /* floats of one part's scratch */
} wino_geom;

/* A block's V and M take a*a*(C + OC)*T floats. The GEMMs want long rows
 * of tiles (their packing of U is repeated per block) more than V and M
 * want L2: a budget of 2^22 floats (16 MiB, half the L3 of a Zen 3 CCD)
 * and at least 256 tiles per block make 2048 tiles of 64 channels, 256 of
 * 512 for a = 4, where shorter blocks measured slower on ResNet-18's
 * layers. */
static wino_geom wino_make(int m, int a, const ss_conv_shape *s)
{
	wino_geom g;
	g.th = (ss_conv_out_h(s) + m - 1) / m;
	g.tw = (ss_conv_out_w(s) + m - 1) / m;
	g.e1 = g.tw + (a - 1) / m;
	ptrdiff_t tiles = ((ptrdiff_t)1 << 22) / ((ptrdiff_t)a * a * (s->c + s->oc));
	if (tiles < 256)
		tiles = 256;
	if (wino_tiles_test > 0)
		tiles = wino_tiles_test;
	ptrdiff_t rows = tiles / g.tw;
	const ptrdiff_t all = (ptrdiff_t)s->n * g.th;
	g.rows = (int)(rows < 1 ? 1 : rows > all ? all : rows);
	/* The largest: the input gradient's a*a tile columns, a padded rows
	 * and r - 1 carried ones, m phases of e1 floats each. */
	g.scratch = (ptrdiff_t)a * a * g.tw + 3 * (ptrdiff_t)a * m * g.e1;
	return g;
}

typedef struct wino_kind wino_kind;

typedef struct {
	const ss_conv_shape *s;
	const wino_kind *k;
	int pos;           /* a*a */
	wino_geom g;
	int pad, oh, ow;
	ptrdiff_t xn, xc, yn, yc;
	ptrdiff_t r0;      /* the block's first tile row (n*TH + th) */
	int rb;            /* the block's tile rows */
	ptrdiff_t t;       /* the block's tiles: rb*TW */
	int n0, nseg;      /* input gradient: first image of the block, images it touches */
	const float *x, *w, *b, *dy;
	float *y, *dx, *dw;
	float *U, *V, *M;  /* U or dU; V or dV; M or dM */
	float *scratch;
} wino_job;

/* ---- 4 x 4 tiles: F(2x2, 3x3) ---- */

/* wino_u returns where item i = oc*C + c of the weight transforms keeps
 * its position 0 in U (or dU); position xi is xi*C floats on. */
SS_INLINE float *wino_u(const wino_job *j, ptrdiff_t i)
{
	const ptrdiff_t c = j->s->c;
	return j->U + i + i / c * (j->pos - 1) * c;
}

/* U from w: items oc*C + c. Rows first (t = G w), then columns. U holds
 * the 16 positions of an output channel together, [oc][xi][c], so that
 * the 16 rows written stay within 16*C floats (the GEMMs read U[xi] as
 * OC x C with rows 16*C apart); dU likewise. */
SS_INLINE void wino_weights_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const wino_job *j = ctx;
	const ptrdiff_t stride = j->s->c;
	for (ptrdiff_t i = lo; i < hi; i++) {
		const float *w = j->w + i * 9;
		float t[4][3];
		for (int b = 0; b < 3; b++) {
			t[0][b] = w[b];
			t[1][b] = 0.5f * (w[b] + w[3 + b] + w[6 + b]);
			t[2][b] = 0.5f * (w[b] - w[3 + b] + w[6 + b]);
			t[3][b] = w[6 + b];
		}
		float *u = wino_u(j, i);
		for (int k = 0; k < 4; k++) {
			u[(4 * k + 0) * stride] = t[k][0];
			u[(4 * k + 1) * stride] = 0.5f * (t[k][0] + t[k][1] + t[k][2]);
			u[(4 * k + 2) * stride] = 0.5f * (t[k][0] - t[k][1] + t[k][2]);
			u[(4 * k + 3) * stride] = t[k][2];
		}
	}
}

/* dw = Gt dU G: items oc*C + c, overwriting dw. */
SS_INLINE void wino_wgrad_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const wino_job *j = ctx;
	const ptrdiff_t stride = j->s->c;
	for (ptrdiff_t i = lo; i < hi; i++) {
		const float *u = wino_u(j, i);
		float r[4][3];
		for (int k = 0; k < 4; k++) {
			const float u0 = u[(4 * k) * stride], u1 = u[(4 * k + 1) * stride];
			const float u2 = u[(4 * k + 2) * stride], u3 = u[(4 * k + 3) * stride];
			r[k][0] = u0 + 0.5f * (u1 + u2);
			r[k][1] = 0.5f * (u1 - u2);
			r[k][2] = 0.5f * (u1 + u2) + u3;
		}
		float *dw = j->dw + i * 9;
		for (int b = 0; b < 3; b++) {
			dw[b] = r[0][b] + 0.5f * (r[1][b] + r[2][b]);
			dw[3 + b] = 0.5f * (r[1][b] - r[2][b]);
			dw[6 + b] = 0.5f * (r[1][b] + r[2][b]) + r[3][b];
		}
	}
}

/* V of the block: items c*rb + tile row. The tile row's four input rows
 * are copied into zero-bordered rows of 2*TW + 2 floats (padded column q
 * is image column q - pad), Bt is applied across the rows on their even
 * and odd columns, then B across the columns: for tile tw the four
 * columns 2tw..2tw+3 are even[tw], odd[tw], even[tw+1], odd[tw+1]. */
SS_INLINE void wino_input_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const wino_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const int tw = j->g.tw, pad = j->pad;
	const ptrdiff_t len = 2 * (ptrdiff_t)tw + 2, e1 = tw + 1, xs = (ptrdiff_t)s->c * j->t;
	float *rows = j->scratch + part * j->g.scratch, *e = rows + 4 * len;
	for (ptrdiff_t i = lo; i < hi; i++) {
		const ptrdiff_t c = i / j->rb, rr = i % j->rb, r = j->r0 + rr;
		const ptrdiff_t n = r / j->g.th, tr = r % j->g.th;
		const float *plane = j->x + n * j->xn + c * j->xc;
		for (int k = 0; k < 4; k++) {
			float *row = rows + k * len;
			const ptrdiff_t ih = 2 * tr + k - pad;
			if (ih < 0 || ih >= s->h) {
				memset(row, 0, sizeof(float) * (size_t)len);
				continue;
			}
			if (pad)
				row[0] = 0.0f;
			memcpy(row + pad, plane + ih * s->w, sizeof(float) * (size_t)s->w);
			for (ptrdiff_t q = pad + s->w; q < len; q++)
				row[q] = 0.0f;
		}
		const float *restrict d0 = rows, *restrict d1 = rows + len, *restrict d2 = rows + 2 * len,
		                      *restrict d3 = rows + 3 * len;
		float *restrict ee = e, *restrict eo = e + 4 * e1;
#pragma GCC ivdep
		for (ptrdiff_t m = 0; m < e1; m++) {
			const float a0 = d0[2 * m], a1 = d1[2 * m], a2 = d2[2 * m], a3 = d3[2 * m];
			const float b0 = d0[2 * m + 1], b1 = d1[2 * m + 1], b2 = d2[2 * m + 1], b3 = d3[2 * m + 1];
			ee[m] = a0 - a2, ee[e1 + m] = a1 + a2, ee[2 * e1 + m] = a2 - a1, ee[3 * e1 + m] = a1 - a3;
			eo[m] = b0 - b2, eo[e1 + m] = b1 + b2, eo[2 * e1 + m] = b2 - b1, eo[3 * e1 + m] = b1 - b3;
		}
		for (int k = 0; k < 4; k++) {
			const float *restrict ev = ee + k * e1, *restrict od = eo + k * e1;
			float *restrict v0 = j->V + (4 * k) * xs + c * j->t + rr * tw;
			float *restrict v1 = v0 + xs, *restrict v2 = v1 + xs, *restrict v3 = v2 + xs;
#pragma GCC ivdep
			for (ptrdiff_t m = 0; m < tw; m++) {
				v0[m] = ev[m] - ev[m + 1];
				v1[m] = od[m] + ev[m + 1];
				v2[m] = ev[m + 1] - od[m];
				v3[m] = od[m] - od[m + 1];
			}
		}
	}
}

/* y of the block: items oc*rb + tile row. At across the rows of each
 * tile's M, then across its columns, into the even and odd columns of the
 * two output rows, which are interleaved into y (cropped). */
SS_INLINE void wino_output_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const wino_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const int tw = j->g.tw, ow = j->ow;
	const ptrdiff_t ms = (ptrdiff_t)s->oc * j->t;
	float *restrict out = j->scratch + part * j->g.scratch;
	for (ptrdiff_t i = lo; i < hi; i++) {
		const ptrdiff_t oc = i / j->rb, rr = i % j->rb, r = j->r0 + rr;
		const ptrdiff_t n = r / j->g.th, tr = r % j->g.th;
		const float *restrict m0 = j->M + oc * j->t + rr * tw;
		const float bias = j->b ? j->b[oc] : 0.0f;
#pragma GCC ivdep
		for (ptrdiff_t m = 0; m < tw; m++) {
			float s0[4], s1[4];
			for (int c = 0; c < 4; c++) {
				const float a0 = m0[c * ms + m], a1 = m0[(4 + c) * ms + m];
				const float a2 = m0[(8 + c) * ms + m], a3 = m0[(12 + c) * ms + m];
				s0[c] = a0 + a1 + a2;
				s1[c] = a1 - a2 - a3;
			}
			out[m] = s0[0] + s0[1] + s0[2] + bias;
			out[tw + m] = s0[1] - s0[2] - s0[3] + bias;
			out[2 * tw + m] = s1[0] + s1[1] + s1[2] + bias;
			out[3 * tw + m] = s1[1] - s1[2] - s1[3] + bias;
		}
		for (int a = 0; a < 2; a++) {
			const ptrdiff_t oh = 2 * tr + a;
			if (oh >= j->oh)
				break;
			float *restrict dst = j->y + n * j->yn + oc * j->yc + oh * ow;
			const float *restrict ev = out + 2 * a * tw, *restrict od = ev + tw;
			const ptrdiff_t pairs = ow / 2;
			for (ptrdiff_t m = 0; m < pairs; m++) {
				dst[2 * m] = ev[m];
				dst[2 * m + 1] = od[m];
			}
			if (ow & 1)
				dst[ow - 1] = ev[tw - 1];
		}
	}
}

/* dM of the block: items oc*rb + tile row. The two rows of dy are split
 * into even and odd columns (zero past the plane's edge), then dy At
 * across the columns and A (dy At) across the rows. */
SS_INLINE void wino_dy_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const wino_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const int tw = j->g.tw, ow = j->ow;
	const ptrdiff_t ms = (ptrdiff_t)s->oc * j->t, len = 2 * (ptrdiff_t)tw;
	float *rows = j->scratch + part * j->g.scratch;
	for (ptrdiff_t i = lo; i < hi; i++) {
		const ptrdiff_t oc = i / j->rb, rr = i % j->rb, r = j->r0 + rr;
		const ptrdiff_t n = r / j->g.th, tr = r % j->g.th;
		for (int a = 0; a < 2; a++) {
			float *row = rows + a * len;
			const ptrdiff_t oh = 2 * tr + a;
			if (oh >= j->oh) {
				memset(row, 0, sizeof(float) * (size_t)len);
				continue;
			}
			memcpy(row, j->dy + n * j->yn + oc * j->yc + oh * ow, sizeof(float) * (size_t)ow);
			if (ow < len)
				row[ow] = 0.0f;
		}
		const float *restrict r0 = rows, *restrict r1 = rows + len;
		float *restrict d = j->M + oc * j->t + rr * tw;
#pragma GCC ivdep
		for (ptrdiff_t m = 0; m < tw; m++) {
			const float e0 = r0[2 * m], o0 = r0[2 * m + 1], e1 = r1[2 * m], o1 = r1[2 * m + 1];
			const float g0[4] = {e0, e0 + o0, e0 - o0, -o0};
			const float g1[4] = {e1, e1 + o1, e1 - o1, -o1};
			for (int c = 0; c < 4; c++) {
				d[c * ms + m] = g0[c];
				d[(4 + c) * ms + m] = g0[c] + g1[c];
				d[(8 + c) * ms + m] = g0[c] - g1[c];
				d[(12 + c) * ms + m] = -g1[c];
			}
		}
	}
}

/* wino_put_row writes (add = 0) or adds (add = 1) padded row pr of a
 * plane of dx, given as its even and odd columns ev and od (TW + 1 each),
 * cropped to the image. */
SS_INLINE void wino_put_row(const wino_job *j, float *plane, ptrdiff_t pr, const float *ev, const float *od,
                            int add)
{
	const ptrdiff_t ih = pr - j->pad, w = j->s->w;
	if (ih < 0 || ih >= j->s->h)
		return;
	float *restrict dst = plane + ih * w;
	/* Image column 2m is padded column 2m + pad. */
	const float *restrict first = j->pad ? od : ev, *restrict second = j->pad ? ev + 1 : od;
	const ptrdiff_t pairs = w / 2;
	if (add) {
		for (ptrdiff_t m = 0; m < pairs; m++) {
			dst[2 * m] += first[m];
			dst[2 * m + 1] += second[m];
		}
		if (w & 1)
			dst[w - 1] += first[pairs];
	} else {
		for (ptrdiff_t m = 0; m < pairs; m++) {
			dst[2 * m] = first[m];
			dst[2 * m + 1] = second[m];
		}
		if (w & 1)
			dst[w - 1] = first[pairs];
	}
}

/* dx of the block from dV: items c*nseg + image of the block. Each tile
 * row's B dV Bt gives four padded rows, each as even and odd columns
 * (tile tw adds its columns 0 and 2 to even[tw] and even[tw + 1], 1 and 3
 * to odd[tw] and odd[tw + 1]); the first two complete the previous tile
 * row's last two (carry). */
SS_INLINE void wino_dx_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	const wino_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const int tw = j->g.tw, th = j->g.th;
	const ptrdiff_t vs = (ptrdiff_t)s->c * j->t, e1 = tw + 1;
	float *tv = j->scratch + part * j->g.scratch; /* 16 x TW: column q of padded row p of each tile */
	float *rowbuf = tv + 16 * (ptrdiff_t)tw;       /* 4 rows x (even, odd) */
	float *carry = rowbuf + 8 * e1;                /* 2 rows x (even, odd) */
	for (ptrdiff_t i = lo; i < hi; i++) {
		const ptrdiff_t c = i / j->nseg, n = j->n0 + i % j->nseg;
		const ptrdiff_t a = (j->r0 > n * th ? j->r0 : n * th) - n * th;
		const ptrdiff_t r1 = j->r0 + j->rb, b = (r1 < (n + 1) * th ? r1 : (n + 1) * th) - n * th;
		float *plane = j->dx + n * j->xn + c * j->xc;
		for (ptrdiff_t tr = a; tr < b; tr++) {
			const float *restrict v = j->V + c * j->t + (n * th + tr - j->r0) * tw;
#pragma GCC ivdep
			for (ptrdiff_t m = 0; m < tw; m++) {
				float h[4][4];
				for (int k = 0; k < 4; k++) {
					const float d0 = v[(4 * k) * vs + m], d1 = v[(4 * k + 1) * vs + m];
					const float d2 = v[(4 * k + 2) * vs + m], d3 = v[(4 * k + 3) * vs + m];
					h[k][0] = d0;
					h[k][1] = d1 - d2 + d3;
					h[k][2] = d1 + d2 - d0;
					h[k][3] = -d3;
				}
				for (int q = 0; q < 4; q++) {
					tv[(0 + q) * tw + m] = h[0][q];
					tv[(4 + q) * tw + m] = h[1][q] - h[2][q] + h[3][q];
					tv[(8 + q) * tw + m] = h[1][q] + h[2][q] - h[0][q];
					tv[(12 + q) * tw + m] = -h[3][q];
				}
			}
			for (int p = 0; p < 4; p++) {
				const float *restrict q0 = tv + (4 * p) * tw, *restrict q1 = q0 + tw;
				const float *restrict q2 = q1 + tw, *restrict q3 = q2 + tw;
				float *restrict ev = rowbuf + 2 * p * e1, *restrict od = ev + e1;
				ev[0] = q0[0], od[0] = q1[0];
				for (ptrdiff_t m = 1; m < tw; m++) {
					ev[m] = q0[m] + q2[m - 1];
					od[m] = q1[m] + q3[m - 1];
				}
				ev[tw] = q2[tw - 1], od[tw] = q3[tw - 1];
			}
			if (tr > a) {
				for (ptrdiff_t m = 0; m < 4 * e1; m++)
					rowbuf[m] += carry[m];
			}
			const int add = tr == a && tr > 0;
			wino_put_row(j, plane, 2 * tr, rowbuf, rowbuf + e1, add);
			wino_put_row(j, plane, 2 * tr + 1, rowbuf + 2 * e1, rowbuf + 3 * e1, add);
			memcpy(carry, rowbuf + 4 * e1, sizeof(float) * (size_t)(4 * e1));
		}
		wino_put_row(j, plane, 2 * b, carry, carry + e1, 0);
		wino_put_row(j, plane, 2 * b + 1, carry + 2 * e1, carry + 3 * e1, 0);
	}
}


/* wino_item is item i = ch*rb + row of a transform over the block's tile
 * rows: channel ch, the tile row rr within the block, and its image n and
 * tile row tr within the image. */
typedef struct {
	ptrdiff_t ch, rr, n, tr;
} wino_item;

SS_INLINE wino_item wino_at(const wino_job *j, ptrdiff_t i)
{
	wino_item it;
	it.ch = i / j->rb, it.rr = i % j->rb;
	const ptrdiff_t r = j->r0 + it.rr;
	it.n = r / j->g.th, it.tr = r % j->g.th;
	return it;
}

/* ---- 6 x 6 tiles: F(4x4, 3x3) (m = 4) and F(2x2, 5x5) (m = 2) ---- */

/* W6_UNROLL unrolls the loops over a tile's rows, columns and phases, so
 * that the loops over tiles around them vectorise. */
#define W6_UNROLL _Pragma("GCC unroll 8")

/* The 1-D transforms of a = 6: o = Bt d, and its adjoint o = B v. */
SS_INLINE void w6_bt(const float *d, float *o)
{
	const float t1 = d[4] - 4.0f * d[2], t2 = d[3] - 4.0f * d[1];
	const float t3 = d[4] - d[2], t4 = 2.0f * (d[3] - d[1]);
	o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
	o[1] = t1 + t2;
	o[2] = t1 - t2;
	o[3] = t3 + t4;
	o[4] = t3 - t4;
	o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

SS_INLINE void w6_b(const float *v, float *o)
{
	const float s12 = v[1] + v[2], d12 = v[1] - v[2], s34 = v[3] + v[4], d34 = v[3] - v[4];
	o[0] = 4.0f * v[0];
	o[1] = 4.0f * (v[5] - d12) - 2.0f * d34;
	o[2] = -5.0f * v[0] - 4.0f * s12 - s34;
	o[3] = d12 + 2.0f * d34 - 5.0f * v[5];
	o[4] = v[0] + s12 + s34;
	o[5] = v[5];
}

/* o = At x (m outputs of 6), and d = A g (6 of m). */
SS_INLINE void w6_at(const float *x, int m, float *o)
{
	const float e = x[1] + x[2], od = x[1] - x[2], e2 = x[3] + x[4], o2 = x[3] - x[4];
	W6_UNROLL
	for (int i = 0; i < m; i++) {
		float v = (i & 1 ? od : e) + (float)(1 << i) * (i & 1 ? o2 : e2);
		if (i == 0)
			v += x[0];
		if (i == m - 1)
			v += x[5];
		o[i] = v;
	}
}

SS_INLINE void w6_a(const float *g, int m, float *d)
{
	float e = 0.0f, od = 0.0f, e2 = 0.0f, o2 = 0.0f;
	W6_UNROLL
	for (int i = 0; i < m; i++) {
		const float p = (float)(1 << i) * g[i];
		if (i & 1)
			od += g[i], o2 += p;
		else
			e += g[i], e2 += p;
	}
	d[0] = g[0];
	d[1] = e + od;
	d[2] = e - od;
	d[3] = e2 + o2;
	d[4] = e2 - o2;
	d[5] = g[m - 1];
}

/* u = G w (6 of r, w[q*ws]), and w = Gt u (r of 6, w[q*ws]). */
SS_INLINE void w6_g(const float *w, ptrdiff_t ws, int r, float *u)
{
	float e = 0.0f, od = 0.0f, e2 = 0.0f, o2 = 0.0f;
	W6_UNROLL
	for (int q = 0; q < r; q++) {
		const float x = w[q * ws], p = (float)(1 << q) * x;
		if (q & 1)
			od += x, o2 += p;
		else
			e += x, e2 += p;
	}
	u[0] = 0.25f * w[0];
	u[1] = (e + od) * (-1.0f / 6.0f);
	u[2] = (e - od) * (-1.0f / 6.0f);
	u[3] = (e2 + o2) * (1.0f / 24.0f);
	u[4] = (e2 - o2) * (1.0f / 24.0f);
	u[5] = w[(r - 1) * ws];
}

SS_INLINE void w6_gt(const float *u, int r, float *w, ptrdiff_t ws)
{
	W6_UNROLL
	for (int q = 0; q < r; q++) {
		const float s = q & 1 ? u[1] - u[2] : u[1] + u[2], t = q & 1 ? u[3] - u[4] : u[3] + u[4];
		float v = s * (-1.0f / 6.0f) + (float)(1 << q) * t * (1.0f / 24.0f);
		if (q == 0)
			v += 0.25f * u[0];
		if (q == r - 1)
			v += u[5];
		w[q * ws] = v;
	}
}

/* U from w: items oc*C + c, r x r kernels; G across the kernel's columns,
 * then across the rows (the layout of U as for a = 4). */
SS_INLINE void w6_weights(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int r)
{
	const wino_job *j = ctx;
	const ptrdiff_t stride = j->s->c;
	for (ptrdiff_t i = lo; i < hi; i++) {
		const float *w = j->w + i * r * r;
		float t[6][5];
		W6_UNROLL
		for (int b = 0; b < r; b++) {
			float col[6];
			w6_g(w + b, r, r, col);
			W6_UNROLL
			for (int k = 0; k < 6; k++)
				t[k][b] = col[k];
		}
		float *u = wino_u(j, i);
		W6_UNROLL
		for (int k = 0; k < 6; k++) {
			float row[6];
			w6_g(t[k], 1, r, row);
			W6_UNROLL
			for (int q = 0; q < 6; q++)
				u[(6 * k + q) * stride] = row[q];
		}
	}
}

/* dw = Gt dU G: items oc*C + c, overwriting dw. */
SS_INLINE void w6_wgrad(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int r)
{
	const wino_job *j = ctx;
	const ptrdiff_t stride = j->s->c;
	for (ptrdiff_t i = lo; i < hi; i++) {
		const float *u = wino_u(j, i);
		float t[6][5];
		W6_UNROLL
		for (int k = 0; k < 6; k++) {
			float v[6];
			W6_UNROLL
			for (int q = 0; q < 6; q++)
				v[q] = u[(6 * k + q) * stride];
			w6_gt(v, r, t[k], 1);
		}
		float *dw = j->dw + i * r * r;
		W6_UNROLL
		for (int b = 0; b < r; b++) {
			float v[6];
			W6_UNROLL
			for (int k = 0; k < 6; k++)
				v[k] = t[k][b];
			w6_gt(v, r, dw + b, r);
		}
	}
}

/* w6_split copies w floats of src (image columns) into row, split into m
 * phases of e1 floats: padded column q = iw + pad at row[(q % m)*e1 +
 * q/m]; padded columns outside the image are zero. Index t of every
 * phase is inside the image for t in [t0, t1). */
SS_INLINE void w6_split(float *restrict row, ptrdiff_t e1, int m, int pad, const float *restrict src, ptrdiff_t w)
{
	const ptrdiff_t t0 = (pad + m - 1) / m, t1 = (pad + w) / m > t0 ? (pad + w) / m : t0;
	for (ptrdiff_t t = 0; t < e1; t++) {
		if (t == t0) {
			for (; t < t1; t++)
				W6_UNROLL
				for (int p = 0; p < m; p++)
					row[p * e1 + t] = src[m * t + p - pad];
			if (t == e1)
				break;
		}
		W6_UNROLL
		for (int p = 0; p < m; p++) {
			const ptrdiff_t iw = m * t + p - pad;
			row[p * e1 + t] = iw >= 0 && iw < w ? src[iw] : 0.0f;
		}
	}
}

/* w6_put_row writes padded row pr of a plane of dx from row (m phases of
 * e1 floats), cropped to the image. */
SS_INLINE void w6_put_row(const wino_job *j, float *plane, ptrdiff_t pr, const float *restrict row, int m)
{
	const ptrdiff_t ih = pr - j->pad, w = j->s->w, e1 = j->g.e1;
	if (ih < 0 || ih >= j->s->h)
		return;
	float *restrict dst = plane + ih * w;
	const int pad = j->pad;
	const ptrdiff_t t0 = (pad + m - 1) / m, t1 = (pad + w) / m > t0 ? (pad + w) / m : t0;
	for (ptrdiff_t t = 0; t < e1; t++) {
		if (t == t0) {
			for (; t < t1; t++)
				W6_UNROLL
				for (int p = 0; p < m; p++)
					dst[m * t + p - pad] = row[p * e1 + t];
			if (t == e1)
				break;
		}
		W6_UNROLL
		for (int p = 0; p < m; p++) {
			const ptrdiff_t iw = m * t + p - pad;
			if (iw >= 0 && iw < w)
				dst[iw] = row[p * e1 + t];
		}
	}
}

/* V of the block: items c*rb + tile row. The tile row's six input rows
 * are split into m phases of zero-bordered rows (w6_split), Bt is applied
 * across the rows, then B across the columns: column l of tile tw is
 * index tw + l/m of phase l % m. */
SS_INLINE void w6_input(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part, int m)
{
	const wino_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const int tw = j->g.tw, pad = j->pad;
	const ptrdiff_t e1 = j->g.e1, len = m * e1, xs = (ptrdiff_t)s->c * j->t;
	float *rows = j->scratch + part * j->g.scratch, *e = rows + 6 * len;
	for (ptrdiff_t i = lo; i < hi; i++) {
		const wino_item it = wino_at(j, i);
		const ptrdiff_t c = it.ch, rr = it.rr, tr = it.tr;
		const float *plane = j->x + it.n * j->xn + c * j->xc;
		W6_UNROLL
		for (int k = 0; k < 6; k++) {
			const ptrdiff_t ih = m * tr + k - pad;
			if (ih < 0 || ih >= s->h)
				memset(rows + k * len, 0, sizeof(float) * (size_t)len);
			else
				w6_split(rows + k * len, e1, m, pad, plane + ih * s->w, s->w);
		}
		{
			const float *restrict d = rows;
			float *restrict o = e;
#pragma GCC ivdep
			for (ptrdiff_t q = 0; q < len; q++) {
				float a[6], b[6];
				W6_UNROLL
				for (int k = 0; k < 6; k++)
					a[k] = d[k * len + q];
				w6_bt(a, b);
				W6_UNROLL
				for (int k = 0; k < 6; k++)
					o[k * len + q] = b[k];
			}
		}
		W6_UNROLL
		for (int k = 0; k < 6; k++) {
			const float *restrict ek = e + k * len;
			float *restrict v = j->V + (6 * k) * xs + c * j->t + rr * tw;
#pragma GCC ivdep
			for (ptrdiff_t t = 0; t < tw; t++) {
				float a[6], b[6];
				W6_UNROLL
				for (int l = 0; l < 6; l++)
					a[l] = ek[(l % m) * e1 + t + l / m];
				w6_bt(a, b);
				W6_UNROLL
				for (int q = 0; q < 6; q++)
					v[q * xs + t] = b[q];
			}
		}
	}
}

/* y of the block: items oc*rb + tile row. At across the rows of each
 * tile's M, then across its columns, into m phases of the m output rows,
 * which are interleaved into y (cropped). */
SS_INLINE void w6_output(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part, int m)
{
	const wino_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const int tw = j->g.tw, ow = j->ow;
	const ptrdiff_t ms = (ptrdiff_t)s->oc * j->t;
	float *restrict out = j->scratch + part * j->g.scratch; /* [row i][phase l][tw] */
	for (ptrdiff_t i = lo; i < hi; i++) {
		const wino_item it = wino_at(j, i);
		const ptrdiff_t oc = it.ch, rr = it.rr, n = it.n, tr = it.tr;
		const float *restrict m0 = j->M + oc * j->t + rr * tw;
		const float bias = j->b ? j->b[oc] : 0.0f;
#pragma GCC ivdep
		for (ptrdiff_t t = 0; t < tw; t++) {
			float sq[6][4];
			W6_UNROLL
			for (int q = 0; q < 6; q++) {
				float a[6], o[4];
				W6_UNROLL
				for (int k = 0; k < 6; k++)
					a[k] = m0[(6 * k + q) * ms + t];
				w6_at(a, m, o);
				W6_UNROLL
				for (int a_ = 0; a_ < m; a_++)
					sq[q][a_] = o[a_];
			}
			W6_UNROLL
			for (int a_ = 0; a_ < m; a_++) {
				float a[6], o[4];
				W6_UNROLL
				for (int q = 0; q < 6; q++)
					a[q] = sq[q][a_];
				w6_at(a, m, o);
				W6_UNROLL
				for (int l = 0; l < m; l++)
					out[(a_ * m + l) * tw + t] = o[l] + bias;
			}
		}
		const ptrdiff_t full = ow / m, rem = ow % m;
		W6_UNROLL
		for (int a_ = 0; a_ < m; a_++) {
			const ptrdiff_t oh = m * tr + a_;
			if (oh >= j->oh)
				break;
			float *restrict dst = j->y + n * j->yn + oc * j->yc + oh * ow;
			const float *restrict o = out + a_ * m * tw;
			for (ptrdiff_t t = 0; t < full; t++)
				W6_UNROLL
				for (int l = 0; l < m; l++)
					dst[m * t + l] = o[l * tw + t];
			for (int l = 0; l < rem; l++)
				dst[m * full + l] = o[l * tw + full];
		}
	}
}

/* dM of the block: items oc*rb + tile row. The m rows of dy are split
 * into m phases of TW floats (zero past the plane's edge), then dy At
 * across the columns and A (dy At) across the rows. */
SS_INLINE void w6_dy(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part, int m)
{
	const wino_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const int tw = j->g.tw, ow = j->ow;
	const ptrdiff_t ms = (ptrdiff_t)s->oc * j->t;
	float *restrict rows = j->scratch + part * j->g.scratch; /* [row i][phase l][tw] */
	const ptrdiff_t full = ow / m, rem = ow % m;
	for (ptrdiff_t i = lo; i < hi; i++) {
		const wino_item it = wino_at(j, i);
		const ptrdiff_t oc = it.ch, rr = it.rr, n = it.n, tr = it.tr;
		W6_UNROLL
		for (int a_ = 0; a_ < m; a_++) {
			float *restrict row = rows + a_ * m * tw;
			const ptrdiff_t oh = m * tr + a_;
			if (oh >= j->oh) {
				memset(row, 0, sizeof(float) * (size_t)(m * tw));
				continue;
			}
			const float *restrict src = j->dy + n * j->yn + oc * j->yc + oh * ow;
			for (ptrdiff_t t = 0; t < full; t++)
				W6_UNROLL
				for (int l = 0; l < m; l++)
					row[l * tw + t] = src[m * t + l];
			if (full < tw)
				W6_UNROLL
				for (int l = 0; l < m; l++)
					row[l * tw + full] = l < rem ? src[m * full + l] : 0.0f;
		}
		float *restrict d = j->M + oc * j->t + rr * tw;
#pragma GCC ivdep
		for (ptrdiff_t t = 0; t < tw; t++) {
			float g[4][6];
			W6_UNROLL
			for (int a_ = 0; a_ < m; a_++) {
				float x[4];
				W6_UNROLL
				for (int l = 0; l < m; l++)
					x[l] = rows[(a_ * m + l) * tw + t];
				w6_a(x, m, g[a_]);
			}
			W6_UNROLL
			for (int q = 0; q < 6; q++) {
				float x[4], o[6];
				W6_UNROLL
				for (int a_ = 0; a_ < m; a_++)
					x[a_] = g[a_][q];
				w6_a(x, m, o);
				W6_UNROLL
				for (int k = 0; k < 6; k++)
					d[(6 * k + q) * ms + t] = o[k];
			}
		}
	}
}

/* dx of the block from dV: items c*nseg + image of the block. Each tile
 * row's B dV Bt gives six padded rows, each as m phases (column l of tile
 * tw adds to index tw + l/m of phase l % m); the first r - 1 = 6 - m
 * complete the previous tile row's last ones (carry), read back from dx
 * when the previous tile row was the previous block's. */
SS_INLINE void w6_dx(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part, int m)
{
	const wino_job *j = ctx;
	const ss_conv_shape *s = j->s;
	const int tw = j->g.tw, th = j->g.th, keep = 6 - m;
	const ptrdiff_t vs = (ptrdiff_t)s->c * j->t, e1 = j->g.e1, len = m * e1;
	float *tv = j->scratch + part * j->g.scratch; /* 36 x TW: column q of padded row p of each tile */
	float *rowbuf = tv + 36 * (ptrdiff_t)tw;       /* 6 padded rows */
	float *carry = rowbuf + 6 * len;               /* 6 - m padded rows */
	for (ptrdiff_t i = lo; i < hi; i++) {
		const ptrdiff_t c = i / j->nseg, n = j->n0 + i % j->nseg;
		const ptrdiff_t a = (j->r0 > n * th ? j->r0 : n * th) - n * th;
		const ptrdiff_t r1 = j->r0 + j->rb, b = (r1 < (n + 1) * th ? r1 : (n + 1) * th) - n * th;
		float *plane = j->dx + n * j->xn + c * j->xc;
		W6_UNROLL
		for (int k = 0; k < keep; k++) {
			const ptrdiff_t ih = m * a + k - j->pad;
			if (a == 0 || ih < 0 || ih >= s->h)
				memset(carry + k * len, 0, sizeof(float) * (size_t)len);
			else
				w6_split(carry + k * len, e1, m, j->pad, plane + ih * s->w, s->w);
		}
		for (ptrdiff_t tr = a; tr < b; tr++) {
			const float *restrict v = j->V + c * j->t + (n * th + tr - j->r0) * tw;
			float *restrict o = tv;
#pragma GCC ivdep
			for (ptrdiff_t t = 0; t < tw; t++) {
				float h[6][6];
				W6_UNROLL
				for (int k = 0; k < 6; k++) {
					float x[6];
					W6_UNROLL
					for (int q = 0; q < 6; q++)
						x[q] = v[(6 * k + q) * vs + t];
					w6_b(x, h[k]);
				}
				W6_UNROLL
				for (int q = 0; q < 6; q++) {
					float x[6], y[6];
					W6_UNROLL
					for (int k = 0; k < 6; k++)
						x[k] = h[k][q];
					w6_b(x, y);
					W6_UNROLL
					for (int p = 0; p < 6; p++)
						o[(6 * p + q) * tw + t] = y[p];
				}
			}
			W6_UNROLL
			for (int p = 0; p < 6; p++) {
				float *restrict row = rowbuf + p * len;
				if (p < keep)
					memcpy(row, carry + p * len, sizeof(float) * (size_t)len);
				else
					memset(row, 0, sizeof(float) * (size_t)len);
				W6_UNROLL
				for (int l = 0; l < 6; l++) {
					float *restrict ph = row + (l % m) * e1 + l / m;
					const float *restrict src = tv + (6 * p + l) * tw;
					for (ptrdiff_t t = 0; t < tw; t++)
						ph[t] += src[t];
				}
			}
			W6_UNROLL
			for (int p = 0; p < m; p++)
				w6_put_row(j, plane, m * tr + p, rowbuf + p * len, m);
			memcpy(carry, rowbuf + m * len, sizeof(float) * (size_t)(keep * len));
		}
		W6_UNROLL
		for (int k = 0; k < keep; k++)
			w6_put_row(j, plane, m * b + k, carry + k * len, m);
	}
}

/* The instances: F(4x4, 3x3) and F(2x2, 5x5). */
SS_INLINE void w43_weights_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { (void)part, w6_weights(ctx, lo, hi, 3); }
SS_INLINE void w43_wgrad_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { (void)part, w6_wgrad(ctx, lo, hi, 3); }
SS_INLINE void w43_input_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { w6_input(ctx, lo, hi, part, 4); }
SS_INLINE void w43_output_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { w6_output(ctx, lo, hi, part, 4); }
SS_INLINE void w43_dy_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { w6_dy(ctx, lo, hi, part, 4); }
SS_INLINE void w43_dx_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { w6_dx(ctx, lo, hi, part, 4); }
SS_INLINE void w25_weights_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { (void)part, w6_weights(ctx, lo, hi, 5); }
SS_INLINE void w25_wgrad_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { (void)part, w6_wgrad(ctx, lo, hi, 5); }
SS_INLINE void w25_input_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { w6_input(ctx, lo, hi, part, 2); }
SS_INLINE void w25_output_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { w6_output(ctx, lo, hi, part, 2); }
SS_INLINE void w25_dy_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { w6_dy(ctx, lo, hi, part, 2); }
SS_INLINE void w25_dx_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part) { w6_dx(ctx, lo, hi, part, 2); }

SS_ISA_VARIANTS(wino_weights_part);
SS_ISA_VARIANTS(wino_wgrad_part);
SS_ISA_VARIANTS(wino_input_part);
SS_ISA_VARIANTS(wino_output_part);
SS_ISA_VARIANTS(wino_dy_part);
SS_ISA_VARIANTS(wino_dx_part);
SS_ISA_VARIANTS(w43_weights_part);
SS_ISA_VARIANTS(w43_wgrad_part);
SS_ISA_VARIANTS(w43_input_part);
SS_ISA_VARIANTS(w43_output_part);
SS_ISA_VARIANTS(w43_dy_part);
SS_ISA_VARIANTS(w43_dx_part);
SS_ISA_VARIANTS(w25_weights_part);
SS_ISA_VARIANTS(w25_wgrad_part);
SS_ISA_VARIANTS(w25_input_part);
SS_ISA_VARIANTS(w25_output_part);
SS_ISA_VARIANTS(w25_dy_part);
SS_ISA_VARIANTS(w25_dx_part);

/* A tile kind: F(m x m, r x r) on a x a tiles, and its transforms per
 * level. */
struct wino_kind {
	int m, r, a;
	const ss_range_fn *weights, *wgrad, *input, *output, *dy, *dx;
};

static const wino_kind wino_kinds[3] = {
	{2, 3, 4, wino_weights_part_isa, wino_wgrad_part_isa, wino_input_part_isa, wino_output_part_isa,
	 wino_dy_part_isa, wino_dx_part_isa},
	{4, 3, 6, w43_weights_part_isa, w43_wgrad_part_isa, w43_input_part_isa, w43_output_part_isa,
	 w43_dy_part_isa, w43_dx_part_isa},
	{2, 5, 6, w25_weights_part_isa, w25_wgrad_part_isa, w25_input_part_isa, w25_output_part_isa,
	 w25_dy_part_isa, w25_dx_part_isa},
};

/* wino_kind_of returns the tiles method runs s on (SS_CONV_WINOGRAD: 4 x 4,
 * SS_CONV_WINOGRAD6: 6 x 6 by kernel size). */
static const wino_kind *wino_kind_of(int method, const ss_conv_shape *s)
{
	if (method == SS_CONV_WINOGRAD)
		return &wino_kinds[0];
	return s->kh == 3 ? &wino_kinds[1] : &wino_kinds[2];
}

/* Workspace: U (and dU backward) a*a*OC*C each, V and M a*a*C*T and
 * a*a*OC*T for the largest block, and each part's scratch. */
ptrdiff_t ss_conv_winograd_workspace(int method, int threads, const ss_conv_shape *s, int backward)
{
	const wino_kind *k = wino_kind_of(method, s);
	const wino_geom g = wino_make(k->m, k->a, s);
	const ptrdiff_t pos = (ptrdiff_t)k->a * k->a, t = (ptrdiff_t)g.rows * g.tw, u = pos * s->oc * s->c;
	return (backward ? 2 : 1) * u + pos * (s->c + s->oc) * t + ss_threads_of(threads) * g.scratch;
}

/* wino_setup fills the job's geometry and carves ws: U, dU (backward),
 * V, M, then the parts' scratch. */
static void wino_setup(wino_job *j, int method, const ss_conv_shape *s, int backward, float *ws, float **dU)
{
	memset(j, 0, sizeof *j);
	j->s = s;
	j->k = wino_kind_of(method, s);
	j->pos = j->k->a * j->k->a;
	j->g = wino_make(j->k->m, j->k->a, s);
	j->pad = s->pad_h;
	j->oh = ss_conv_out_h(s);
	j->ow = ss_conv_out_w(s);
	ss_conv_planes(s, &j->xn, &j->xc, &j->yn, &j->yc);
	const ptrdiff_t u = (ptrdiff_t)j->pos * s->oc * s->c, t = (ptrdiff_t)j->g.rows * j->g.tw;
	j->U = ws;
	*dU = backward ? ws + u : NULL;
	j->V = ws + (backward ? 2 : 1) * u;
	j->M = j->V + (ptrdiff_t)j->pos * s->c * t;
	j->scratch = j->M + (ptrdiff_t)j->pos * s->oc * t;
}

/* wino_block points the job at the block of tile rows from r0. */
static void wino_block(wino_job *j, ptrdiff_t r0)
{
	const ptrdiff_t all = (ptrdiff_t)j->s->n * j->g.th;
	j->r0 = r0;
	j->rb = (int)(all - r0 < j->g.rows ? all - r0 : j->g.rows);
	j->t = (ptrdiff_t)j->rb * j->g.tw;
	j->n0 = (int)(r0 / j->g.th);
	j->nseg = (int)((r0 + j->rb - 1) / j->g.th) - j->n0 + 1;
}

/* wino_each runs a transform over the block's items: per items for each
 * of its tile rows. */
static void wino_each(int threads, const ss_range_fn fn, ptrdiff_t per, wino_job *j)
{
	ss_parallel_for(threads, per * j->rb, ss_grain(j->pos * (ptrdiff_t)j->g.tw), fn, j);
}

void ss_conv_winograd_forward(int method, int isa, int threads, const ss_conv_shape *s, const float *x,
                              const float *w, const float *b, float *y, float *ws)
{
	const int l = ss_isa(isa);
	wino_job j;
	float *unused;
	wino_setup(&j, method, s, 0, ws, &unused);
	j.x = x, j.w = w, j.b = b, j.y = y;
	const ptrdiff_t u = (ptrdiff_t)s->oc * s->c, all = (ptrdiff_t)s->n * j.g.th;
	const int pos = j.pos;
	ss_parallel_for(threads, u, ss_grain(pos), j.k->weights[l], &j);
	for (ptrdiff_t r0 = 0; r0 < all; r0 += j.g.rows) {
		wino_block(&j, r0);
		wino_each(threads, j.k->input[l], s->c, &j);
		for (int xi = 0; xi < pos; xi++)
			ss_sgemm(threads, 0, 0, s->oc, (int)j.t, s->c, 1.0f, j.U + xi * s->c, pos * s->c,
			         j.V + xi * s->c * j.t, (int)j.t, 0.0f, j.M + xi * s->oc * j.t, (int)j.t);
		wino_each(threads, j.k->output[l], s->oc, &j);
	}
}

void ss_conv_winograd_backward(int method, int isa, int threads, const ss_conv_shape *s, const float *x,
                               const float *w, const float *dy, float *dx, float *dw, float *db, float *ws)
{
	const int l = ss_isa(isa);
	if (db)
		ss_conv_bias_grad(threads, s, dy, db);
	if (dx == NULL && dw == NULL)
		return;
	wino_job j;
	float *dU;
	wino_setup(&j, method, s, 1, ws, &dU);
	j.x = x, j.w = w, j.dy = dy, j.dx = dx, j.dw = dw;
	float *U = j.U;
	const ptrdiff_t u = (ptrdiff_t)s->oc * s->c, all = (ptrdiff_t)s->n * j.g.th;
	const int pos = j.pos;
	if (dx)
		ss_parallel_for(threads, u, ss_grain(pos), j.k->weights[l], &j);
	for (ptrdiff_t r0 = 0; r0 < all; r0 += j.g.rows) {
		wino_block(&j, r0);
		const int t = (int)j.t;
		wino_each(threads, j.k->dy[l], s->oc, &j);
		if (dw) {
			wino_each(threads, j.k->input[l], s->c, &j);
			for (int xi = 0; xi < pos; xi++)
				ss_sgemm(threads, 0, 1, s->oc, s->c, t, 1.0f, j.M + xi * s->oc * j.t, t,
				         j.V + xi * s->c * j.t, t, r0 == 0 ? 0.0f : 1.0f, dU + xi * s->c, pos * s->c);
		}
		if (dx == NULL)
			continue;
		/* dV overwrites V, which the weight gradient has used. */
		for (int xi = 0; xi < pos; xi++)
			ss_sgemm(threads, 1, 0, s->c, t, s->oc, 1.0f, U + xi * s->c, pos * s->c,
			         j.M + xi * s->oc * j.t, t, 0.0f, j.V + xi * s->c * j.t, t);
		ss_parallel_for(threads, (ptrdiff_t)s->c * j.nseg, ss_grain(4 * (ptrdiff_t)j.g.th * j.g.tw),
		                j.k->dx[l], &j);
	}
	if (dw) {
		j.U = dU;
		ss_parallel_for(threads, u, ss_grain(pos), j.k->wgrad[l], &j);
	}
}
