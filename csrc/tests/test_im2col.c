/* ss_im2col and ss_col2im against loops written from their definitions,
 * with column matrices shared by several images (ldcol > OH*OW), guard
 * words around every buffer, and the adjoint identity
 * <im2col(x), c> = <x, col2im(c)>. */
#include "check.h"
#include "softsync.h"

static const ss_conv_shape shapes[] = {
	/* n  c  h   w   oc kh kw ph pw sh sw */
	{1, 1, 5, 5, 1, 3, 3, 0, 0, 1, 1},
	{1, 3, 7, 6, 1, 3, 2, 1, 0, 2, 1},
	{1, 2, 8, 8, 1, 5, 5, 2, 2, 1, 1},
	{1, 4, 9, 9, 1, 3, 3, 1, 1, 3, 3},
	{1, 1, 3, 3, 1, 3, 3, 1, 1, 1, 1},
	{1, 2, 6, 5, 1, 1, 1, 0, 0, 1, 1},
	{1, 3, 4, 4, 1, 4, 4, 2, 2, 2, 2},
	{1, 1, 28, 28, 1, 5, 5, 0, 0, 1, 1},  /* LeNet conv1 */
	{1, 3, 32, 32, 1, 5, 5, 2, 2, 1, 1},  /* cifar10_full conv1 */
	{1, 2, 5, 9, 1, 2, 4, 1, 3, 2, 3},
};

static int out_h(const ss_conv_shape *s) { return (s->h + 2 * s->pad_h - s->kh) / s->stride_h + 1; }
static int out_w(const ss_conv_shape *s) { return (s->w + 2 * s->pad_w - s->kw) / s->stride_w + 1; }

/* pixel returns the input index read by column entry (r, y, x), or -1 for
 * padding. */
static long pixel(const ss_conv_shape *s, int r, int y, int x)
{
	int c = r / (s->kh * s->kw), i = r / s->kw % s->kh, j = r % s->kw;
	int h = y * s->stride_h - s->pad_h + i, w = x * s->stride_w - s->pad_w + j;
	if (h < 0 || h >= s->h || w < 0 || w >= s->w)
		return -1;
	return ((long)c * s->h + h) * s->w + w;
}

static void test_shape(const ss_conv_shape *s)
{
	const int oh = out_h(s), ow = out_w(s), p = oh * ow;
	const int rows = s->c * s->kh * s->kw;
	const size_t in = (size_t)s->c * (size_t)s->h * (size_t)s->w;
	/* The image occupies block 1 of a 3-image column matrix. */
	const long ld = 3L * p, off = p;
	const size_t cols = (size_t)rows * (size_t)ld;

	float *x = guarded(in), *col = guarded(cols), *c2 = guarded(cols), *dx = guarded(in);
	for (size_t i = 0; i < in; i++)
		x[i] = uniform();
	ss_im2col(s, x, col + off, ld);
	for (int r = 0; r < rows; r++) {
		for (long q = 0; q < ld; q++) {
			float got = col[r * ld + q];
			if (q < off || q >= off + p) {
				CHECK(got == GUARD_VALUE, "im2col wrote column %ld of row %d outside its block", q, r);
				continue;
			}
			long k = pixel(s, r, (int)((q - off) / ow), (int)((q - off) % ow));
			float want = k < 0 ? 0.0f : x[k];
			CHECK(got == want, "im2col row %d col %ld: %g, want %g", r, q - off, got, want);
		}
	}
	check_guards(col, cols, "col");
	check_guards(x, in, "x");

	/* col2im of a random matrix against a scatter loop, and the adjoint
	 * identity with the x above. */
	for (size_t i = 0; i < cols; i++)
		c2[i] = uniform();
	for (size_t i = 0; i < in; i++)
		dx[i] = NAN; /* must be overwritten */
	ss_col2im(s, c2 + off, ld, dx);
	double *want = zeros(in);
	double lhs = 0.0, rhs = 0.0;
	for (int r = 0; r < rows; r++)
		for (int q = 0; q < p; q++) {
			long k = pixel(s, r, q / ow, q % ow);
			double v = c2[r * ld + off + q];
			if (k >= 0) {
				want[k] += v;
				lhs += v * x[k];
			}
		}
	for (size_t i = 0; i < in; i++) {
		CHECK(fabs(dx[i] - want[i]) <= 1e-5 * (1.0 + fabs(want[i])),
		      "col2im x[%zu] = %g, want %g", i, dx[i], want[i]);
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

int main(void)
{
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
		test_shape(&shapes[i]);
	return report("im2col");
}
