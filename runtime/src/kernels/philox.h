/* Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw, "Parallel
 * Random Numbers: As Easy as 1, 2, 3" (SC'11), with the round constants given there. */
#ifndef VNC_KERNELS_PHILOX_H
#define VNC_KERNELS_PHILOX_H

#include <stdint.h>

static inline void vnc_philox4x32_10(const uint32_t in[4], const uint32_t key_in[2], uint32_t out[4]) {
  uint32_t c0 = in[0], c1 = in[1], c2 = in[2], c3 = in[3];
  uint32_t k0 = key_in[0], k1 = key_in[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u; /* golden ratio */
    k1 += 0xBB67AE85u; /* sqrt(3) - 1 */
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* Words 4*round .. 4*round+3 of element `index` under (seed, offset): the round fills the
 * counter's upper half, so a sampler that needs more than four words per element (poisson's
 * rejection loop) draws them without touching other elements' counters. */
static inline void vnc_philox_element_round(uint64_t seed, uint64_t offset, uint64_t index, uint64_t round,
                                            uint32_t out[4]) {
  uint64_t c = offset + index;
  const uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), (uint32_t)round, (uint32_t)(round >> 32)};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  vnc_philox4x32_10(ctr, key, out);
}

/* The four 32-bit words of element `index` under (seed, offset). */
static inline void vnc_philox_element(uint64_t seed, uint64_t offset, uint64_t index, uint32_t out[4]) {
  vnc_philox_element_round(seed, offset, index, 0, out);
}

#endif
