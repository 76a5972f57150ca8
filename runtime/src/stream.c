/* Streams: in-order task queues, each run by one worker thread; events; sticky errors. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

typedef struct task {
  struct task *next;
  vnc_task_fn fn;
  vnc_release_fn release;
  int always_run; /* markers and waits run even after an error, so nothing hangs */
  char op[64];
  _Alignas(16) unsigned char payload[];
} task;

struct vnc_stream {
  int device;
  int64_t id;
  atomic_int started;
  pthread_mutex_t m;
  pthread_cond_t work_cv, done_cv;
  task *head, *tail;
  uint64_t enqueued, completed;
  int worker_waiting, waiters;
  int inline_busy; /* a vnc_launch_small task runs on its caller's thread: the worker waits */
  atomic_uint_fast64_t posted; /* launches so far, readable without the lock (worker's spin) */
  vnc_hold *held; /* a hold taken while the stream was idle: the worker waits, not at a task */
  vnc_status err;
  char err_msg[1024];
};

struct vnc_event {
  atomic_int refs;
  int timing;
  int device;
  pthread_mutex_t m;
  vnc_stream *stream; /* NULL until recorded */
  uint64_t ticket, gen;
  uint64_t time_ns;
};

static vnc_stream streams[VNC_MAX_DEVICES][VNC_STREAM_POOL_SIZE + 1];
static atomic_uint pool_cursor[VNC_MAX_DEVICES];
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local vnc_stream *current_streams[VNC_MAX_DEVICES];
/* The stream whose task this thread is running (NULL outside tasks). A launch onto that
 * stream from inside its own task runs inline: the task is the stream's current work, so
 * running the inner work now keeps the stream's order (compiled graphs call kernels so). */
static _Thread_local vnc_stream *running_stream;

/* Runs a task body on the calling thread as work of `s`. */
static vnc_status run_as(vnc_stream *s, vnc_task_fn fn, void *payload) {
  vnc_stream *outer = running_stream;
  running_stream = s;
  vnc_status st = fn(payload);
  running_stream = outer;
  return st;
}

/* A hold (vnc_stream_hold) is a task whose body is never called: the worker stops at it until
 * vnc_hold_release. Fields are guarded by the stream's mutex. */
struct vnc_hold {
  vnc_stream *stream;
  int released, parked, completed; /* parked: the worker waits at it */
  vnc_status st;
  char op[64];
  char msg[900]; /* fits err_msg with the op prefix */
};

static vnc_status hold_task(void *payload) {
  (void)payload;
  return VNC_OK;
}

/* Finishes a hold's task (stream mutex held): sticky error, completion count, waiters. */
static void complete_hold(vnc_stream *s, vnc_hold *h) {
  if (h->st != VNC_OK && s->err == VNC_OK) {
    s->err = h->st;
    snprintf(s->err_msg, sizeof s->err_msg, "%s: %s", h->op, h->msg);
  }
  h->completed = 1;
  s->completed++;
  if (s->waiters) pthread_cond_broadcast(&s->done_cv);
}

/* The worker at a hold (stream mutex held): waits for the release unless it came first. */
static void run_hold(vnc_stream *s, task *t) {
  vnc_hold *h = *(vnc_hold **)(void *)t->payload;
  while (!h->released) {
    h->parked = 1;
    pthread_cond_wait(&s->work_cv, &s->m);
  }
  if (!h->completed) complete_hold(s, h);
  free(h);
  free(t);
}

/* An idle worker polls for up to SPIN_NS before it sleeps: back-to-back small launches then
 * cost no futex wake-up (the adaptive wait of a mutex); beyond that it blocks. */
#define SPIN_NS 20000

static void *worker_main(void *arg) {
  vnc_stream *s = arg;
  pthread_mutex_lock(&s->m);
  for (;;) {
    if (s->head == NULL) {
      uint_fast64_t seen = atomic_load_explicit(&s->posted, memory_order_relaxed);
      pthread_mutex_unlock(&s->m);
      uint64_t t0 = vnc_now_ns(), last = t0;
      for (unsigned polls = 1; atomic_load_explicit(&s->posted, memory_order_acquire) == seen; polls++) {
        if (polls % 64) {
#if defined(__x86_64__)
          __builtin_ia32_pause();
#endif
          continue;
        }
        /* As the thread pool's poll: yield the core now and then, and stop at once after
         * having been descheduled (another process wants this core). */
        const uint64_t now = vnc_now_ns();
        if (now - t0 >= SPIN_NS || now - last >= SPIN_NS) break;
        last = now;
        sched_yield();
      }
      pthread_mutex_lock(&s->m);
    }
    while (s->head == NULL || s->held || s->inline_busy) {
      s->worker_waiting = 1;
      pthread_cond_wait(&s->work_cv, &s->m);
    }
    s->worker_waiting = 0;
    task *t = s->head;
    s->head = t->next;
    if (!s->head) s->tail = NULL;
    if (t->fn == hold_task) {
      run_hold(s, t);
      continue;
    }
    int drop = !t->always_run && s->err != VNC_OK;
    pthread_mutex_unlock(&s->m);
    vnc_status st = drop ? VNC_OK : run_as(s, t->fn, t->payload);
    if (t->release) t->release(t->payload);
    pthread_mutex_lock(&s->m);
    if (st != VNC_OK && s->err == VNC_OK) {
      s->err = st;
      snprintf(s->err_msg, sizeof s->err_msg, "%s: %s", t->op, vnc_last_error());
    }
    free(t);
    s->completed++;
    if (s->waiters) pthread_cond_broadcast(&s->done_cv);
  }
  return NULL;
}

void vnc_stream_init_device(int device) {
  for (int i = 0; i <= VNC_STREAM_POOL_SIZE; i++) {
    vnc_stream *s = &streams[device][i];
    memset(s, 0, sizeof *s);
    s->device = device;
    s->id = i;
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
  }
  atomic_init(&pool_cursor[device], 0);
}

static vnc_status start_stream(vnc_stream *s) {
  if (atomic_load_explicit(&s->started, memory_order_acquire)) return VNC_OK;
  pthread_mutex_lock(&start_lock);
  vnc_status st = VNC_OK;
  if (!atomic_load(&s->started)) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, worker_main, s) != 0)
      st = vnc_set_error(VNC_ERR_INTERNAL, "could not start the worker thread of stream %lld",
                         (long long)s->id);
    else
      atomic_store_explicit(&s->started, 1, memory_order_release);
    pthread_attr_destroy(&attr);
  }
  pthread_mutex_unlock(&start_lock);
  return st;
}

vnc_status vnc_stream_get(int device, int64_t id, vnc_stream **out) {
  vnc_status st = vnc_check_device(device);
  if (st != VNC_OK) return st;
  VNC_ENSURE_INIT();
  if (id < 0 || id > VNC_STREAM_POOL_SIZE)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "invalid stream id %lld: valid range is 0 to %d",
                         (long long)id, VNC_STREAM_POOL_SIZE);
  vnc_stream *s = &streams[device][id];
  st = start_stream(s);
  if (st != VNC_OK) return st;
  *out = s;
  return VNC_OK;
}

vnc_status vnc_stream_from_pool(int device, vnc_stream **out) {
  vnc_status st = vnc_check_device(device);
  if (st != VNC_OK) return st;
  unsigned k = atomic_fetch_add(&pool_cursor[device], 1u);
  return vnc_stream_get(device, 1 + (int64_t)(k % VNC_STREAM_POOL_SIZE), out);
}

int64_t vnc_stream_id(const vnc_stream *s) { return s->id; }
int vnc_stream_device(const vnc_stream *s) { return s->device; }

vnc_status vnc_current_stream(int device, vnc_stream **out) {
  vnc_status st = vnc_check_device(device);
  if (st != VNC_OK) return st;
  if (current_streams[device]) {
    *out = current_streams[device];
    return VNC_OK;
  }
  return vnc_stream_get(device, 0, out);
}

void vnc_set_current_stream(vnc_stream *s) { current_streams[s->device] = s; }

static vnc_status enqueue(vnc_stream *s, const char *op, vnc_task_fn fn, const void *payload,
                          size_t size, vnc_release_fn release, int always_run,
                          uint64_t *ticket) {
  task *t = malloc(sizeof(task) + size);
  if (!t) {
    if (release) release((void *)payload);
    return vnc_set_error(VNC_ERR_INTERNAL, "%s: out of host memory for a task", op);
  }
  t->next = NULL;
  t->fn = fn;
  t->release = release;
  t->always_run = always_run;
  snprintf(t->op, sizeof t->op, "%s", op ? op : "op");
  if (size) memcpy(t->payload, payload, size);
  pthread_mutex_lock(&s->m);
  while (s->enqueued - s->completed >= VNC_QUEUE_DEPTH) {
    s->waiters++;
    pthread_cond_wait(&s->done_cv, &s->m);
    s->waiters--;
  }
  if (s->tail) s->tail->next = t;
  else s->head = t;
  s->tail = t;
  s->enqueued++;
  atomic_store_explicit(&s->posted, s->enqueued, memory_order_release);
  if (ticket) *ticket = s->enqueued;
  if (s->worker_waiting) pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->m);
  return VNC_OK;
}

void vnc_stream_wait_ticket(vnc_stream *s, uint64_t ticket) {
  pthread_mutex_lock(&s->m);
  while (s->completed < ticket) {
    s->waiters++;
    pthread_cond_wait(&s->done_cv, &s->m);
    s->waiters--;
  }
  pthread_mutex_unlock(&s->m);
}

static _Thread_local uint64_t thread_launches;

uint64_t vnc_thread_launches(void) { return thread_launches; }

vnc_status vnc_launch(vnc_stream *s, const char *op, vnc_task_fn fn, const void *payload,
                      size_t payload_size, vnc_release_fn release) {
  thread_launches++;
  if (vnc_in_bad_fork()) {
    if (release) release((void *)payload);
    return vnc_init();
  }
  const int inline_run = running_stream == s;
  if (!inline_run && !vnc_launch_blocking()) return enqueue(s, op, fn, payload, payload_size, release, 0, NULL);
  int sticky = 0;
  if (!inline_run) { /* synchronous mode: run after everything queued before, on this thread */
    vnc_stream_wait_ticket(s, vnc_stream_enqueued(s));
    pthread_mutex_lock(&s->m);
    sticky = s->err != VNC_OK;
    pthread_mutex_unlock(&s->m);
  }
  vnc_status st = sticky ? VNC_OK : run_as(s, fn, (void *)payload);
  if (release) release((void *)payload);
  if (st != VNC_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", vnc_last_error());
    return vnc_set_error(st == VNC_ERR_INDEX ? VNC_ERR_INDEX : VNC_ERR_KERNEL, "%s: %s", op ? op : "op", msg);
  }
  return VNC_OK;
}

#define SMALL_PAYLOAD 4096

vnc_status vnc_launch_small(vnc_stream *s, const char *op, vnc_task_fn fn, const void *payload,
                            size_t payload_size, vnc_release_fn release) {
  if (payload_size > SMALL_PAYLOAD || vnc_in_bad_fork() || vnc_launch_blocking() || running_stream == s)
    return vnc_launch(s, op, fn, payload, payload_size, release); /* (inside s's own task: inline) */
  thread_launches++; /* counted as vnc_launch counts: the dtype gate must see that work was issued */
  pthread_mutex_lock(&s->m);
  if (s->head || s->inline_busy || s->completed != s->enqueued) { /* busy: keep the order */
    pthread_mutex_unlock(&s->m);
    return enqueue(s, op, fn, payload, payload_size, release, 0, NULL);
  }
  const int drop = s->err != VNC_OK; /* behind a failed task: dropped, as on the worker */
  s->inline_busy = 1;
  s->enqueued++; /* `posted` stays: the polling worker has nothing to pop */
  pthread_mutex_unlock(&s->m);
  _Alignas(16) unsigned char copy[SMALL_PAYLOAD];
  if (payload_size) memcpy(copy, payload, payload_size);
  vnc_status st = drop ? VNC_OK : run_as(s, fn, copy);
  if (release) release(copy);
  pthread_mutex_lock(&s->m);
  if (st != VNC_OK && s->err == VNC_OK) {
    s->err = st;
    snprintf(s->err_msg, sizeof s->err_msg, "%s: %s", op ? op : "op", vnc_last_error());
  }
  s->completed++;
  s->inline_busy = 0;
  if (s->waiters) pthread_cond_broadcast(&s->done_cv);
  if (s->head && s->worker_waiting) pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->m);
  return VNC_OK;
}

vnc_status vnc_stream_synchronize(vnc_stream *s) {
  pthread_mutex_lock(&s->m);
  while (s->completed < s->enqueued) {
    s->waiters++;
    pthread_cond_wait(&s->done_cv, &s->m);
    s->waiters--;
  }
  vnc_status st = s->err;
  if (st != VNC_OK) { /* index errors keep their code (IndexError in Python) */
    st = st == VNC_ERR_INDEX ? VNC_ERR_INDEX : VNC_ERR_KERNEL;
    vnc_set_error(st, "%s", s->err_msg);
    s->err = VNC_OK;
  }
  pthread_mutex_unlock(&s->m);
  return st;
}

int vnc_stream_query(vnc_stream *s) {
  pthread_mutex_lock(&s->m);
  int done = s->completed >= s->enqueued;
  pthread_mutex_unlock(&s->m);
  return done;
}

uint64_t vnc_stream_enqueued(vnc_stream *s) {
  pthread_mutex_lock(&s->m);
  uint64_t v = s->enqueued;
  pthread_mutex_unlock(&s->m);
  return v;
}

uint64_t vnc_stream_completed(vnc_stream *s) {
  pthread_mutex_lock(&s->m);
  uint64_t v = s->completed;
  pthread_mutex_unlock(&s->m);
  return v;
}

vnc_status vnc_device_synchronize(int device) {
  vnc_status st = vnc_check_device(device);
  if (st != VNC_OK) return st;
  if (!vnc_is_initialized()) return vnc_in_bad_fork() ? vnc_init() : VNC_OK;
  vnc_status first = VNC_OK;
  char msg[1024] = "";
  for (int i = 0; i <= VNC_STREAM_POOL_SIZE; i++) {
    vnc_stream *s = &streams[device][i];
    if (!atomic_load(&s->started)) continue;
    st = vnc_stream_synchronize(s);
    if (st != VNC_OK && first == VNC_OK) {
      first = st;
      snprintf(msg, sizeof msg, "%s", vnc_last_error());
    }
  }
  if (first != VNC_OK) vnc_set_error(first, "%s", msg);
  return first;
}

void vnc_device_drain(int device) {
  for (int i = 0; i <= VNC_STREAM_POOL_SIZE; i++) {
    vnc_stream *s = &streams[device][i];
    if (atomic_load(&s->started)) vnc_stream_wait_ticket(s, vnc_stream_enqueued(s));
  }
}

vnc_status vnc_stream_hold(vnc_stream *s, const char *op, vnc_hold **out) {
  vnc_hold *h = calloc(1, sizeof *h);
  if (!h) return vnc_set_error(VNC_ERR_INTERNAL, "%s: out of host memory for a hold", op ? op : "hold");
  h->stream = s;
  snprintf(h->op, sizeof h->op, "%s", op ? op : "hold");
  pthread_mutex_lock(&s->m);
  if (s->head == NULL && s->held == NULL && s->completed == s->enqueued) {
    /* Idle stream: the hold is its current work at once, without waking the worker. */
    s->held = h;
    h->parked = 1;
    s->enqueued++; /* `posted` stays: the worker has nothing to pop */
    pthread_mutex_unlock(&s->m);
    *out = h;
    return VNC_OK;
  }
  pthread_mutex_unlock(&s->m);
  /* always_run: a hold behind a failed task still orders what follows it */
  vnc_status st = enqueue(s, op, hold_task, &h, sizeof h, NULL, 1, NULL);
  if (st != VNC_OK) {
    free(h);
    return st;
  }
  *out = h;
  return VNC_OK;
}

void vnc_hold_release(vnc_hold *h, vnc_status st, const char *msg) {
  vnc_stream *s = h->stream;
  pthread_mutex_lock(&s->m);
  h->st = st;
  snprintf(h->msg, sizeof h->msg, "%s", msg ? msg : "");
  h->released = 1;
  if (h->parked) complete_hold(s, h); /* the stream stands at the hold: its waiters wake now */
  const int idle_hold = s->held == h; /* taken on an idle stream: no task to free it */
  if (idle_hold) s->held = NULL;
  pthread_cond_broadcast(&s->work_cv);
  pthread_mutex_unlock(&s->m);
  if (idle_hold) free(h);
}

/* ---- events ---- */

vnc_status vnc_event_create(int enable_timing, vnc_event **out) {
  vnc_event *e = calloc(1, sizeof *e);
  if (!e) return vnc_set_error(VNC_ERR_INTERNAL, "out of host memory for an event");
  atomic_init(&e->refs, 1);
  e->timing = enable_timing;
  e->device = -1;
  pthread_mutex_init(&e->m, NULL);
  *out = e;
  return VNC_OK;
}

static void event_unref(vnc_event *e) {
  if (atomic_fetch_sub(&e->refs, 1) == 1) {
    pthread_mutex_destroy(&e->m);
    free(e);
  }
}

void vnc_event_destroy(vnc_event *e) {
  if (e) event_unref(e);
}

typedef struct marker {
  vnc_event *e;
  uint64_t gen;
} marker;

static vnc_status marker_run(void *p) {
  marker *mk = p;
  uint64_t now = vnc_now_ns();
  pthread_mutex_lock(&mk->e->m);
  if (mk->e->gen == mk->gen) mk->e->time_ns = now;
  pthread_mutex_unlock(&mk->e->m);
  return VNC_OK;
}

static void marker_release(void *p) { event_unref(((marker *)p)->e); }

vnc_status vnc_event_record(vnc_event *e, vnc_stream *s) {
  atomic_fetch_add(&e->refs, 1);
  pthread_mutex_lock(&e->m);
  marker mk = {e, ++e->gen};
  e->time_ns = 0;
  pthread_mutex_unlock(&e->m);
  uint64_t ticket = 0;
  vnc_status st = enqueue(s, "event_record", marker_run, &mk, sizeof mk, marker_release, 1, &ticket);
  if (st != VNC_OK) return st;
  pthread_mutex_lock(&e->m);
  if (e->gen == mk.gen) { /* a later record on another thread wins */
    e->stream = s;
    e->device = s->device;
    e->ticket = ticket;
  }
  pthread_mutex_unlock(&e->m);
  return VNC_OK;
}

typedef struct waiter {
  vnc_stream *on;
  uint64_t ticket;
} waiter;

static vnc_status waiter_run(void *p) {
  waiter *w = p;
  vnc_stream_wait_ticket(w->on, w->ticket);
  return VNC_OK;
}

vnc_status vnc_stream_wait_event(vnc_stream *s, vnc_event *e) {
  pthread_mutex_lock(&e->m);
  waiter w = {e->stream, e->ticket};
  pthread_mutex_unlock(&e->m);
  if (!w.on || w.on == s) return VNC_OK; /* never recorded, or same queue: already ordered */
  return enqueue(s, "stream_wait_event", waiter_run, &w, sizeof w, NULL, 1, NULL);
}

int vnc_event_query(vnc_event *e) {
  pthread_mutex_lock(&e->m);
  vnc_stream *s = e->stream;
  uint64_t ticket = e->ticket;
  pthread_mutex_unlock(&e->m);
  return !s || vnc_stream_completed(s) >= ticket;
}

vnc_status vnc_event_synchronize(vnc_event *e) {
  pthread_mutex_lock(&e->m);
  vnc_stream *s = e->stream;
  uint64_t ticket = e->ticket;
  pthread_mutex_unlock(&e->m);
  if (s) vnc_stream_wait_ticket(s, ticket);
  return VNC_OK;
}

vnc_status vnc_event_elapsed_ms(vnc_event *a, vnc_event *b, double *ms) {
  if (!a->timing || !b->timing)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT,
                         "elapsed_time: both events must be created with enable_timing=True");
  if (!a->stream || !b->stream)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT,
                         "elapsed_time: both events must be recorded before calculating elapsed time");
  if (!vnc_event_query(a) || !vnc_event_query(b))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT,
                         "elapsed_time: both events must have completed (synchronize first)");
  pthread_mutex_lock(&a->m);
  uint64_t ta = a->time_ns;
  pthread_mutex_unlock(&a->m);
  pthread_mutex_lock(&b->m);
  uint64_t tb = b->time_ns;
  pthread_mutex_unlock(&b->m);
  *ms = ((double)tb - (double)ta) / 1e6;
  return VNC_OK;
}

int vnc_event_device(const vnc_event *e) { return e->device; }
