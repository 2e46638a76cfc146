/* Each call owns its thread count: the pool only grows, a kernel splits
 * its work over the threads it is given whatever another caller asked for
 * (ss_parallel_max_parts), results are the same bits for every count
 * (OpenBLAS's GEMMs: the same up to rounding), also while callers with
 * different counts run at the same time, and ss_sgemm sets OpenBLAS's
 * count to its own. The OpenBLAS parts are left out when it cannot be
 * loaded. */
#include <pthread.h>

#include "check.h"
#include "softsync.h"

static int isa, blas;

/* A convolution (stride 1, so that levels AVX2 and AVX-512 run their
 * direct kernels), a pooling and an LRN of one set of inputs. */
static const ss_conv_shape conv = {6, 5, 12, 19, 9, 5, 5, 2, 2, 1, 1, SS_NCHW, 1};
static const ss_pool_shape pool = {SS_POOL_MAX, 3, 5, 13, 11, 3, 3, 1, 1, 2, 2};
static const ss_lrn_shape lrn = {3, 4, 9, 11, 5, 0.9f, 0.75f, 1.0f, SS_LRN_WITHIN};

enum { CONV_IN = 6 * 5 * 12 * 19, CONV_W = 9 * 5 * 5 * 5, CONV_OUT = 6 * 9 * 12 * 19 };
enum { POOL_IN = 3 * 5 * 13 * 11, POOL_OUT = 3 * 5 * 7 * 6, LRN_N = 3 * 4 * 9 * 11 };

static float x[CONV_IN], w[CONV_W], b[9], dy[CONV_OUT];

/* outputs holds everything one run computes. */
typedef struct {
	float y[CONV_OUT], dx[CONV_IN], dw[CONV_W], db[9];
	float py[POOL_OUT], pdx[POOL_IN];
	int mask[POOL_OUT];
	float ly[LRN_N], lscale[LRN_N], ldx[LRN_N];
	float ry[CONV_IN];
} outputs;

/* run computes every output over threads threads and returns the most
 * threads a job was split over. */
static int run(int threads, int method, outputs *o)
{
	ss_parallel_max_parts();
	const int g = ss_conv_group(&conv, 1 << 30);
	ptrdiff_t n = ss_conv_workspace(isa, threads, &conv, g, method, 1);
	const ptrdiff_t nf = ss_conv_workspace(isa, threads, &conv, g, method, 0);
	const ptrdiff_t nl = ss_lrn_workspace(threads, &lrn);
	n = n > nf ? n : nf;
	n = n > nl ? n : nl;
	float *ws = guarded((size_t)n);
	ss_conv_forward(isa, threads, &conv, g, method, x, w, b, o->y, ws, nf);
	ss_conv_backward(isa, threads, &conv, g, method, x, w, dy, o->dx, o->dw, o->db, ws, n);
	ss_pool_forward(isa, threads, &pool, x, o->py, o->mask);
	ss_pool_backward(isa, threads, &pool, dy, o->mask, o->pdx);
	ss_lrn_forward(isa, threads, &lrn, x, o->ly, o->lscale, ws, nl);
	ss_lrn_backward(isa, threads, &lrn, x, o->ly, o->lscale, dy, o->ldx, ws, nl);
	ss_relu_forward(isa, threads, CONV_IN, dy, o->ry);
	check_guards(ws, (size_t)n, "workspace");
	release(ws);
	return ss_parallel_max_parts();
}

typedef struct {
	int threads, method, reps;
	outputs *out;
	int parts;
} caller;

static void *call(void *arg)
{
	caller *c = arg;
	for (int i = 0; i < c->reps; i++)
		c->parts = run(c->threads, c->method, c->out);
	return NULL;
}

static int method_now;

/* close_to checks that got[i] is want[i] up to the rounding of a GEMM. */
static void close_to(const float *got, const float *want, size_t n, const char *name, const char *what)
{
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += !(fabs(got[i] - want[i]) <= 1e-4 * (1 + fabs(want[i])));
	CHECK(bad == 0, "isa %d method %d: %s of %s: %zu values off one thread's", isa, method_now, name, what, bad);
}

/* same checks each output of got against want: bit for bit, except the
 * convolutions of the GEMM methods, whose bits OpenBLAS's thread count
 * may change (it splits its GEMMs differently). */
static void same(const outputs *got, const outputs *want, const char *what)
{
#define SAME(f) CHECK(memcmp(got->f, want->f, sizeof got->f) == 0, \
	"isa %d method %d: %s of %s differs from one thread's", isa, method_now, #f, what)
	if (method_now == SS_CONV_DIRECT) {
		SAME(y);
		SAME(dx);
		SAME(dw);
		SAME(db);
	} else {
		close_to(got->y, want->y, CONV_OUT, "y", what);
		close_to(got->dx, want->dx, CONV_IN, "dx", what);
		close_to(got->dw, want->dw, CONV_W, "dw", what);
		SAME(db); /* ours */
	}
	SAME(py);
	SAME(pdx);
	SAME(mask);
	SAME(ly);
	SAME(lscale);
	SAME(ldx);
	SAME(ry);
#undef SAME
}

static void test_blas(void)
{
	/* OpenBLAS's count follows the calls' counts. A single-threaded
	 * OpenBLAS reports 1 whatever is set. */
	static float a[64 * 64], c[64 * 64];
	ss_sgemm(2, 0, 0, 64, 64, 64, 1.0f, a, 64, a, 64, 0.0f, c, 64);
	if (ss_blas_threads() == 1) {
		fprintf(stderr, "OpenBLAS runs one thread: its count is not checked\n");
		return;
	}
	CHECK(ss_blas_threads() == 2, "after a GEMM on 2 threads OpenBLAS runs %d", ss_blas_threads());
	ss_sgemm(1, 0, 0, 64, 64, 64, 1.0f, a, 64, a, 64, 0.0f, c, 64);
	CHECK(ss_blas_threads() == 1, "after a GEMM on 1 thread OpenBLAS runs %d", ss_blas_threads());
	ss_sgemm(2, 0, 0, 64, 64, 64, 1.0f, a, 64, a, 64, 0.0f, c, 64);
	CHECK(ss_blas_threads() == 2, "after a GEMM on 2 threads again OpenBLAS runs %d", ss_blas_threads());
}

int main(void)
{
	char err[512];
	blas = ss_blas_load("libopenblas.so.0", err, sizeof err) == 0;
	if (!blas)
		fprintf(stderr, "OpenBLAS not loaded (%s): GEMM methods and counts not checked\n", err);
	for (int i = 0; i < CONV_IN; i++)
		x[i] = uniform();
	for (int i = 0; i < CONV_W; i++)
		w[i] = uniform();
	for (int i = 0; i < 9; i++)
		b[i] = uniform();
	for (int i = 0; i < CONV_OUT; i++)
		dy[i] = uniform();

	/* The pool only grows. */
	CHECK(ss_threads_init(3) == 0 && ss_threads() == 3, "ss_threads_init(3): pool of %d", ss_threads());
	CHECK(ss_threads_init(1) == 0 && ss_threads() == 3, "ss_threads_init(1) shrank the pool to %d", ss_threads());
	ss_set_min_parallel_floats(1);

	outputs *alone = malloc(sizeof *alone), *got = malloc(sizeof *got), *other = malloc(sizeof *other);
	for (isa = 0; isa < SS_ISA_LEVELS; isa++)
		for (int method = SS_CONV_CHWN; method <= SS_CONV_DIRECT; method++) {
			if (method == SS_CONV_DIRECT ? !ss_conv_direct_supported(isa, &conv) : !blas)
				continue;
			method_now = method;
			memset(alone, 0, sizeof *alone);
			CHECK(run(1, method, alone) == 1, "isa %d method %d: one thread split its jobs", isa, method);
			/* Each count is used whatever the pool's size or the
			 * count of the call before; 0 means serial. */
			for (int t = 0; t <= 4; t++) {
				const int want = t < 1 ? 1 : t > 3 ? 3 : t;
				memset(got, 0, sizeof *got);
				const int parts = run(t, method, got);
				CHECK(parts == want, "isa %d method %d: %d threads split jobs over %d, want %d", isa, method, t,
				      parts, want);
				same(got, alone, "a run on more threads");
			}
			/* Two callers with different counts at the same time: the
			 * same bits (each may run serially while the other holds
			 * the pool). */
			memset(got, 0, sizeof *got);
			memset(other, 0, sizeof *other);
			caller c3 = {.threads = 3, .method = method, .reps = 4, .out = got};
			caller c1 = {.threads = 1, .method = method, .reps = 4, .out = other};
			pthread_t t3, t1;
			pthread_create(&t3, NULL, call, &c3);
			pthread_create(&t1, NULL, call, &c1);
			pthread_join(t3, NULL);
			pthread_join(t1, NULL);
			CHECK(c1.parts == 1, "isa %d method %d: a one-thread caller split a job over %d", isa, method,
			      c1.parts);
			CHECK(c3.parts <= 3, "isa %d method %d: a three-thread caller split a job over %d", isa, method,
			      c3.parts);
			same(got, alone, "a concurrent three-thread caller");
			same(other, alone, "a concurrent one-thread caller");
		}
	if (blas)
		test_blas();
	free(alone), free(got), free(other);
	return report("threads");
}
