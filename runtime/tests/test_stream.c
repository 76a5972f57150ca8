/* Streams: asynchrony, ordering, events across streams, sticky errors; the thread pool. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include "check.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Order and asynchrony are checked with gates the test opens (never with timing): a task
 * with a gate waits until the host thread opens it, so the host can observe the state before
 * the task runs however slowly the machine is loaded. */
static void wait_open(atomic_int *gate) {
  while (!atomic_load(gate)) sleep_ms(1);
}

typedef struct {
  int *log;
  atomic_int *pos;
  int value;
  int delay_ms;
  atomic_int *gate; /* NULL: none */
} append_args;

static vnc_status append(void *p) {
  append_args *a = p;
  if (a->gate) wait_open(a->gate);
  if (a->delay_ms) sleep_ms(a->delay_ms);
  a->log[atomic_fetch_add(a->pos, 1)] = a->value;
  return VNC_OK;
}

static vnc_status fail(void *p) {
  (void)p;
  return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "index 7 is out of bounds for size 3");
}

typedef struct {
  atomic_int *src;
  int *dst;
} read_args;

static vnc_status read_value(void *p) {
  read_args *a = p;
  *a->dst = atomic_load(a->src);
  return VNC_OK;
}

static atomic_int released;
static void count_release(void *p) {
  (void)p;
  atomic_fetch_add(&released, 1);
}

typedef struct {
  vnc_hold *h;
  atomic_int *gate; /* released once the host opens it */
  vnc_status st;
} release_args;

static void *release_later(void *p) {
  release_args *a = p;
  wait_open(a->gate);
  vnc_hold_release(a->h, a->st, a->st == VNC_OK ? "" : "peer closed the connection");
  return NULL;
}

static void sum_range(void *ctx, int64_t b, int64_t e) {
  atomic_llong *acc = ctx;
  long long s = 0;
  for (int64_t i = b; i < e; i++) s += i;
  atomic_fetch_add(acc, s);
}

int main(void) {
  vnc_stream *s0, *s1;
  CHECK_OK(vnc_stream_get(0, 0, &s0));
  CHECK_OK(vnc_stream_from_pool(0, &s1));
  CHECK(vnc_stream_id(s0) == 0 && vnc_stream_id(s1) >= 1);
  CHECK(vnc_stream_get(0, 99, &s1) == VNC_ERR_INVALID_ARGUMENT);

  /* The host runs ahead; order is kept. */
  int log[64];
  atomic_int pos = 0, gate1 = 0;
  append_args a = {log, &pos, 1, 0, &gate1};
  CHECK_OK(vnc_launch(s0, "first", append, &a, sizeof a, NULL));
  CHECK(atomic_load(&pos) == 0); /* returned before the task ran (it waits for the gate) */
  CHECK(!vnc_stream_query(s0));
  for (int i = 2; i <= 10; i++) {
    append_args b = {log, &pos, i, 0, NULL};
    CHECK_OK(vnc_launch(s0, "next", append, &b, sizeof b, NULL));
  }
  CHECK(atomic_load(&pos) == 0);
  atomic_store(&gate1, 1);
  CHECK_OK(vnc_stream_synchronize(s0));
  CHECK(atomic_load(&pos) == 10);
  for (int i = 0; i < 10; i++) CHECK(log[i] == i + 1);
  CHECK(vnc_stream_query(s0));

  /* Every launch counts for the thread, the small ones run inline on an idle stream included
   * (the PyTorch glue's dtype gate relies on it to know whether a kernel issued work). */
  const uint64_t launches = vnc_thread_launches();
  append_args small = {log, &pos, 11, 0, NULL};
  CHECK_OK(vnc_launch_small(s0, "small", append, &small, sizeof small, NULL));
  CHECK(vnc_thread_launches() == launches + 1);
  CHECK_OK(vnc_launch(s0, "plain", append, &small, sizeof small, NULL));
  CHECK(vnc_thread_launches() == launches + 2);
  CHECK_OK(vnc_stream_synchronize(s0));
  CHECK(atomic_load(&pos) == 12 && log[10] == 11 && log[11] == 11);

  /* Events order work across streams: s1 waits for s0's slow write. */
  CHECK_OK(vnc_stream_from_pool(0, &s1));
  atomic_int shared = 0;
  vnc_event *ev;
  CHECK_OK(vnc_event_create(1, &ev));
  CHECK(vnc_event_query(ev)); /* never recorded: complete */
  atomic_int pos2 = 0, gate2 = 0;
  int dummy[2];
  append_args slow = {dummy, &pos2, 0, 0, &gate2};
  CHECK_OK(vnc_launch(s0, "slow", append, &slow, sizeof slow, NULL));
  CHECK_OK(vnc_event_record(ev, s0));
  CHECK(!vnc_event_query(ev)); /* behind the gated write */
  CHECK_OK(vnc_stream_wait_event(s1, ev));
  int seen = -1;
  read_args r = {&pos2, &seen};
  CHECK_OK(vnc_launch(s1, "read", read_value, &r, sizeof r, NULL));
  sleep_ms(5);
  CHECK(seen == -1); /* s1 waits for the event */
  atomic_store(&gate2, 1);
  CHECK_OK(vnc_stream_synchronize(s1));
  CHECK(seen == 1); /* ran after s0's write */
  CHECK(vnc_event_query(ev));
  (void)shared;

  /* Timing events. */
  vnc_event *e1, *e2;
  CHECK_OK(vnc_event_create(1, &e1));
  CHECK_OK(vnc_event_create(1, &e2));
  CHECK_OK(vnc_event_record(e1, s0));
  append_args wait20 = {dummy, &pos2, 0, 20, NULL};
  CHECK_OK(vnc_launch(s0, "wait", append, &wait20, sizeof wait20, NULL));
  CHECK_OK(vnc_event_record(e2, s0));
  CHECK_OK(vnc_event_synchronize(e2));
  double ms = 0;
  CHECK_OK(vnc_event_elapsed_ms(e1, e2, &ms));
  CHECK(ms >= 19.0 && ms < 2000.0);
  vnc_event *untimed;
  CHECK_OK(vnc_event_create(0, &untimed));
  CHECK_OK(vnc_event_record(untimed, s0));
  CHECK_OK(vnc_event_synchronize(untimed));
  CHECK(vnc_event_elapsed_ms(e1, untimed, &ms) == VNC_ERR_INVALID_ARGUMENT);
  vnc_event_destroy(e1);
  vnc_event_destroy(e2);
  vnc_event_destroy(untimed);
  vnc_event_destroy(ev);

  /* Sticky error: first failure kept, later tasks dropped (released), reported once. */
  atomic_int pos3 = 0;
  atomic_store(&released, 0);
  append_args ok = {log, &pos3, 1, 0, NULL};
  CHECK_OK(vnc_launch(s0, "ok", append, &ok, sizeof ok, count_release));
  CHECK_OK(vnc_launch(s0, "aten::gather", fail, NULL, 0, count_release));
  CHECK_OK(vnc_launch(s0, "after", append, &ok, sizeof ok, count_release));
  CHECK(vnc_stream_synchronize(s0) == VNC_ERR_KERNEL);
  CHECK(strstr(vnc_last_error(), "aten::gather: index 7 is out of bounds") != NULL);
  CHECK(atomic_load(&pos3) == 1);
  CHECK(atomic_load(&released) == 3);
  CHECK_OK(vnc_stream_synchronize(s0)); /* cleared */
  CHECK_OK(vnc_launch(s0, "again", append, &ok, sizeof ok, NULL));
  CHECK_OK(vnc_stream_synchronize(s0));
  CHECK(atomic_load(&pos3) == 2); /* usable again */

  /* Errors also surface through a device-wide sync. */
  CHECK_OK(vnc_launch(s1, "aten::index_select", fail, NULL, 0, NULL));
  CHECK(vnc_device_synchronize(0) == VNC_ERR_KERNEL);
  CHECK(strstr(vnc_last_error(), "aten::index_select") != NULL);
  CHECK_OK(vnc_device_synchronize(0));

  /* Holds: work behind a hold waits for its release from another thread. Three cases: the
   * release comes before the worker reaches the hold, after it (the worker waits at it), and a
   * hold taken on an idle stream (no task: the releasing thread completes it). */
  for (int mode = 0; mode < 3; mode++) {
    atomic_int pos5 = 0, gate5 = 0, go = 0;
    int log5[4];
    vnc_hold *h;
    append_args first = {log5, &pos5, 1, 0, mode == 0 ? &gate5 : NULL}, second = {log5, &pos5, 2, 0, NULL};
    if (mode == 2) {
      CHECK_OK(vnc_stream_synchronize(s0));
      CHECK_OK(vnc_stream_hold(s0, "c10d::allreduce_", &h));
      CHECK_OK(vnc_launch(s0, "before", append, &first, sizeof first, NULL));
    } else {
      CHECK_OK(vnc_launch(s0, "before", append, &first, sizeof first, NULL));
      CHECK_OK(vnc_stream_hold(s0, "c10d::allreduce_", &h));
    }
    CHECK_OK(vnc_launch(s0, "after", append, &second, sizeof second, NULL));
    release_args ra = {h, &go, VNC_OK};
    pthread_t th;
    if (mode == 0) {
      vnc_hold_release(h, VNC_OK, NULL); /* before the worker reaches the hold (it is gated) */
      atomic_store(&gate5, 1);
    } else {
      CHECK(pthread_create(&th, NULL, release_later, &ra) == 0);
      if (mode == 1)
        for (int t = 0; t < 10000 && atomic_load(&pos5) == 0; t++) sleep_ms(1);
      else
        sleep_ms(5);
      CHECK(atomic_load(&pos5) == (mode == 1 ? 1 : 0)); /* stopped at the hold */
      CHECK(!vnc_stream_query(s0));
      atomic_store(&go, 1);
    }
    CHECK_OK(vnc_stream_synchronize(s0));
    CHECK(atomic_load(&pos5) == 2 && log5[0] == 1 && log5[1] == 2);
    if (mode) pthread_join(th, NULL);
  }
  {
    vnc_hold *h;
    atomic_int pos6 = 0, go = 1;
    int log6[2];
    append_args next = {log6, &pos6, 1, 0, NULL};
    CHECK_OK(vnc_stream_hold(s0, "c10d::broadcast_", &h));
    CHECK_OK(vnc_launch(s0, "dropped", append, &next, sizeof next, NULL));
    release_args ra = {h, &go, VNC_ERR_KERNEL};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, release_later, &ra) == 0);
    CHECK(vnc_stream_synchronize(s0) == VNC_ERR_KERNEL);
    CHECK(strstr(vnc_last_error(), "c10d::broadcast_: peer closed the connection") != NULL);
    CHECK(atomic_load(&pos6) == 0); /* behind the failed hold: dropped */
    pthread_join(th, NULL);
    CHECK_OK(vnc_stream_synchronize(s0));
  }

  /* Back-pressure: more launches than the queue holds complete in order. */
  atomic_int pos4 = 0;
  static int biglog[VNC_QUEUE_DEPTH * 2 + 8];
  for (int i = 0; i < VNC_QUEUE_DEPTH * 2 + 8; i++) {
    append_args b = {biglog, &pos4, i, 0, NULL};
    CHECK_OK(vnc_launch(s0, "many", append, &b, sizeof b, NULL));
  }
  CHECK_OK(vnc_stream_synchronize(s0));
  int in_order = 1;
  for (int i = 0; i < VNC_QUEUE_DEPTH * 2 + 8; i++) in_order &= biglog[i] == i;
  CHECK(in_order);

  /* Thread pool: ranges cover [0, n) exactly once. */
  for (int64_t n = 1; n <= 1000001; n += 250000) {
    atomic_llong acc = 0;
    vnc_parallel_for(n, 1000, sum_range, &acc);
    CHECK(atomic_load(&acc) == (long long)(n * (n - 1) / 2));
  }
  CHECK_DONE();
}
