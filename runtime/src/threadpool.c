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
 * While polling it calls sched_yield every YIELD_POLLS polls: on a core shared with another
 * busy process the poller gives its time slice away instead of burning it, and a poller that
 * finds itself descheduled for long (a gap over SPIN_NS between polls) goes to sleep at once.
 * A worker enters a job by incrementing `active` and re-reading `current`; the caller clears
 * `current` and then waits for `active` to drain (both sequentially consistent, so either
 * the worker sees NULL or the caller sees it active: the job, on the caller's stack, is
 * never touched after the caller returns). Workers numbered at or above the pool size
 * (after vnc_set_num_threads lowered it) sleep until it grows again. */
#define SPIN_NS 30000
#define YIELD_POLLS 64

static atomic_int pool_size = 1;     /* threads including the caller */
static int spawned = 0;              /* worker threads started (guarded by `lock`) */
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
  const int id = (int)(intptr_t)arg; /* 1 .. spawned */
  uint_fast64_t seen = atomic_load(&generation);
  for (;;) {
    uint64_t last = vnc_now_ns();
    const uint64_t t0 = last;
    unsigned polls = 0;
    while (atomic_load(&generation) == seen) {
      if (++polls % YIELD_POLLS) {
        cpu_relax();
        continue;
      }
      const uint64_t now = vnc_now_ns();
      if (now - t0 >= SPIN_NS || now - last >= SPIN_NS) break; /* spun long enough, or descheduled */
      last = now;
      sched_yield();
    }
    if (atomic_load(&generation) == seen || id >= atomic_load(&pool_size)) {
      pthread_mutex_lock(&lock);
      atomic_fetch_add(&sleepers, 1);
      while (atomic_load(&generation) == seen || id >= atomic_load(&pool_size)) {
        seen = atomic_load(&generation);
        pthread_cond_wait(&work_cv, &lock);
      }
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

/* Starts workers up to n - 1 (the caller is the n-th thread); returns the threads available. */
static int spawn_up_to(int n) {
  pthread_mutex_lock(&lock);
  while (spawned < n - 1) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)(spawned + 1));
    pthread_attr_destroy(&attr);
    if (rc != 0) break; /* run with the threads we got */
    spawned++;
  }
  int have = spawned + 1;
  pthread_mutex_unlock(&lock);
  return have < n ? have : n;
}

int vnc_threadpool_resize(int nthreads) {
  if (nthreads < 1) nthreads = 1;
  const int n = spawn_up_to(nthreads);
  atomic_store(&pool_size, n);
  pthread_mutex_lock(&lock); /* parked workers re-check their number */
  pthread_cond_broadcast(&work_cv);
  pthread_mutex_unlock(&lock);
  return n;
}

int vnc_threadpool_size(void) { return atomic_load_explicit(&pool_size, memory_order_relaxed); }

void vnc_parallel_for(int64_t n, int64_t grain, vnc_range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t max_chunks = (n + grain - 1) / grain;
  const int size = atomic_load_explicit(&pool_size, memory_order_relaxed);
  if (size <= 1 || max_chunks <= 1 || pthread_mutex_trylock(&owner_lock) != 0) {
    fn(ctx, 0, n);
    return;
  }
  int64_t nchunks = max_chunks < (int64_t)size * 4 ? max_chunks : (int64_t)size * 4;
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
