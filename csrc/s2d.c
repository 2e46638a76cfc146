/* Space-to-depth convolution (SS_CONV_S2D): a convolution of stride
 * (sh, sw) rewritten as one of stride 1, which the stride-1 methods run.
 *
 * Pixel (sh*r + a, sw*q + b) of the zero-padded input plane of channel c
 * becomes pixel (r, q) of channel (c*sh + a)*sw + b of the rewritten
 * input (x', C*sh*sw channels, no padding); tap (i, j) of the kernel
 * becomes tap (i/sh, j/sw) of channel (c*sh + i%sh)*sw + j%sw of a
 * ceil(kh/sh) x ceil(kw/sw) kernel (w'), whose taps past the original
 * kernel are zero. Output pixel (oh, ow) of the original reads padded
 * pixels (sh*oh + i, sw*ow + j), which is what output pixel (oh, ow) of
 * the stride-1 convolution of x' and w' reads, so the two outputs are the
 * same plane (OH x OW, the same layout): y is written directly. x' has
 * OH + kh' - 1 rows and OW + kw' - 1 columns: the pixels it holds past
 * the padded input meet only zero taps and are zeros.
 *
 * The weight gradient is the stride-1 one of x' folded back into the
 * original taps (the zero taps' gradients are dropped); the input
 * gradient the stride-1 one (dx', over x's buffer) moved back pixel by
 * pixel, zero for the input pixels that x' leaves out (no output reads
 * them). x' holds the whole batch, so that both layouts address its
 * planes with the shape's own strides: the workspace grows by about
 * the size of x. The stride-1 passes each run the method s2d_method
 * chooses for them; their workspace follows x', w' and dw' in ours. */
#include <string.h>

#include "internal.h"

static int s2d_ceil(int a, int b) { return (a + b - 1) / b; }

/* s2d_shape returns the stride-1 convolution that runs s. */
static ss_conv_shape s2d_shape(const ss_conv_shape *s)
{
	ss_conv_shape t = *s;
	t.c = s->c * s->stride_h * s->stride_w;
	t.kh = s2d_ceil(s->kh, s->stride_h);
	t.kw = s2d_ceil(s->kw, s->stride_w);
	t.h = ss_conv_out_h(s) + t.kh - 1;
	t.w = ss_conv_out_w(s) + t.kw - 1;
	t.pad_h = t.pad_w = 0;
	t.stride_h = t.stride_w = 1;
	t.groups = 1;
	return t;
}

int ss_conv_s2d_supported(const ss_conv_shape *s)
{
	return (s->stride_h > 1 || s->stride_w > 1) && s->groups <= 1;
}

/* s2d_group is the GEMM group of the stride-1 convolution: as many
 * columns as group gives s, in images. */
static int s2d_group(const ss_conv_shape *s, const ss_conv_shape *t, int group)
{
	const ptrdiff_t k = (ptrdiff_t)s->c * s->kh * s->kw, kt = (ptrdiff_t)t->c * t->kh * t->kw;
	const ptrdiff_t g = (ptrdiff_t)group * k / kt;
	return g < 1 ? 1 : g > s->n ? s->n : (int)g;
}

static ptrdiff_t s2d_round16(ptrdiff_t n) { return (n + 15) / 16 * 16; }

/* Floats of x' (or dx') and of w' (and dw'), each rounded up to 16 so
 * that the stride-1 method's workspace keeps the alignment of ours. */
static ptrdiff_t s2d_x_floats(const ss_conv_shape *t) { return s2d_round16((ptrdiff_t)t->n * t->c * t->h * t->w); }
static ptrdiff_t s2d_w_floats(const ss_conv_shape *t) { return s2d_round16((ptrdiff_t)t->oc * t->c * t->kh * t->kw); }

/* s2d_method returns the method of a pass of the stride-1 convolution t:
 * ss_conv_pass_method's, except that at level AVX2 Winograd runs the
 * 3 x 3 kernels over at least 48 channels that AlexNet's conv1 becomes
 * (11 x 11, stride 4, 3 channels: 48 channels of 57 x 57, 96 output
 * channels), where ss_conv_pass_method asks for 64. Counting the FLOPs
 * of its 144 taps, at 16 images on one thread, forward 97 cpu-GFLOP/s
 * against the direct kernels' 72, the weight gradient 92 against 72-74
 * (the direct kernels, the GEMM of wgrad.c). */
static int s2d_method(int isa, const ss_conv_shape *t, int pass)
{
	if (ss_isa(isa) == SS_ISA_AVX2 && ss_conv_winograd_supported(SS_CONV_WINOGRAD, t) && t->c >= 48 && t->oc >= 64)
		return SS_CONV_WINOGRAD;
	return ss_conv_pass_method(isa, t, pass);
}

/* The rewritten input of a batch that ss_s2d_pays accepts stays within
 * 2^24 floats (64 MiB, as wgrad.c's channel-last copy): 20 MiB for 32
 * images of either network. */
#define S2D_X_BUDGET ((ptrdiff_t)1 << 24)

/* ss_s2d_pays reports whether the rewrite beats the other methods on a
 * shape it supports, for one pass (ss_conv_pass_method): at level AVX2,
 * for the first layers of image networks, a few input channels (at most
 * 4) under a kernel at least twice the stride (rewritten, at least
 * 2 x 2) whose rewrite adds at most 35% zero taps: ResNet-18's conv1
 * (7 x 7, stride 2, 64 taps for 49) and AlexNet's (11 x 11, stride 4, 144
 * for 121). At 16 images on one thread, cpu-GFLOP/s counting the original
 * FLOPs (on a shared host, ranges of repeated runs), ResNet-18's conv1
 * runs forward at 62 against 43-48 (image-major GEMMs, batch-innermost
 * GEMMs) and its weight gradient at 57 against 45-50; its input gradient,
 * at about 51 against 53, stays on the GEMMs. AlexNet's conv1 runs
 * forward at 73-80 against 60-62, its weight gradient at 70-81 against
 * 57-66 (wgrad.c's GEMM) and its input gradient, estimated from both
 * gradients together, at about 87 against 62: its rewritten 3 x 3 kernel
 * runs on Winograd (s2d_method), ResNet-18's 4 x 4 on the direct kernels,
 * whose input gradient gains nothing. With many channels the rewrite
 * loses 1.7-5x (ResNet-18's strided 3 x 3 layers, 64-256 channels: 29-37
 * against 49-74 forward; its 1 x 1 downsampling layers, 75% zero taps:
 * 7-13 against 36-61). At level AVX-512 the other methods stay (not
 * measured against it), and so they do for batches whose rewritten input
 * would exceed S2D_X_BUDGET. */
int ss_s2d_pays(int isa, const ss_conv_shape *s, int pass)
{
	if (ss_isa(isa) != SS_ISA_AVX2 || s->c > 4 || s->kh < 2 * s->stride_h || s->kw < 2 * s->stride_w)
		return 0;
	const ss_conv_shape t = s2d_shape(s);
	const ptrdiff_t taps = (ptrdiff_t)s->kh * s->kw, rewritten = (ptrdiff_t)t.kh * t.kw * s->stride_h * s->stride_w;
	if (rewritten * 100 > taps * 135 || s2d_x_floats(&t) > S2D_X_BUDGET)
		return 0;
	return pass != SS_CONV_PASS_DGRAD || s2d_method(isa, &t, pass) == SS_CONV_WINOGRAD;
}

ptrdiff_t ss_conv_s2d_workspace(int isa, int threads, const ss_conv_shape *s, int group, int backward)
{
	const ss_conv_shape t = s2d_shape(s);
	const int g = s2d_group(s, &t, group);
	ptrdiff_t inner;
	if (!backward) {
		inner = ss_conv_workspace(isa, threads, &t, g, s2d_method(isa, &t, SS_CONV_PASS_FORWARD), 0);
	} else {
		const ptrdiff_t a = ss_conv_workspace(isa, threads, &t, g, s2d_method(isa, &t, SS_CONV_PASS_WGRAD), 1);
		const ptrdiff_t b = ss_conv_workspace(isa, threads, &t, g, s2d_method(isa, &t, SS_CONV_PASS_DGRAD), 1);
		inner = a > b ? a : b;
	}
	return s2d_x_floats(&t) + (backward ? 2 : 1) * s2d_w_floats(&t) + inner;
}

typedef struct {
	const ss_conv_shape *s, *t;
	ptrdiff_t xn, xc, tn, tc;  /* plane strides of x (s) and x' (t) */
	const float *src;
	float *dst;
} s2d_job;

/* s2d_cols returns the columns [q0, q1) of x' whose pixels of column
 * phase b lie inside the image (w = q*sw + b - pw in [0, W)). */
static void s2d_cols(const ss_conv_shape *s, const ss_conv_shape *t, int b, int *q0, int *q1)
{
	const int lo = s->pad_w - b, hi = s->w + s->pad_w - b; /* q*sw in [lo, hi) */
	*q0 = lo <= 0 ? 0 : s2d_ceil(lo, s->stride_w);
	*q1 = hi <= 0 ? 0 : ss_imin(t->w, s2d_ceil(hi, s->stride_w));
	if (*q1 < *q0)
		*q1 = *q0;
}

/* Items t = n*C + c: the sh*sw planes of x' that plane (n, c) of x
 * fills. */
static void to_depth_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const s2d_job *j = ctx;
	const ss_conv_shape *s = j->s, *t = j->t;
	const int sh = s->stride_h, sw = s->stride_w;
	for (ptrdiff_t it = lo; it < hi; it++) {
		const ptrdiff_t n = it / s->c, c = it % s->c;
		const float *x = j->src + n * j->xn + c * j->xc;
		for (int a = 0; a < sh; a++)
			for (int b = 0; b < sw; b++) {
				float *d = j->dst + n * j->tn + ((c * sh + a) * sw + b) * j->tc;
				int q0, q1;
				s2d_cols(s, t, b, &q0, &q1);
				for (int r = 0; r < t->h; r++, d += t->w) {
					const int h = r * sh + a - s->pad_h;
					if (h < 0 || h >= s->h || q0 == q1) {
						memset(d, 0, sizeof(float) * (size_t)t->w);
						continue;
					}
					const float *row = x + (ptrdiff_t)h * s->w;
					const int off = b - s->pad_w;
					for (int q = 0; q < q0; q++)
						d[q] = 0.0f;
					for (int q = q0; q < q1; q++)
						d[q] = row[q * sw + off];
					for (int q = q1; q < t->w; q++)
						d[q] = 0.0f;
				}
			}
	}
}

/* Items t = n*C + c: plane (n, c) of dx from its sh*sw planes of dx'. */
static void from_depth_part(void *ctx, ptrdiff_t lo, ptrdiff_t hi, int part)
{
	(void)part;
	const s2d_job *j = ctx;
	const ss_conv_shape *s = j->s, *t = j->t;
	const int sh = s->stride_h, sw = s->stride_w;
	/* Whether x' leaves out input pixels: rows or columns past its last. */
	const int partial = t->h * sh - s->pad_h < s->h || t->w * sw - s->pad_w < s->w;
	for (ptrdiff_t it = lo; it < hi; it++) {
		const ptrdiff_t n = it / s->c, c = it % s->c;
		float *x = j->dst + n * j->xn + c * j->xc;
		if (partial)
			memset(x, 0, sizeof(float) * (size_t)s->h * s->w);
		for (int a = 0; a < sh; a++)
			for (int b = 0; b < sw; b++) {
				const float *d = j->src + n * j->tn + ((c * sh + a) * sw + b) * j->tc;
				int q0, q1;
				s2d_cols(s, t, b, &q0, &q1);
				for (int r = 0; r < t->h; r++, d += t->w) {
					const int h = r * sh + a - s->pad_h;
					if (h < 0 || h >= s->h)
						continue;
					float *row = x + (ptrdiff_t)h * s->w;
					const int off = b - s->pad_w;
					for (int q = q0; q < q1; q++)
						row[q * sw + off] = d[q];
				}
			}
	}
}

static void s2d_planes(int threads, const ss_conv_shape *s, const ss_conv_shape *t, const float *src, float *dst,
                       ss_range_fn fn)
{
	s2d_job j = {.s = s, .t = t, .src = src, .dst = dst};
	ptrdiff_t yn, yc;
	ss_conv_planes(s, &j.xn, &j.xc, &yn, &yc);
	ss_conv_planes(t, &j.tn, &j.tc, &yn, &yc);
	ss_parallel_for(threads, (ptrdiff_t)s->n * s->c, ss_grain((ptrdiff_t)s->h * s->w), fn, &j);
}

/* The index of tap (i, j) of channel c of output channel o in w'. */
static ptrdiff_t s2d_tap(const ss_conv_shape *s, const ss_conv_shape *t, int o, int c, int i, int j)
{
	const int ct = (c * s->stride_h + i % s->stride_h) * s->stride_w + j % s->stride_w;
	return (((ptrdiff_t)o * t->c + ct) * t->kh + i / s->stride_h) * t->kw + j / s->stride_w;
}

/* w' from w (to = 1), or dw from dw' (to = 0). */
static void s2d_weights(const ss_conv_shape *s, const ss_conv_shape *t, const float *src, float *dst, int to)
{
	if (to)
		memset(dst, 0, sizeof(float) * (size_t)t->oc * t->c * t->kh * t->kw);
	const float *w = to ? src : NULL;
	float *dw = to ? NULL : dst;
	ptrdiff_t k = 0;
	for (int o = 0; o < s->oc; o++)
		for (int c = 0; c < s->c; c++)
			for (int i = 0; i < s->kh; i++)
				for (int jj = 0; jj < s->kw; jj++, k++) {
					const ptrdiff_t kt = s2d_tap(s, t, o, c, i, jj);
					if (to)
						dst[kt] = w[k];
					else
						dw[k] = src[kt];
				}
}

void ss_conv_s2d_forward(int isa, int threads, const ss_conv_shape *s, int group, const float *x, const float *w,
                         const float *b, float *y, float *ws, ptrdiff_t ws_len)
{
	const ss_conv_shape t = s2d_shape(s);
	float *xt = ws, *wt = xt + s2d_x_floats(&t), *rest = wt + s2d_w_floats(&t);
	s2d_planes(threads, s, &t, x, xt, to_depth_part);
	s2d_weights(s, &t, w, wt, 1);
	ss_conv_forward(isa, threads, &t, s2d_group(s, &t, group), s2d_method(isa, &t, SS_CONV_PASS_FORWARD),
	                xt, wt, b, y, rest, ws_len - (rest - ws));
}

/* The weight gradient first, which reads x'; then the input gradient,
 * which overwrites x' with dx' (its call gets no input: the stride-1
 * methods read none for the input gradient alone). */
void ss_conv_s2d_backward(int isa, int threads, const ss_conv_shape *s, int group, const float *x, const float *w,
                          const float *dy, float *dx, float *dw, float *db, float *ws, ptrdiff_t ws_len)
{
	const ss_conv_shape t = s2d_shape(s);
	const int g = s2d_group(s, &t, group);
	float *xt = ws, *wt = xt + s2d_x_floats(&t), *dwt = wt + s2d_w_floats(&t), *rest = dwt + s2d_w_floats(&t);
	const ptrdiff_t rest_len = ws_len - (rest - ws);
	s2d_weights(s, &t, w, wt, 1);
	if (dw) {
		s2d_planes(threads, s, &t, x, xt, to_depth_part);
		ss_conv_backward(isa, threads, &t, g, s2d_method(isa, &t, SS_CONV_PASS_WGRAD), xt, wt, dy, NULL,
		                 dwt, db, rest, rest_len);
		s2d_weights(s, &t, dwt, dw, 0);
	} else if (db) {
		ss_conv_bias_grad(threads, s, dy, db);
	}
	if (dx == NULL)
		return;
	ss_conv_backward(isa, threads, &t, g, s2d_method(isa, &t, SS_CONV_PASS_DGRAD), NULL, wt, dy, xt, NULL,
	                 NULL, rest, rest_len);
	s2d_planes(threads, s, &t, xt, dx, from_depth_part);
}
