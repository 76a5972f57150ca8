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
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include "dtype.h"
#include "internal.h"
#include "tier.h"
#include "philox.h"
#include "vnc/ew_scalar.h"
#include "vnc/kernels.h"
#include "vnc/reduce.h"

#ifndef VNC_TIER_NAME
#define VNC_TIER_NAME baseline
#endif
#define TIER_CAT2(a, b) a##b
#define TIER_CAT(a, b) TIER_CAT2(a, b)
#define TIER_STR2(a) #a
#define TIER_STR(a) TIER_STR2(a)

/* The tier's native vector: one AVX-512 register, one AVX2 one, or one SSE2 one (GCC spills
 * generic vectors wider than the hardware's). */
#if defined(__AVX512F__)
#define MM_W 16
#elif defined(__AVX__)
#define MM_W 8
#else
#define MM_W 4
#endif
typedef float mm_vec __attribute__((vector_size(MM_W * 4)));
typedef int32_t mm_ivec __attribute__((vector_size(MM_W * 4)));

static inline mm_vec mm_load(const float *p) {
  mm_vec v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* Lane-wise v > m ? v : m: one max instruction on x86 (its rule for unordered operands, the
 * second, is this expression's); a select elsewhere. */
static inline mm_vec mm_max(mm_vec m, mm_vec v) {
#if defined(__AVX512F__)
  return (mm_vec)_mm512_max_ps((__m512)v, (__m512)m);
#elif defined(__AVX__)
  return (mm_vec)_mm256_max_ps((__m256)v, (__m256)m);
#elif defined(__SSE2__)
  return (mm_vec)_mm_max_ps((__m128)v, (__m128)m);
#else
  const mm_ivec take = v > m;
  return (mm_vec)(((mm_ivec)v & take) | ((mm_ivec)m & ~take));
#endif
}

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

/* The bodies read their parameters through P, a local copy: reads of a local object are safe
 * to hoist and to speculate, so a parameter read in one arm of a select (leaky_relu's slope)
 * does not keep GCC from vectorising the loop. */
#define EW_DEF_KERNEL(CLS, TT, DT, COL, name, nin, res, F, I, B, C)                      \
  EW_ATTR_##CLS static void ew_##name##_##CLS(int64_t n, char *out, char *const *in, const vnc_ew_params *P_) { \
    typedef TT T;                                                                         \
    typedef EW_RES_##res(TT) R;                                                           \
    const vnc_ew_params params_ = *P_, *P = &params_;                                     \
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

/* exp over blocks of RANGE_BLOCK elements (softmax's and attention's exp): a block whose
 * arguments ARG (an expression of I) all lie in vnc_expf_bounded's domain takes it (the same
 * bits, half the operations); a block holding anything else (far tails, the -inf of masks,
 * NaN) takes vnc_expf. One compare per element decides. OUT is a statement using e, the exp
 * of element I. */
#define RANGE_BLOCK 256
#define EXP_BLOCKED(I, n, ARG, OUT)                                                         \
  for (int64_t i0_ = 0; i0_ < (n); i0_ += RANGE_BLOCK) {                                    \
    const int64_t i1_ = i0_ + RANGE_BLOCK < (n) ? i0_ + RANGE_BLOCK : (n);                  \
    int32_t ok_ = 1;                                                                        \
    for (int64_t I = i0_; I < i1_; I++) ok_ &= vnc_expf_bounded_ok(ARG);                    \
    if (ok_)                                                                                \
      for (int64_t I = i0_; I < i1_; I++) {                                                 \
        const float e = vnc_expf_bounded(ARG);                                              \
        OUT;                                                                                \
      }                                                                                     \
    else                                                                                    \
      for (int64_t I = i0_; I < i1_; I++) {                                                 \
        const float e = vnc_expf(ARG);                                                      \
        OUT;                                                                                \
      }                                                                                     \
  }

/* The float32 loops of the rows of VNC_EW_FAST_TABLE (vnc/ew_scalar.h): per block of
 * RANGE_BLOCK elements, the fast form when every input is in its domain, else the table's
 * loop above (the same bits either way). They replace the generated entries in the table. */
#define EW_FAST_KERNEL(name, nin, IN_DOMAIN, FAST)                                                   \
  static void ew_##name##_F32_fast(int64_t n, char *out, char *const *in, const vnc_ew_params *P) { \
    const float *xa = (const float *)in[0], *xb = (nin) > 1 ? (const float *)in[1] : xa;            \
    float *o = (float *)out;                                                                        \
    for (int64_t i0 = 0; i0 < n; i0 += RANGE_BLOCK) {                                               \
      const int64_t m = n - i0 < RANGE_BLOCK ? n - i0 : RANGE_BLOCK;                                \
      const float *pa = xa + i0, *pb = xb + i0;                                                     \
      float *po = o + i0;                                                                           \
      int32_t ok = 1;                                                                               \
      for (int64_t i = 0; i < m; i++) {                                                             \
        const float a = pa[i], b = pb[i];                                                           \
        (void)a; (void)b;                                                                           \
        ok &= IN_DOMAIN;                                                                            \
      }                                                                                             \
      if (ok) {                                                                                     \
        for (int64_t i = 0; i < m; i++) {                                                           \
          const float a = pa[i], b = pb[i];                                                         \
          (void)a; (void)b;                                                                         \
          po[i] = FAST;                                                                             \
        }                                                                                           \
      } else {                                                                                      \
        char *const blk[2] = {(char *)pa, (char *)pb};                                              \
        ew_##name##_F32(m, (char *)po, blk, P);                                                     \
      }                                                                                             \
    }                                                                                               \
  }
VNC_EW_FAST_TABLE(EW_FAST_KERNEL)

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

#define PF_RUNS 32 /* block_sum prefetches this many runs ahead (16 KB: a DRAM latency of adds) */

/* K full runs from p side by side (K independent chains, the same additions per lane as one
 * run at a time), their lane trees into out[0..K). K and kind are constants after inlining. */
static inline __attribute__((always_inline)) void runs_side_by_side(const float *p, int K, int kind, v8f sh,
                                                                    float *out) {
  v8f a[8] = {{0}};
  for (int64_t i = 0; i < RUN; i += 8) {
    /* the next K runs, a line per 2 runs per step: the loads here stride across the page, which
     * the hardware's stream prefetcher follows poorly */
    for (int j = 0; j < K / 2; j++) __builtin_prefetch(p + PF_RUNS * RUN + i * K + j * 16);
    for (int k = 0; k < K; k++) a[k] += TERM8(p + k * RUN + i, kind, sh);
  }
  for (int k = 0; k < K; k++) out[k] = lane_tree(a[k]);
}

/* Runs of RUN elements summed in 8 interleaved lanes (lane tree ((0+1)+(2+3))+((4+5)+(6+7))),
 * run sums combined pairwise (the schedule of vnc/reduce.h). Kinds 0 and 1 add full runs eight,
 * four, two at a time side by side (enough independent chains to keep the adders busy); kinds 2
 * (|x|^p) and 3 (|x|) go element by element in the same lane order. */
static float block_sum(const float *x, int64_t n, int kind, float shift, float pw) {
  float runs[VNC_REDUCE_BLOCK / RUN + 1];
  int64_t nr = 0, r0 = 0;
  const v8f sh = {shift, shift, shift, shift, shift, shift, shift, shift};
  if (kind == 0 || kind == 1) {
    for (int K = 8; K >= 2; K /= 2) {
      for (; r0 + K * RUN <= n; r0 += K * RUN, nr += K) {
        if (kind == 0) {
          if (K == 8) runs_side_by_side(x + r0, 8, 0, sh, runs + nr);
          else if (K == 4) runs_side_by_side(x + r0, 4, 0, sh, runs + nr);
          else runs_side_by_side(x + r0, 2, 0, sh, runs + nr);
        } else {
          if (K == 8) runs_side_by_side(x + r0, 8, 1, sh, runs + nr);
          else if (K == 4) runs_side_by_side(x + r0, 4, 1, sh, runs + nr);
          else runs_side_by_side(x + r0, 2, 1, sh, runs + nr);
        }
      }
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

/* The first m < 8 of p, zeros after: adding +0.0 leaves a lane as it was (a lane that starts at
 * +0.0 never holds -0.0), so a masked tail gives block_sum's lane values. */
static inline v8f load8_head(const float *p, int64_t m) {
  float b[8] = {0};
  memcpy(b, p, sizeof(float) * (size_t)m);
  return load8(b);
}

/* Rows of at most one run, four side by side (independent chains); longer rows one by one. */
static void row_sums(const float *x, int64_t ld, int64_t n, int64_t rows, float *out) {
  int64_t k = 0;
  if (n <= RUN) {
    const int64_t full = n & ~(int64_t)7, tail = n - full;
    for (; k + 4 <= rows; k += 4) {
      const float *p = x + k * ld;
      v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
      for (int64_t i = 0; i < full; i += 8) {
        a0 += load8(p + i);
        a1 += load8(p + ld + i);
        a2 += load8(p + 2 * ld + i);
        a3 += load8(p + 3 * ld + i);
      }
      if (tail) {
        a0 += load8_head(p + full, tail);
        a1 += load8_head(p + ld + full, tail);
        a2 += load8_head(p + 2 * ld + full, tail);
        a3 += load8_head(p + 3 * ld + full, tail);
      }
      out[k] = lane_tree(a0);
      out[k + 1] = lane_tree(a1);
      out[k + 2] = lane_tree(a2);
      out[k + 3] = lane_tree(a3);
    }
  }
  for (; k < rows; k++) out[k] = block_sum(x + k * ld, n, 0, 0.0f, 0.0f);
}

/* ---------------------------------------------------------------- column extremes (reduce.c) */

/* Columns [j, j + NV * MM_W) over rows [0, nrows): the running extremes and indices held in NV
 * native vectors; NV, mx and the index constants per specialisation. */
static inline __attribute__((always_inline)) void extreme_cols(float *m, int32_t *idx, const float *x, int64_t ld,
                                                               int64_t nrows, int64_t j, int NV, int mx, int32_t k0) {
  mm_vec c[4];
  mm_ivec id[4];
  for (int v = 0; v < NV; v++) {
    c[v] = mm_load(m + j + v * MM_W);
    if (idx) memcpy(&id[v], idx + j + v * MM_W, sizeof id[v]);
  }
  for (int64_t r = 0; r < nrows; r++) {
    const mm_ivec kv = (mm_ivec){0} + (k0 + (int32_t)r);
    for (int v = 0; v < NV; v++) {
      const mm_vec x1 = mm_load(x + r * ld + j + v * MM_W);
      const mm_ivec take = (c[v] == c[v]) & ((x1 != x1) | (mx ? x1 > c[v] : x1 < c[v]));
      c[v] = (mm_vec)(((mm_ivec)x1 & take) | ((mm_ivec)c[v] & ~take));
      if (idx) id[v] = (kv & take) | (id[v] & ~take);
    }
  }
  for (int v = 0; v < NV; v++) {
    memcpy(m + j + v * MM_W, &c[v], sizeof c[v]);
    if (idx) memcpy(idx + j + v * MM_W, &id[v], sizeof id[v]);
  }
}

/* Blocks of 64 rows (read once per column block, in L1 between blocks), four native vectors of
 * columns at a time in registers; the last columns one vector, then one by one. */
static inline __attribute__((always_inline)) void tile_extreme_k(float *m, int32_t *idx, const float *x, int64_t ld,
                                                                 int64_t nrows, int64_t nt, int mx, int32_t k0) {
  const int64_t j4 = nt / (4 * MM_W) * (4 * MM_W), jv = nt / MM_W * MM_W;
  for (int64_t r0 = 0; r0 < nrows; r0 += 64) {
    const int64_t nr = nrows - r0 < 64 ? nrows - r0 : 64;
    const float *xb = x + r0 * ld;
    const int32_t kb = k0 + (int32_t)r0;
    int64_t j = 0;
    for (; j < j4; j += 4 * MM_W) extreme_cols(m, idx, xb, ld, nr, j, 4, mx, kb);
    for (; j < jv; j += MM_W) extreme_cols(m, idx, xb, ld, nr, j, 1, mx, kb);
    for (int64_t r = 0; r < nr; r++)
      for (int64_t q = jv; q < nt; q++) {
        const float v = xb[r * ld + q], c = m[q];
        if (c == c && (v != v || (mx ? v > c : v < c))) {
          m[q] = v;
          if (idx) idx[q] = kb + (int32_t)r;
        }
      }
  }
}

static void tile_extreme(float *m, int32_t *idx, const float *x, int64_t ld, int64_t nrows, int64_t nt, int mx,
                         int32_t k0) {
  if (mx && idx) tile_extreme_k(m, idx, x, ld, nrows, nt, 1, k0);
  else if (mx) tile_extreme_k(m, NULL, x, ld, nrows, nt, 1, k0);
  else if (idx) tile_extreme_k(m, idx, x, ld, nrows, nt, 0, k0);
  else tile_extreme_k(m, NULL, x, ld, nrows, nt, 0, k0);
}

/* ---------------------------------------------------------------- transposes (copy.c) */

/* transpose_<T>: 8 x 8 tiles of T as eight vectors of 8, unpacked in pairs, quads and halves
 * (a transpose in registers); the edges element by element. */
#define TRANSPOSE8(T)                                                                               \
  typedef T v8_##T __attribute__((vector_size(8 * sizeof(T))));                                    \
  static void transpose_##T(char *d, int64_t dq, const char *s, int64_t s0, int64_t ni, int64_t nq) { \
    const int64_t es = sizeof(T), i8 = ni & ~(int64_t)7, q8 = nq & ~(int64_t)7;                    \
    for (int64_t i0 = 0; i0 < i8; i0 += 8) {                                                        \
      for (int64_t q0 = 0; q0 < q8; q0 += 8) {                                                      \
        v8_##T r[8], t[8], u[8];                                                                    \
        for (int k = 0; k < 8; k++) memcpy(&r[k], s + (i0 + k) * s0 + q0 * es, sizeof r[k]);        \
        for (int k = 0; k < 8; k += 2) {                                                            \
          t[k] = __builtin_shufflevector(r[k], r[k + 1], 0, 8, 1, 9, 4, 12, 5, 13);                 \
          t[k + 1] = __builtin_shufflevector(r[k], r[k + 1], 2, 10, 3, 11, 6, 14, 7, 15);           \
        }                                                                                           \
        for (int k = 0; k < 8; k += 4)                                                              \
          for (int h = 0; h < 2; h++) {                                                             \
            u[k + 2 * h] = __builtin_shufflevector(t[k + h], t[k + h + 2], 0, 1, 8, 9, 4, 5, 12, 13); \
            u[k + 2 * h + 1] = __builtin_shufflevector(t[k + h], t[k + h + 2], 2, 3, 10, 11, 6, 7, 14, 15); \
          }                                                                                         \
        for (int k = 0; k < 4; k++) { /* u[k]: columns k, k + 4 of rows 0-3; u[k + 4]: of rows 4-7 */ \
          const v8_##T lo = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);      \
          const v8_##T hi = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);    \
          memcpy(d + (q0 + k) * dq + i0 * es, &lo, sizeof lo);                                      \
          memcpy(d + (q0 + k + 4) * dq + i0 * es, &hi, sizeof hi);                                  \
        }                                                                                           \
      }                                                                                             \
      for (int64_t q = q8; q < nq; q++)                                                             \
        for (int k = 0; k < 8; k++) memcpy(d + q * dq + (i0 + k) * es, s + (i0 + k) * s0 + q * es, es); \
    }                                                                                               \
    for (int64_t i = i8; i < ni; i++)                                                               \
      for (int64_t q = 0; q < nq; q++) memcpy(d + q * dq + i * es, s + i * s0 + q * es, es);       \
  }
TRANSPOSE8(uint8_t)
TRANSPOSE8(uint16_t)
TRANSPOSE8(uint32_t)
TRANSPOSE8(uint64_t)

static void transpose(int64_t es, char *d, int64_t dq, const char *s, int64_t s0, int64_t ni, int64_t nq) {
  switch (es) {
    case 1: transpose_uint8_t(d, dq, s, s0, ni, nq); break;
    case 2: transpose_uint16_t(d, dq, s, s0, ni, nq); break;
    case 4: transpose_uint32_t(d, dq, s, s0, ni, nq); break;
    default: transpose_uint64_t(d, dq, s, s0, ni, nq); break;
  }
}

/* Columns [j0, j0 + 64) of rows [0, nrows): explicit native vectors with a fixed count, so each
 * row costs its loads and adds only (a loop over a run-time count of columns paid its setup
 * and alias checks once per row). */
#define TILE_BLOCK 64
static inline void tile_block(float (*lanes)[VNC_TILE_OUTPUTS], const float *x, int64_t ld, int64_t nrows,
                              int64_t j0, const float *shift) {
  mm_vec sh[TILE_BLOCK / MM_W];
  for (int v = 0; v < TILE_BLOCK / MM_W; v++) sh[v] = shift ? mm_load(shift + j0 + v * MM_W) : (mm_vec){0};
  for (int64_t r = 0; r < nrows; r++) {
    float *l = lanes[r & 7] + j0;
    const float *xr = x + r * ld + j0;
    for (int v = 0; v < TILE_BLOCK / MM_W; v++) {
      mm_vec a = mm_load(l + v * MM_W), t = mm_load(xr + v * MM_W);
      if (shift) {
        t = t - sh[v];
        t = t * t;
      }
      a = a + t;
      memcpy(l + v * MM_W, &a, sizeof a);
    }
  }
}

static void tile_run(float (*lanes)[VNC_TILE_OUTPUTS], const float *x, int64_t ld, int64_t nrows, int64_t nt,
                     const float *shift) {
  int64_t j0 = 0;
  for (; j0 + TILE_BLOCK <= nt; j0 += TILE_BLOCK) {
    if (shift) tile_block(lanes, x, ld, nrows, j0, shift);
    else tile_block(lanes, x, ld, nrows, j0, NULL);
  }
  for (int64_t r = 0; r < nrows && j0 < nt; r++) {
    float *l = lanes[r & 7];
    const float *xr = x + r * ld;
    if (shift)
      for (int64_t j = j0; j < nt; j++) {
        const float v = xr[j] - shift[j];
        l[j] += v * v;
      }
    else
      for (int64_t j = j0; j < nt; j++) l[j] += xr[j];
  }
}

/* ---------------------------------------------------------------- rows (softmax, attention) */

typedef int32_t v8i __attribute__((vector_size(32)));

/* Lane-wise: v where v is NaN or above m, else m (NaN, once in a lane, stays). */
static inline v8f max_nan(v8f m, v8f v) {
  const v8i take = (v != v) | (v > m);
  return (v8f)(((v8i)v & take) | ((v8i)m & ~take));
}

/* A plain lane-wise max (exact, so any split of the lanes gives the same value) and an
 * OR-accumulated NaN flag, in two chains of native vectors: 3 operations per vector. */
/* ---------------------------------------------------------------- float16 conversions */

/* Dense float16 <-> float32 runs: F16C's conversions (round to nearest even, as dtype.h's exact
 * arithmetic), eight at a time; a group holding a NaN goes through dtype.h, whose NaN bits every
 * tier then shares. */
/* bfloat16 <-> float32: dtype.h's widening (a shift) and narrowing (round to nearest even, any NaN
 * to 0x7FC0) as integer operations without branches, which the compiler vectorises. */
static void bf16_to_f32(float *d, const uint16_t *s, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const uint32_t w = (uint32_t)s[i] << 16;
    memcpy(d + i, &w, 4);
  }
}
static void f32_to_bf16(uint16_t *d, const float *s, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t w;
    memcpy(&w, s + i, 4);
    const uint32_t r = (w + 0x7FFFu + ((w >> 16) & 1u)) >> 16;
    d[i] = (uint16_t)((w & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : r);
  }
}

static void f16_to_f32(float *d, const uint16_t *s, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  for (; i + 16 <= n; i += 16) { /* sixteen at a time, one mask test for inf/NaN */
    const __m256i h = _mm256_loadu_si256((const __m256i *)(s + i));
    const __m256i expo = _mm256_and_si256(h, _mm256_set1_epi16(0x7C00));
    if (_mm256_cmpeq_epi16_mask(expo, _mm256_set1_epi16(0x7C00)))
      for (int k = 0; k < 16; k++) d[i + k] = vnc_f16_to_f32(s[i + k]);
    else
      _mm512_storeu_ps(d + i, _mm512_cvtph_ps(h));
  }
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128((const __m128i *)(s + i));
    const __m128i expo = _mm_and_si128(h, _mm_set1_epi16(0x7C00));
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(expo, _mm_set1_epi16(0x7C00)))) /* inf or NaN */
      for (int k = 0; k < 8; k++) d[i + k] = vnc_f16_to_f32(s[i + k]);
    else
      _mm256_storeu_ps(d + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; i++) d[i] = vnc_f16_to_f32(s[i]);
}

static void f32_to_f16(uint16_t *d, const float *s, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(s + i);
    if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q))
      for (int k = 0; k < 16; k++) d[i + k] = vnc_f32_to_f16(s[i + k]);
    else
      _mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(s + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
      for (int k = 0; k < 8; k++) d[i + k] = vnc_f32_to_f16(s[i + k]);
    else
      _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; i++) d[i] = vnc_f32_to_f16(s[i]);
}

/* The largest of x[0..n) (of -x[0..n) with neg, negated back: the smallest), NaN if any is NaN. */
static inline float row_extreme(const float *x, int64_t n, int neg) {
  mm_vec m0, m1;
  mm_ivec bad0 = {0}, bad1 = {0};
  for (int k = 0; k < MM_W; k++) m0[k] = m1[k] = -INFINITY;
  int64_t i = 0;
  for (; i + 2 * MM_W <= n; i += 2 * MM_W) {
    const mm_vec v0 = neg ? -mm_load(x + i) : mm_load(x + i), v1 = neg ? -mm_load(x + i + MM_W) : mm_load(x + i + MM_W);
    m0 = mm_max(m0, v0);
    bad0 |= v0 != v0;
    m1 = mm_max(m1, v1);
    bad1 |= v1 != v1;
  }
  m0 = mm_max(m0, m1);
  bad0 |= bad1;
  float m = -INFINITY;
  int32_t bad = 0;
  for (int k = 0; k < MM_W; k++) {
    m = m0[k] > m ? m0[k] : m;
    bad |= bad0[k];
  }
  for (; i < n; i++) {
    const float v = neg ? -x[i] : x[i];
    m = v > m ? v : m;
    bad |= v != v;
  }
  return bad ? NAN : neg ? -m : m;
}

static float row_max(const float *x, int64_t n) { return row_extreme(x, n, 0); }
static float row_min(const float *x, int64_t n) { return row_extreme(x, n, 1); }

static void exp_shift(float *y, const float *x, float shift, int64_t n) { EXP_BLOCKED(i, n, x[i] - shift, y[i] = e) }

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

/* ---------------------------------------------------------------- small products (attention) */

/* 16 columns as MM_NV native vectors (see MM_W). The operations are lane-wise, so the bits do
 * not depend on the split. */
#define MM_NV (VNC_MM_COLS / MM_W)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Rows [0, NR) of one tile and NV native vectors of columns: c[r] = sum over t in [t0, t1) of
 * a[r * ars + t * ats] * b[t * ldb]. A multiply and an add per term: an FMA would save ~10 %
 * of attention on avx2/avx512 but cost 10x on baseline, which has to emulate it. */
#define MM_TILE(NR, NV)                                                                            \
  static void mm_tile_##NR##_##NV(float *c, int64_t ldc, const float *a, int64_t ars, int64_t ats, \
                                  const float *b, int64_t ldb, int64_t t0, int64_t t1) {           \
    mm_vec s[NR][NV];                                                                              \
    for (int r = 0; r < NR; r++)                                                                   \
      for (int v = 0; v < NV; v++) s[r][v] = (mm_vec){0};                                          \
    for (int64_t t = t0; t < t1; t++) {                                                            \
      mm_vec bt[NV];                                                                               \
      for (int v = 0; v < NV; v++) bt[v] = mm_load(b + t * ldb + v * MM_W);                        \
      for (int r = 0; r < NR; r++) {                                                               \
        const mm_vec av = a[r * ars + t * ats] - (mm_vec){0}; /* a broadcast: x - +0 is x */      \
        for (int v = 0; v < NV; v++) s[r][v] = s[r][v] + av * bt[v];                               \
      }                                                                                            \
    }                                                                                              \
    for (int r = 0; r < NR; r++) memcpy(c + r * ldc, s[r], sizeof s[r]);                          \
  }
MM_TILE(1, MM_NV)
MM_TILE(2, MM_NV)
MM_TILE(4, MM_NV)
/* Two column blocks per tile where the tier has the registers (AVX-512: 8 accumulators of
 * 16 lanes, enough independent adds to hide their latency). */
#define MM_WIDE (MM_W == 16)
#if MM_WIDE
MM_TILE(4, 2)
#endif

static void mm(const vnc_mm *p) {
  for (int64_t r0 = 0; r0 < p->m; r0 += VNC_MM_ROWS) {
    const int64_t nr = min64(p->m - r0, VNC_MM_ROWS), last = r0 + nr - 1;
    int64_t t0 = 0, t1 = p->k, first = 0;
    if (p->tri == VNC_MM_T_LE_R) t1 = min64(t1, last + 1);
    else if (p->tri == VNC_MM_T_GE_R) t0 = min64(t1, r0);
    else if (p->tri == VNC_MM_C_GE_R) first = r0 / VNC_MM_COLS * VNC_MM_COLS;
    const float *a = p->a + r0 * p->ars;
    float *c = p->c + r0 * p->ldc;
    for (int64_t c0 = first; c0 < p->n; c0 += VNC_MM_COLS) {
      if (nr == 4) {
#if MM_WIDE
        if (c0 + 2 * VNC_MM_COLS <= p->n) {
          mm_tile_4_2(c + c0, p->ldc, a, p->ars, p->ats, p->b + c0, p->ldb, t0, t1);
          c0 += VNC_MM_COLS;
          continue;
        }
#endif
        mm_tile_4_MM_NV(c + c0, p->ldc, a, p->ars, p->ats, p->b + c0, p->ldb, t0, t1);
        continue;
      }
      int64_t r = 0;
      if (nr - r >= 2) {
        mm_tile_2_MM_NV(c + c0, p->ldc, a, p->ars, p->ats, p->b + c0, p->ldb, t0, t1);
        r = 2;
      }
      if (r < nr) mm_tile_1_MM_NV(c + r * p->ldc + c0, p->ldc, a + r * p->ars, p->ars, p->ats, p->b + c0, p->ldb, t0, t1);
    }
  }
}

#define AQ VNC_MM_COLS /* queries side by side */

/* Lane-wise sums over rows j < J of x (row stride ld, AQ lanes) in the canonical schedule of
 * vnc/reduce.h for one block (J <= VNC_REDUCE_BLOCK): runs of RUN rows summed in 8
 * interleaved lanes (row j into lane j % 8, lane tree), run sums combined pairwise. */
static void col_sums(const float *x, int64_t ld, int64_t J, float *out) {
  float runs[AQ][VNC_REDUCE_BLOCK / RUN];
  int64_t nr = 0;
  for (int64_t r0 = 0; r0 < J; r0 += RUN, nr++) {
    float acc[8][AQ] = {{0}};
    const int64_t r1 = min64(J, r0 + RUN);
    for (int64_t j = r0; j < r1; j++)
      for (int l = 0; l < AQ; l++) acc[j & 7][l] += x[j * ld + l];
    for (int l = 0; l < AQ; l++)
      runs[l][nr] = ((acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l])) + ((acc[4][l] + acc[5][l]) + (acc[6][l] + acc[7][l]));
  }
  for (int l = 0; l < AQ; l++) out[l] = vnc_pairwise_sum(runs[l], nr);
}

static void attn_cols(const vnc_attn_rows *p) {
  const int64_t ld = p->ld, S = p->S;
  const mm_vec scale = p->scale - (mm_vec){0}; /* explicit vectors: the scores might alias *p for GCC */
  for (int64_t i0 = 0; i0 < p->L; i0 += AQ) {
    const int64_t J = p->causal ? min64(S, i0 + AQ) : S, nl = min64(AQ, p->L - i0);
    float *blk = p->s + i0;
    if (p->mode == VNC_ATTN_GRAD) {
      const float *pt = p->p + i0;
      mm_vec d[AQ / MM_W]; /* explicit vectors: GCC kept the loop scalar, as d might alias the scores */
      for (int v = 0; v < AQ / MM_W; v++) d[v] = mm_load(p->d + i0 + v * MM_W);
      for (int64_t j = 0; j < J; j++)
        for (int v = 0; v < AQ / MM_W; v++) {
          const mm_vec g = mm_load(pt + j * ld + v * MM_W) * (mm_load(blk + j * ld + v * MM_W) - d[v]);
          memcpy(blk + j * ld + v * MM_W, &g, sizeof g);
        }
    } else {
      float shift[AQ], m[AQ];
      for (int64_t j = 0; j < J; j++) {
        float *row = blk + j * ld;
        for (int v = 0; v < AQ / MM_W; v++) {
          const mm_vec t = mm_load(row + v * MM_W) * scale;
          memcpy(row + v * MM_W, &t, sizeof t);
        }
        if (p->bias)
          for (int64_t l = 0; l < nl; l++) row[l] = row[l] + p->bias[(i0 + l) * p->brs + j * p->bcs];
        if (p->causal && j > i0) /* queries i < j of the diagonal block */
          for (int64_t l = 0; l < j - i0 && l < AQ; l++) row[l] = -INFINITY;
      }
      if (p->mode == VNC_ATTN_SOFTMAX) {
        for (int l8 = 0; l8 < AQ; l8 += 8) { /* a NaN score makes the query's row NaN, as on CPU */
          v8f mv = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
          for (int64_t j = 0; j < J; j++) mv = max_nan(mv, load8(blk + j * ld + l8));
          memcpy(m + l8, &mv, sizeof mv);
        }
        for (int l = 0; l < AQ; l++) shift[l] = m[l] == -INFINITY ? INFINITY : m[l]; /* all -inf: exp gives 0 */
      } else {
        for (int l = 0; l < AQ; l++) shift[l] = l < nl && p->lse[i0 + l] != -INFINITY ? p->lse[i0 + l] : INFINITY;
      }
      /* exp of the whole block: the bounded form when every argument is in its domain (the
       * check in explicit vectors: GCC kept a loop of vnc_expf_bounded_ok over 16 lanes scalar) */
      mm_vec sh[AQ / MM_W];
      mm_ivec in = ~(mm_ivec){0};
      for (int v = 0; v < AQ / MM_W; v++) sh[v] = mm_load(shift + v * MM_W);
      for (int64_t j = 0; j < J; j++)
        for (int v = 0; v < AQ / MM_W; v++) {
          const mm_ivec t = (mm_ivec)(mm_load(blk + j * ld + v * MM_W) - sh[v]) & 0x7fffffff; /* |arg| */
          in &= (mm_vec)t <= VNC_EXPF_BOUNDED_MAX;
        }
      int32_t ok = 1;
      for (int k = 0; k < MM_W; k++) ok &= in[k] != 0;
      if (ok)
        for (int64_t j = 0; j < J; j++)
          for (int l = 0; l < AQ; l++) blk[j * ld + l] = vnc_expf_bounded(blk[j * ld + l] - shift[l]);
      else
        for (int64_t j = 0; j < J; j++)
          for (int l = 0; l < AQ; l++) blk[j * ld + l] = vnc_expf(blk[j * ld + l] - shift[l]);
      if (p->mode == VNC_ATTN_SOFTMAX) {
        float sum[AQ], inv[AQ];
        if (J <= VNC_REDUCE_BLOCK) {
          col_sums(blk, ld, J, sum);
        } else {
          for (int l = 0; l < AQ; l++) {
            for (int64_t j = 0; j < J; j++) p->scratch[j] = blk[j * ld + l];
            sum[l] = vnc_canonical_sum(p->scratch, J);
          }
        }
        for (int l = 0; l < AQ; l++) {
          inv[l] = m[l] == -INFINITY ? 0.0f : 1.0f / sum[l]; /* ATen's softmax multiplies by 1 / sum too */
          if (l < nl) p->lse[i0 + l] = m[l] == -INFINITY ? -INFINITY : m[l] + logf(sum[l]);
        }
        for (int64_t j = 0; j < J; j++)
          for (int l = 0; l < AQ; l++) blk[j * ld + l] = blk[j * ld + l] * inv[l];
      }
    }
    for (int64_t j = J; j < S; j++) memset(blk + j * ld, 0, sizeof(float) * AQ);
  }
}

/* ---------------------------------------------------------------- layer norm backward */

/* The canonical sum of x[0..n) (vnc_canonical_sum: one block up to VNC_REDUCE_BLOCK). Up to
 * one run (RUN elements) with n a multiple of 8, the block's schedule is one 8-lane loop and
 * the lane tree. */
static float row_sum(const float *x, int64_t n) {
  if (n <= RUN && n % 8 == 0) {
    v8f acc = {0};
    for (int64_t i = 0; i < n; i += 8) acc += load8(x + i);
    return lane_tree(acc);
  }
  return n <= VNC_REDUCE_BLOCK ? block_sum(x, n, 0, 0.0f, 0.0f) : vnc_canonical_sum(x, n);
}

static inline void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
static inline v8f splat8(float f) { return (v8f){f, f, f, f, f, f, f, f}; }

/* The row in two passes over x and dy when n is a multiple of 8 up to one block (the main
 * job's rows): the first adds into aw, ab and sums g and g * xh in block_sum's runs and lane
 * trees, the second writes dx. xh and g are computed again rather than kept: the same
 * operations, so the same bits as the general path below, without its five scratch passes. */
static inline __attribute__((always_inline)) void ln_bwd_fused(float *dx, const float *x, const float *dy,
                                                                const float *w, int64_t n, float mean, float rstd,
                                                                float *aw, float *ab) {
  float rg[VNC_REDUCE_BLOCK / RUN], rgx[VNC_REDUCE_BLOCK / RUN];
  int64_t nr = 0;
  const v8f mu = splat8(mean), rs = splat8(rstd);
  for (int64_t r0 = 0; r0 < n; r0 += RUN) {
    const int64_t r1 = r0 + RUN < n ? r0 + RUN : n;
    v8f sg = {0}, sgx = {0};
    for (int64_t i = r0; i < r1; i += 8) {
      const v8f xh = (load8(x + i) - mu) * rs, d = load8(dy + i);
      if (aw) {
        store8(aw + i, load8(aw + i) + d * xh);
        store8(ab + i, load8(ab + i) + d);
      }
      if (dx) {
        const v8f g = w ? d * load8(w + i) : d;
        sg += g;
        sgx += g * xh;
      }
    }
    rg[nr] = lane_tree(sg);
    rgx[nr++] = lane_tree(sgx);
  }
  if (!dx) return;
  const v8f a = splat8(vnc_pairwise_sum(rg, nr) / (float)n), b = splat8(vnc_pairwise_sum(rgx, nr) / (float)n);
  for (int64_t i = 0; i < n; i += 8) {
    const v8f xh = (load8(x + i) - mu) * rs, d = load8(dy + i), g = w ? d * load8(w + i) : d;
    store8(dx + i, rs * ((g - a) - xh * b));
  }
}

static void ln_bwd_row(float *dx, const float *x, const float *dy, const float *w, int64_t n, float mean, float rstd,
                       float *aw, float *ab, float *xh, float *g) {
  if (n % 8 == 0 && n <= VNC_REDUCE_BLOCK) { /* one specialisation per case keeps the loops branch-free */
    if (aw && w) ln_bwd_fused(dx, x, dy, w, n, mean, rstd, aw, ab);
    else if (aw) ln_bwd_fused(dx, x, dy, NULL, n, mean, rstd, aw, ab);
    else if (w) ln_bwd_fused(dx, x, dy, w, n, mean, rstd, NULL, NULL);
    else ln_bwd_fused(dx, x, dy, NULL, n, mean, rstd, NULL, NULL);
    return;
  }
  for (int64_t j = 0; j < n; j++) xh[j] = (x[j] - mean) * rstd;
  if (aw)
    for (int64_t j = 0; j < n; j++) {
      aw[j] += dy[j] * xh[j];
      ab[j] += dy[j];
    }
  if (!dx) return;
  if (w)
    for (int64_t j = 0; j < n; j++) g[j] = dy[j] * w[j];
  else
    memcpy(g, dy, sizeof(float) * (size_t)n);
  const float a = row_sum(g, n) / (float)n;
  for (int64_t j = 0; j < n; j++) dx[j] = g[j] * xh[j]; /* dx as scratch until the last pass */
  const float b = row_sum(dx, n) / (float)n;
  for (int64_t j = 0; j < n; j++) dx[j] = rstd * ((g[j] - a) - xh[j] * b);
}

/* ---------------------------------------------------------------- softmax rows */

/* vnc_pairwise_sum over values pushed one at a time, in O(log n) space: a binary counter whose
 * slot l holds the sum of the last complete group of 2^l values; the final fold from the
 * lowest slot up gives the same tree (the odd value of a level is carried up, as there). */
typedef struct pairwise_acc {
  float slot[64];
  uint64_t count;
} pairwise_acc;

static inline void pairwise_push(pairwise_acc *a, float v) {
  int l = 0;
  for (uint64_t c = a->count++; c & 1; c >>= 1) v = a->slot[l++] + v;
  a->slot[l] = v;
}

static inline float pairwise_result(const pairwise_acc *a) {
  float r = 0.0f;
  int have = 0;
  for (int l = 0; l < 64; l++)
    if ((a->count >> l) & 1) {
      r = have ? a->slot[l] + r : a->slot[l];
      have = 1;
    }
  return r;
}

/* The canonical sum of e = exp(x - shift), e stored to y (y may equal x; NULL: not kept), in
 * pieces of four runs, each summed while it is in L1. Runs, blocks and chunks of the
 * canonical schedule hold 1/4, 8 and 128 pieces (powers of two, aligned), so the pairwise
 * tree over the pieces' sums is the schedule's tree. */
#define PIECE (4 * RUN)
static float exp_sum(float *y, const float *x, float shift, int64_t n) {
  float scratch[PIECE];
  pairwise_acc acc = {.count = 0};
  for (int64_t c = 0; c < n; c += PIECE) {
    const int64_t m = n - c < PIECE ? n - c : PIECE;
    float *e = y ? y + c : scratch;
    exp_shift(e, x + c, shift, m);
    pairwise_push(&acc, block_sum(e, m, 0, 0.0f, 0.0f));
  }
  return pairwise_result(&acc);
}

static void softmax_row(float *y, const float *x, const float *yo, int64_t n, int log, int backward, float *tmp) {
  if (!backward) {
    const float mx = row_max(x, n);
    if (log) {
      const float lse = logf(exp_sum(NULL, x, mx, n));
      for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mx) - lse;
    } else {
      const float inv = 1.0f / exp_sum(y, x, mx, n); /* ATen's vectorised softmax multiplies by 1 / sum too */
      for (int64_t j = 0; j < n; j++) y[j] = y[j] * inv;
    }
  } else if (log) {
    const float gsum = row_sum(x, n);
    exp_shift(tmp, yo, 0.0f, n);
    for (int64_t j = 0; j < n; j++) y[j] = x[j] - tmp[j] * gsum;
  } else {
    for (int64_t j = 0; j < n; j++) tmp[j] = x[j] * yo[j];
    const float dot = row_sum(tmp, n);
    for (int64_t j = 0; j < n; j++) y[j] = yo[j] * (x[j] - dot);
  }
}

/* ---------------------------------------------------------------- depthwise convolution rows */

static inline mm_vec mm_splat(float s) {
#if defined(__AVX512F__)
  return (mm_vec)_mm512_set1_ps(s);
#elif defined(__AVX__)
  return (mm_vec)_mm256_set1_ps(s);
#elif defined(__SSE2__)
  return (mm_vec)_mm_set1_ps(s);
#else
  mm_vec v;
  for (int l = 0; l < MM_W; l++) v[l] = s;
  return v;
#endif
}

/* The first r (1..MM_W) floats at p, the other lanes 0; nothing past them is read. */
static inline mm_vec mm_load_part(const float *p, int64_t r) {
#if defined(__AVX512F__)
  return (mm_vec)_mm512_maskz_loadu_ps((__mmask16)((1u << r) - 1u), p);
#elif defined(__AVX2__)
  const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return (mm_vec)_mm256_maskload_ps(p, m);
#else
  mm_vec v = {0};
  memcpy(&v, p, sizeof(float) * (size_t)(r < 0 ? 0 : r > MM_W ? MM_W : r)); /* (the bound: for GCC's checks) */
  return v;
#endif
}

/* Stores the first r (1..MM_W) lanes of v at p; nothing past them is written. */
static inline void mm_store_part(float *p, mm_vec v, int64_t r) {
#if defined(__AVX512F__)
  _mm512_mask_storeu_ps(p, (__mmask16)((1u << r) - 1u), (__m512)v);
#elif defined(__AVX2__)
  const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  _mm256_maskstore_ps(p, m, (__m256)v);
#else
  memcpy(p, &v, sizeof(float) * (size_t)(r < 0 ? 0 : r > MM_W ? MM_W : r));
#endif
}

static inline void mm_store(float *p, mm_vec v) { memcpy(p, &v, sizeof v); }

/* The lanes l whose bit is set in `bits` (below 1 << MM_W) of base[idx + l], the other lanes
 * 0: only those lanes are read. base + idx may lie before base (a border column's source,
 * left of its row), so the address is formed as an integer. */
static inline mm_vec mm_load_bits(const float *base, int64_t idx, uint32_t bits) {
  const float *p = (const float *)((uintptr_t)base + (uintptr_t)(idx * (int64_t)sizeof(float)));
#if defined(__AVX512F__)
  return (mm_vec)_mm512_maskz_loadu_ps((__mmask16)bits, p);
#elif defined(__AVX2__)
  const __m256i lb = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return (mm_vec)_mm256_maskload_ps(p, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), lb), lb));
#else
  mm_vec v = {0};
  for (int l = 0; l < MM_W; l++)
    if (bits >> l & 1u) v[l] = base[idx + l];
  (void)p;
  return v;
#endif
}

/* v + d in the lanes whose bit is set in `bits`, v in the others. */
static inline mm_vec mm_add_bits(mm_vec v, mm_vec d, uint32_t bits) {
#if defined(__AVX512F__)
  return (mm_vec)_mm512_mask_add_ps((__m512)v, (__mmask16)bits, (__m512)v, (__m512)d);
#elif defined(__AVX2__)
  const __m256i lb = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 m = (__m256)_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), lb), lb);
  return (mm_vec)_mm256_blendv_ps((__m256)v, (__m256)(v + d), m);
#else
  const mm_vec s = v + d;
  for (int l = 0; l < MM_W; l++)
    if (bits >> l & 1u) v[l] = s[l];
  return v;
#endif
}

/* Lanes [a, b) as bits (0 <= a <= b <= MM_W). */
static inline uint32_t lane_bits(int64_t a, int64_t b) {
  return (uint32_t)(((1ull << b) - 1ull) & ~((1ull << a) - 1ull));
}

#define MM_ALL ((uint32_t)((1ull << MM_W) - 1ull))

static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Up to DW_G vectors of a line (or of a pixel's channels) at once, of up to DW_P planes: their
 * tap chains overlap. */
#define DW_G 4
#define DW_P VNC_DW_PLANES

/* Columns [i0, i0 + len) (len <= NV vectors) of line l in NP planes at once: each tap's lane
 * ranges worked out once for all of them, NP * NV independent sums in registers. */
static inline __attribute__((always_inline)) void dw_group(const vnc_dw_lines *L, int64_t l, int64_t i0, int64_t len,
                                                           float *const *y, const float *const *x,
                                                           const float *const *w, const float *init, const int NP,
                                                           const int NV) {
  const int64_t *src = L->src, *wi = L->wi, yb = L->ybase[l] + i0, G = L->groups, gi = i0 / 64, sh = i0 % 64;
  const uint64_t *mask = L->mask;
  mm_vec v[DW_P][DW_G];
#pragma GCC unroll 4
  for (int p = 0; p < NP; p++)
#pragma GCC unroll 4
    for (int q = 0; q < NV; q++)
      v[p][q] = init                  ? mm_splat(init[p])
                : (q + 1) * MM_W <= len ? mm_load(y[p] + yb + q * MM_W)
                                        : mm_load_part(y[p] + yb + q * MM_W, len - q * MM_W);
  for (int64_t t = L->start[l]; t < L->start[l + 1]; t++) {
    const uint64_t m = mask[t * G + gi] >> sh; /* the tap's columns from i0 on */
    const int64_t s = src[t] + i0, k = wi[t];
#pragma GCC unroll 4
    for (int q = 0; q < NV; q++) {
      const uint32_t bits = (uint32_t)(m >> (q * MM_W)) & MM_ALL;
#if defined(__AVX512F__) /* masked loads and adds cost as much as plain ones */
#pragma GCC unroll 4
      for (int p = 0; p < NP; p++)
        v[p][q] = mm_add_bits(v[p][q], mm_splat(w[p][k]) * mm_load_bits(x[p], s + q * MM_W, bits), bits);
#else
      if (bits == MM_ALL) {
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) v[p][q] = v[p][q] + mm_splat(w[p][k]) * mm_load(x[p] + s + q * MM_W);
      } else if (bits) {
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++)
          v[p][q] = mm_add_bits(v[p][q], mm_splat(w[p][k]) * mm_load_bits(x[p], s + q * MM_W, bits), bits);
      }
#endif
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < NP; p++)
#pragma GCC unroll 4
    for (int q = 0; q < NV; q++) {
      if ((q + 1) * MM_W <= len) mm_store(y[p] + yb + q * MM_W, v[p][q]);
      else mm_store_part(y[p] + yb + q * MM_W, v[p][q], len - q * MM_W);
    }
}

static void dw_lines(const vnc_dw_lines *L, int64_t l0, int64_t l1, int np, float *const *y, const float *const *x,
                     const float *const *w, const float *init) {
  const int64_t ycs = L->ycs, xcs = L->xcs;
  for (int64_t l = l0; l < l1; l++) {
    const int64_t n = L->n[l];
    if (ycs != 1 || xcs != 1) { /* strided (a stride, or a gradient's phase): taps outer, same order */
      for (int p = 0; p < np; p++) {
        float *yl = y[p] + L->ybase[l];
        if (init)
          for (int64_t i = 0; i < n; i++) yl[i * ycs] = init[p];
        for (int64_t t = L->start[l]; t < L->start[l + 1]; t++) {
          const float wt = w[p][L->wi[t]];
          const int64_t s = L->src[t], lo = L->lo[t], hi = L->hi[t];
          for (int64_t i = lo; i < hi; i++) yl[i * ycs] = yl[i * ycs] + wt * x[p][s + i * xcs];
        }
      }
      continue;
    }
    for (int64_t i0 = 0; i0 < n; i0 += DW_G * MM_W) {
      const int64_t len = min64(DW_G * MM_W, n - i0), nv = (len + MM_W - 1) / MM_W;
      /* planes side by side while their sums fit in registers (8 vectors or fewer) */
      if (np == 4 && nv <= 2) {
        if (nv == 1) dw_group(L, l, i0, len, y, x, w, init, 4, 1);
        else dw_group(L, l, i0, len, y, x, w, init, 4, 2);
        continue;
      }
      int p = 0;
      for (; p < np; p += 2) {
        const float *in = init ? init + p : NULL;
        if (p + 1 < np) {
          switch (nv) {
            case 1: dw_group(L, l, i0, len, y + p, x + p, w + p, in, 2, 1); break;
            case 2: dw_group(L, l, i0, len, y + p, x + p, w + p, in, 2, 2); break;
            case 3: dw_group(L, l, i0, len, y + p, x + p, w + p, in, 2, 3); break;
            default: dw_group(L, l, i0, len, y + p, x + p, w + p, in, 2, 4); break;
          }
        } else {
          switch (nv) {
            case 1: dw_group(L, l, i0, len, y + p, x + p, w + p, in, 1, 1); break;
            case 2: dw_group(L, l, i0, len, y + p, x + p, w + p, in, 1, 2); break;
            case 3: dw_group(L, l, i0, len, y + p, x + p, w + p, in, 1, 3); break;
            default: dw_group(L, l, i0, len, y + p, x + p, w + p, in, 1, 4); break;
          }
        }
      }
    }
  }
}

/* The weight gradient's taps in np planes at once: a tap's lanes held in registers over all
 * of its lines (L grouped by tap: see dw_dot_taps in tier.h). */
#define DWV (VNC_DW_LANES / MM_W)
static inline __attribute__((always_inline)) void dw_dot_tap(const vnc_dw_lines *L, int64_t k, float *const *acc,
                                                             const float *const *g, const float *const *x,
                                                             const int NP) {
  const int64_t G = L->groups;
  mm_vec a[DW_P][DWV];
  for (int p = 0; p < NP; p++)
    for (int v = 0; v < DWV; v++) a[p][v] = mm_load(acc[p] + k * VNC_DW_LANES + v * MM_W);
  for (int64_t e = L->start[k]; e < L->start[k + 1]; e++) {
    const int64_t s = L->src[e], gb = L->wi[e], lo = L->lo[e], hi = L->hi[e];
    for (int64_t i0 = lo - lo % VNC_DW_LANES; i0 < hi; i0 += VNC_DW_LANES) {
      const uint64_t m = L->mask[e * G + i0 / 64] >> (i0 % 64);
#pragma GCC unroll 4
      for (int v = 0; v < DWV; v++) {
        const int64_t c = i0 + v * MM_W;
        const uint32_t bits = (uint32_t)(m >> (v * MM_W)) & MM_ALL;
        if (bits == MM_ALL) {
#pragma GCC unroll 4
          for (int p = 0; p < NP; p++) a[p][v] = a[p][v] + mm_load(g[p] + gb + c) * mm_load(x[p] + s + c);
        } else if (bits) {
#pragma GCC unroll 4
          for (int p = 0; p < NP; p++)
            a[p][v] = mm_add_bits(a[p][v], mm_load_bits(g[p], gb + c, bits) * mm_load_bits(x[p], s + c, bits), bits);
        }
      }
    }
  }
  for (int p = 0; p < NP; p++)
    for (int v = 0; v < DWV; v++) mm_store(acc[p] + k * VNC_DW_LANES + v * MM_W, a[p][v]);
}

static void dw_dot_taps(const vnc_dw_lines *L, int64_t k0, int64_t k1, int np, float *const *acc,
                        const float *const *g, const float *const *x) {
  for (int64_t k = k0; k < k1; k++) {
    if (L->xcs != 1) { /* strided: lanes by column, columns in order */
      for (int p = 0; p < np; p++) {
        float *ac = acc[p] + k * VNC_DW_LANES;
        for (int64_t e = L->start[k]; e < L->start[k + 1]; e++) {
          const int64_t s = L->src[e], gb = L->wi[e], xcs = L->xcs;
          for (int64_t i = L->lo[e]; i < L->hi[e]; i++)
            ac[i % VNC_DW_LANES] = ac[i % VNC_DW_LANES] + g[p][gb + i] * x[p][s + i * xcs];
        }
      }
      continue;
    }
    int p = 0;
    for (; p + 4 <= np && DWV <= 2; p += 4) dw_dot_tap(L, k, acc + p, g + p, x + p, 4);
    for (; p + 2 <= np; p += 2) dw_dot_tap(L, k, acc + p, g + p, x + p, 2);
    for (; p < np; p++) dw_dot_tap(L, k, acc + p, g + p, x + p, 1);
  }
}
#undef DWV

/* Channels_last: each column a pixel of channels. Up to DW_G channel vectors of PB pixels at
 * once: a tap's weight vectors are loaded once for the PB pixels; a pixel whose source for the
 * tap lies outside its row skips the tap. The last vector of a group is masked at the
 * channels' end (r lanes). */
static inline __attribute__((always_inline)) void dw_cl_block(const vnc_dw_lines *L, int64_t l, int64_t i0, int64_t c,
                                                              int64_t r, int64_t ld, float *y, const float *x,
                                                              const float *w, const float *init, const int NV,
                                                              const int PB) {
  const int64_t ycs = L->ycs, xcs = L->xcs, yb = L->ybase[l];
  mm_vec v[4][DW_G];
#pragma GCC unroll 4
  for (int b = 0; b < PB; b++)
#pragma GCC unroll 4
    for (int q = 0; q < NV; q++) {
      const float *yp = init ? init + c + q * MM_W : y + (yb + (i0 + b) * ycs) * ld + c + q * MM_W;
      v[b][q] = q + 1 < NV || r == MM_W ? mm_load(yp) : mm_load_part(yp, r);
    }
  for (int64_t t = L->start[l]; t < L->start[l + 1]; t++) {
    const int64_t lo = L->lo[t], hi = L->hi[t];
    if (hi <= i0 || lo >= i0 + PB) continue;
    const float *wp = w + L->wi[t] * ld + c, *xp = x + (L->src[t] + i0 * xcs) * ld + c; /* pixel i0's source */
    mm_vec wv[DW_G];
#pragma GCC unroll 4
    for (int q = 0; q < NV; q++) wv[q] = q + 1 < NV || r == MM_W ? mm_load(wp + q * MM_W) : mm_load_part(wp + q * MM_W, r);
#pragma GCC unroll 4
    for (int b = 0; b < PB; b++) {
      if (i0 + b < lo || i0 + b >= hi) continue;
#pragma GCC unroll 4
      for (int q = 0; q < NV; q++) {
        const float *xq = xp + b * xcs * ld + q * MM_W;
        v[b][q] = v[b][q] + wv[q] * (q + 1 < NV || r == MM_W ? mm_load(xq) : mm_load_part(xq, r));
      }
    }
  }
#pragma GCC unroll 4
  for (int b = 0; b < PB; b++)
#pragma GCC unroll 4
    for (int q = 0; q < NV; q++) {
      float *yp = y + (yb + (i0 + b) * ycs) * ld + c + q * MM_W;
      if (q + 1 < NV || r == MM_W) mm_store(yp, v[b][q]);
      else mm_store_part(yp, v[b][q], r);
    }
}

/* One channel group of pixels [i0, n) of line l: blocks of 4 pixels (2 for 3 or 4 vectors:
 * 8 sums in registers), then single pixels. */
#define DW_CL_RUN(NV, PB4)                                                                 \
  do {                                                                                     \
    int64_t i = 0;                                                                         \
    for (; i + (PB4) <= n; i += (PB4)) dw_cl_block(L, l, i, c, r, ld, y, x, w, init, NV, PB4); \
    for (; i < n; i++) dw_cl_block(L, l, i, c, r, ld, y, x, w, init, NV, 1);                   \
  } while (0)

static void dw_cl_lines(const vnc_dw_lines *L, int64_t l0, int64_t l1, int64_t C, int64_t ld, float *y, const float *x,
                        const float *w, const float *init) {
  for (int64_t l = l0; l < l1; l++) {
    const int64_t n = L->n[l];
    for (int64_t c = 0; c < C; c += DW_G * MM_W) {
      const int64_t nv = min64(DW_G, (C - c + MM_W - 1) / MM_W), r = C - c - (nv - 1) * MM_W; /* last: r lanes */
      switch (nv) {
        case 1: DW_CL_RUN(1, 4); break;
        case 2: DW_CL_RUN(2, 4); break;
        case 3: DW_CL_RUN(3, 2); break;
        default: DW_CL_RUN(4, 2); break;
      }
    }
  }
}
#undef DW_CL_RUN

/* Taps outer, the accumulators of up to DW_G channel vectors held over the tap's columns. */
static inline __attribute__((always_inline)) void dw_cl_dot_tap(float *ap, const float *g, const float *x, int64_t s,
                                                                int64_t xcs, int64_t lo, int64_t hi, int64_t ld,
                                                                int64_t c, int64_t r, const int NV) {
  mm_vec a[DW_G];
#pragma GCC unroll 4
  for (int q = 0; q < NV; q++) a[q] = q + 1 < NV || r == MM_W ? mm_load(ap + c + q * MM_W) : mm_load_part(ap + c + q * MM_W, r);
  for (int64_t i = lo; i < hi; i++) {
    const float *gp = g + i * ld + c, *xp = x + (s + i * xcs) * ld + c;
#pragma GCC unroll 4
    for (int q = 0; q < NV; q++)
      a[q] = a[q] + (q + 1 < NV || r == MM_W ? mm_load(gp + q * MM_W) * mm_load(xp + q * MM_W)
                                : mm_load_part(gp + q * MM_W, r) * mm_load_part(xp + q * MM_W, r));
  }
#pragma GCC unroll 4
  for (int q = 0; q < NV; q++) {
    if (q + 1 < NV || r == MM_W) mm_store(ap + c + q * MM_W, a[q]);
    else mm_store_part(ap + c + q * MM_W, a[q], r);
  }
}

static void dw_cl_dot_lines(const vnc_dw_lines *L, int64_t l0, int64_t l1, int64_t C, int64_t ld, float *acc,
                            const float *y, const float *x) {
  for (int64_t l = l0; l < l1; l++) {
    const float *g = y + L->ybase[l] * ld;
    for (int64_t t = L->start[l]; t < L->start[l + 1]; t++) {
      float *ap = acc + L->wi[t] * ld;
      const int64_t lo = L->lo[t], hi = L->hi[t], s = L->src[t], xcs = L->xcs;
      for (int64_t c = 0; c < C; c += DW_G * MM_W) {
        const int64_t nv = min64(DW_G, (C - c + MM_W - 1) / MM_W), r = C - c - (nv - 1) * MM_W;
        switch (nv) {
          case 1: dw_cl_dot_tap(ap, g, x, s, xcs, lo, hi, ld, c, r, 1); break;
          case 2: dw_cl_dot_tap(ap, g, x, s, xcs, lo, hi, ld, c, r, 2); break;
          case 3: dw_cl_dot_tap(ap, g, x, s, xcs, lo, hi, ld, c, r, 3); break;
          default: dw_cl_dot_tap(ap, g, x, s, xcs, lo, hi, ld, c, r, 4); break;
        }
      }
    }
  }
}
#undef DW_G
#undef DW_P
#undef MM_ALL

/* ---------------------------------------------------------------- random fills */

/* Words 0 and 1 of Philox4x32-10 (philox.h) for the counters ctr .. ctr + n - 1 (round 0),
 * n <= VNC_RNG_BLOCK: every round over the whole block (lanes independent, so no round waits on
 * the one before it), one lane's words in a 64-bit slot so that one 32x32->64 multiply
 * instruction per slot gives both halves of the product. Integer arithmetic: every tier gives
 * philox.h's words. */
#define RNG_BLOCK VNC_RNG_BLOCK
#if defined(__AVX512F__)
#define PX_W 8
#define PX_MUL(a, b) (px_vec) _mm512_mul_epu32((__m512i)(a), (__m512i)(b))
#elif defined(__AVX2__)
#define PX_W 4
#define PX_MUL(a, b) (px_vec) _mm256_mul_epu32((__m256i)(a), (__m256i)(b))
#elif defined(__SSE2__)
#define PX_W 2
#define PX_MUL(a, b) (px_vec) _mm_mul_epu32((__m128i)(a), (__m128i)(b))
#endif

#if defined(PX_W)
typedef uint64_t px_vec __attribute__((vector_size(PX_W * 8)));

static void philox_words(uint64_t seed, uint64_t ctr, int64_t n, uint32_t *w0, uint32_t *w1) {
  enum { NV = RNG_BLOCK / PX_W };
  uint64_t lane[2][RNG_BLOCK];
  px_vec x0[NV], x1[NV], x2[NV], x3[NV];
  for (int64_t j = 0; j < RNG_BLOCK; j++) {
    const uint64_t c = ctr + (uint64_t)j;
    lane[0][j] = (uint32_t)c;
    lane[1][j] = c >> 32;
  }
  memcpy(x0, lane[0], sizeof x0);
  memcpy(x1, lane[1], sizeof x1);
  memset(x2, 0, sizeof x2);
  memset(x3, 0, sizeof x3);
  const px_vec m0 = (px_vec){0} + 0xD2511F53u, m1 = (px_vec){0} + 0xCD9E8D57u, low = (px_vec){0} + 0xFFFFFFFFu;
  uint64_t k0 = (uint32_t)seed, k1 = seed >> 32;
  for (int r = 0; r < 10; r++) {
    for (int v = 0; v < NV; v++) {
      const px_vec p0 = PX_MUL(x0[v], m0), p1 = PX_MUL(x2[v], m1);
      x0[v] = (p1 >> 32) ^ x1[v] ^ k0;
      x2[v] = (p0 >> 32) ^ x3[v] ^ k1;
      x1[v] = p1 & low;
      x3[v] = p0 & low;
    }
    k0 = (uint32_t)(k0 + 0x9E3779B9u);
    k1 = (uint32_t)(k1 + 0xBB67AE85u);
  }
  memcpy(lane[0], x0, sizeof x0);
  memcpy(lane[1], x1, sizeof x1);
  for (int64_t j = 0; j < n; j++) {
    w0[j] = (uint32_t)lane[0][j];
    w1[j] = (uint32_t)lane[1][j];
  }
}
#else
static void philox_words(uint64_t seed, uint64_t ctr, int64_t n, uint32_t *w0, uint32_t *w1) {
  for (int64_t j = 0; j < n; j++) {
    uint32_t w[4];
    vnc_philox_element(seed, ctr, (uint64_t)j, w);
    w0[j] = w[0];
    w1[j] = w[1];
  }
}
#endif

/* cos(2 pi u) for u in [0, 1) a multiple of 2^-24: the nearest quarter turn k taken off
 * exactly, the rest (|x| <= pi/4) by the polynomials of vnc_sinf/vnc_cosf (Cephes'). */
static inline float cos_2pi(float u) {
  const int32_t k = (int32_t)(u * 4.0f + 0.5f);
  const float x = (u - (float)k * 0.25f) * 6.28318530717958647692f, z = x * x;
  const float sn = vnc_sin_poly(x, z), cs = vnc_cos_poly(z);
  const int32_t q = k & 3;
  return q == 0 ? cs : q == 1 ? -sn : q == 2 ? -cs : sn;
}

static void rng_f32(float *y, int64_t n, uint64_t seed, uint64_t ctr, int kind, float a, float b) {
  uint32_t w0[RNG_BLOCK], w1[RNG_BLOCK];
  for (int64_t i0 = 0; i0 < n; i0 += RNG_BLOCK) {
    const int64_t m = n - i0 < RNG_BLOCK ? n - i0 : RNG_BLOCK;
    float *o = y + i0;
    philox_words(seed, ctr + (uint64_t)i0, m, w0, w1);
    switch (kind) {
      case VNC_RNG_UNIFORM:
        for (int64_t i = 0; i < m; i++) o[i] = a + (b - a) * ((float)(w0[i] >> 8) * 0x1.0p-24f);
        break;
      case VNC_RNG_EXPONENTIAL:
        for (int64_t i = 0; i < m; i++) o[i] = -vnc_log1pf(-((float)(w0[i] >> 8) * 0x1.0p-24f)) / a;
        break;
      default: /* normal, log-normal: Box-Muller's cosine half, u1 in (0, 1] (its log finite) */
        for (int64_t i = 0; i < m; i++) {
          const float u1 = ((float)(w0[i] >> 8) + 1.0f) * 0x1.0p-24f, u2 = (float)(w1[i] >> 8) * 0x1.0p-24f;
          o[i] = a + b * (sqrtf(-2.0f * vnc_logf_normal(u1)) * cos_2pi(u2));
        }
        if (kind == VNC_RNG_LOG_NORMAL)
          for (int64_t i = 0; i < m; i++) o[i] = vnc_expf(o[i]);
    }
  }
}

/* ---------------------------------------------------------------- the table */

#define EW_KERNEL_ENTRY(CLS, TT, DT, COL, name) ew_##name##_##CLS,
#define EW_ROW(name, nin, res, F, I, B, C) {EW_CLASSES(EW_KERNEL_ENTRY, name)},

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init" /* .ew's entries replaced below */
const vnc_tier_ops TIER_CAT(vnc_tier_ops_, VNC_TIER_NAME) = {
    .name = TIER_STR(VNC_TIER_NAME),
    .ew = {VNC_EW_TABLE(EW_ROW)},
    /* the fast-form rows' float32 loops replace the generated ones */
#define EW_FAST_ENTRY(name, nin, IN_DOMAIN, FAST) .ew[VNC_EW_##name][EW_CLS_F32] = ew_##name##_F32_fast,
    VNC_EW_FAST_TABLE(EW_FAST_ENTRY)
    .block_sum = block_sum,
    .row_sums = row_sums,
    .tile_extreme = tile_extreme,
    .transpose = transpose,
    .tile_run = tile_run,
    .row_max = row_max,
    .row_min = row_min,
    .f16_to_f32 = f16_to_f32,
    .f32_to_f16 = f32_to_f16,
    .bf16_to_f32 = bf16_to_f32,
    .f32_to_bf16 = f32_to_bf16,
    .exp_shift = exp_shift,
    .philox_words = philox_words,
    .rng_f32 = rng_f32,
    .norm_row = norm_row,
    .mm = mm,
    .softmax_row = softmax_row,
    .ln_bwd_row = ln_bwd_row,
    .attn_cols = attn_cols,
    .dw_lines = dw_lines,
    .dw_dot_taps = dw_dot_taps,
    .dw_cl_lines = dw_cl_lines,
    .dw_cl_dot_lines = dw_cl_dot_lines,
};
#pragma GCC diagnostic pop
