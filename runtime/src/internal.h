/* Runtime-internal declarations shared by the src/ files (not installed). */
#ifndef VNC_INTERNAL_H
#define VNC_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
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
/* Sets the threads kernels use (starting workers as needed); returns the count in effect. */
int vnc_threadpool_resize(int nthreads);
/* Picks the CPU tier (kernels/tier.c); -1 with a message in err for a bad TORCH_NEURONX_ISA. */
int vnc_tier_init(char *err, size_t errlen);

/* Waits until every started stream of `device` is idle; sticky errors stay in place. */
void vnc_device_drain(int device);

/* Monotonic clock in nanoseconds. */
uint64_t vnc_now_ns(void);

#endif
