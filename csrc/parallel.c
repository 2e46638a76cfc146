/* A small fork-join thread pool for the non-GEMM kernels: persistent
 * POSIX threads that sleep on a condition variable between jobs, so that
 * while idle they leave the cores to OpenBLAS's threads and to Go.
 *
 * The pool is process-wide and only grows (ss_threads_init); how many of
 * its threads a job uses is the caller's: every kernel passes the thread
 * count of the engine that called it to ss_parallel_for, so that engines
 * with different counts share the pool without changing each other's. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>

#include "internal.h"

static struct {
	pthread_mutex_t lock;    /* guards every field below */
	pthread_cond_t wake;     /* a new job (generation) is posted */
	pthread_cond_t done;     /* the last worker of a job finished */
	pthread_mutex_t submit;  /* held by the one caller whose job runs */
	int started;             /* worker threads started */
	unsigned long gen;       /* job generation */
	int pending;             /* workers of the current job still running */
	int parts;               /* ranges of the current job */
	ss_range_fn fn;
	void *ctx;
	ptrdiff_t n;
} pool = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.wake = PTHREAD_COND_INITIALIZER,
	.done = PTHREAD_COND_INITIALIZER,
	.submit = PTHREAD_MUTEX_INITIALIZER,
};

/* The most parts of the jobs the calling thread ran since the last
 * ss_parallel_max_parts (a test hook; one store per job). */
static __thread int max_parts_seen;

static void run_part(ss_range_fn fn, void *ctx, ptrdiff_t n, int part, int parts)
{
	ptrdiff_t lo = n * part / parts, hi = n * (part + 1) / parts;
	if (lo < hi)
		fn(ctx, lo, hi, part);
}

static void *worker(void *arg)
{
	const int id = (int)(ptrdiff_t)arg; /* 1 .. started; the caller is part 0 */
	/* Starting from generation 0 is safe: every job posted before this
	 * thread existed had fewer parts than id, so it is skipped. */
	unsigned long seen = 0;
	pthread_mutex_lock(&pool.lock);
	for (;;) {
		while (pool.gen == seen)
			pthread_cond_wait(&pool.wake, &pool.lock);
		seen = pool.gen;
		if (id >= pool.parts)
			continue; /* not part of this job */
		ss_range_fn fn = pool.fn;
		void *ctx = pool.ctx;
		ptrdiff_t n = pool.n;
		int parts = pool.parts;
		pthread_mutex_unlock(&pool.lock);
		run_part(fn, ctx, n, id, parts);
		pthread_mutex_lock(&pool.lock);
		if (--pool.pending == 0)
			pthread_cond_signal(&pool.done);
	}
	return NULL;
}

int ss_threads_init(int n)
{
	if (n < 1)
		n = 1;
	if (n > SS_MAX_THREADS)
		n = SS_MAX_THREADS;
	pthread_mutex_lock(&pool.submit); /* no job runs while growing */
	pthread_mutex_lock(&pool.lock);
	int rc = 0;
	while (pool.started < n - 1) {
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&t, &attr, worker, (void *)(ptrdiff_t)(pool.started + 1));
		pthread_attr_destroy(&attr);
		if (rc != 0)
			break;
		pool.started++;
	}
	pthread_mutex_unlock(&pool.lock);
	pthread_mutex_unlock(&pool.submit);
	return rc == 0 ? 0 : -1;
}

/* Work below this many floats per range is not worth a thread wake-up. */
static ptrdiff_t min_floats = 4096;

void ss_set_min_parallel_floats(ptrdiff_t floats)
{
	pthread_mutex_lock(&pool.lock);
	min_floats = floats < 1 ? 1 : floats;
	pthread_mutex_unlock(&pool.lock);
}

ptrdiff_t ss_grain(ptrdiff_t item_floats)
{
	pthread_mutex_lock(&pool.lock);
	ptrdiff_t m = min_floats;
	pthread_mutex_unlock(&pool.lock);
	if (item_floats < 1)
		item_floats = 1;
	return item_floats >= m ? 1 : m / item_floats;
}

int ss_threads(void)
{
	pthread_mutex_lock(&pool.lock);
	int n = pool.started + 1;
	pthread_mutex_unlock(&pool.lock);
	return n;
}

int ss_parallel_max_parts(void)
{
	int n = max_parts_seen;
	max_parts_seen = 0;
	return n;
}

/* serial runs a whole job on the caller. */
static void serial(ptrdiff_t n, ss_range_fn fn, void *ctx)
{
	if (max_parts_seen < 1)
		max_parts_seen = 1;
	fn(ctx, 0, n, 0);
}

void ss_parallel_for(int threads, ptrdiff_t n, ptrdiff_t grain, ss_range_fn fn, void *ctx)
{
	if (n <= 0)
		return;
	if (grain < 1)
		grain = 1;
	/* Too little work, a serial caller, or another caller's job in
	 * progress: run here, serially. */
	if (threads <= 1 || n < 2 * grain || pthread_mutex_trylock(&pool.submit) != 0) {
		serial(n, fn, ctx);
		return;
	}
	pthread_mutex_lock(&pool.lock);
	int parts = pool.started + 1;
	if (threads < parts)
		parts = threads;
	if (n / grain < parts)
		parts = (int)(n / grain);
	if (parts <= 1) {
		pthread_mutex_unlock(&pool.lock);
		pthread_mutex_unlock(&pool.submit);
		serial(n, fn, ctx);
		return;
	}
	if (max_parts_seen < parts)
		max_parts_seen = parts;
	pool.fn = fn;
	pool.ctx = ctx;
	pool.n = n;
	pool.parts = parts;
	pool.pending = parts - 1;
	pool.gen++;
	pthread_cond_broadcast(&pool.wake);
	pthread_mutex_unlock(&pool.lock);

	run_part(fn, ctx, n, 0, parts);

	pthread_mutex_lock(&pool.lock);
	while (pool.pending > 0)
		pthread_cond_wait(&pool.done, &pool.lock);
	pthread_mutex_unlock(&pool.lock);
	pthread_mutex_unlock(&pool.submit);
}
