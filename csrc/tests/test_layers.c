/* Convolution, grouped too (with OpenBLAS, loaded as the Go package loads
 * it), and LRN within and across channels against loops written from
 * their definitions, with every buffer, workspaces included, exactly as
 * large as the kernels say and guarded, serially and over three
 * threads. Under AddressSanitizer this proves the
 * workspace sizes. Skipped (exit 77) when OpenBLAS cannot be loaded. */
#include "check.h"
#include "softsync.h"

void ss_winograd_set_test(ptrdiff_t tiles); /* internal.h */

/* isa is the instruction-set level every kernel is called at and threads
 * the threads it splits its work over; main runs the tests at each level
 * (levels above the CPU's run as its best), serially and over three
 * threads. */
static int isa, threads;

/* WINO6_KAPPA bounds the rounding error of SS_CONV_WINOGRAD6 per term
 * of a sum of terms of magnitude at most 1: one output of a tile sums
 * |At| (|G| |w| |Gt|) (|Bt| |d| |B|) |A|, whose 1-D factor is at most
 * beta = 48 for F(4x4, 3x3) (At's row 3 against G's and Bt's row sums)
 * over r = 3 taps, (48/3)^2 = 256 per term in 2-D (F(2x2, 5x5): (58/5)^2
 * = 133), times 2 units of rounding (2^-24 each). It is within the
 * worst-case bound, which also grows with the GEMMs' length; these
 * tests measured errors of at most 1.8e-6 per term (a sixteenth of it). */
#define WINO6_KAPPA (256.0 * 2.0 / 16777216.0)

static int out_dim(int in, int k, int pad, int stride) { return (in + 2 * pad - k) / stride + 1; }

/* act returns the index of element (n, c, h, w) of an activation with cs
 * channels of hs x ws pixels in the shape's layout. */
static size_t act(const ss_conv_shape *s, int cs, int hs, int ws, int n, int c, int h, int w)
{
	size_t plane = s->layout == SS_CNHW ? (size_t)c * s->n + n : (size_t)n * cs + c;
	return (plane * hs + h) * ws + w;
}

/* conv_case holds a shape's inputs (in its layout) and the results of
 * the loops written from the definitions, in double precision: drawn and
 * computed once per shape and layout, then checked against every level,
 * thread count, method and budget (the loops, not the kernels, took
 * almost all of the test's time under AddressSanitizer). */
typedef struct {
	float *x, *w, *b, *dy;
	double *wy, *wdx, *wdw, *wdb;
} conv_case;

/* conv_case_init draws c's inputs and computes its results for shape s
 * (s.groups groups, as test_conv describes). */
static void conv_case_init(conv_case *c, ss_conv_shape s)
{
	const int G = s.groups > 1 ? s.groups : 1, ct = G * s.c, oct = G * s.oc;
	const int oh = out_dim(s.h, s.kh, s.pad_h, s.stride_h), ow = out_dim(s.w, s.kw, s.pad_w, s.stride_w);
	const size_t kk = (size_t)s.kh * s.kw, in = (size_t)s.n * ct * s.h * s.w, wl = (size_t)oct * s.c * kk;
	const size_t out = (size_t)s.n * oct * oh * ow;
	float *x = malloc(sizeof(float) * in), *w = malloc(sizeof(float) * wl), *b = malloc(sizeof(float) * (size_t)oct);
	float *dy = malloc(sizeof(float) * out);
	double *wy = zeros(out), *wdx = zeros(in), *wdw = zeros(wl), *wdb = zeros((size_t)oct);
	if (x == NULL || w == NULL || b == NULL || dy == NULL) {
		perror("malloc");
		exit(2);
	}
	for (size_t i = 0; i < in; i++)
		x[i] = uniform();
	for (size_t i = 0; i < wl; i++)
		w[i] = uniform();
	for (int i = 0; i < oct; i++)
		b[i] = uniform();
	for (size_t i = 0; i < out; i++)
		dy[i] = uniform();
	for (int n = 0; n < s.n; n++)
		for (int o = 0; o < oct; o++)
			for (int py = 0; py < oh; py++)
				for (int px = 0; px < ow; px++) {
					size_t yi = act(&s, oct, oh, ow, n, o, py, px);
					wy[yi] += b[o];
					wdb[o] += dy[yi];
					for (int c = 0; c < s.c; c++)
						for (int i = 0; i < s.kh; i++)
							for (int j = 0; j < s.kw; j++) {
								int h = py * s.stride_h - s.pad_h + i, ww = px * s.stride_w - s.pad_w + j;
								if (h < 0 || h >= s.h || ww < 0 || ww >= s.w)
									continue;
								/* Output channel o reads its group's input channels. */
								size_t xi = act(&s, ct, s.h, s.w, n, o / s.oc * s.c + c, h, ww);
								size_t wi = ((size_t)o * s.c + c) * kk + (size_t)i * s.kw + j;
								wy[yi] += (double)x[xi] * w[wi];
								wdx[xi] += (double)w[wi] * dy[yi];
								wdw[wi] += (double)x[xi] * dy[yi];
							}
				}
	*c = (conv_case){x, w, b, dy, wy, wdx, wdw, wdb};
}

/* copied returns a guarded copy of the n floats of v. */
static float *copied(const float *v, size_t n)
{
	float *p = guarded(n);
	memcpy(p, v, sizeof(float) * n);
	return p;
}

/* test_conv checks a convolution of s.groups groups (0 or 1: one), run
 * group by group as softsync.h describes: s is one group, c input to oc
 * output channels of tensors of groups*c and groups*oc channels; cc is
 * the shape's case (conv_case_init). */
static void test_conv(ss_conv_shape s, const conv_case *cc, ptrdiff_t budget, int method)
{
	const int G = s.groups > 1 ? s.groups : 1, ct = G * s.c, oct = G * s.oc;
	const int oh = out_dim(s.h, s.kh, s.pad_h, s.stride_h), ow = out_dim(s.w, s.kw, s.pad_w, s.stride_w);
	const size_t kk = (size_t)s.kh * s.kw, in = (size_t)s.n * ct * s.h * s.w, wl = (size_t)oct * s.c * kk;
	const size_t out = (size_t)s.n * oct * oh * ow;
	const int g = ss_conv_group(&s, budget);
	const size_t wsf = (size_t)ss_conv_workspace(isa, threads, &s, g, method, 0), wsb = (size_t)ss_conv_workspace(isa, threads, &s, g, method, 1);
	const size_t wsl = wsf > wsb ? wsf : wsb;
	float *x = copied(cc->x, in), *w = copied(cc->w, wl), *b = copied(cc->b, (size_t)oct), *y = guarded(out);
	float *dy = copied(cc->dy, out), *dx = guarded(in), *dw = guarded(wl), *db = guarded((size_t)oct);
	float *ws = guarded(wsl);
	const double *wy = cc->wy, *wdx = cc->wdx, *wdw = cc->wdw, *wdb = cc->wdb;
	/* Planes of channel 1 from channel 0's: H*W (OH*OW) apart in NCHW, N
	 * times that in CNHW. */
	const size_t xc = (size_t)s.h * s.w * (s.layout == SS_CNHW ? (size_t)s.n : 1);
	const size_t yc = (size_t)oh * ow * (s.layout == SS_CNHW ? (size_t)s.n : 1);
	for (int k = 0; k < G; k++) {
		const size_t xo = (size_t)k * s.c * xc, yo = (size_t)k * s.oc * yc, wo = (size_t)k * s.oc * s.c * kk;
		ss_conv_forward(isa, threads, &s, g, method, x + xo, w + wo, b + k * s.oc, y + yo, ws, (ptrdiff_t)wsf);
		check_guards(ws, wsl, "forward workspace");
		ss_conv_backward(isa, threads, &s, g, method, x + xo, w + wo, dy + yo, dx + xo, dw + wo, db + k * s.oc, ws,
		                 (ptrdiff_t)wsb);
		check_guards(ws, wsl, "backward workspace");
	}
	/* Winograd's rounding error grows with its transforms' norms: bound it
	 * by kappa times the terms of a whole sum, each at most 1 (see
	 * WINO6_KAPPA). */
	const double kappa = method == SS_CONV_WINOGRAD6 ? WINO6_KAPPA : 0.0;
	const double my = (double)s.c * kk, mdx = (double)s.oc * kk, mdw = (double)s.n * oh * ow;
	for (size_t i = 0; i < out; i++)
		CHECK(fabs(y[i] - wy[i]) <= 1e-4 * (1 + fabs(wy[i])) + kappa * my, "method %d layout %d groups %d g=%d y[%zu] = %g, want %g", method, s.layout, G, g, i, y[i], wy[i]);
	for (size_t i = 0; i < in; i++)
		CHECK(fabs(dx[i] - wdx[i]) <= 1e-4 * (1 + fabs(wdx[i])) + kappa * mdx, "method %d layout %d groups %d g=%d dx[%zu] = %g, want %g", method, s.layout, G, g, i, dx[i], wdx[i]);
	for (size_t i = 0; i < wl; i++)
		CHECK(fabs(dw[i] - wdw[i]) <= 1e-4 * (1 + fabs(wdw[i])) + kappa * mdw, "method %d layout %d groups %d g=%d dw[%zu] = %g, want %g", method, s.layout, G, g, i, dw[i], wdw[i]);
	for (int i = 0; i < oct; i++)
		CHECK(fabs(db[i] - wdb[i]) <= 1e-4 * (1 + fabs(wdb[i])), "method %d layout %d groups %d g=%d db[%d] = %g, want %g", method, s.layout, G, g, i, db[i], wdb[i]);
	/* dx alone (dw and db NULL), as the split calls of a pass whose two
	 * gradients' methods differ make it. */
	for (size_t i = 0; i < in; i++)
		dx[i] = NAN;
	for (int k = 0; k < G; k++) {
		const size_t xo = (size_t)k * s.c * xc, yo = (size_t)k * s.oc * yc, wo = (size_t)k * s.oc * s.c * kk;
		ss_conv_backward(isa, threads, &s, g, method, x + xo, w + wo, dy + yo, dx + xo, NULL, NULL, ws,
		                 (ptrdiff_t)wsb);
	}
	for (size_t i = 0; i < in; i++)
		CHECK(fabs(dx[i] - wdx[i]) <= 1e-4 * (1 + fabs(wdx[i])) + kappa * mdx, "method %d layout %d groups %d g=%d dx alone[%zu] = %g, want %g", method, s.layout, G, g, i, dx[i], wdx[i]);
	check_guards(y, out, "y");
	check_guards(dx, in, "dx");
	check_guards(dw, wl, "dw");
	check_guards(db, (size_t)oct, "db");
	release(x), release(w), release(b), release(y), release(dy), release(dx), release(dw), release(db), release(ws);
}

/* test_fc checks ss_fc_forward and ss_fc_backward (both the GEMM and the
 * small-batch paths) with guarded buffers. */
static void test_fc(int n, int in, int out)
{
	float *x = guarded((size_t)n * in), *w = guarded((size_t)out * in), *b = guarded((size_t)out);
	float *y = guarded((size_t)n * out), *dy = guarded((size_t)n * out), *dx = guarded((size_t)n * in);
	float *dw = guarded((size_t)out * in), *db = guarded((size_t)out);
	for (int i = 0; i < n * in; i++)
		x[i] = uniform();
	for (int i = 0; i < out * in; i++)
		w[i] = uniform();
	for (int i = 0; i < out; i++)
		b[i] = uniform();
	for (int i = 0; i < n * out; i++)
		dy[i] = uniform();
	ss_fc_forward(isa, threads, n, in, out, x, w, b, y);
	ss_fc_backward(isa, threads, n, in, out, x, w, dy, dx, dw, db);
	for (int r = 0; r < n; r++)
		for (int o = 0; o < out; o++) {
			double want = b[o];
			for (int i = 0; i < in; i++)
				want += (double)x[r * in + i] * w[o * in + i];
			CHECK(fabs(y[r * out + o] - want) <= 1e-4 * (1 + fabs(want)), "fc %dx%dx%d y[%d][%d] = %g, want %g",
			      n, in, out, r, o, y[r * out + o], want);
		}
	for (int o = 0; o < out; o++) {
		double wdb = 0;
		for (int r = 0; r < n; r++)
			wdb += dy[r * out + o];
		CHECK(fabs(db[o] - wdb) <= 1e-4 * (1 + fabs(wdb)), "fc db[%d]", o);
		for (int i = 0; i < in; i++) {
			double want = 0;
			for (int r = 0; r < n; r++)
				want += (double)dy[r * out + o] * x[r * in + i];
			CHECK(fabs(dw[o * in + i] - want) <= 1e-4 * (1 + fabs(want)), "fc %dx%dx%d dw[%d][%d]", n, in, out, o, i);
		}
	}
	for (int r = 0; r < n; r++)
		for (int i = 0; i < in; i++) {
			double want = 0;
			for (int o = 0; o < out; o++)
				want += (double)dy[r * out + o] * w[o * in + i];
			CHECK(fabs(dx[r * in + i] - want) <= 1e-4 * (1 + fabs(want)), "fc %dx%dx%d dx[%d][%d]", n, in, out, r, i);
		}
	ss_fc_backward(isa, threads, n, in, out, x, w, dy, NULL, dw, NULL);
	check_guards(y, (size_t)n * out, "fc y"), check_guards(dx, (size_t)n * in, "fc dx");
	check_guards(dw, (size_t)out * in, "fc dw"), check_guards(db, (size_t)out, "fc db");
	release(x), release(w), release(b), release(y), release(dy), release(dx), release(dw), release(db);
}

/* lrn_window returns the sum of v over the elements of the window of
 * element (q, h, w), q = n*C + c, that lie inside the tensor. */
static double lrn_window(const ss_lrn_shape *s, size_t q, int h, int w, const double *v)
{
	const int r = s->size / 2;
	double sum = 0;
	if (s->region == SS_LRN_ACROSS) {
		const size_t n = q / (size_t)s->c;
		const int c = (int)(q % (size_t)s->c);
		for (int k = c - r; k <= c + r; k++)
			if (k >= 0 && k < s->c)
				sum += v[((n * (size_t)s->c + (size_t)k) * s->h + h) * s->w + w];
		return sum;
	}
	for (int i = h - r; i <= h + r; i++)
		for (int j = w - r; j <= w + r; j++)
			if (i >= 0 && i < s->h && j >= 0 && j < s->w)
				sum += v[(q * s->h + i) * s->w + j];
	return sum;
}

static void test_lrn(ss_lrn_shape s)
{
	const size_t n = (size_t)s.n * s.c * s.h * s.w;
	const size_t wsl = (size_t)ss_lrn_workspace(threads, &s);
	const double norm = s.region == SS_LRN_ACROSS ? s.size : s.size * s.size;
	float *x = guarded(n), *y = guarded(n), *sc = guarded(n), *dy = guarded(n), *dx = guarded(n);
	float *ws = guarded(wsl);
	double *wsc = zeros(n), *wy = zeros(n), *sq = zeros(n), *t = zeros(n), *tm = zeros(n);
	for (size_t i = 0; i < n; i++) {
		x[i] = uniform();
		dy[i] = uniform();
		sq[i] = (double)x[i] * x[i];
	}
	for (size_t q = 0; q < (size_t)s.n * s.c; q++)
		for (int h = 0; h < s.h; h++)
			for (int w = 0; w < s.w; w++) {
				size_t k = (q * s.h + h) * s.w + w;
				wsc[k] = s.k + s.alpha / norm * lrn_window(&s, q, h, w, sq);
				wy[k] = x[k] * pow(wsc[k], -s.beta);
			}
	ss_lrn_forward(isa, threads, &s, x, y, sc, ws, (ptrdiff_t)wsl);
	for (size_t i = 0; i < n; i++) {
		CHECK(fabs(sc[i] - wsc[i]) <= 1e-5 * wsc[i], "region %d scale[%zu] = %g, want %g", s.region, i, sc[i], wsc[i]);
		CHECK(fabs(y[i] - wy[i]) <= 1e-5 * (1e-3 + fabs(wy[i])), "region %d y[%zu] = %g, want %g", s.region, i, y[i], wy[i]);
		t[i] = dy[i] * wy[i] / wsc[i];
		tm[i] = fabs(t[i]);
	}
	ss_lrn_backward(isa, threads, &s, x, y, sc, dy, dx, ws, (ptrdiff_t)wsl);
	const double c = 2.0 * s.alpha * s.beta / norm;
	for (size_t q = 0; q < (size_t)s.n * s.c; q++)
		for (int h = 0; h < s.h; h++)
			for (int w = 0; w < s.w; w++) {
				size_t k = (q * s.h + h) * s.w + w;
				const double sum = lrn_window(&s, q, h, w, t), mag = lrn_window(&s, q, h, w, tm);
				double want = dy[k] * pow(wsc[k], -s.beta) - c * x[k] * sum;
				CHECK(fabs(dx[k] - want) <= 1e-5 * (fabs(dy[k]) + c * fabs(x[k]) * mag + 1e-6),
				      "region %d dx[%zu] = %g, want %g", s.region, k, dx[k], want);
			}
	check_guards(ws, wsl, "LRN workspace");
	check_guards(y, n, "y"), check_guards(sc, n, "scale"), check_guards(dx, n, "dx");
	release(x), release(y), release(sc), release(dy), release(dx), release(ws);
	free(wsc), free(wy), free(sq), free(t), free(tm);
}

int main(void)
{
	char err[512];
	if (ss_blas_load("libopenblas.so.0", err, sizeof err) != 0) {
		fprintf(stderr, "skipped: %s\n", err);
		return 77;
	}
	static const ss_conv_shape convs[] = {
		/* n  c  h   w   oc kh kw ph pw sh sw layout groups */
		{5, 3, 9, 8, 4, 3, 3, 1, 1, 1, 1, SS_NCHW, 1},
		{4, 2, 11, 10, 3, 5, 5, 2, 2, 1, 1, SS_NCHW, 1},
		{3, 3, 9, 9, 2, 3, 2, 0, 1, 2, 3, SS_NCHW, 1},
		{2, 1, 6, 6, 2, 1, 1, 0, 0, 1, 1, SS_NCHW, 1},
		{3, 5, 12, 19, 9, 5, 5, 2, 2, 1, 1, SS_NCHW, 1},   /* rows of 2 units and a partial one */
		{2, 3, 7, 30, 6, 2, 4, 3, 0, 1, 1, SS_NCHW, 1},    /* padding beyond the kernel: dx crops */
		{7, 20, 12, 12, 50, 5, 5, 0, 0, 1, 1, SS_NCHW, 1}, /* LeNet conv2 */
		{3, 6, 11, 37, 13, 3, 5, 1, 2, 1, 1, SS_NCHW, 1},  /* AVX-512: units across rows, partial tiles */
		{2, 5, 8, 16, 9, 5, 5, 2, 2, 1, 1, SS_NCHW, 1},    /* AVX-512: padded planes (OW = 16) */
		{3, 4, 10, 9, 5, 3, 3, 0, 0, 1, 1, SS_NCHW, 1},    /* Winograd without padding, odd OW */
		{2, 3, 5, 13, 4, 3, 3, 1, 1, 1, 1, SS_NCHW, 1},    /* Winograd: odd OH and OW */
		{2, 2, 13, 11, 3, 2, 5, 0, 1, 4, 2, SS_NCHW, 1},   /* space to depth: input rows it leaves out */
		{1, 3, 15, 18, 64, 11, 11, 1, 0, 4, 4, SS_NCHW, 1}, /* space to depth: Winograd's 3 x 3 at level AVX2 */
		{2, 3, 7, 10, 2, 5, 5, 1, 1, 1, 1, SS_NCHW, 1},    /* Winograd 6 x 6: 5 x 5 padded by 1 */
		/* grouped: each a group's shape */
		{3, 4, 9, 9, 5, 5, 5, 2, 2, 1, 1, SS_NCHW, 2},
		{2, 2, 9, 8, 3, 3, 2, 1, 0, 2, 1, SS_NCHW, 3},
		{2, 1, 6, 7, 1, 3, 3, 1, 1, 1, 1, SS_NCHW, 4},
	};
	static const ss_lrn_shape lrns[] = {
		{2, 3, 5, 6, 3, 0.9f, 0.75f, 1.0f, SS_LRN_WITHIN},
		{1, 2, 7, 4, 5, 2.0f, 0.5f, 2.0f, SS_LRN_WITHIN},
		{2, 2, 9, 11, 1, 0.7f, 0.75f, 1.0f, SS_LRN_WITHIN},
		{1, 2, 1, 3, 3, 1.5f, 1.3f, 1.2f, SS_LRN_WITHIN},
		{2, 2, 3, 2, 5, 1.0f, 1.0f, 1.0f, SS_LRN_WITHIN},
		{2, 7, 3, 5, 5, 0.9f, 0.75f, 1.0f, SS_LRN_ACROSS},
		{1, 3, 2, 5, 7, 2.0f, 0.5f, 2.0f, SS_LRN_ACROSS},   /* window wider than the channels */
		{2, 5, 30, 21, 3, 1.3f, 1.3f, 1.2f, SS_LRN_ACROSS}, /* two blocks of pixels per image */
		{1, 4, 1, 3, 1, 0.7f, 1.0f, 1.0f, SS_LRN_ACROSS},
	};

	enum { NCONVS = sizeof convs / sizeof convs[0] };
	static conv_case cases[NCONVS][2]; /* by shape and layout, drawn at first use */
	for (threads = 1; threads <= 3; threads += 2)
		for (isa = 0; isa < SS_ISA_LEVELS; isa++) {
			ss_threads_init(threads);
			ss_set_min_parallel_floats(1);
			for (size_t i = 0; i < NCONVS; i++)
				for (int layout = SS_NCHW; layout <= SS_CNHW; layout++) {
					ss_conv_shape s = convs[i];
					s.layout = layout;
					const conv_case *cc = &cases[i][layout - SS_NCHW];
					if (cc->x == NULL)
						conv_case_init(&cases[i][layout - SS_NCHW], s);
					for (int method = SS_CONV_CHWN; method <= SS_CONV_IMAGE; method++) {
						test_conv(s, cc, 1, method);        /* one image per GEMM */
						test_conv(s, cc, 1 << 30, method);  /* the whole batch */
						test_conv(s, cc, 3 * (ptrdiff_t)s.c * s.kh * s.kw * 16, method); /* uneven groups */
					}
					if (ss_conv_direct_supported(isa, &s))
						test_conv(s, cc, 1, SS_CONV_DIRECT);
					for (int method = SS_CONV_WINOGRAD; method <= SS_CONV_WINOGRAD6; method++) {
						if (!ss_conv_winograd_supported(method, &s))
							continue;
						ss_winograd_set_test(0);
						test_conv(s, cc, 1, method);
						ss_winograd_set_test(3); /* blocks that end inside images */
						test_conv(s, cc, 1, method);
						ss_winograd_set_test(0);
					}
					if (ss_conv_s2d_supported(&s)) {
						test_conv(s, cc, 1, SS_CONV_S2D);
						test_conv(s, cc, 1 << 30, SS_CONV_S2D);
					}
				}
			for (size_t i = 0; i < sizeof lrns / sizeof lrns[0]; i++)
				test_lrn(lrns[i]);
			for (int n = 1; n <= 9; n += 2)
				for (int in = 1; in <= 33; in += 8)
					test_fc(n, in, n % 3 + 2);
		}
	for (size_t i = 0; i < NCONVS; i++)
		for (int l = 0; l < 2; l++) {
			conv_case *c = &cases[i][l];
			free(c->x), free(c->w), free(c->b), free(c->dy), free(c->wy), free(c->wdx), free(c->wdw), free(c->wdb);
		}
	return report("layers");
}
