/* Runtime-internal declarations shared by the src/ files (not installed). */
#ifndef VNC_INTERNAL_H
#define VNC_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include "vnc/vnc.h"

#define VNC_MAX_DEVICES 64

/* Fails the calling function with VNC_ERR_FORKED / init errors. */
#define VNC_ENSURE_INIT()                 \
  do {                                    \
    vnc_status st_ = vnc_init();          \
    if (st_ != VNC_OK) return st_;        \
  } while (0)

/* Per-core allocator state lives in memory.c; stream table in stream.c. */
void vnc_memory_init_device(int device);
void vnc_stream_init_device(int device);
void vnc_threadpool_init(int nthreads);

/* Waits until every started stream of `device` is idle; sticky errors stay in place. */
void vnc_device_drain(int device);

/* Monotonic clock in nanoseconds. */
uint64_t vnc_now_ns(void);

#endif
