/* The hot loops of one CPU tier, compiled once per tier with that tier's -march (see
 * tier.h and runtime/CMakeLists.txt); VNC_TIER_NAME names the table this file exports. Plain
 * C loops that GCC vectorises: the elementwise typed loops generated from vnc/ew_table.h, the
 * canonical block sum of reductions, and the row helpers of softmax and attention. */
/* Integer bodies are generic over signedness: `b == -1` is simply false for unsigned T. */
#pragma GCC diagnostic ignored "-Wtype-limits"
/* 32-byte vector values are passed between static inline helpers only: no ABI is involved. */
#pragma GCC diagnostic ignored "-Wpsabi"
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


/* The 8 lanes of the canonical schedule as one GCC/Clang vector value: lane-wise IEEE adds, so
 * a register of 8 (AVX2, half of AVX-512) or two of 4 (SSE2) compute the same bits. */
typedef float v8f __attribute__((vector_size(32)));

static inline v8f load8(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}

static float lane_tree(v8f l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }

/* f(x - shift) of 8 elements: kind 0 x, 1 x^2. */
#define TERM8(p, kind, sh) ((kind) == 0 ? load8(p) : (load8(p) - (sh)) * (load8(p) - (sh)))

/* Runs of RUN elements summed in 8 interleaved lanes (lane tree ((0+1)+(2+3))+((4+5)+(6+7))),
 * run sums combined pairwise (the schedule of vnc/reduce.h). Kinds 0 and 1 add four full runs
 * side by side (independent chains, the same additions per lane); kinds 2 (|x|^p) and 3 (|x|)
 * go element by element in the same lane order. */
static float block_sum(const float *x, int64_t n, int kind, float shift, float pw) {
  float runs[VNC_REDUCE_BLOCK / RUN + 1];
  int64_t nr = 0, r0 = 0;
  const v8f sh = {shift, shift, shift, shift, shift, shift, shift, shift};
  if (kind == 0 || kind == 1) {
    for (; r0 + 4 * RUN <= n; r0 += 4 * RUN) {
      v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
      const float *p = x + r0;
      if (kind == 0) {
        for (int64_t i = 0; i < RUN; i += 8) {
          a0 += TERM8(p + i, 0, sh);
          a1 += TERM8(p + RUN + i, 0, sh);
          a2 += TERM8(p + 2 * RUN + i, 0, sh);
          a3 += TERM8(p + 3 * RUN + i, 0, sh);
        }
      } else {
        for (int64_t i = 0; i < RUN; i += 8) {
          a0 += TERM8(p + i, 1, sh);
          a1 += TERM8(p + RUN + i, 1, sh);
          a2 += TERM8(p + 2 * RUN + i, 1, sh);
          a3 += TERM8(p + 3 * RUN + i, 1, sh);
        }
      }
      runs[nr++] = lane_tree(a0);
      runs[nr++] = lane_tree(a1);
      runs[nr++] = lane_tree(a2);
      runs[nr++] = lane_tree(a3);
    }
  }
  for (; r0 < n; r0 += RUN) {
    const int64_t m = n - r0 < RUN ? n - r0 : RUN;
    const float *xr = x + r0;
    v8f a = {0};
    int64_t i = 0;
    if (kind == 0)
      for (; i + 8 <= m; i += 8) a += TERM8(xr + i, 0, sh);
    else if (kind == 1)
      for (; i + 8 <= m; i += 8) a += TERM8(xr + i, 1, sh);
    float l[8];
    memcpy(l, &a, sizeof l);
    for (; i < m; i++) {
      const float v = xr[i] - (kind == 0 ? 0.0f : shift);
      l[i & 7] += kind == 1 ? v * v : kind == 2 ? powf(fabsf(v), pw) : kind == 3 ? fabsf(v) : v;
    }
    memcpy(&a, l, sizeof l);
    runs[nr++] = lane_tree(a);
  }
  return vnc_pairwise_sum(runs, nr);
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

typedef int32_t v8i __attribute__((vector_size(32)));

/* Lane-wise: v where v is NaN or above m, else m (NaN, once in a lane, stays). */
static inline v8f max_nan(v8f m, v8f v) {
  const v8i take = (v != v) | (v > m);
  return (v8f)(((v8i)v & take) | ((v8i)m & ~take));
}

static float row_max(const float *x, int64_t n) {
  const v8f ninf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  v8f m0 = ninf, m1 = ninf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = max_nan(m0, load8(x + i));
    m1 = max_nan(m1, load8(x + i + 8));
  }
  m0 = max_nan(m0, m1);
  float m = -INFINITY;
  for (int k = 0; k < 8; k++) m = m != m ? m : (m0[k] != m0[k] || m0[k] > m) ? m0[k] : m;
  for (; i < n; i++) m = m != m ? m : (x[i] != x[i] || x[i] > m) ? x[i] : m;
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
