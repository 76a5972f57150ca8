/* Per-tier kernel tables (kernel-internal). tier_kernels.c is compiled once per x86-64 tier
 * (AVX-512, AVX2, baseline SSE2; only baseline on other architectures) with that tier's
 * -march, so the loops vectorise for it; tier.c picks one table when the runtime initialises
 * (TORCH_NEURONX_ISA caps it). Every tier computes the same bits: the bodies use correctly
 * rounded operations only (an explicit vnc_fmaf is one, emulated exactly on baseline), no
 * FMA contraction, and the same order of operations per element. */
#ifndef VNC_TIER_H
#define VNC_TIER_H

#include <stddef.h>
#include <stdint.h>
#include "ew_classes.h"

#define VNC_TILE_OUTPUTS 256 /* outputs per tile of the column sums */
#define VNC_RNG_BLOCK 256    /* counters per philox_words call */

/* A small float32 product for attention (vnc_tier_ops.mm): c[r][col] = the sum over t of
 * a[r * ars + t * ats] * b[t * ldb + col], for r < m, col < n; n is a multiple of
 * VNC_MM_COLS (b's and c's rows hold n columns, padded where needed). Each sum runs in t order from +0 with separate
 * multiplies and adds, so every tier computes the same bits. Rows go in tiles of VNC_MM_ROWS;
 * the triangular modes (causal attention) skip what is zero or unused by construction, per
 * tile: T_LE_R sums t <= the tile's last row only, T_GE_R t >= its first row only, C_GE_R
 * computes the column blocks from the one holding the tile's first row only (the rest of c
 * is left as it was). */
#define VNC_MM_COLS 16
#define VNC_MM_ROWS 4
enum { VNC_MM_FULL, VNC_MM_T_LE_R, VNC_MM_T_GE_R, VNC_MM_C_GE_R };
typedef struct vnc_mm {
  float *c;
  int64_t ldc;
  const float *a;
  int64_t ars, ats;
  const float *b;
  int64_t ldb, m, n, k;
  int tri;
} vnc_mm;

/* The softmax passes of one attention pair (vnc_tier_ops.attn_cols), in place on the
 * transposed scores s [S][ld] (ld a multiple of VNC_MM_COLS): s[j][i] holds Q_i . K_j, query i
 * in the lanes of a row, so 16 queries go side by side. Key j is live for query i when
 * j <= i (causal) or always; the live rows of a block of 16 queries are j < J (J = min(S,
 * block end) when causal, else S), the entries of those rows past the diagonal are masked.
 *   VNC_ATTN_SOFTMAX: s = softmax over live j of (scale * s + bias), lse[i] its logsumexp
 *     (the sum in the canonical schedule of vnc/reduce.h); a query with no finite score
 *     gets zeros and lse -inf;
 *   VNC_ATTN_PROBS: s = exp(scale * s + bias - lse[i]) (lse from the forward; -inf: zeros);
 *   VNC_ATTN_GRAD: s = p * (s - d[i]), s holding dP^T and p P^T (both [S][ld]).
 * Masked entries and rows J..S of each block become 0. Bias (may be NULL) is read at
 * bias + i * brs + j * bcs. scratch: S floats. */
enum { VNC_ATTN_SOFTMAX, VNC_ATTN_PROBS, VNC_ATTN_GRAD };
typedef struct vnc_attn_rows {
  int mode, causal;
  float *s;
  int64_t ld, L, S;
  float scale;
  const float *bias;
  int64_t brs, bcs;
  float *lse;
  const float *p, *d;
  float *scratch;
} vnc_attn_rows;

/* The lines of a depthwise convolution (conv.c builds them once per task from the geometry):
 * line l has n[l] columns, column i at ybase[l] + i * ycs of the output; its taps t = start[l]
 * .. start[l + 1] - 1, in order, each add a weight (index wi[t]) times the source at src[t] +
 * i * xcs for the columns i in [lo[t], hi[t]) (whose source lies inside its row; src[t]
 * itself, column 0's, may lie outside). Indices count elements (NCHW) or pixels
 * (channels_last). With ycs == xcs == 1, mask[t * groups + g] holds those columns as bits
 * (bit b: column 64 g + b), `groups` words per tap. */
typedef struct vnc_dw_lines {
  int64_t ycs, xcs, groups;
  const int64_t *ybase, *n, *start;
  const int64_t *src, *lo, *hi, *wi;
  const uint64_t *mask;
} vnc_dw_lines;
#define VNC_DW_LANES 16 /* partial sums per tap of dw_dot_taps */
#define VNC_DW_PLANES 4 /* planes one dw_lines call takes at most */

typedef struct vnc_tier_ops {
  const char *name;
  vnc_ew_kernel ew[VNC_EW_COUNT][EW_NCLS];
  /* The canonical sum of one block of n <= VNC_REDUCE_BLOCK terms f(x[i] - shift) (reduce.c);
   * kind: 0 x, 1 x^2, 2 |x|^pw, 3 |x|. */
  float (*block_sum)(const float *x, int64_t n, int kind, float shift, float pw);
  /* block_sum (kind 0) of `rows` rows of n <= VNC_REDUCE_BLOCK terms each, row k at x + k * ld,
   * into out[k]: several short rows side by side (global average pooling's 49). */
  void (*row_sums)(const float *x, int64_t ld, int64_t n, int64_t rows, float *out);
  /* Transpose of es-byte elements, es in {1, 2, 4, 8} (copy.c): element (i, q), i < ni, q < nq,
   * from s + i * s0 + q * es to d + q * dq + i * es (strides in bytes); 8 x 8 tiles in registers. */
  void (*transpose)(int64_t es, char *d, int64_t dq, const char *s, int64_t s0, int64_t ni, int64_t nq);
  /* Column extremes of the tiled path (reduce.c): rows r < nrows of x (row r at x + r * ld) update
   * m[j], j < nt, where the row's value is NaN or beyond m[j] (above for mx, below otherwise) and
   * m[j] is not NaN (the first extreme, NaN winning and staying); idx[j] = k0 + r alongside, when
   * idx is not NULL. */
  void (*tile_extreme)(float *m, int32_t *idx, const float *x, int64_t ld, int64_t nrows, int64_t nt, int mx,
                       int32_t k0);
  /* One run of the tiled column sums (reduce.c): rows k < nrows of x (row k at x + k * ld)
   * added to lanes[k % 8][j], j < nt; with shift, (x - shift[j])^2 is added instead. */
  void (*tile_run)(float (*lanes)[VNC_TILE_OUTPUTS], const float *x, int64_t ld, int64_t nrows, int64_t nt,
                   const float *shift);
  /* Largest of x[0..n), NaN if any is NaN, -inf if n == 0 (which zero, for a largest of zeros,
   * is unspecified); row_min the smallest (+inf if n == 0). */
  float (*row_max)(const float *x, int64_t n);
  float (*row_min)(const float *x, int64_t n);
  /* Dense float16 <-> float32 conversion of n elements, dtype.h's bits (copy.c's loops). */
  void (*f16_to_f32)(float *d, const uint16_t *s, int64_t n);
  void (*f32_to_f16)(uint16_t *d, const float *s, int64_t n);
  /* The same for bfloat16 (dtype.h's rounding and NaN, in integer lanes). */
  void (*bf16_to_f32)(float *d, const uint16_t *s, int64_t n);
  void (*f32_to_bf16)(uint16_t *d, const float *s, int64_t n);
  /* y[i] = exp(x[i] - shift) (vnc_expf). y may equal x. */
  void (*exp_shift)(float *y, const float *x, float shift, int64_t n);
  /* Words 0 and 1 of Philox4x32-10 (philox.h's vnc_philox_element) for the counters ctr + i,
   * i < n <= VNC_RNG_BLOCK, into w0[i] and w1[i]. */
  void (*philox_words)(uint64_t seed, uint64_t ctr, int64_t n, uint32_t *w0, uint32_t *w1);
  /* Random fills (rng.c): y[i] for i < n drawn from Philox counter ctr + i under seed, for
   * kind VNC_RNG_UNIFORM (a + (b - a) u, u in [0, 1) from 24 bits), VNC_RNG_NORMAL (mean a,
   * std b, Box-Muller), VNC_RNG_LOG_NORMAL (exp of that) or VNC_RNG_EXPONENTIAL (rate a). */
  void (*rng_f32)(float *y, int64_t n, uint64_t seed, uint64_t ctr, int kind, float a, float b);
  /* Layer norm of a row: y[i] = (x[i] - mean) * rstd, then * w[i], then + b[i] (w, b may be
   * NULL). y may equal x. */
  void (*norm_row)(float *y, const float *x, int64_t n, float mean, float rstd, const float *w, const float *b);
  /* The small product described at vnc_mm. */
  void (*mm)(const vnc_mm *p);
  /* One row of softmax (nn.c), n >= 1. Forward (x the input): m = max, e = exp(x - m) in tmp,
   * s = canonical sum of e; y = e * (1 / s), or (x - m) - log(s) for log_softmax. Backward (x
   * the gradient, yo the output): y = yo * (x - canonical sum of x * yo), or for log_softmax
   * x - exp(yo) * canonical sum of x. y may equal x or yo; tmp: n floats. */
  void (*softmax_row)(float *y, const float *x, const float *yo, int64_t n, int log, int backward, float *tmp);
  /* One row of layer norm's backward (nn.c): xh = (x - mean) * rstd; with aw (then ab too)
   * aw += dy * xh, ab += dy; with dx: g = dy * w (w may be NULL), a = canonical sum of g / n,
   * b = canonical sum of g * xh / n, dx = rstd * ((g - a) - xh * b). xh, g: n-float scratch. */
  void (*ln_bwd_row)(float *dx, const float *x, const float *dy, const float *w, int64_t n, float mean, float rstd,
                     float *aw, float *ab, float *xh, float *g);
  /* The attention softmax passes described at vnc_attn_rows. */
  void (*attn_cols)(const vnc_attn_rows *p);
  /* The depthwise convolution's lines [l0, l1) of L (see vnc_dw_lines); every term is a
   * multiply then an add, taps added in their order. dw_lines, in np <= VNC_DW_PLANES planes
   * (y[p], x[p], w[p]) side by side: y[ybase + i * ycs] += w[wi] * x[src + i * xcs] (the
   * vector path: ycs == xcs == 1), each line's y first set to init[p] (init NULL: y as it
   * is). dw_dot_taps takes a table grouped by tap instead (weight gradients): "line" k is
   * tap k, its entries t = start[k] .. start[k + 1] - 1 the output lines the tap reaches, wi[t]
   * the index of such a line's column 0 in y; in np planes, acc[p][k * VNC_DW_LANES + i %
   * VNC_DW_LANES] += y[p][wi + i] * x[p][src + i * xcs], i in order per lane (fixed lanes, so
   * every tier sums alike), for taps [k0, k1). dw_cl_lines and dw_cl_dot_lines are the
   * same with a pixel of channels per column (channels_last): channels c < C of pixels ld
   * floats apart, y[(ybase + i * ycs) * ld + c] += w[wi * ld + c] * x[(src + i * xcs) * ld + c]
   * (each pixel first set to init[c], a vector of C; init NULL: y as it is),
   * and acc[wi * ld + c] += y[(ybase + i) * ld + c] * x[(src + i * xcs) * ld + c]. No output
   * may overlap an input. */
  void (*dw_lines)(const vnc_dw_lines *L, int64_t l0, int64_t l1, int np, float *const *y, const float *const *x,
                   const float *const *w, const float *init);
  void (*dw_dot_taps)(const vnc_dw_lines *L, int64_t k0, int64_t k1, int np, float *const *acc, const float *const *y,
                      const float *const *x);
  void (*dw_cl_lines)(const vnc_dw_lines *L, int64_t l0, int64_t l1, int64_t C, int64_t ld, float *y, const float *x,
                      const float *w, const float *init);
  void (*dw_cl_dot_lines)(const vnc_dw_lines *L, int64_t l0, int64_t l1, int64_t C, int64_t ld, float *acc,
                          const float *y, const float *x);
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
