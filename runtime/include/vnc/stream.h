/* vnc/stream.h — streams (in-order work queues) and events of a virtual NeuronCore.
 *
 * Each stream is run by its own worker thread, so a launch returns before its work has
 * run. Stream 0 of each device is its default stream; ids 1..VNC_STREAM_POOL_SIZE name a
 * small pool handed out round-robin (as CUDA's stream pool). The first failing task sets
 * the stream's sticky error; tasks queued behind it are dropped (their release still
 * runs); the next synchronize returns the error once and clears it.
 * With NEURON_LAUNCH_BLOCKING=1 every launch waits for the stream, runs the task on the
 * caller's thread and returns its error at once.
 *
 *     static vnc_status work(void *p) { ...; return VNC_OK; }
 *     vnc_stream *s; vnc_stream_get(0, 0, &s);
 *     vnc_launch(s, "aten::foo", work, &args, sizeof args, NULL);
 *     if (vnc_stream_synchronize(s) != VNC_OK) puts(vnc_last_error()); // "aten::foo: ..."
 */
#ifndef VNC_STREAM_H
#define VNC_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VNC_STREAM_POOL_SIZE 4
#define VNC_QUEUE_DEPTH 1024 /* launches block while this many tasks are pending */

typedef struct vnc_stream vnc_stream;
typedef struct vnc_event vnc_event;
typedef struct vnc_hold vnc_hold;

/* A task: runs on the stream's worker. On failure it returns non-VNC_OK after
 * vnc_set_error(); the message becomes the stream's sticky error, prefixed by the op. */
typedef vnc_status (*vnc_task_fn)(void *payload);
/* Called exactly once per launched task, after it ran or was dropped. */
typedef void (*vnc_release_fn)(void *payload);

/* Stream `id` (0 = default, 1..VNC_STREAM_POOL_SIZE = pool) of `device`; initialises the
 * runtime on first use. */
vnc_status vnc_stream_get(int device, int64_t id, vnc_stream **out);
/* Next pool stream of `device`, round-robin. */
vnc_status vnc_stream_from_pool(int device, vnc_stream **out);
int64_t vnc_stream_id(const vnc_stream *s);
int vnc_stream_device(const vnc_stream *s);

/* The calling thread's current stream for `device` (default stream unless set). */
vnc_status vnc_current_stream(int device, vnc_stream **out);
void vnc_set_current_stream(vnc_stream *s);

/* Enqueues fn(copy of payload). `op` names the operation in errors (copied, 63 chars max).
 * payload_size may be 0. Blocks while VNC_QUEUE_DEPTH tasks are pending. */
vnc_status vnc_launch(vnc_stream *s, const char *op, vnc_task_fn fn, const void *payload,
                      size_t payload_size, vnc_release_fn release);

/* As vnc_launch, for a task the caller knows to be tiny (a few microseconds: kernels on a
 * few thousand elements). When the stream is idle (nothing queued or running) it runs on the
 * caller's thread at once, saving the hand-off to the worker, which costs more than such a
 * task; it still takes its place in the stream's order and a failure still becomes the sticky
 * error, exactly as if the worker had run it. Otherwise it is enqueued. */
vnc_status vnc_launch_small(vnc_stream *s, const char *op, vnc_task_fn fn, const void *payload,
                            size_t payload_size, vnc_release_fn release);

/* vnc_launch and vnc_launch_small calls made by the calling thread so far (every kernel and
 * copy task goes through one of them): the PyTorch glue compares it before and after a kernel
 * to know whether the kernel has issued work that may have written memory. */
uint64_t vnc_thread_launches(void);

/* Waits until all enqueued work has run; returns (and clears) the sticky error. */
vnc_status vnc_stream_synchronize(vnc_stream *s);
/* 1 when all enqueued work has run. */
int vnc_stream_query(vnc_stream *s);
/* Synchronizes every started stream of `device`; returns the first sticky error. */
vnc_status vnc_device_synchronize(int device);
/* Counters: tasks enqueued so far and tasks finished (run or dropped). */
uint64_t vnc_stream_enqueued(vnc_stream *s);
uint64_t vnc_stream_completed(vnc_stream *s);
/* Blocks until the stream has finished `ticket` tasks. */
void vnc_stream_wait_ticket(vnc_stream *s, uint64_t ticket);

/* Holds: a point of a stream completed by another thread (the role of CUDA's stream wait on a
 * host-written value). Work enqueued on `s` after vnc_stream_hold runs after
 * vnc_hold_release(h, ...); synchronizing `s` waits for the release. When the stream has
 * reached the hold, the releasing thread completes it and wakes the stream's waiters itself
 * (no hand-off through the worker). A release with st != VNC_OK sets the stream's sticky error
 * "<op>: <msg>". Release every hold exactly once; `h` is invalid afterwards. */
vnc_status vnc_stream_hold(vnc_stream *s, const char *op, vnc_hold **out);
void vnc_hold_release(vnc_hold *h, vnc_status st, const char *msg);

/* Events. A never-recorded event counts as complete. */
vnc_status vnc_event_create(int enable_timing, vnc_event **out);
void vnc_event_destroy(vnc_event *e);
/* Marks the point after all work now enqueued on `s`. */
vnc_status vnc_event_record(vnc_event *e, vnc_stream *s);
/* Work enqueued on `s` after this call waits for the event's recorded point. */
vnc_status vnc_stream_wait_event(vnc_stream *s, vnc_event *e);
int vnc_event_query(vnc_event *e);
vnc_status vnc_event_synchronize(vnc_event *e);
/* Milliseconds between two completed, timing-enabled events. */
vnc_status vnc_event_elapsed_ms(vnc_event *start, vnc_event *end, double *ms);
int vnc_event_device(const vnc_event *e);

#ifdef __cplusplus
}
#endif
#endif
