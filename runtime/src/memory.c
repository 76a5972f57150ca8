/* The caching allocator: one per virtual core, exact-size-class free lists, stream-ordered
 * reuse, capacity enforcement and CUDA-style statistics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "internal.h"

#define MMAP_THRESHOLD ((size_t)1 << 20) /* large-pool blocks come from mmap: committed on touch */
#define HUGE_PAGE ((size_t)2 << 20)
#define NBUCKETS 1024
#define MAX_USERS 4

struct vnc_block {
  void *ptr;
  size_t size;       /* rounded size reserved */
  size_t requested;  /* size asked for (live blocks only) */
  int device;
  int large;
  int allocated;
  vnc_stream *stream;               /* stream it was allocated for */
  int nusers;                       /* other streams recorded with record_stream */
  vnc_stream *users[MAX_USERS];
  uint64_t user_tickets[MAX_USERS]; /* their enqueue count at free time */
  uint64_t own_ticket;              /* own stream's enqueue count at free time */
  struct vnc_block *next, *prev;    /* free-list links */
};

typedef struct core_mem {
  pthread_mutex_t m;
  uint64_t capacity;
  vnc_block *buckets[NBUCKETS]; /* free blocks, hashed by size */
  vnc_memory_stats stats;
} core_mem;

static core_mem cores[VNC_MAX_DEVICES];

void vnc_memory_init_device(int device) {
  core_mem *c = &cores[device];
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->m, NULL);
  c->capacity = vnc_device_capacity(device);
  c->stats.capacity = c->capacity;
}

size_t vnc_round_size(size_t size) {
  if (size == 0) return 0;
  if (size < VNC_SMALL_POOL_LIMIT) return (size + 511) & ~(size_t)511;
  if (size < ((size_t)16 << 20)) {
    /* quarter steps between powers of two: 1, 1.25, 1.5, 1.75, 2 MiB, 2.5, ... */
    size_t p = VNC_SMALL_POOL_LIMIT;
    while (p * 2 <= size) p *= 2;
    size_t step = p / 4;
    return (size + step - 1) / step * step;
  }
  size_t two_mib = (size_t)2 << 20;
  return (size + two_mib - 1) / two_mib * two_mib;
}

static void stat_add(vnc_stat *s, int large, int64_t amount) {
  vnc_stat *k[2] = {&s[VNC_STAT_ALL], &s[large ? VNC_STAT_LARGE : VNC_STAT_SMALL]};
  for (int i = 0; i < 2; i++) {
    k[i]->current += amount;
    if (amount > 0) {
      k[i]->allocated += amount;
      if (k[i]->current > k[i]->peak) k[i]->peak = k[i]->current;
    } else {
      k[i]->freed -= amount;
    }
  }
}

static unsigned bucket_of(size_t size) { return (unsigned)((size >> 9) * 2654435761u) % NBUCKETS; }

static void list_remove(core_mem *c, vnc_block *b) {
  if (b->prev) b->prev->next = b->next;
  else c->buckets[bucket_of(b->size)] = b->next;
  if (b->next) b->next->prev = b->prev;
  b->next = b->prev = NULL;
}

static void list_push(core_mem *c, vnc_block *b) {
  unsigned k = bucket_of(b->size);
  b->prev = NULL;
  b->next = c->buckets[k];
  if (b->next) b->next->prev = b;
  c->buckets[k] = b;
}

/* A freed block may serve `stream` once every other stream that used it has run past
 * the point of the free; its own stream is ordered after its earlier users anyway. */
static int reusable_on(const vnc_block *b, vnc_stream *stream) {
  if (b->stream != stream && b->stream && vnc_stream_completed(b->stream) < b->own_ticket) return 0;
  for (int i = 0; i < b->nusers; i++)
    if (b->users[i] != stream && vnc_stream_completed(b->users[i]) < b->user_tickets[i]) return 0;
  return 1;
}

static void release_block(core_mem *c, vnc_block *b) {
  stat_add(c->stats.reserved_bytes, b->large, -(int64_t)b->size);
  stat_add(c->stats.segment, b->large, -1);
  c->stats.num_device_free++;
  if (b->large) munmap(b->ptr, b->size);
  else free(b->ptr);
  free(b);
}

/* Releases every cached block; caller holds c->m and has synchronized the streams. */
static void release_cached(core_mem *c) {
  for (int k = 0; k < NBUCKETS; k++) {
    vnc_block *b = c->buckets[k];
    while (b) {
      vnc_block *n = b->next;
      release_block(c, b);
      b = n;
    }
    c->buckets[k] = NULL;
  }
}

static vnc_block *take_cached(core_mem *c, size_t size, vnc_stream *stream) {
  for (vnc_block *b = c->buckets[bucket_of(size)]; b; b = b->next) {
    if (b->size == size && reusable_on(b, stream)) {
      list_remove(c, b);
      return b;
    }
  }
  return NULL;
}

static vnc_block *new_block(core_mem *c, int device, size_t size) {
  vnc_block *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->large = size >= VNC_SMALL_POOL_LIMIT;
  if (size >= MMAP_THRESHOLD) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    b->ptr = p == MAP_FAILED ? NULL : p;
#ifdef MADV_HUGEPAGE
    /* 2 MiB pages where the kernel offers them (THP in "madvise" mode): a kernel streaming a large
     * tensor takes a TLB miss per 2 MiB instead of per 4 KiB. Advice only: failure changes nothing. */
    if (b->ptr && size >= HUGE_PAGE) (void)madvise(b->ptr, size, MADV_HUGEPAGE);
#endif
  } else {
    b->ptr = aligned_alloc(VNC_ALIGNMENT, size);
  }
  if (!b->ptr) {
    free(b);
    return NULL;
  }
  b->size = size;
  b->device = device;
  stat_add(c->stats.reserved_bytes, b->large, (int64_t)size);
  stat_add(c->stats.segment, b->large, 1);
  c->stats.num_device_alloc++;
  return b;
}

static void fmt_bytes(char *buf, size_t n, uint64_t v) {
  const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double x = (double)v;
  int u = 0;
  while (x >= 1024 && u < 4) { x /= 1024; u++; }
  if (u == 0) snprintf(buf, n, "%llu bytes", (unsigned long long)v);
  else snprintf(buf, n, "%.2f %s", x, unit[u]);
}

vnc_status vnc_malloc(int device, size_t size, vnc_stream *stream, void **ptr, vnc_block **out) {
  vnc_status st = vnc_check_device(device);
  if (st != VNC_OK) return st;
  VNC_ENSURE_INIT();
  *ptr = NULL;
  *out = NULL;
  if (size == 0) return VNC_OK;
  if (!stream) {
    st = vnc_stream_get(device, 0, &stream);
    if (st != VNC_OK) return st;
  }
  core_mem *c = &cores[device];
  size_t rounded = vnc_round_size(size);
  if (rounded < size) rounded = size; /* overflow guard for absurd sizes */
  pthread_mutex_lock(&c->m);
  vnc_block *b = take_cached(c, rounded, stream);
  if (!b) {
    uint64_t reserved = (uint64_t)c->stats.reserved_bytes[VNC_STAT_ALL].current;
    if (reserved + rounded > c->capacity && reserved > 0) {
      /* Give the cache back and try again, like CUDA's allocator does before an OOM. */
      pthread_mutex_unlock(&c->m);
      vnc_device_drain(device); /* sticky errors stay for the user's next sync */
      pthread_mutex_lock(&c->m);
      c->stats.num_alloc_retries++;
      c->stats.num_sync_all_streams++;
      release_cached(c);
      b = take_cached(c, rounded, stream);
      reserved = (uint64_t)c->stats.reserved_bytes[VNC_STAT_ALL].current;
    }
    if (!b && reserved + rounded <= c->capacity) b = new_block(c, device, rounded);
    if (!b) {
      c->stats.num_ooms++;
      char req[32], used[32], cap[32], res[32];
      fmt_bytes(req, sizeof req, size);
      fmt_bytes(used, sizeof used, (uint64_t)c->stats.allocated_bytes[VNC_STAT_ALL].current);
      fmt_bytes(res, sizeof res, reserved);
      fmt_bytes(cap, sizeof cap, c->capacity);
      pthread_mutex_unlock(&c->m);
      return vnc_set_error(VNC_ERR_OUT_OF_MEMORY,
                           "neuron out of memory. Tried to allocate %s on neuron:%d, which has a "
                           "capacity of %s; %s is allocated by tensors and %s is reserved. Free "
                           "tensors or raise TORCH_NEURONX_CORE_MEMORY.",
                           req, device, cap, used, res);
    }
  }
  b->allocated = 1;
  b->requested = size;
  b->stream = stream;
  b->nusers = 0;
  stat_add(c->stats.allocation, b->large, 1);
  stat_add(c->stats.active, b->large, 1);
  stat_add(c->stats.allocated_bytes, b->large, (int64_t)b->size);
  stat_add(c->stats.active_bytes, b->large, (int64_t)b->size);
  stat_add(c->stats.requested_bytes, b->large, (int64_t)size);
  pthread_mutex_unlock(&c->m);
  *ptr = b->ptr;
  *out = b;
  return VNC_OK;
}

void vnc_free(vnc_block *b) {
  if (!b) return;
  core_mem *c = &cores[b->device];
  /* Tickets before the lock: vnc_stream_enqueued takes the stream's own lock. */
  uint64_t own = b->stream ? vnc_stream_enqueued(b->stream) : 0;
  uint64_t tickets[MAX_USERS];
  for (int i = 0; i < b->nusers; i++) tickets[i] = vnc_stream_enqueued(b->users[i]);
  pthread_mutex_lock(&c->m);
  b->own_ticket = own;
  memcpy(b->user_tickets, tickets, sizeof(uint64_t) * (size_t)b->nusers);
  b->allocated = 0;
  stat_add(c->stats.allocation, b->large, -1);
  stat_add(c->stats.active, b->large, -1);
  stat_add(c->stats.allocated_bytes, b->large, -(int64_t)b->size);
  stat_add(c->stats.active_bytes, b->large, -(int64_t)b->size);
  stat_add(c->stats.requested_bytes, b->large, -(int64_t)b->requested);
  list_push(c, b);
  pthread_mutex_unlock(&c->m);
}

void vnc_block_record_stream(vnc_block *b, vnc_stream *s) {
  if (!b || s == b->stream) return;
  core_mem *c = &cores[b->device];
  pthread_mutex_lock(&c->m);
  int known = 0;
  for (int i = 0; i < b->nusers; i++) known |= b->users[i] == s;
  if (!known) {
    if (b->nusers < MAX_USERS) b->users[b->nusers++] = s;
    else b->stream = NULL; /* too many users: reuse only after a full device sync */
  }
  pthread_mutex_unlock(&c->m);
}

void *vnc_block_ptr(const vnc_block *b) { return b ? b->ptr : NULL; }
int vnc_block_device(const vnc_block *b) { return b ? b->device : -1; }
size_t vnc_block_size(const vnc_block *b) { return b ? b->size : 0; }

vnc_status vnc_empty_cache(int device) {
  vnc_status st = vnc_check_device(device);
  if (st != VNC_OK) return st;
  if (!vnc_is_initialized()) return VNC_OK;
  vnc_device_drain(device); /* queued kernels may still read freed blocks */
  core_mem *c = &cores[device];
  pthread_mutex_lock(&c->m);
  c->stats.num_sync_all_streams++;
  release_cached(c);
  pthread_mutex_unlock(&c->m);
  return VNC_OK;
}

vnc_status vnc_memory_stats_get(int device, vnc_memory_stats *out) {
  vnc_status st = vnc_check_device(device);
  if (st != VNC_OK) return st;
  if (!vnc_is_initialized()) {
    memset(out, 0, sizeof *out);
    out->capacity = vnc_device_capacity(device);
    return VNC_OK;
  }
  core_mem *c = &cores[device];
  pthread_mutex_lock(&c->m);
  *out = c->stats;
  pthread_mutex_unlock(&c->m);
  return VNC_OK;
}

#define FOR_EACH_STAT_ARRAY(X, s) \
  X((s).allocation) X((s).segment) X((s).active) X((s).allocated_bytes) \
  X((s).reserved_bytes) X((s).active_bytes) X((s).requested_bytes)

vnc_status vnc_memory_reset_peak(int device) {
  vnc_status st = vnc_check_device(device);
  if (st != VNC_OK || !vnc_is_initialized()) return st;
  core_mem *c = &cores[device];
  pthread_mutex_lock(&c->m);
#define RESET_PEAK(a) for (int k = 0; k < VNC_STAT_KINDS; k++) a[k].peak = a[k].current;
  FOR_EACH_STAT_ARRAY(RESET_PEAK, c->stats)
#undef RESET_PEAK
  pthread_mutex_unlock(&c->m);
  return VNC_OK;
}

vnc_status vnc_memory_reset_accumulated(int device) {
  vnc_status st = vnc_check_device(device);
  if (st != VNC_OK || !vnc_is_initialized()) return st;
  core_mem *c = &cores[device];
  pthread_mutex_lock(&c->m);
#define RESET_ACC(a) for (int k = 0; k < VNC_STAT_KINDS; k++) a[k].allocated = a[k].freed = 0;
  FOR_EACH_STAT_ARRAY(RESET_ACC, c->stats)
#undef RESET_ACC
  c->stats.num_alloc_retries = c->stats.num_ooms = 0;
  c->stats.num_device_alloc = c->stats.num_device_free = c->stats.num_sync_all_streams = 0;
  pthread_mutex_unlock(&c->m);
  return VNC_OK;
}
