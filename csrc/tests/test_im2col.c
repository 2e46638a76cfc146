/* ss_im2col and ss_col2im against loops written from their definitions,
 * for groups of images stored batch innermost, with guard words around
 * every buffer, col2im split over channel ranges, and the adjoint identity
 * <im2col(x), c> = <x, col2im(c)>. */
#include "check.h"
#include "softsync.h"

static const ss_conv_shape shapes[] = {
	/* n  c  h   w   oc kh kw ph pw sh sw layout */
	{1, 1, 5, 5, 1, 3, 3, 0, 0, 1, 1, SS_NCHW, 1},
	{1, 3, 7, 6, 1, 3, 2, 1, 0, 2, 1, SS_NCHW, 1},
	{1, 2, 8, 8, 1, 5, 5, 2, 2, 1, 1, SS_NCHW, 1},
	{1, 4, 9, 9, 1, 3, 3, 1, 1, 3, 3, SS_NCHW, 1},
	{1, 1, 3, 3, 1, 3, 3, 1, 1, 1, 1, SS_NCHW, 1},
	{1, 2, 6, 5, 1, 1, 1, 0, 0, 1, 1, SS_NCHW, 1},
	{1, 3, 4, 4, 1, 4, 4, 2, 2, 2, 2, SS_NCHW, 1},
	{1, 1, 28, 28, 1, 5, 5, 0, 0, 1, 1, SS_NCHW, 1},  /* LeNet conv1 */
	{1, 3, 32, 32, 1, 5, 5, 2, 2, 1, 1, SS_NCHW, 1},  /* cifar10_full conv1 */
	{1, 2, 5, 9, 1, 2, 4, 1, 3, 2, 3, SS_NCHW, 1},
};

static int out_h(const ss_conv_shape *s) { return (s->h + 2 * s->pad_h - s->kh) / s->stride_h + 1; }
static int out_w(const ss_conv_shape *s) { return (s->w + 2 * s->pad_w - s->kw) / s->stride_w + 1; }

/* pixel returns the CHWN index of image n read by column row r at output
 * pixel (y, x), or -1 for padding. */
static long pixel(const ss_conv_shape *s, int g, int r, int y, int x, int n)
{
	int c = r / (s->kh * s->kw), i = r / s->kw % s->kh, j = r % s->kw;
	int h = y * s->stride_h - s->pad_h + i, w = x * s->stride_w - s->pad_w + j;
	if (h < 0 || h >= s->h || w < 0 || w >= s->w)
		return -1;
	return (((long)c * s->h + h) * s->w + w) * g + n;
}

static void test_shape(const ss_conv_shape *s, int g)
{
	const int oh = out_h(s), ow = out_w(s), p = oh * ow;
	const int rows = s->c * s->kh * s->kw;
	const size_t in = (size_t)s->c * (size_t)s->h * (size_t)s->w * (size_t)g;
	const size_t cols = (size_t)rows * (size_t)p * (size_t)g;

	float *x = guarded(in), *col = guarded(cols), *c2 = guarded(cols), *dx = guarded(in);
	for (size_t i = 0; i < in; i++)
		x[i] = uniform();
	/* Two row ranges, as the threads of a convolution would. */
	ss_im2col(s, g, x, (ptrdiff_t)s->h * s->w * g, col, (ptrdiff_t)p * g, 0, rows / 2);
	ss_im2col(s, g, x, (ptrdiff_t)s->h * s->w * g, col, (ptrdiff_t)p * g, rows / 2, rows);
	for (int r = 0; r < rows; r++)
		for (int q = 0; q < p; q++)
			for (int n = 0; n < g; n++) {
				long k = pixel(s, g, r, q / ow, q % ow, n);
				float want = k < 0 ? 0.0f : x[k];
				float got = col[((size_t)r * p + q) * g + n];
				CHECK(got == want, "g=%d im2col row %d pixel %d image %d: %g, want %g", g, r, q, n, got, want);
			}
	check_guards(col, cols, "col");
	check_guards(x, in, "x");

	for (size_t i = 0; i < cols; i++)
		c2[i] = uniform();
	for (size_t i = 0; i < in; i++)
		dx[i] = NAN; /* must be overwritten */
	ss_col2im(s, g, c2, (ptrdiff_t)p * g, dx, (ptrdiff_t)s->h * s->w * g, 0, s->c / 2);
	ss_col2im(s, g, c2, (ptrdiff_t)p * g, dx, (ptrdiff_t)s->h * s->w * g, s->c / 2, s->c);
	double *want = zeros(in);
	double lhs = 0.0, rhs = 0.0;
	for (int r = 0; r < rows; r++)
		for (int q = 0; q < p; q++)
			for (int n = 0; n < g; n++) {
				long k = pixel(s, g, r, q / ow, q % ow, n);
				double v = c2[((size_t)r * p + q) * g + n];
				if (k >= 0) {
					want[k] += v;
					lhs += v * x[k];
				}
			}
	for (size_t i = 0; i < in; i++) {
		CHECK(fabs(dx[i] - want[i]) <= 1e-5 * (1.0 + fabs(want[i])),
		      "g=%d col2im x[%zu] = %g, want %g", g, i, dx[i], want[i]);
		rhs += (double)dx[i] * x[i];
	}
	CHECK(fabs(lhs - rhs) <= 1e-4 * (1.0 + fabs(lhs)), "adjoint: %g != %g", lhs, rhs);
	check_guards(dx, in, "dx");
	check_guards(c2, cols, "c2");
	free(want);
	release(x);
	release(col);
	release(c2);
	release(dx);
}

/* test_image_major checks one image written into block 1 of a matrix
 * shared by three images side by side (ld = 3*P), as the image-major
 * layout of a convolution does; the other blocks must stay untouched. */
static void test_image_major(const ss_conv_shape *s)
{
	const int oh = out_h(s), ow = out_w(s), p = oh * ow;
	const int rows = s->c * s->kh * s->kw;
	const size_t in = (size_t)s->c * (size_t)s->h * (size_t)s->w;
	const ptrdiff_t ld = 3 * (ptrdiff_t)p;
	const size_t cols = (size_t)rows * (size_t)ld;
	float *x = guarded(in), *col = guarded(cols), *dx = guarded(in);
	for (size_t i = 0; i < in; i++)
		x[i] = uniform();
	ss_im2col(s, 1, x, (ptrdiff_t)s->h * s->w, col + p, ld, 0, rows);
	for (int r = 0; r < rows; r++)
		for (ptrdiff_t q = 0; q < ld; q++) {
			float got = col[r * ld + q];
			if (q < p || q >= 2 * p) {
				CHECK(got == GUARD_VALUE, "image-major im2col wrote row %d column %td outside its block", r, q);
				continue;
			}
			long k = pixel(s, 1, r, (int)(q - p) / ow, (int)(q - p) % ow, 0);
			CHECK(got == (k < 0 ? 0.0f : x[k]), "image-major im2col row %d pixel %td", r, q - p);
		}
	/* col2im of that block must give the adjoint: <col, col> = <x, col2im(col)>. */
	ss_col2im(s, 1, col + p, ld, dx, (ptrdiff_t)s->h * s->w, 0, s->c);
	double lhs = 0.0, rhs = 0.0;
	for (int r = 0; r < rows; r++)
		for (int q = 0; q < p; q++)
			lhs += (double)col[r * ld + p + q] * col[r * ld + p + q];
	for (size_t i = 0; i < in; i++)
		rhs += (double)x[i] * dx[i];
	CHECK(fabs(lhs - rhs) <= 1e-4 * (1.0 + fabs(lhs)), "image-major adjoint: %g != %g", lhs, rhs);
	check_guards(col, cols, "col"), check_guards(dx, in, "dx");
	release(x), release(col), release(dx);
}

int main(void)
{
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
		test_image_major(&shapes[i]);
	for (int g = 1; g <= 3; g++)
		for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
			test_shape(&shapes[i], g);
	return report("im2col");
}
