/* Winograd F(2x2, 3x3) convolution for 3 x 3 kernels, stride 1, padding 0
 * or 1 (SS_CONV_WINOGRAD), all three passes.
 *
 * The output plane (OH x OW) is cut into 2 x 2 tiles, TH = ceil(OH/2) by
 * TW = ceil(OW/2) per image, the last row and column of tiles cropped.
 * Output tile (th, tw) reads the 4 x 4 input tile d whose top left pixel
 * is (2*th - pad, 2*tw - pad): input tiles overlap by 2 pixels and read
 * zeros outside the image. With
 *   Bt = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
 *   G  = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],   At = [1 1 1 0; 0 1 -1 -1],
 * and xi = 4*k + j indexing the 16 positions of a 4 x 4 transform:
 *   U[oc][xi][c] = (G w[oc][c] Gt)[k][j]      weights
 *   V[xi][c][t]  = (Bt d[c][t] B)[k][j]       input tiles
 *   M[xi]        = U[xi] V[xi]                16 GEMMs (OC x C times C x T)
 *   y tile       = At M A (+ bias).
 * U[xi], the OC x C matrix of position xi, has rows 16*C floats apart.
 * The gradients are those of this computation, so every pass shares the
 * transforms: with dM = A dy At (the 2 x 2 output-gradient tile, zero
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
 * write rows through even/odd split copies of padded rows so that every
 * loop over tiles is unit-stride and vectorises (ivdep: the rows a loop
 * reads and writes never overlap, which GCC cannot prove within the
 * scratch and V and M); they are compiled per instruction-set level
 * (SS_ISA_VARIANTS). The GEMMs run on OpenBLAS's
 * threads, so the bits depend on the thread count.
 *
 * The input gradient overlaps between tile rows: a tile row's last two
 * padded rows are the next one's first two. Within a block, the pair is
 * carried from tile row to tile row and written when complete; a block's
 * last pair is written to dx, and the next block's first tile row of the
 * same image adds to it. */
#include <string.h>

#include "internal.h"

enum { WINO_POS = 16 }; /* positions xi of a 4 x 4 transform */

/* Tiles per block (a multiple of TW rounded down, at least one tile
 * row); set by tests only (ss_winograd_set_test). */
static ptrdiff_t wino_tiles_test;

void ss_winograd_set_test(ptrdiff_t tiles) { wino_tiles_test = tiles; }

int ss_conv_winograd_supported(const ss_conv_shape *s)
{
	return s->kh == 3 && s->kw == 3 && s->stride_h == 1 && s->stride_w == 1 && s->pad_h == s->pad_w &&
	       (s->pad_h == 0 || s->pad_h == 1) && s->h + 2 * s->pad_h >= 3 && s->w + 2 * s->pad_w >= 3;
}

typedef struct {
	int th, tw;       /* tiles per column and per row of an image */
	int rows;         /* tile rows per block */
	ptrdiff_t scratch; /* floats of one part's scratch */
} wino_geom;

/* A block's V and M take 16*(C + OC)*T floats. The GEMMs want long rows
 * of tiles (their packing of U is repeated per block) more than V and M
 * want L2: a budget of 2^22 floats (16 MiB, half the L3 of a Zen 3 CCD)
 * and at least 256 tiles per block make 2048 tiles of 64 channels, 256 of
 * 512, where shorter blocks measured slower on ResNet-18's layers. */
static wino_geom wino_make(const ss_conv_shape *s)
{
	wino_geom g;
	g.th = (ss_conv_out_h(s) + 1) / 2;
	g.tw = (ss_conv_out_w(s) + 1) / 2;
	ptrdiff_t tiles = ((ptrdiff_t)1 << 22) / (WINO_POS * (ptrdiff_t)(s->c + s->oc));
	if (tiles < 256)
		tiles = 256;
	if (wino_tiles_test > 0)
		tiles = wino_tiles_test;
	ptrdiff_t rows = tiles / g.tw;
	const ptrdiff_t all = (ptrdiff_t)s->n * g.th;
	g.rows = (int)(rows < 1 ? 1 : rows > all ? all : rows);
	g.scratch = 32 * ((ptrdiff_t)g.tw + 1);
	return g;
}

/* Workspace: U (and dU backward) 16*OC*C each, V and M 16*C*T and
 * 16*OC*T for the largest block, and each part's scratch. */
ptrdiff_t ss_conv_winograd_workspace(int threads, const ss_conv_shape *s, int backward)
{
	const wino_geom g = wino_make(s);
	const ptrdiff_t t = (ptrdiff_t)g.rows * g.tw, u = (ptrdiff_t)WINO_POS * s->oc * s->c;
	return (backward ? 2 : 1) * u + (ptrdiff_t)WINO_POS * (s->c + s->oc) * t + ss_threads_of(threads) * g.scratch;
}

typedef struct {
	const ss_conv_shape *s;
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

/* wino_u returns where item i = oc*C + c of the weight transforms keeps
 * its position 0 in U (or dU); position xi is xi*C floats on. */
SS_INLINE float *wino_u(const wino_job *j, ptrdiff_t i)
{
	const ptrdiff_t c = j->s->c;
	return j->U + i + i / c * (WINO_POS - 1) * c;
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

SS_ISA_VARIANTS(wino_weights_part);
SS_ISA_VARIANTS(wino_wgrad_part);
SS_ISA_VARIANTS(wino_input_part);
SS_ISA_VARIANTS(wino_output_part);
SS_ISA_VARIANTS(wino_dy_part);
SS_ISA_VARIANTS(wino_dx_part);

/* wino_setup fills the job's geometry and carves ws: U, dU (backward),
 * V, M, then the parts' scratch. */
static void wino_setup(wino_job *j, const ss_conv_shape *s, int backward, float *ws, float **dU)
{
	memset(j, 0, sizeof *j);
	j->s = s;
	j->g = wino_make(s);
	j->pad = s->pad_h;
	j->oh = ss_conv_out_h(s);
	j->ow = ss_conv_out_w(s);
	ss_conv_planes(s, &j->xn, &j->xc, &j->yn, &j->yc);
	const ptrdiff_t u = (ptrdiff_t)WINO_POS * s->oc * s->c, t = (ptrdiff_t)j->g.rows * j->g.tw;
	j->U = ws;
	*dU = backward ? ws + u : NULL;
	j->V = ws + (backward ? 2 : 1) * u;
	j->M = j->V + (ptrdiff_t)WINO_POS * s->c * t;
	j->scratch = j->M + (ptrdiff_t)WINO_POS * s->oc * t;
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
	ss_parallel_for(threads, per * j->rb, ss_grain(16 * (ptrdiff_t)j->g.tw), fn, j);
}

void ss_conv_winograd_forward(int isa, int threads, const ss_conv_shape *s, const float *x, const float *w,
                              const float *b, float *y, float *ws)
{
	const int l = ss_isa(isa);
	wino_job j;
	float *unused;
	wino_setup(&j, s, 0, ws, &unused);
	j.x = x, j.w = w, j.b = b, j.y = y;
	const ptrdiff_t u = (ptrdiff_t)s->oc * s->c, all = (ptrdiff_t)s->n * j.g.th;
	ss_parallel_for(threads, u, ss_grain(16), wino_weights_part_isa[l], &j);
	for (ptrdiff_t r0 = 0; r0 < all; r0 += j.g.rows) {
		wino_block(&j, r0);
		wino_each(threads, wino_input_part_isa[l], s->c, &j);
		for (int xi = 0; xi < WINO_POS; xi++)
			ss_sgemm(threads, 0, 0, s->oc, (int)j.t, s->c, 1.0f, j.U + xi * s->c, WINO_POS * s->c,
			         j.V + xi * s->c * j.t, (int)j.t, 0.0f, j.M + xi * s->oc * j.t, (int)j.t);
		wino_each(threads, wino_output_part_isa[l], s->oc, &j);
	}
}

void ss_conv_winograd_backward(int isa, int threads, const ss_conv_shape *s, const float *x, const float *w,
                               const float *dy, float *dx, float *dw, float *db, float *ws)
{
	const int l = ss_isa(isa);
	if (db)
		ss_conv_bias_grad(threads, s, dy, db);
	if (dx == NULL && dw == NULL)
		return;
	wino_job j;
	float *dU;
	wino_setup(&j, s, 1, ws, &dU);
	j.x = x, j.w = w, j.dy = dy, j.dx = dx, j.dw = dw;
	float *U = j.U;
	const ptrdiff_t u = (ptrdiff_t)s->oc * s->c, all = (ptrdiff_t)s->n * j.g.th;
	if (dx)
		ss_parallel_for(threads, u, ss_grain(16), wino_weights_part_isa[l], &j);
	for (ptrdiff_t r0 = 0; r0 < all; r0 += j.g.rows) {
		wino_block(&j, r0);
		const int t = (int)j.t;
		wino_each(threads, wino_dy_part_isa[l], s->oc, &j);
		if (dw) {
			wino_each(threads, wino_input_part_isa[l], s->c, &j);
			for (int xi = 0; xi < WINO_POS; xi++)
				ss_sgemm(threads, 0, 1, s->oc, s->c, t, 1.0f, j.M + xi * s->oc * j.t, t,
				         j.V + xi * s->c * j.t, t, r0 == 0 ? 0.0f : 1.0f, dU + xi * s->c,
				         WINO_POS * s->c);
		}
		if (dx == NULL)
			continue;
		/* dV overwrites V, which the weight gradient has used. */
		for (int xi = 0; xi < WINO_POS; xi++)
			ss_sgemm(threads, 1, 0, s->c, t, s->oc, 1.0f, U + xi * s->c, WINO_POS * s->c,
			         j.M + xi * s->oc * j.t, t, 0.0f, j.V + xi * s->c * j.t, t);
		ss_parallel_for(threads, (ptrdiff_t)s->c * j.nseg, ss_grain(4 * (ptrdiff_t)j.g.th * j.g.tw),
		                wino_dx_part_isa[l], &j);
	}
	if (dw) {
		j.U = dU;
		ss_parallel_for(threads, u, ss_grain(16), wino_wgrad_part_isa[l], &j);
	}
}
