/* Per-tier kernel tables (kernel-internal). tier_kernels.c is compiled once per x86-64 tier
 * (AVX-512, AVX2, baseline SSE2; only baseline on other architectures) with that tier's
 * -march, so the loops vectorise for it; tier.c picks one table when the runtime initialises
 * (TORCH_NEURONX_ISA caps it). Every tier computes the same bits: the bodies use IEEE-exact
 * operations only, no FMA contraction, and the same order of operations per element. */
#ifndef VNC_TIER_H
#define VNC_TIER_H

#include <stddef.h>
#include <stdint.h>
#include "ew_classes.h"

#define VNC_TILE_OUTPUTS 64 /* outputs per tile of the column sums */

typedef struct vnc_tier_ops {
  const char *name;
  vnc_ew_kernel ew[VNC_EW_COUNT][EW_NCLS];
  /* The canonical sum of one block of n <= VNC_REDUCE_BLOCK terms f(x[i] - shift) (reduce.c);
   * kind: 0 x, 1 x^2, 2 |x|^pw, 3 |x|. */
  float (*block_sum)(const float *x, int64_t n, int kind, float shift, float pw);
  /* One run of the tiled column sums (reduce.c): rows k < nrows of x (row k at x + k * ld)
   * added to lanes[k % 8][j], j < nt; with shift, (x - shift[j])^2 is added instead. */
  void (*tile_run)(float (*lanes)[VNC_TILE_OUTPUTS], const float *x, int64_t ld, int64_t nrows, int64_t nt,
                   const float *shift);
  /* Largest of x[0..n), NaN if any is NaN, -inf if n == 0. */
  float (*row_max)(const float *x, int64_t n);
  /* y[i] = exp(x[i] - shift) (vnc_expf). y may equal x. */
  void (*exp_shift)(float *y, const float *x, float shift, int64_t n);
  /* Layer norm of a row: y[i] = (x[i] - mean) * rstd, then * w[i], then + b[i] (w, b may be
   * NULL). y may equal x. */
  void (*norm_row)(float *y, const float *x, int64_t n, float mean, float rstd, const float *w, const float *b);
} vnc_tier_ops;

enum { VNC_TIER_BASELINE, VNC_TIER_AVX2, VNC_TIER_AVX512, VNC_TIER_COUNT };

/* Combines v[0..n) pairwise in place: ((v0 + v1) + (v2 + v3)) + ... (the canonical schedule's
 * combining step, shared by reduce.c and the tier tables). */
static inline float vnc_pairwise_sum(float *v, int64_t n) {
  while (n > 1) {
    int64_t h = 0;
    for (int64_t i = 0; i + 1 < n; i += 2) v[h++] = v[i] + v[i + 1];
    if (n & 1) v[h++] = v[n - 1];
    n = h;
  }
  return n ? v[0] : 0.0f;
}

extern const vnc_tier_ops vnc_tier_ops_baseline;
#if defined(VNC_HAVE_X86_TIERS)
extern const vnc_tier_ops vnc_tier_ops_avx2, vnc_tier_ops_avx512;
#endif

/* The table in use (baseline until the runtime initialises). */
const vnc_tier_ops *vnc_tier(void);

#endif
