/* The kernel thread pool: one job at a time, chunks claimed with an atomic counter. */
#include <stdatomic.h>
#include <stdlib.h>
#include "internal.h"

typedef struct job {
  vnc_range_fn fn;
  void *ctx;
  int64_t n, chunk, nchunks;
  atomic_llong next;
} job;

static int pool_size = 1;            /* threads including the caller */
static pthread_mutex_t owner_lock = PTHREAD_MUTEX_INITIALIZER; /* held by the running job's caller */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static job *current = NULL;
static uint64_t generation = 0;
static int active = 0;               /* workers inside `current` */

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
  uint64_t seen = 0;
  pthread_mutex_lock(&lock);
  for (;;) {
    while (generation == seen || current == NULL) {
      seen = generation;
      pthread_cond_wait(&work_cv, &lock);
    }
    seen = generation;
    job *j = current;
    active++;
    pthread_mutex_unlock(&lock);
    run_chunks(j);
    pthread_mutex_lock(&lock);
    if (--active == 0) pthread_cond_signal(&idle_cv);
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
  pthread_mutex_lock(&lock);
  current = &j;
  generation++;
  pthread_cond_broadcast(&work_cv);
  pthread_mutex_unlock(&lock);
  run_chunks(&j);
  pthread_mutex_lock(&lock);
  current = NULL; /* no new worker joins; wait for those inside */
  while (active > 0) pthread_cond_wait(&idle_cv, &lock);
  pthread_mutex_unlock(&lock);
  pthread_mutex_unlock(&owner_lock);
}
