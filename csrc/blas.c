/* Run-time loading of OpenBLAS (dlopen), so that OPENBLAS_CORETYPE can be
 * chosen before OpenBLAS reads it, and the GEMM entry points. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "softsync.h"

/* CBLAS enumerations (cblas.h), fixed by the CBLAS standard. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

/* blasint is int in the LP64 OpenBLAS that libopenblas.so.0 provides. */
typedef void (*sgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k,
                         float alpha, const float *a, int lda, const float *b, int ldb,
                         float beta, float *c, int ldc);
typedef char *(*str_fn)(void);
typedef void (*set_int_fn)(int);
typedef int (*get_int_fn)(void);

static struct {
	void *handle;
	char path[4096];
	sgemm_fn sgemm;
	str_fn config, corename;
	set_int_fn set_threads;
	get_int_fn get_threads;
} blas;

/* sym resolves name into *out through a union-free cast that POSIX
 * guarantees for dlsym results. */
static int blas_sym(const char *name, void *out, size_t size, char *err, size_t errlen)
{
	void *p = dlsym(blas.handle, name);
	if (p == NULL) {
		snprintf(err, errlen, "%s: missing symbol %s", blas.path, name);
		return -1;
	}
	memcpy(out, &p, size);
	return 0;
}

int ss_blas_load(const char *path, char *err, size_t errlen)
{
	if (blas.sgemm != NULL)
		return 0;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	blas.handle = h;
	snprintf(blas.path, sizeof blas.path, "%s", path);
	sgemm_fn sg;
	if (blas_sym("cblas_sgemm", &sg, sizeof sg, err, errlen) ||
	    blas_sym("openblas_get_config", &blas.config, sizeof blas.config, err, errlen) ||
	    blas_sym("openblas_get_corename", &blas.corename, sizeof blas.corename, err, errlen) ||
	    blas_sym("openblas_set_num_threads", &blas.set_threads, sizeof blas.set_threads, err, errlen) ||
	    blas_sym("openblas_get_num_threads", &blas.get_threads, sizeof blas.get_threads, err, errlen)) {
		dlclose(h);
		memset(&blas, 0, sizeof blas);
		return -1;
	}
	blas.sgemm = sg;
	/* Record the file the loader actually opened. */
	Dl_info di;
	void *addr;
	memcpy(&addr, &blas.config, sizeof addr);
	if (dladdr(addr, &di) != 0 && di.dli_fname != NULL)
		snprintf(blas.path, sizeof blas.path, "%s", di.dli_fname);
	return 0;
}

int ss_blas_loaded(void) { return blas.sgemm != NULL; }
const char *ss_blas_path(void) { return blas.path; }
const char *ss_blas_config(void) { return blas.config ? blas.config() : ""; }
const char *ss_blas_corename(void) { return blas.corename ? blas.corename() : ""; }

/* OpenBLAS's thread count as last set here (0: never), read without the
 * lock (one atomic load per GEMM) and written under it, so that a change
 * calls openblas_set_num_threads once, never concurrently with another. */
static int blas_threads_set;
static pthread_mutex_t blas_threads_lock = PTHREAD_MUTEX_INITIALIZER;

void ss_blas_set_threads(int n)
{
	if (n < 1)
		n = 1;
	if (__atomic_load_n(&blas_threads_set, __ATOMIC_ACQUIRE) == n || blas.set_threads == NULL)
		return;
	pthread_mutex_lock(&blas_threads_lock);
	if (blas_threads_set != n) {
		blas.set_threads(n);
		__atomic_store_n(&blas_threads_set, n, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&blas_threads_lock);
}

int ss_blas_threads(void) { return blas.get_threads ? blas.get_threads() : 0; }

void ss_sgemm(int threads, int trans_a, int trans_b, int m, int n, int k, float alpha,
              const float *a, int lda, const float *b, int ldb,
              float beta, float *c, int ldc)
{
	ss_blas_set_threads(threads);
	blas.sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
	           trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, m, n, k, alpha, a, lda, b, ldb,
	           beta, c, ldc);
}

double ss_sgemm_loop(int threads, int m, int n, int k, const float *a, const float *b, float *c, int reps)
{
	ss_blas_set_threads(threads);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < reps; i++)
		blas.sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, m, n, k, 1.0f, a, k,
		           b, n, 0.0f, c, n);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}
