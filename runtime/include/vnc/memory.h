/* vnc/memory.h — the caching allocator of each virtual NeuronCore.
 *
 * Device memory is host memory committed on demand (mmap for large blocks), counted
 * against the core's capacity (vnc_device_capacity). Freed blocks stay cached and are
 * reused for requests of the same size class; vnc_empty_cache returns them.
 * Pools: "small" for requests under 1 MiB (rounded up to 512 B), "large" above (rounded to
 * quarter powers of two under 16 MiB, to 2 MiB multiples above). Alignment: 64 bytes.
 *
 * Reuse is stream-ordered like CUDA's caching allocator: a block freed while kernels on
 * its stream may still read it is handed out again only to work on that same stream
 * (which runs after them), or to another stream once its last users have finished.
 *
 *     void *p; vnc_block *b;
 *     if (vnc_malloc(0, 4096, NULL, &p, &b) == VNC_OK) { ...; vnc_free(b); }
 */
#ifndef VNC_MEMORY_H
#define VNC_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vnc_block vnc_block;
typedef struct vnc_stream vnc_stream;

#define VNC_SMALL_POOL_LIMIT ((size_t)1 << 20)
#define VNC_ALIGNMENT 64

/* Allocates `size` bytes on `device` for use on `stream` (NULL: the default stream).
 * size 0 yields *ptr = NULL, *block = NULL. On VNC_ERR_OUT_OF_MEMORY the message gives the
 * request, the amount in use and the capacity; the cache was emptied and retried first. */
vnc_status vnc_malloc(int device, size_t size, vnc_stream *stream, void **ptr, vnc_block **block);
/* Returns a block to its core's cache. NULL is ignored. Never fails. */
void vnc_free(vnc_block *block);
/* Marks `block` as used by `stream` too: it is not reused before that stream's work
 * enqueued up to its free has run (c10's recordStream). */
void vnc_block_record_stream(vnc_block *block, vnc_stream *stream);
/* The pointer and device of a block. */
void *vnc_block_ptr(const vnc_block *block);
int vnc_block_device(const vnc_block *block);
size_t vnc_block_size(const vnc_block *block);

/* Synchronizes the device's streams, then releases every cached (free) block. Live
 * blocks are untouched. */
vnc_status vnc_empty_cache(int device);

/* Size the allocator would reserve for a request of `size` bytes (its size class). */
size_t vnc_round_size(size_t size);

enum { VNC_STAT_ALL = 0, VNC_STAT_SMALL = 1, VNC_STAT_LARGE = 2, VNC_STAT_KINDS = 3 };

typedef struct vnc_stat {
  int64_t current, peak, allocated, freed;
} vnc_stat;

/* Counters in c10::CachingDeviceAllocator::DeviceStats's layout; index [VNC_STAT_*]. */
typedef struct vnc_memory_stats {
  vnc_stat allocation[VNC_STAT_KINDS];      /* live blocks */
  vnc_stat segment[VNC_STAT_KINDS];         /* blocks reserved from the host */
  vnc_stat active[VNC_STAT_KINDS];
  vnc_stat allocated_bytes[VNC_STAT_KINDS]; /* bytes of live blocks (rounded sizes) */
  vnc_stat reserved_bytes[VNC_STAT_KINDS];  /* bytes of live and cached blocks */
  vnc_stat active_bytes[VNC_STAT_KINDS];
  vnc_stat requested_bytes[VNC_STAT_KINDS]; /* bytes asked for by live allocations */
  int64_t num_alloc_retries;  /* allocations that emptied the cache and tried again */
  int64_t num_ooms;           /* allocations refused for capacity */
  int64_t num_device_alloc;   /* blocks taken from the host */
  int64_t num_device_free;    /* blocks returned to the host */
  int64_t num_sync_all_streams;
  uint64_t capacity;          /* the core's capacity in bytes */
} vnc_memory_stats;

vnc_status vnc_memory_stats_get(int device, vnc_memory_stats *out);
/* Sets every peak to its current value. */
vnc_status vnc_memory_reset_peak(int device);
/* Zeroes the allocated/freed totals and the event counters. */
vnc_status vnc_memory_reset_accumulated(int device);

#ifdef __cplusplus
}
#endif
#endif
