/* Caching allocator: reuse, alignment, stats, fragmentation, capacity, empty_cache.
 * Run with TORCH_NEURONX_CORE_MEMORY=64M and two cores (set by ctest). */
#include <stdint.h>
#include "check.h"

#define MiB ((size_t)1 << 20)

static vnc_memory_stats stats(void) {
  vnc_memory_stats s;
  vnc_memory_stats_get(0, &s);
  return s;
}

int main(void) {
  CHECK(vnc_device_count() == 2);
  CHECK(vnc_device_capacity(0) == 64 * MiB);
  CHECK(!vnc_is_initialized()); /* counting devices initialises nothing */

  /* Invalid device: the message gives the valid range. */
  void *p;
  vnc_block *b;
  CHECK(vnc_malloc(2, 16, NULL, &p, &b) == VNC_ERR_INVALID_DEVICE);
  CHECK(strstr(vnc_last_error(), "0 to 1") != NULL);
  CHECK(vnc_set_device(-1) == VNC_ERR_INVALID_DEVICE);

  /* Size classes. */
  CHECK(vnc_round_size(1) == 512);
  CHECK(vnc_round_size(512) == 512);
  CHECK(vnc_round_size(513) == 1024);
  CHECK(vnc_round_size(MiB) == MiB);
  CHECK(vnc_round_size(MiB + 1) == MiB + MiB / 4);
  CHECK(vnc_round_size(3 * MiB) == 3 * MiB);
  CHECK(vnc_round_size(17 * MiB) == 18 * MiB);

  /* Zero-size allocations hold nothing. */
  CHECK_OK(vnc_malloc(0, 0, NULL, &p, &b));
  CHECK(p == NULL && b == NULL);
  vnc_free(NULL);

  /* Reuse after free, alignment, exact stats. */
  CHECK_OK(vnc_malloc(0, 4096, NULL, &p, &b));
  CHECK(((uintptr_t)p % VNC_ALIGNMENT) == 0);
  vnc_memory_stats s = stats();
  CHECK(s.allocated_bytes[VNC_STAT_ALL].current == 4096);
  CHECK(s.allocated_bytes[VNC_STAT_SMALL].current == 4096);
  CHECK(s.requested_bytes[VNC_STAT_ALL].current == 4096);
  CHECK(s.reserved_bytes[VNC_STAT_ALL].current == 4096);
  CHECK(s.allocation[VNC_STAT_ALL].current == 1);
  vnc_free(b);
  void *p2;
  vnc_block *b2;
  CHECK_OK(vnc_malloc(0, 4000, NULL, &p2, &b2)); /* same size class: the cached block */
  CHECK(p2 == p);
  s = stats();
  CHECK(s.num_device_alloc == 1);
  CHECK(s.requested_bytes[VNC_STAT_ALL].current == 4000);
  vnc_free(b2);
  s = stats();
  CHECK(s.allocated_bytes[VNC_STAT_ALL].current == 0);
  CHECK(s.reserved_bytes[VNC_STAT_ALL].current == 4096);
  CHECK(s.allocated_bytes[VNC_STAT_ALL].peak == 4096);
  CHECK(s.allocated_bytes[VNC_STAT_ALL].allocated == 8192);
  CHECK(s.allocated_bytes[VNC_STAT_ALL].freed == 8192);

  /* empty_cache returns cached blocks only. */
  void *live;
  vnc_block *live_b;
  CHECK_OK(vnc_malloc(0, 2 * MiB, NULL, &live, &live_b));
  memset(live, 0x5A, 2 * MiB);
  CHECK_OK(vnc_empty_cache(0));
  s = stats();
  CHECK(s.reserved_bytes[VNC_STAT_ALL].current == (int64_t)(2 * MiB));
  CHECK(s.reserved_bytes[VNC_STAT_LARGE].current == (int64_t)(2 * MiB));
  CHECK(s.reserved_bytes[VNC_STAT_SMALL].current == 0);
  CHECK(((unsigned char *)live)[2 * MiB - 1] == 0x5A);
  CHECK_OK(vnc_memory_reset_peak(0));
  s = stats();
  CHECK(s.allocated_bytes[VNC_STAT_ALL].peak == (int64_t)(2 * MiB));

  /* Fragmentation: fill the core with 4 MiB blocks, free every other one; a 8 MiB request
   * cannot reuse a 4 MiB block, so the allocator empties its cache and retries. */
  vnc_block *blocks[32];
  int n = 0;
  while (n < 32 && vnc_malloc(0, 4 * MiB, NULL, &p, &blocks[n]) == VNC_OK) n++;
  CHECK(n == 15); /* 62 MiB free after the live 2 MiB block */
  s = stats();
  CHECK(s.num_ooms == 1);
  CHECK(s.reserved_bytes[VNC_STAT_ALL].current <= (int64_t)(64 * MiB));
  for (int i = 0; i < n; i += 2) vnc_free(blocks[i]);
  int64_t retries = s.num_alloc_retries;
  CHECK_OK(vnc_malloc(0, 8 * MiB, NULL, &p, &b));
  s = stats();
  CHECK(s.num_alloc_retries == retries + 1);
  CHECK(s.allocated_bytes[VNC_STAT_ALL].current == (int64_t)((2 + 8 + 4 * 7) * MiB));
  vnc_free(b);
  for (int i = 1; i < n; i += 2) vnc_free(blocks[i]);

  /* Over capacity: a clear error, and the allocator keeps working afterwards. */
  CHECK(vnc_malloc(0, 65 * MiB, NULL, &p, &b) == VNC_ERR_OUT_OF_MEMORY);
  CHECK(strstr(vnc_last_error(), "capacity of 64.00 MiB") != NULL);
  CHECK(strstr(vnc_last_error(), "Tried to allocate 65.00 MiB") != NULL);
  CHECK_OK(vnc_malloc(0, 32 * MiB, NULL, &p, &b));
  vnc_free(b);

  /* Cores are separate: device 1 has its own capacity and stats. */
  CHECK_OK(vnc_malloc(1, 60 * MiB, NULL, &p, &b));
  vnc_memory_stats s1;
  vnc_memory_stats_get(1, &s1);
  CHECK(s1.allocated_bytes[VNC_STAT_ALL].current == (int64_t)(60 * MiB));
  vnc_free(b);
  vnc_free(live_b);
  CHECK_OK(vnc_empty_cache(0));
  CHECK_OK(vnc_empty_cache(1));
  s = stats();
  CHECK(s.reserved_bytes[VNC_STAT_ALL].current == 0);
  CHECK(s.allocated_bytes[VNC_STAT_ALL].current == 0);
  CHECK_DONE();
}
