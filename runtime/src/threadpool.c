/* The kernel thread pool: one job at a time, chunks claimed with an atomic counter. */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "internal.h"

typedef struct job {
  vnc_range_fn fn;
  void *ctx;
  int64_t n, chunk, nchunks;
  atomic_llong next;
} job;

/* Workers find a job without the lock: the caller publishes `current` and bumps
 * `generation`; an idle worker polls the generation for up to SPIN_NS (back-to-back small
 * kernels then cost no futex wake-up, the role of OpenMP's spin-wait) and only then sleeps
 * on the condition variable, counted in `sleepers` so the caller signals only when needed.
 * A worker enters a job by incrementing `active` and re-reading `current`; the caller clears
 * `current` and then waits for `active` to drain (both sequentially consistent, so either
 * the worker sees NULL or the caller sees it active: the job, on the caller's stack, is
 * never touched after the caller returns). */
#define SPIN_NS 30000

static int pool_size = 1;            /* threads including the caller */
static pthread_mutex_t owner_lock = PTHREAD_MUTEX_INITIALIZER; /* held by the running job's caller */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;     /* guards sleeping only */
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER;
static _Atomic(job *) current = NULL;
static atomic_uint_fast64_t generation = 0;
static atomic_int active = 0;        /* workers inside a job */
static atomic_int sleepers = 0;

static void cpu_relax(void) {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

static void run_chunks(job *j) {
  for (;;) {
    int64_t c = atomic_fetch_add(&j->next, 1);
    if (c >= j->nchunks) return;
    int64_t b = c * j->chunk, e = b + j->chunk;
    if (e > j->n) e = j->n;
    j->fn(j->ctx, b, e);
  }
}

static void *worker_main(void *arg) {
  (void)arg;
  uint_fast64_t seen = atomic_load(&generation);
  for (;;) {
    const uint64_t t0 = vnc_now_ns();
    unsigned polls = 0;
    while (atomic_load(&generation) == seen && (++polls & 63 || vnc_now_ns() - t0 < SPIN_NS)) cpu_relax();
    if (atomic_load(&generation) == seen) {
      pthread_mutex_lock(&lock);
      atomic_fetch_add(&sleepers, 1);
      while (atomic_load(&generation) == seen) pthread_cond_wait(&work_cv, &lock);
      atomic_fetch_sub(&sleepers, 1);
      pthread_mutex_unlock(&lock);
    }
    seen = atomic_load(&generation);
    atomic_fetch_add(&active, 1);
    job *j = atomic_load(&current);
    if (j) run_chunks(j);
    atomic_fetch_sub(&active, 1);
  }
  return NULL;
}

void vnc_threadpool_init(int nthreads) {
  pool_size = nthreads < 1 ? 1 : nthreads;
  for (int i = 1; i < pool_size; i++) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, worker_main, NULL) != 0) {
      pool_size = i; /* run with the threads we got */
      pthread_attr_destroy(&attr);
      break;
    }
    pthread_attr_destroy(&attr);
  }
}

void vnc_parallel_for(int64_t n, int64_t grain, vnc_range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t max_chunks = (n + grain - 1) / grain;
  if (pool_size <= 1 || max_chunks <= 1 || pthread_mutex_trylock(&owner_lock) != 0) {
    fn(ctx, 0, n);
    return;
  }
  int64_t nchunks = max_chunks < (int64_t)pool_size * 4 ? max_chunks : (int64_t)pool_size * 4;
  job j;
  j.fn = fn;
  j.ctx = ctx;
  j.n = n;
  j.chunk = (n + nchunks - 1) / nchunks;
  j.nchunks = (n + j.chunk - 1) / j.chunk;
  atomic_init(&j.next, 0);
  atomic_store(&current, &j);
  atomic_fetch_add(&generation, 1);
  if (atomic_load(&sleepers) > 0) {
    pthread_mutex_lock(&lock);
    pthread_cond_broadcast(&work_cv);
    pthread_mutex_unlock(&lock);
  }
  run_chunks(&j);
  atomic_store(&current, NULL); /* no new worker enters; wait for those inside */
  for (unsigned polls = 1; atomic_load(&active) > 0; polls++) {
    if (polls & 63) cpu_relax();
    else sched_yield(); /* a worker inside may be descheduled */
  }
  pthread_mutex_unlock(&owner_lock);
}
