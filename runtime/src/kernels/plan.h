/* Plan cache internals (see vnc_plan_cache_* in vnc/elementwise.h). */
#ifndef VNC_KERNELS_PLAN_H
#define VNC_KERNELS_PLAN_H
#include <stddef.h>
#include "vnc/elementwise.h"

/* Copies the cached value for `key` into `value` and returns 1, or returns 0 (a miss). */
int vnc_plan_get(const void *key, size_t klen, void *value, size_t vlen);
/* Stores a plan; evicts the least recently used beyond the capacity. */
void vnc_plan_put(const void *key, size_t klen, const void *value, size_t vlen);
#endif
