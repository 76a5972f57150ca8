/* The hot loops of one CPU tier, compiled once per tier with that tier's -march (see
 * tier.h and runtime/CMakeLists.txt); VNC_TIER_NAME names the table this file exports. Plain
 * C loops that GCC vectorises: the elementwise typed loops generated from vnc/ew_table.h, the
 * canonical block sum of reductions, and the row helpers of softmax and attention. */
/* Integer bodies are generic over signedness: `b == -1` is simply false for unsigned T. */
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <math.h>
#include <string.h>
#include "tier.h"
#include "vnc/ew_scalar.h"
#include "vnc/reduce.h"

#ifndef VNC_TIER_NAME
#define VNC_TIER_NAME baseline
#endif
#define TIER_CAT2(a, b) a##b
#define TIER_CAT(a, b) TIER_CAT2(a, b)
#define TIER_STR2(a) #a
#define TIER_STR(a) TIER_STR2(a)

/* ---------------------------------------------------------------- elementwise loops */

/* Complex loops stay scalar: GCC 12 vectorises a complex product into fmaddsub (a fused
 * multiply-add) even under -ffp-contract=off, which would change bits between tiers. */
#if defined(__GNUC__) && !defined(__clang__)
#define EW_ATTR_C64 __attribute__((optimize("no-tree-vectorize")))
#else
#define EW_ATTR_C64
#endif
#define EW_ATTR_F32
#define EW_ATTR_I64
#define EW_ATTR_I32
#define EW_ATTR_I16
#define EW_ATTR_I8
#define EW_ATTR_U8
#define EW_ATTR_B

#define EW_DEF_KERNEL(CLS, TT, DT, COL, name, nin, res, F, I, B, C)                      \
  EW_ATTR_##CLS static void ew_##name##_##CLS(int64_t n, char *out, char *const *in, const vnc_ew_params *P) { \
    typedef TT T;                                                                         \
    typedef EW_RES_##res(TT) R;                                                           \
    R *o = (R *)out;                                                                      \
    const T *x = (const T *)in[0];                                                        \
    const T *y = (nin) > 1 ? (const T *)in[1] : x;                                        \
    const T *z = (nin) > 2 ? (const T *)in[2] : x;                                        \
    (void)P;                                                                              \
    for (int64_t i = 0; i < n; i++) {                                                     \
      T a = x[i], b = y[i], c = z[i];                                                     \
      (void)a; (void)b; (void)c;                                                          \
      o[i] = _Generic((EW_BODY_##COL(F, I, B, C)), vnc_ew_na: (R)0,                       \
                      default: (EW_BODY_##COL(F, I, B, C)));                              \
    }                                                                                     \
  }
#define EW_DEF_OP(name, nin, res, F, I, B, C) EW_CLASSES(EW_DEF_KERNEL, name, nin, res, F, I, B, C)
VNC_EW_TABLE(EW_DEF_OP)

/* ---------------------------------------------------------------- reductions */

#define RUN 128 /* elements per 8-lane run */

static float pairwise(float *v, int64_t n) {
  while (n > 1) {
    int64_t h = 0;
    for (int64_t i = 0; i + 1 < n; i += 2) v[h++] = v[i] + v[i + 1];
    if (n & 1) v[h++] = v[n - 1];
    n = h;
  }
  return n ? v[0] : 0.0f;
}

/* The lanes of one run: l[k] += f(x[i + k]) for i = 0, 8, 16, ... (m a multiple of 8). */
#define RUN_LANES(l, xr, m, kind, shift)                                   \
  do {                                                                     \
    if ((kind) == 0)                                                       \
      for (int64_t i_ = 0; i_ < (m); i_ += 8)                              \
        for (int k_ = 0; k_ < 8; k_++) (l)[k_] += (xr)[i_ + k_];           \
    else if ((kind) == 1)                                                  \
      for (int64_t i_ = 0; i_ < (m); i_ += 8)                              \
        for (int k_ = 0; k_ < 8; k_++) {                                   \
          const float v_ = (xr)[i_ + k_] - (shift);                        \
          (l)[k_] += v_ * v_;                                              \
        }                                                                  \
    else                                                                   \
      for (int64_t i_ = 0; i_ < (m); i_ += 8)                              \
        for (int k_ = 0; k_ < 8; k_++) (l)[k_] += fabsf((xr)[i_ + k_] - (shift)); \
  } while (0)

static float lane_tree(const float *l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }

/* Runs of RUN elements summed in 8 interleaved lanes (lane tree ((0+1)+(2+3))+((4+5)+(6+7))),
 * run sums combined pairwise (the schedule of vnc/reduce.h). Four full runs are summed side by
 * side: independent chains of additions, the same additions per lane, so the same bits. */
static float block_sum(const float *x, int64_t n, int kind, float shift, float pw) {
  float runs[VNC_REDUCE_BLOCK / RUN + 1];
  int64_t nr = 0, r0 = 0;
  if (kind == 0) shift = 0.0f;
  if (kind != 2) {
    for (; r0 + 4 * RUN <= n; r0 += 4 * RUN) {
      float l[4][8] = {{0}};
      for (int64_t i = 0; i < RUN; i += 8)
        for (int q = 0; q < 4; q++)
          for (int k = 0; k < 8; k++) {
            const float v = x[r0 + q * RUN + i + k] - shift;
            l[q][k] += kind == 0 ? v : kind == 1 ? v * v : fabsf(v);
          }
      for (int q = 0; q < 4; q++) runs[nr++] = lane_tree(l[q]);
    }
  }
  for (; r0 < n; r0 += RUN) {
    int64_t m = n - r0 < RUN ? n - r0 : RUN;
    float l[8] = {0};
    const float *xr = x + r0;
    int64_t i = 0;
    if (kind != 2) {
      RUN_LANES(l, xr, m & ~(int64_t)7, kind, shift);
      i = m & ~(int64_t)7;
    }
    for (; i < m; i++) {
      float v = xr[i] - shift;
      l[i & 7] += kind == 1 ? v * v : kind == 2 ? powf(fabsf(v), pw) : kind == 3 ? fabsf(v) : v;
    }
    runs[nr++] = lane_tree(l);
  }
  return pairwise(runs, nr);
}

static void tile_run(float (*lanes)[VNC_TILE_OUTPUTS], const float *x, int64_t ld, int64_t nrows, int64_t nt,
                     const float *shift) {
  for (int64_t r = 0; r < nrows; r++) {
    float *l = lanes[r & 7];
    const float *xr = x + r * ld;
    if (shift)
      for (int64_t j = 0; j < nt; j++) {
        const float v = xr[j] - shift[j];
        l[j] += v * v;
      }
    else
      for (int64_t j = 0; j < nt; j++) l[j] += xr[j];
  }
}

/* ---------------------------------------------------------------- rows (softmax, attention) */

#define LANES 16

static float row_max(const float *x, int64_t n) {
  float l[LANES];
  for (int k = 0; k < LANES; k++) l[k] = -INFINITY;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) {
      const float v = x[i + k];
      l[k] = (v != v || v > l[k]) ? v : l[k];
    }
  for (; i < n; i++) l[0] = (x[i] != x[i] || x[i] > l[0]) ? x[i] : l[0];
  float m = l[0];
  for (int k = 1; k < LANES; k++) m = m != m ? m : (l[k] != l[k] || l[k] > m) ? l[k] : m;
  return m;
}

static void exp_shift(float *y, const float *x, float shift, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = vnc_expf(x[i] - shift);
}

static void norm_row(float *y, const float *x, int64_t n, float mean, float rstd, const float *w, const float *b) {
  if (w && b)
    for (int64_t i = 0; i < n; i++) y[i] = ((x[i] - mean) * rstd) * w[i] + b[i];
  else if (w)
    for (int64_t i = 0; i < n; i++) y[i] = ((x[i] - mean) * rstd) * w[i];
  else if (b)
    for (int64_t i = 0; i < n; i++) y[i] = ((x[i] - mean) * rstd) + b[i];
  else
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * rstd;
}

/* ---------------------------------------------------------------- the table */

#define EW_KERNEL_ENTRY(CLS, TT, DT, COL, name) ew_##name##_##CLS,
#define EW_ROW(name, nin, res, F, I, B, C) {EW_CLASSES(EW_KERNEL_ENTRY, name)},

const vnc_tier_ops TIER_CAT(vnc_tier_ops_, VNC_TIER_NAME) = {
    .name = TIER_STR(VNC_TIER_NAME),
    .ew = {VNC_EW_TABLE(EW_ROW)},
    .block_sum = block_sum,
    .tile_run = tile_run,
    .row_max = row_max,
    .exp_shift = exp_shift,
    .norm_row = norm_row,
};
