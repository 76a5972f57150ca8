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
#include "vnc/ew_scalar.h"
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
static void f16_to_f32(float *d, const uint16_t *s, int64_t n) {
  int64_t i = 0;
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
    .tile_run = tile_run,
    .row_max = row_max,
    .row_min = row_min,
    .f16_to_f32 = f16_to_f32,
    .f32_to_f16 = f32_to_f16,
    .exp_shift = exp_shift,
    .norm_row = norm_row,
    .mm = mm,
    .softmax_row = softmax_row,
    .ln_bwd_row = ln_bwd_row,
    .attn_cols = attn_cols,
};
#pragma GCC diagnostic pop
