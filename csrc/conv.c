/* Batched convolution: Winograd's F(2x2, 3x3) or F(4x4, 3x3) around 16
 * or 36 GEMMs for 3 x 3 kernels of stride 1 and F(2x2, 5x5) for 5 x 5
 * ones (winograd.c), direct kernels for stride 1 at levels
 * AVX2 and AVX-512 (direct.c, direct512.c), strided kernels rewritten to
 * stride 1 by space to depth (s2d.c), otherwise one GEMM per group of g
 * images.
 *
 * With P = OH*OW output pixels, K = C*kh*kw and L = C*H*W, the group's
 * column matrix col (K x P*g) feeds
 *   Y (OC x P*g) = W (OC x K) * col,
 * and backward, with dY (OC x P*g) holding dy in the same column order,
 *   dW += dY * col^T,   dcol = W^T * dY,   dx = col2im(dcol).
 * Two column orders:
 *   SS_CONV_CHWN  column p*g + n. The group is first transposed to batch
 *                 innermost (xT, L x g), so that im2col copies runs of g
 *                 floats per kernel tap; Y is transposed back (with the
 *                 bias) and dy transposed into dY. Best for small images.
 *   SS_CONV_IMAGE column n*P + p. im2col works image by image, copying
 *                 output rows; Y[oc] splits into contiguous per-image rows
 *                 of y. Best when output rows are long.
 * Activations are addressed by plane: plane (n, c) of x at x + n*xn + c*xc
 * and of y at y + n*yn + c*yc, which covers both NCHW and CNHW. The GEMMs
 * run on OpenBLAS's threads; everything else on ours (ss_parallel_for), the
 * caller's thread count for both. */
#include <string.h>

#include "internal.h"

static ptrdiff_t conv_k(const ss_conv_shape *s) { return (ptrdiff_t)s->c * s->kh * s->kw; }
static ptrdiff_t conv_p(const ss_conv_shape *s) { return (ptrdiff_t)ss_conv_out_h(s) * ss_conv_out_w(s); }
static ptrdiff_t conv_l(const ss_conv_shape *s) { return (ptrdiff_t)s->c * s->h * s->w; }

/* direct_pays reports whether the direct kernels beat the GEMMs on a
 * shape they support, for one pass (SS_CONV_PASS_*). At level AVX2, for
 * every pass: the kernels compute output rows in whole 8-pixel vectors,
 * so a narrow plane whose rows end in a partial vector (13, 14 or 7
 * pixels) wastes an eighth to a fifth of their work, and with many taps
 * (C*kh*kw >= 1024) a GEMM over the batch-innermost columns loses less to
 * its copies than that (AlexNet's conv3-5, ResNet-18's layer3 and layer4).
 * At level AVX-512 the kernels run vectors across rows, over kw shifted
 * copies of each image when rows are narrower than a vector: on planes
 * narrower than 16 pixels (13, 14, 7) the copies, the partial last vector
 * of each plane (49 pixels run as 64 on 7 x 7) and the short tiles make
 * the forward pass and the input gradient of layers with many taps
 * (C*kh*kw >= 1024) slower than OpenBLAS's 512-bit GEMMs over
 * batch-innermost columns (ResNet-18's layer4: 25-30 against 90
 * cpu-GFLOP/s forward; AlexNet's conv3: 65 against 92). The weight
 * gradient, which puts output channels in the lanes, keeps its lead down
 * to 64-pixel planes (98-105 against 85-95 on 13 x 13 and 14 x 14) and
 * loses below (78 against 93 on 7 x 7). A forward pass of fewer than
 * 192 output channels stays direct too: OpenBLAS's GEMM of 128 rows runs
 * AlexNet's conv5 (13 x 13) at 72-75 against the direct kernels' 82-83,
 * where conv4's 192 rows make 76-81 against 72-75. With fewer taps the direct
 * kernels stay ahead on every plane (LeNet's conv2 and cifar10_full's
 * conv3, 8 x 8 with 500 and 800 taps: 84-93 against 53-78 forward). */
static int direct_pays(int isa, const ss_conv_shape *s, int pass)
{
	const int ow = ss_conv_out_w(s);
	if (ss_isa(isa) == SS_ISA_AVX2)
		return ow % 8 == 0 || ow >= 16 || conv_k(s) < 1024;
	if (conv_k(s) < 1024)
		return 1;
	if (pass == SS_CONV_PASS_WGRAD)
		return conv_p(s) >= 64;
	if (pass == SS_CONV_PASS_FORWARD && s->oc < 192)
		return 1;
	return ow >= 16;
}

/* winograd_method returns the Winograd method (winograd.c) that beats
 * the other methods on a shape, for one pass, or -1. At level AVX2, for
 * every pass once both channel counts are at least 64 on 3 x 3 kernels:
 * F(2x2, 3x3) does 4 multiplications per output pixel and channel pair
 * and F(4x4, 3x3) 2.25 where the others do 9, in 16 or 36 GEMMs of OC x
 * C by C x tiles, which OpenBLAS runs about as fast as the direct kernels
 * run theirs. On ResNet-18's 3 x 3 layers at 16 images on one thread
 * (cpu-GFLOP/s counted as direct FLOPs; forward, both gradients), direct
 * against F(2x2, 3x3) against F(4x4, 3x3):
 *   64 channels of 56 x 56    76/76 : 102/112 : 127/129
 *   128 of 28 x 28            48-67/74 : 130/132 : 172/155
 *   256 of 14 x 14            66/71 : 141/143 : 148/139
 *   512 of 7 x 7              62/66 : 102/99 : 75/79
 * and AlexNet's 13 x 13 conv3-5 (192-384 channels) 59-65/64-69 :
 * 89-129/83-124 : 86-134/84-134. So F(4x4, 3x3) on output rows of 16
 * pixels or more, whose 4 x 4 tiles waste little, F(2x2, 3x3) on
 * narrower ones: on 7 x 7 the 6 x 6 tiles compute 64 outputs for 49 and
 * the 36 weight transforms of 512 x 512 channels weigh; on 13 x 13 and
 * 14 x 14 the two are within the noise. On 5 x 5 kernels, F(2x2, 5x5)
 * does 9 multiplications where the others do 25: AlexNet's conv2 (48 to
 * 128 channels per group, 27 x 27) runs at 107/104 against the direct
 * kernels' 64/72, so it runs from 48 input and 64 output channels on
 * planes of 16 pixels or more (smaller were not measured). At level
 * AVX-512 the direct kernels and OpenBLAS's 512-bit GEMMs stay (not
 * measured against it). */
static int winograd_method(int isa, const ss_conv_shape *s, int pass)
{
	(void)pass;
	if (ss_isa(isa) != SS_ISA_AVX2 || ss_conv_out_w(s) < (s->kh == 5 ? 16 : 1))
		return -1;
	if (s->kh == 5)
		return s->c >= 48 && s->oc >= 64 && ss_conv_winograd_supported(SS_CONV_WINOGRAD6, s) ? SS_CONV_WINOGRAD6
		                                                                                    : -1;
	if (s->c < 64 || s->oc < 64 || !ss_conv_winograd_supported(SS_CONV_WINOGRAD, s))
		return -1;
	return ss_conv_out_w(s) >= 16 ? SS_CONV_WINOGRAD6 : SS_CONV_WINOGRAD;
}

int ss_conv_pass_method(int isa, const ss_conv_shape *s, int pass)
{
	/* The first layers' strided kernels over few channels: s2d.c. */
	if (ss_conv_s2d_supported(s) && ss_s2d_pays(isa, s, pass))
		return SS_CONV_S2D;
	const int wino = winograd_method(isa, s, pass);
	if (wino >= 0)
		return wino;
	if (ss_conv_direct_supported(isa, s) && direct_pays(isa, s, pass))
		return SS_CONV_DIRECT;
	return ss_conv_out_w(s) >= 24 ? SS_CONV_IMAGE : SS_CONV_CHWN;
}


int ss_conv_group(const ss_conv_shape *s, ptrdiff_t budget)
{
	ptrdiff_t per = conv_k(s) * conv_p(s);
	ptrdiff_t g = per > 0 ? budget / per : 1;
	if (g < 1)
		g = 1;
	if (g > s->n)
		g = s->n;
	return (int)g;
}

/* Workspace layout for a group of g images, in floats:
 *   col  K*P*g
 *   Y    OC*P*g   (Y forward, dY backward; g > 1)
 *   xT   L*g      (g > 1, CHWN)
 *   dcol K*P*g    (backward)
 *   dxT  L*g      (backward, g > 1, CHWN) */
static ptrdiff_t method_workspace(int isa, int threads, const ss_conv_shape *s, int group, int method,
                                  int backward);

ptrdiff_t ss_conv_workspace(int isa, int threads, const ss_conv_shape *s, int group, int method,
                            int backward)
{
	if (method == SS_CONV_S2D)
		return ss_conv_s2d_workspace(isa, threads, s, group, backward);
	const ptrdiff_t m = method_workspace(isa, threads, s, group, method, backward);
	if (!backward || method == SS_CONV_WINOGRAD || method == SS_CONV_WINOGRAD6 || !ss_wgrad_supported(isa, s))
		return m;
	const ptrdiff_t w = ss_wgrad_workspace(threads, s);
	return w > m ? w : m;
}

static ptrdiff_t method_workspace(int isa, int threads, const ss_conv_shape *s, int group, int method,
                                  int backward)
{
	if (method == SS_CONV_DIRECT)
		return ss_conv_direct_workspace(isa, threads, s, backward);
	if (method == SS_CONV_WINOGRAD || method == SS_CONV_WINOGRAD6)
		return ss_conv_winograd_workspace(method, threads, s, backward);
	const ptrdiff_t gp = (ptrdiff_t)group * conv_p(s);
	const ptrdiff_t gl = group > 1 && method == SS_CONV_CHWN ? (ptrdiff_t)group * conv_l(s) : 0;
	ptrdiff_t need = conv_k(s) * gp + gl;
	if (group > 1)
		need += (ptrdiff_t)s->oc * gp;
	if (backward)
		need += conv_k(s) * gp + gl;
	return need;
}

typedef struct {
	const ss_conv_shape *s;
	int threads;                /* the caller's thread count */
	int g;
	ptrdiff_t k, p, hw, ld;     /* rows of col, output pixels, input pixels, row stride of col */
	ptrdiff_t xn, xc, yn, yc;   /* plane strides of x and y */
	const float *src;
	float *dst;
	const float *bias;
} conv_job;

/* CHWN: rows [lo, hi) of the whole group's column matrix. */
static void im2col_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	ss_im2col(j->s, j->g, j->src, j->hw * j->g, j->dst, j->ld, lo, hi);
}

/* Image-major: items t = image*K + row. */
static void im2col_img_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t t = lo; t < hi;) {
		const ptrdiff_t n = t / j->k, r = t % j->k;
		const ptrdiff_t end = hi - t < j->k - r ? r + (hi - t) : j->k;
		ss_im2col(j->s, 1, j->src + n * j->xn, j->xc, j->dst + n * j->p, j->ld, r, end);
		t += end - r;
	}
}

/* CHWN: channels [lo, hi) of the whole group. */
static void col2im_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	ss_col2im(j->s, j->g, j->src, j->ld, j->dst, j->hw * j->g, (int)lo, (int)hi);
}

/* Image-major: items t = image*C + channel. */
static void col2im_img_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const int c = j->s->c;
	for (ptrdiff_t t = lo; t < hi;) {
		const ptrdiff_t n = t / c, c0 = t % c;
		const ptrdiff_t c1 = hi - t < c - c0 ? c0 + (hi - t) : c;
		ss_col2im(j->s, 1, j->src + n * j->p, j->ld, j->dst + n * j->xn, j->xc, (int)c0, (int)c1);
		t += c1 - c0;
	}
}

/* The group's planes (g images of x) to CHWN (L x g): items t = c*HW + i
 * of the L side, [lo, hi). */
static void to_chwn_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t t = lo; t < hi;) {
		const ptrdiff_t c = t / j->hw, i = t % j->hw;
		const ptrdiff_t end = hi - t < j->hw - i ? i + (hi - t) : j->hw;
		ss_transpose(j->src + c * j->xc + i, j->xn, j->dst + t * j->g, j->g, j->g, end - i, 0.0f);
		t += end - i;
	}
}

/* CHWN (L x g) back to the group's planes of dx. */
static void to_planes_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t t = lo; t < hi;) {
		const ptrdiff_t c = t / j->hw, i = t % j->hw;
		const ptrdiff_t end = hi - t < j->hw - i ? i + (hi - t) : j->hw;
		ss_transpose(j->src + t * j->g, j->g, j->dst + c * j->xc + i, j->xn, end - i, j->g, 0.0f);
		t += end - i;
	}
}

/* CHWN: Y row oc (P x g) into the planes (n, oc) of y, plus bias. */
static void scatter_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t o = lo; o < hi; o++)
		ss_transpose(j->src + o * j->ld, j->g, j->dst + o * j->yc, j->yn, j->p, j->g,
		             j->bias ? j->bias[o] : 0.0f);
}

/* CHWN: the planes (n, oc) of dy into dY row oc (P x g). */
static void gather_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t o = lo; o < hi; o++)
		ss_transpose(j->src + o * j->yc, j->yn, j->dst + o * j->ld, j->g, j->g, j->p, 0.0f);
}

/* Image-major: items t = image*OC + oc, plane (n, oc) of y = Y[oc][n*P ...]
 * + bias. With src == dst (g = 1, NCHW) it adds the bias in place. */
SS_MULTIVERSION
static void scatter_img_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const int oc = j->s->oc;
	for (ptrdiff_t t = lo; t < hi; t++) {
		const ptrdiff_t n = t / oc, o = t % oc;
		const float *src = j->src + o * j->ld + n * j->p;
		float *dst = j->dst + n * j->yn + o * j->yc;
		const float b = j->bias ? j->bias[o] : 0.0f;
		for (ptrdiff_t i = 0; i < j->p; i++)
			dst[i] = src[i] + b;
	}
}

/* Image-major: items t = image*OC + oc, dY[oc][n*P ...] = plane (n, oc) of dy. */
static void gather_img_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	const int oc = j->s->oc;
	for (ptrdiff_t t = lo; t < hi; t++) {
		const ptrdiff_t n = t / oc, o = t % oc;
		memcpy(j->dst + o * j->ld + n * j->p, j->src + n * j->yn + o * j->yc, sizeof(float) * (size_t)j->p);
	}
}

/* expand writes the group's column matrix into col from the group's
 * images (first plane at x), using xT (L x g floats) for CHWN. */
static void expand(conv_job *j, int method, const float *x, float *xT, float *col)
{
	if (j->g > 1 && method == SS_CONV_CHWN) {
		j->src = x;
		j->dst = xT;
		ss_parallel_for(j->threads, j->s->c * j->hw, ss_grain(j->g), to_chwn_part, j);
		j->src = xT;
		j->dst = col;
		ss_parallel_for(j->threads, j->k, ss_grain(j->ld), im2col_part, j);
		return;
	}
	j->src = x;
	j->dst = col;
	ss_parallel_for(j->threads, j->g * j->k, ss_grain(j->p), im2col_img_part, j);
}

void ss_conv_forward(int isa, int threads, const ss_conv_shape *s, int group, int method, const float *x,
                     const float *w, const float *b, float *y, float *ws, ptrdiff_t ws_len)
{
	if (method == SS_CONV_DIRECT) {
		ss_conv_direct_forward(isa, threads, s, x, w, b, y, ws, ws_len);
		return;
	}
	if (method == SS_CONV_WINOGRAD || method == SS_CONV_WINOGRAD6) {
		ss_conv_winograd_forward(method, isa, threads, s, x, w, b, y, ws);
		return;
	}
	if (method == SS_CONV_S2D) {
		ss_conv_s2d_forward(isa, threads, s, group, x, w, b, y, ws, ws_len);
		return;
	}
	const ptrdiff_t k = conv_k(s), p = conv_p(s);
	ptrdiff_t xn, xc, yn, yc;
	ss_conv_planes(s, &xn, &xc, &yn, &yc);
	for (int n0 = 0; n0 < s->n; n0 += group) {
		const int g = ss_imin(group, s->n - n0);
		const ptrdiff_t cols = g * p;
		const int chwn = g > 1 && method == SS_CONV_CHWN;
		/* See ss_conv_workspace for the layout; with g = 1 the GEMM
		 * writes y directly (row oc of Y is plane (n0, oc)). */
		float *col = ws, *Y = g > 1 ? col + k * cols : y + n0 * yn;
		const ptrdiff_t ldY = g > 1 ? cols : yc;
		float *xT = chwn ? Y + s->oc * cols : NULL;
		conv_job j = {.s = s, .threads = threads, .g = g, .k = k, .p = p, .hw = (ptrdiff_t)s->h * s->w, .ld = cols,
		              .xn = xn, .xc = xc, .yn = yn, .yc = yc, .bias = b};
		expand(&j, method, x + n0 * xn, xT, col);
		ss_sgemm(threads, 0, 0, s->oc, (int)cols, (int)k, 1.0f, w, (int)k, col, (int)cols, 0.0f, Y, (int)ldY);
		j.src = Y;
		j.dst = y + n0 * yn;
		j.ld = ldY;
		if (chwn)
			ss_parallel_for(j.threads, s->oc, ss_grain(cols), scatter_part, &j);
		else if (g > 1 || b)
			ss_parallel_for(j.threads, (ptrdiff_t)g * s->oc, ss_grain(p), scatter_img_part, &j);
	}
}

static void db_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const conv_job *j = ctx;
	for (ptrdiff_t o = lo; o < hi; o++) {
		float sum = 0.0f;
		for (int n = 0; n < j->s->n; n++)
			sum += ss_sum(j->src + n * j->yn + o * j->yc, j->p);
		j->dst[o] = sum;
	}
}

void ss_conv_bias_grad(int threads, const ss_conv_shape *s, const float *dy, float *db)
{
	ptrdiff_t xn, xc, yn, yc;
	ss_conv_planes(s, &xn, &xc, &yn, &yc);
	conv_job j = {.s = s, .threads = threads, .p = conv_p(s), .yn = yn, .yc = yc, .src = dy, .dst = db};
	ss_parallel_for(j.threads, s->oc, ss_grain(s->n * j.p), db_part, &j);
}

void ss_conv_backward(int isa, int threads, const ss_conv_shape *s, int group, int method, const float *x,
                      const float *w, const float *dy, float *dx, float *dw,
                      float *db, float *ws, ptrdiff_t ws_len)
{
	if (method == SS_CONV_WINOGRAD || method == SS_CONV_WINOGRAD6) {
		ss_conv_winograd_backward(method, isa, threads, s, x, w, dy, dx, dw, db, ws);
		return;
	}
	if (method == SS_CONV_S2D) {
		ss_conv_s2d_backward(isa, threads, s, group, x, w, dy, dx, dw, db, ws, ws_len);
		return;
	}
	if (dw && ss_wgrad_supported(isa, s)) {
		/* The weight gradient as one GEMM over the batch, then the
		 * method's input gradient alone. */
		if (db)
			ss_conv_bias_grad(threads, s, dy, db);
		ss_wgrad(threads, s, x, dy, dw, ws, ws_len);
		if (dx == NULL)
			return;
		dw = NULL, db = NULL;
	}
	if (method == SS_CONV_DIRECT) {
		ss_conv_direct_backward(isa, threads, s, x, w, dy, dx, dw, db, ws, ws_len);
		return;
	}
	const ptrdiff_t k = conv_k(s), p = conv_p(s), hw = (ptrdiff_t)s->h * s->w, l = conv_l(s);
	ptrdiff_t xn, xc, yn, yc;
	ss_conv_planes(s, &xn, &xc, &yn, &yc);
	if (db)
		ss_conv_bias_grad(threads, s, dy, db);
	for (int n0 = 0; n0 < s->n; n0 += group) {
		const int g = ss_imin(group, s->n - n0);
		const ptrdiff_t cols = g * p;
		const int chwn = g > 1 && method == SS_CONV_CHWN;
		/* See ss_conv_workspace for the layout. */
		float *col = ws, *dY = g > 1 ? col + k * cols : NULL;
		float *xT = chwn ? dY + s->oc * cols : NULL;
		float *dcol = chwn ? xT + g * l : g > 1 ? dY + s->oc * cols : col + k * cols;
		float *dxT = chwn ? dcol + k * cols : NULL;
		conv_job j = {.s = s, .threads = threads, .g = g, .k = k, .p = p, .hw = hw, .ld = cols,
		              .xn = xn, .xc = xc, .yn = yn, .yc = yc};
		/* With g = 1, row oc of dY is plane (n0, oc) of dy. */
		const float *dYg = dy + n0 * yn;
		ptrdiff_t ldY = yc;
		if (g > 1) {
			j.src = dYg;
			j.dst = dY;
			if (chwn)
				ss_parallel_for(j.threads, s->oc, ss_grain(cols), gather_part, &j);
			else
				ss_parallel_for(j.threads, (ptrdiff_t)g * s->oc, ss_grain(p), gather_img_part, &j);
			dYg = dY;
			ldY = cols;
		}
		if (dw) {
			expand(&j, method, x + n0 * xn, xT, col);
			ss_sgemm(threads, 0, 1, s->oc, (int)k, (int)cols, 1.0f, dYg, (int)ldY, col, (int)cols,
			         n0 == 0 ? 0.0f : 1.0f, dw, (int)k);
		}
		if (dx == NULL)
			continue;
		ss_sgemm(threads, 1, 0, (int)k, (int)cols, s->oc, 1.0f, w, (int)k, dYg, (int)ldY, 0.0f, dcol, (int)cols);
		j.src = dcol;
		if (chwn) {
			j.dst = dxT;
			ss_parallel_for(j.threads, s->c, ss_grain(hw * g), col2im_part, &j);
			j.src = dxT;
			j.dst = dx + n0 * xn;
			ss_parallel_for(j.threads, l, ss_grain(g), to_planes_part, &j);
		} else {
			j.dst = dx + n0 * xn;
			ss_parallel_for(j.threads, (ptrdiff_t)g * s->c, ss_grain(hw), col2im_img_part, &j);
		}
	}
}
