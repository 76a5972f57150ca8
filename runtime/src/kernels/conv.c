/* Convolution, 1-D to 3-D, plain and transposed (im2col + BLAS), unfold/fold (its im2col and
 * col2im on their own), batch norm, max and adaptive average pooling (vnc/conv.h).
 * Operands are converted to float32 once per task when they are not float32 already. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "tier.h"
#include "vnc/conv.h"
#include "vnc/threadpool.h"

/* float32 copy of n elements of `dtype` at p (or p itself when already float32). */
static float *as_f32(const void *p, int32_t dtype, int64_t n, float **owned) {
  *owned = NULL;
  if (!p) return NULL;
  if (dtype == VNC_FLOAT32) return (float *)p;
  float *b = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  vnc_to_f32(b, p, dtype, 1, n);
  *owned = b;
  return b;
}

static void store_f32(void *dst, int32_t dtype, const float *src, int64_t n) {
  if (dtype == VNC_FLOAT32 && dst == (const void *)src) return;
  vnc_from_f32(dst, dtype, 1, src, n);
}

/* ---------------------------------------------------------------- convolution */

/* Every convolution is described as a plain one from a "big" side X (channels Cx, spatial xs)
 * to a "small" side Y (channels Cy, spatial ys) with weight [Cy, Cx / G, k...]; a transposed
 * convolution runs the same geometry the other way (its input is Y, its output X). Three
 * products per (n, group) serve every case:
 *   to_y:   Y_g  = W_g @ im2col(X_g)              (convolution forward, transposed input grad)
 *   to_x:   X_g += col2im(W_g^T @ Y_g)            (transposed forward, convolution input grad)
 *   grad_w: W_g += Y_g @ im2col(X_g)^T, n in order (weight gradients)                      */
typedef struct geom {
  int64_t N, G, Cx, Cy, K, XS, YS; /* K = kernel volume, XS/YS = spatial volumes */
  int64_t xs[3], ys[3], k[3], st[3], pad[3], dil[3];
} geom;

static geom geom_of(const vnc_conv_params *p) {
  geom g;
  memset(&g, 0, sizeof g);
  g.N = p->N;
  g.G = p->groups;
  g.Cx = p->transposed ? p->O : p->C;
  g.Cy = p->transposed ? p->C : p->O;
  g.K = g.XS = g.YS = 1;
  for (int d = 0; d < 3; d++) {
    const int used = d >= 3 - p->nspatial;
    const int i = d - (3 - p->nspatial); /* index into the caller's arrays */
    g.xs[d] = used ? (p->transposed ? p->out[i] : p->in[i]) : 1;
    g.ys[d] = used ? (p->transposed ? p->in[i] : p->out[i]) : 1;
    g.k[d] = used ? p->k[i] : 1;
    g.st[d] = used ? p->stride[i] : 1;
    g.pad[d] = used ? p->pad[i] : 0;
    g.dil[d] = used ? p->dil[i] : 1;
    g.K *= g.k[d];
    g.XS *= g.xs[d];
    g.YS *= g.ys[d];
  }
  return g;
}

typedef struct col_job {
  const geom *g;
  float *x;       /* the group's X channels (Cx / G of them), XS each */
  float *col;     /* [(Cx / G) * K, YS] */
} col_job;

/* Source index of kernel offset kk for output index o along dim d (may lie outside the input). */
#define SRC(g, d, o, kk) ((o) * (g)->st[d] - (g)->pad[d] + (kk) * (g)->dil[d])

static int64_t ceil_div(int64_t a, int64_t b) { return a <= 0 ? -(-a / b) : (a + b - 1) / b; } /* b > 0 */

/* Columns [c0, c1) of one line of an im2col row, dst[c2] = src[SRC(c2)] or 0 where that lies
 * in the padding: the in-range columns are one interval, computed once (a memcpy at stride 1). */
static void im2col_segment(const geom *g, const float *src, int64_t k2, float *dst, int64_t c0, int64_t c1) {
  const int64_t off = k2 * g->dil[2] - g->pad[2], st = g->st[2];
  int64_t lo = ceil_div(-off, st), hi = ceil_div(g->xs[2] - off, st);
  lo = lo < c0 ? c0 : lo > c1 ? c1 : lo;
  hi = hi < lo ? lo : hi > c1 ? c1 : hi;
  memset(dst + c0, 0, sizeof(float) * (size_t)(lo - c0));
  if (st == 1) memcpy(dst + lo, src + lo + off, sizeof(float) * (size_t)(hi - lo));
  else
    for (int64_t c2 = lo; c2 < hi; c2++) dst[c2] = src[c2 * st + off];
  memset(dst + hi, 0, sizeof(float) * (size_t)(c1 - hi));
}

/* Rows [r0, r1) and output columns [j0, j1) (positions in the flattened Y volume) of the
 * im2col of a group's X channels: col[r * ld + q - j0] for row r = (channel, kernel offset),
 * each independent, filled line by line. */
static void im2col_block(const geom *g, const float *x, float *col, int64_t ld, int64_t r0, int64_t r1, int64_t j0,
                         int64_t j1) {
  const int64_t ys2 = g->ys[2];
  for (int64_t r = r0; r < r1; r++) {
    const int64_t c = r / g->K, kk = r % g->K;
    const int64_t k0 = kk / (g->k[1] * g->k[2]), k1 = (kk / g->k[2]) % g->k[1], k2 = kk % g->k[2];
    for (int64_t q = j0; q < j1;) {
      const int64_t line = q / ys2, c0 = q % ys2, c1 = c0 + (j1 - q) < ys2 ? c0 + (j1 - q) : ys2;
      const int64_t i0 = SRC(g, 0, line / g->ys[1], k0), i1 = SRC(g, 1, line % g->ys[1], k1);
      float *dst = col + r * ld + (q - c0 - j0); /* dst[c2]: column line * ys2 + c2 */
      if (i0 < 0 || i0 >= g->xs[0] || i1 < 0 || i1 >= g->xs[1])
        memset(dst + c0, 0, sizeof(float) * (size_t)(c1 - c0));
      else
        im2col_segment(g, x + c * g->XS + (i0 * g->xs[1] + i1) * g->xs[2], k2, dst, c0, c1);
      q += c1 - c0;
    }
  }
}

/* im2col rows [r0, r1), all columns (im2col's parallel ranges). */
static void im2col_rows(void *ctx, int64_t r0, int64_t r1) {
  const col_job *j = ctx;
  im2col_block(j->g, j->x, j->col, j->g->YS, r0, r1, 0, j->g->YS);
}

/* col2im by channels [c0, c1): each channel adds its K rows in order (deterministic). */
static void col2im_channels(void *ctx, int64_t c0, int64_t c1) {
  const col_job *j = ctx;
  const geom *g = j->g;
  for (int64_t c = c0; c < c1; c++)
    for (int64_t kk = 0; kk < g->K; kk++) {
      const int64_t k0 = kk / (g->k[1] * g->k[2]), k1 = (kk / g->k[2]) % g->k[1], k2 = kk % g->k[2];
      float *x = j->x + c * g->XS;
      const float *row = j->col + (c * g->K + kk) * g->YS;
      for (int64_t a = 0; a < g->ys[0]; a++) {
        const int64_t i0 = SRC(g, 0, a, k0);
        if (i0 < 0 || i0 >= g->xs[0]) continue;
        for (int64_t b = 0; b < g->ys[1]; b++) {
          const int64_t i1 = SRC(g, 1, b, k1);
          if (i1 < 0 || i1 >= g->xs[1]) continue;
          float *dst = x + (i0 * g->xs[1] + i1) * g->xs[2];
          const float *src = row + (a * g->ys[1] + b) * g->ys[2];
          for (int64_t c2 = 0; c2 < g->ys[2]; c2++) {
            const int64_t i2 = SRC(g, 2, c2, k2);
            if (i2 >= 0 && i2 < g->xs[2]) dst[i2] += src[c2];
          }
        }
      }
    }
}

static void im2col(const geom *g, float *x, float *col) {
  col_job j = {g, x, col};
  const int64_t rows = g->Cx / g->G * g->K;
  vnc_parallel_for(rows, 1 + 16384 / (g->YS + 1), im2col_rows, &j);
}

static void col2im(const geom *g, float *x, float *col) {
  col_job j = {g, x, col};
  vnc_parallel_for(g->Cx / g->G, 1 + 16384 / (g->K * g->YS + 1), col2im_channels, &j);
}

/* A 1x1 convolution with stride 1 and no padding: im2col(X) is X itself. */
static int col_is_x(const geom *g) {
  for (int d = 0; d < 3; d++)
    if (g->k[d] != 1 || g->st[d] != 1 || g->pad[d] != 0) return 0;
  return 1;
}

/* to_y's tasks: (sample, group, block of output columns), each the im2col of its block into
 * its own cache-sized buffer, then W_g @ that block into Y (BLAS on one thread: a nested
 * vnc_sgemm runs serially), then the bias on the block while it is in cache. */
typedef struct to_y_job {
  const geom *g;
  const float *X, *W, *bias;
  float *Y;
  int64_t block, nblocks;
} to_y_job;

static void to_y_blocks(void *ctx, int64_t t0, int64_t t1) {
  const to_y_job *j = ctx;
  const geom *g = j->g;
  const int64_t Cxg = g->Cx / g->G, Cyg = g->Cy / g->G, CK = Cxg * g->K;
  const int direct = col_is_x(g);
  float *col = direct ? NULL : malloc(sizeof(float) * (size_t)(CK * j->block));
  for (int64_t t = t0; t < t1; t++) {
    const int64_t n = t / (g->G * j->nblocks), gr = t / j->nblocks % g->G, j0 = t % j->nblocks * j->block;
    const int64_t j1 = j0 + j->block < g->YS ? j0 + j->block : g->YS;
    const float *x = j->X + (n * g->Cx + gr * Cxg) * g->XS;
    float *y = j->Y + (n * g->Cy + gr * Cyg) * g->YS + j0;
    if (!direct) im2col_block(g, x, col, j1 - j0, 0, CK, j0, j1);
    vnc_sgemm(0, 0, Cyg, j1 - j0, CK, 1.0f, j->W + gr * Cyg * CK, CK, direct ? x + j0 : col, direct ? g->XS : j1 - j0,
              0.0f, y, g->YS);
    if (j->bias)
      for (int64_t o = 0; o < Cyg; o++) {
        const float b = j->bias[gr * Cyg + o];
        for (int64_t q = 0; q < j1 - j0; q++) y[o * g->YS + q] += b;
      }
  }
  free(col);
}

/* Y[n] = W @ im2col(X[n]) (+ bias) per group (Y fully written). Blocks of about 256 KiB of
 * im2col columns (16 to 512 columns). */
static void to_y(const geom *g, const float *X, const float *W, const float *bias, float *Y) {
  const int64_t CK = g->Cx / g->G * g->K;
  int64_t block = (65536 / (CK > 0 ? CK : 1)) / 16 * 16;
  block = block < 16 ? 16 : block > 512 ? 512 : block;
  if (block > g->YS) block = g->YS > 0 ? g->YS : 1;
  to_y_job j = {g, X, W, bias, Y, block, (g->YS + block - 1) / block};
  vnc_parallel_for(g->N * g->G * j.nblocks, 1, to_y_blocks, &j);
}

/* X[n] += col2im(W^T @ Y[n]) per group (X zeroed by the caller). */
static void to_x(const geom *g, const float *Y, const float *W, float *X, float *col) {
  const int64_t Cxg = g->Cx / g->G, Cyg = g->Cy / g->G, CK = Cxg * g->K;
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t gr = 0; gr < g->G; gr++) {
      vnc_sgemm(1, 0, CK, g->YS, Cyg, 1.0f, W + gr * Cyg * CK, CK, Y + (n * g->Cy + gr * Cyg) * g->YS, g->YS, 0.0f, col, g->YS);
      col2im(g, X + (n * g->Cx + gr * Cxg) * g->XS, col);
    }
}

/* dW = sum over n (in order) of Y[n] @ im2col(X[n])^T per group (dW zeroed by the caller). */
static void grad_w(const geom *g, const float *X, const float *Y, float *dW, float *col) {
  const int64_t Cxg = g->Cx / g->G, Cyg = g->Cy / g->G, CK = Cxg * g->K;
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t gr = 0; gr < g->G; gr++) {
      im2col(g, (float *)X + (n * g->Cx + gr * Cxg) * g->XS, col);
      vnc_sgemm(0, 1, Cyg, CK, g->YS, 1.0f, Y + (n * g->Cy + gr * Cyg) * g->YS, g->YS, col, g->YS, 1.0f, dW + gr * Cyg * CK, CK);
    }
}

/* ---------------------------------------------------------------- depthwise and channels_last */

/* A depthwise convolution (groups == C > 1, channel multiplier m = O / C) runs directly, as
 * lines: every output line (a row of the innermost dim) is a sum of shifted source rows, one
 * per tap, each a multiply-add over contiguous columns that the tier's vector loop takes
 * (dw_lines; the border columns, whose source lies in the zero padding for some taps, in
 * masked vectors that skip those taps). The lines and their taps depend on the geometry only,
 * so they are built once per task (plan_forward, plan_input_grad, plan_weight_grad: the
 * forward's grouped by tap) and serve every (sample, channel) plane, 4 planes at once.
 * Relative to the plain geometry (X input side, Y output side, weight [Cy, 1, K]):
 *   forward       Y[n, o] line = bias[o] + sum over taps of w[o, tap] * shifted X[n, o / m] row;
 *   input grad    X[n, c] line phase r (positions r + stride * q of the innermost dim) = sum
 *                 over j < m and the taps landing on that phase of w[c m + j, tap] * shifted
 *                 Y[n, c m + j] row (a gather: each element written once; stride 1: one phase);
 *   weight grad   per (n, o): each tap's dot product of Y[n, o] with its shifted X rows, in
 *                 VNC_DW_LANES lanes combined pairwise; then the samples added in order
 *                 (no atomics: every sum has one order, on every tier and thread count).
 * channels_last operands take the same lines with a pixel of channels per column (dw_cl_lines:
 * vectors over channels; the input expanded by the multiplier first). */

static int is_depthwise(const vnc_conv_params *p) {
  return !p->transposed && p->groups == p->C && p->C > 1 && p->O % p->C == 0;
}

static int is_pointwise(const vnc_conv_params *p) {
  if (p->transposed || p->groups != 1) return 0;
  for (int i = 0; i < p->nspatial; i++)
    if (p->k[i] != 1 || p->stride[i] != 1 || p->pad[i] != 0) return 0;
  return 1;
}

int vnc_conv_channels_last_ok(const vnc_conv_params *p) {
  return p && p->nspatial >= 1 && p->nspatial <= 3 && (is_depthwise(p) || is_pointwise(p));
}

/* A line table (vnc_dw_lines) being built, and its storage. */
typedef struct dw_plan {
  vnc_dw_lines L;
  int64_t lines;
  int64_t *ybase, *n, *start, *src, *lo, *hi, *wi;
  uint64_t *mask;
} dw_plan;

/* Room for `lines` lines of at most `cols` columns and `taps` taps. */
static dw_plan plan_alloc(int64_t lines, int64_t taps, int64_t cols, int64_t ycs, int64_t xcs) {
  dw_plan P;
  const int64_t tp = taps > 0 ? taps : 1, groups = ycs == 1 && xcs == 1 ? (cols + 63) / 64 : 0;
  int64_t *m = malloc(sizeof(int64_t) * (size_t)(3 * lines + 1 + 4 * tp));
  P.lines = 0;
  P.ybase = m, P.n = m + lines, P.start = m + 2 * lines;
  P.src = P.start + lines + 1, P.lo = P.src + tp, P.hi = P.lo + tp, P.wi = P.hi + tp;
  P.mask = groups ? malloc(sizeof(uint64_t) * (size_t)(tp * groups)) : NULL;
  P.start[0] = 0;
  P.L = (vnc_dw_lines){.ycs = ycs, .xcs = xcs, .groups = groups, .ybase = P.ybase, .n = P.n, .start = P.start,
                       .src = P.src, .lo = P.lo, .hi = P.hi, .wi = P.wi, .mask = P.mask};
  return P;
}

static void plan_free(dw_plan *P) {
  free(P->ybase);
  free(P->mask);
}

static void plan_line(dw_plan *P, int64_t ybase, int64_t n) {
  P->ybase[P->lines] = ybase;
  P->n[P->lines] = n;
  P->lines++;
  P->start[P->lines] = P->start[P->lines - 1];
}

/* A tap of the current line: the source of column i is row + off + i * a, inside its row when
 * 0 <= off + i * a < Lx; columns where it is not are left out (zero padding), a tap with none
 * is dropped. */
static void plan_tap(dw_plan *P, int64_t row, int64_t off, int64_t a, int64_t Lx, int64_t wi) {
  const int64_t L = P->n[P->lines - 1];
  const int64_t lo = off >= 0 ? 0 : (-off + a - 1) / a;
  int64_t hi = Lx - off <= 0 ? 0 : (Lx - off - 1) / a + 1;
  hi = hi < L ? hi : L;
  if (lo >= hi) return;
  const int64_t t = P->start[P->lines]++;
  P->src[t] = row + off, P->lo[t] = lo, P->hi[t] = hi, P->wi[t] = wi;
  for (int64_t gr = 0; gr < P->L.groups; gr++) { /* columns [lo, hi) as bits, 64 a word */
    const int64_t a0 = lo - 64 * gr < 0 ? 0 : lo - 64 * gr, b0 = hi - 64 * gr > 64 ? 64 : hi - 64 * gr;
    P->mask[t * P->L.groups + gr] = a0 >= b0 ? 0 : (b0 == 64 ? ~0ull : (1ull << b0) - 1ull) & ~((1ull << a0) - 1ull);
  }
}

/* Output index o along dim d whose kernel offset kk lands on source index s; 0 when none. */
static inline int dst_of(const geom *g, int d, int64_t s, int64_t kk, int64_t *o) {
  const int64_t num = s + g->pad[d] - kk * g->dil[d];
  if (num < 0 || num % g->st[d]) return 0;
  *o = num / g->st[d];
  return *o < g->ys[d];
}

/* Y's lines from X (forward and weight gradient): tap (k0, k1, k2) has weight index kk. */
static dw_plan plan_forward(const geom *g) {
  const int64_t lines = g->ys[0] * g->ys[1];
  dw_plan P = plan_alloc(lines, lines * g->K, g->ys[2], 1, g->st[2]);
  for (int64_t a0 = 0; a0 < g->ys[0]; a0++)
    for (int64_t a1 = 0; a1 < g->ys[1]; a1++) {
      plan_line(&P, (a0 * g->ys[1] + a1) * g->ys[2], g->ys[2]);
      for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
        const int64_t i0 = SRC(g, 0, a0, k0);
        if (i0 < 0 || i0 >= g->xs[0]) continue;
        for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
          const int64_t i1 = SRC(g, 1, a1, k1);
          if (i1 < 0 || i1 >= g->xs[1]) continue;
          for (int64_t k2 = 0; k2 < g->k[2]; k2++)
            plan_tap(&P, (i0 * g->xs[1] + i1) * g->xs[2], SRC(g, 2, 0, k2), g->st[2], g->xs[2],
                     (k0 * g->k[1] + k1) * g->k[2] + k2);
        }
      }
    }
  return P;
}

/* The forward's lines grouped by tap (weight gradient, dw_dot_taps): "line" k = tap k, its
 * entries the output lines it reaches, wi the index of their column 0 in Y. */
static dw_plan plan_weight_grad(const geom *g) {
  const int64_t lines = g->ys[0] * g->ys[1];
  dw_plan P = plan_alloc(g->K, lines * g->K, g->ys[2], 1, g->st[2]);
  for (int64_t k0 = 0; k0 < g->k[0]; k0++)
    for (int64_t k1 = 0; k1 < g->k[1]; k1++)
      for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
        plan_line(&P, 0, g->ys[2]);
        for (int64_t a0 = 0; a0 < g->ys[0]; a0++) {
          const int64_t i0 = SRC(g, 0, a0, k0);
          if (i0 < 0 || i0 >= g->xs[0]) continue;
          for (int64_t a1 = 0; a1 < g->ys[1]; a1++) {
            const int64_t i1 = SRC(g, 1, a1, k1);
            if (i1 < 0 || i1 >= g->xs[1]) continue;
            plan_tap(&P, (i0 * g->xs[1] + i1) * g->xs[2], SRC(g, 2, 0, k2), g->st[2], g->xs[2],
                     (a0 * g->ys[1] + a1) * g->ys[2]);
          }
        }
      }
  return P;
}

/* X's lines from Y (input gradient), one per row and phase; sources in m consecutive Y planes
 * (plane j at j * YS, weights at j * K; channels_last: m = 1, the multiplier lies in the
 * pixel). */
static dw_plan plan_input_grad(const geom *g, int64_t m) {
  const int64_t phases = g->st[2] < g->xs[2] ? g->st[2] : g->xs[2], lines = g->xs[0] * g->xs[1] * phases;
  dw_plan P = plan_alloc(lines, lines * m * g->K, g->xs[2], g->st[2], 1);
  for (int64_t s0 = 0; s0 < g->xs[0]; s0++)
    for (int64_t s1 = 0; s1 < g->xs[1]; s1++)
      for (int64_t r = 0; r < phases; r++) {
        plan_line(&P, (s0 * g->xs[1] + s1) * g->xs[2] + r, (g->xs[2] - r + g->st[2] - 1) / g->st[2]);
        for (int64_t j = 0; j < m; j++)
          for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
            int64_t i0, i1;
            if (!dst_of(g, 0, s0, k0, &i0)) continue;
            for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
              if (!dst_of(g, 1, s1, k1, &i1)) continue;
              for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                const int64_t num = r + g->pad[2] - k2 * g->dil[2];
                if (((num % g->st[2]) + g->st[2]) % g->st[2]) continue; /* lands on another phase */
                plan_tap(&P, j * g->YS + (i0 * g->ys[1] + i1) * g->ys[2], num / g->st[2], 1, g->ys[2],
                         j * g->K + (k0 * g->k[1] + k1) * g->k[2] + k2);
              }
            }
          }
      }
  return P;
}
#undef SRC

typedef struct dw_job {
  const geom *g;
  const vnc_dw_lines *L;
  int64_t lines, m;
  const float *x, *w, *b, *y;
  float *out, *gx; /* out: the result (or an expanded one, channels_last's input gradient); gx: its sum */
} dw_job;

/* NCHW forward, units (n, block of VNC_DW_PLANES output channels) in [u0, u1). */
static void dw_fwd_units(void *ctx, int64_t u0, int64_t u1) {
  const dw_job *j = ctx;
  const geom *g = j->g;
  const int64_t blocks = (g->Cy + VNC_DW_PLANES - 1) / VNC_DW_PLANES;
  for (int64_t u = u0; u < u1; u++) {
    const int64_t n = u / blocks, o0 = u % blocks * VNC_DW_PLANES;
    float *y[VNC_DW_PLANES], bias[VNC_DW_PLANES];
    const float *x[VNC_DW_PLANES], *w[VNC_DW_PLANES];
    int np = 0;
    for (int64_t o = o0; o < g->Cy && np < VNC_DW_PLANES; o++, np++) {
      y[np] = j->out + (n * g->Cy + o) * g->YS;
      x[np] = j->x + (n * g->Cx + o / j->m) * g->XS;
      w[np] = j->w + o * g->K;
      bias[np] = j->b ? j->b[o] : 0.0f;
    }
    vnc_tier()->dw_lines(j->L, 0, j->lines, np, y, x, w, bias); /* every output line is one of the plan's */
  }
}

/* NCHW input gradient, units (n, block of VNC_DW_PLANES input channels) in [u0, u1). */
static void dw_bwd_in_units(void *ctx, int64_t u0, int64_t u1) {
  const dw_job *j = ctx;
  const geom *g = j->g;
  const int64_t blocks = (g->Cx + VNC_DW_PLANES - 1) / VNC_DW_PLANES;
  for (int64_t u = u0; u < u1; u++) {
    const int64_t n = u / blocks, c0 = u % blocks * VNC_DW_PLANES;
    float *x[VNC_DW_PLANES];
    const float *y[VNC_DW_PLANES], *w[VNC_DW_PLANES];
    const float zero[VNC_DW_PLANES] = {0};
    int np = 0;
    for (int64_t c = c0; c < g->Cx && np < VNC_DW_PLANES; c++, np++) {
      x[np] = j->out + (n * g->Cx + c) * g->XS;
      y[np] = j->y + (n * g->Cy + c * j->m) * g->YS;
      w[np] = j->w + c * j->m * g->K;
    }
    vnc_tier()->dw_lines(j->L, 0, j->lines, np, x, y, w, zero); /* every element is on one line */
  }
}

/* NCHW weight gradient, units (n, block of VNC_DW_PLANES output channels) in [u0, u1):
 * out[(n * Cy + o) * K + tap], the sample's sums. */
static void dw_bwd_w_units(void *ctx, int64_t u0, int64_t u1) {
  const dw_job *j = ctx;
  const geom *g = j->g;
  const int64_t blocks = (g->Cy + VNC_DW_PLANES - 1) / VNC_DW_PLANES, A = g->K * VNC_DW_LANES;
  float *buf = malloc(sizeof(float) * (size_t)(A * VNC_DW_PLANES));
  for (int64_t u = u0; u < u1; u++) {
    const int64_t n = u / blocks, o0 = u % blocks * VNC_DW_PLANES;
    float *acc[VNC_DW_PLANES];
    const float *y[VNC_DW_PLANES], *x[VNC_DW_PLANES];
    int np = 0;
    for (int64_t o = o0; o < g->Cy && np < VNC_DW_PLANES; o++, np++) {
      acc[np] = buf + np * A;
      y[np] = j->y + (n * g->Cy + o) * g->YS;
      x[np] = j->x + (n * g->Cx + o / j->m) * g->XS;
    }
    memset(buf, 0, sizeof(float) * (size_t)(A * np));
    vnc_tier()->dw_dot_taps(j->L, 0, g->K, np, acc, y, x);
    for (int p = 0; p < np; p++)
      for (int64_t k = 0; k < g->K; k++)
        j->out[(n * g->Cy + o0 + p) * g->K + k] = vnc_pairwise_sum(acc[p] + k * VNC_DW_LANES, VNC_DW_LANES);
  }
  free(buf);
}

/* dst[r] = the samples' partial sums part[n * rows + r] added in order. */
static void sum_samples(const float *part, int64_t N, int64_t rows, float *dst) {
  if (N == 0) memset(dst, 0, sizeof(float) * (size_t)rows);
  for (int64_t r = 0; r < rows && N > 0; r++) {
    float s = part[r];
    for (int64_t n = 1; n < N; n++) s = s + part[n * rows + r];
    dst[r] = s;
  }
}

static int64_t grain_of(int64_t work) { return 1 + 65536 / (work + 1); }

static void dw_forward(const geom *g, const float *X, const float *W, const float *b, float *Y) {
  dw_plan P = plan_forward(g);
  dw_job j = {.g = g, .L = &P.L, .lines = P.lines, .m = g->Cy / g->Cx, .x = X, .w = W, .b = b, .out = Y};
  const int64_t blocks = (g->Cy + VNC_DW_PLANES - 1) / VNC_DW_PLANES;
  vnc_parallel_for(g->N * blocks, grain_of(g->YS * g->K * VNC_DW_PLANES), dw_fwd_units, &j);
  plan_free(&P);
}

static void dw_backward(const geom *g, const float *X, const float *W, const float *GY, float *GX, float *GW) {
  const int64_t m = g->Cy / g->Cx;
  if (GX) {
    dw_plan P = plan_input_grad(g, m);
    dw_job j = {.g = g, .L = &P.L, .lines = P.lines, .m = m, .w = W, .y = GY, .out = GX};
    const int64_t blocks = (g->Cx + VNC_DW_PLANES - 1) / VNC_DW_PLANES;
    vnc_parallel_for(g->N * blocks, grain_of(g->XS * g->K * m * VNC_DW_PLANES), dw_bwd_in_units, &j);
    plan_free(&P);
  }
  if (GW) {
    dw_plan P = plan_weight_grad(g);
    float *part = malloc(sizeof(float) * (size_t)(g->N * g->Cy * g->K > 0 ? g->N * g->Cy * g->K : 1));
    dw_job j = {.g = g, .L = &P.L, .lines = P.lines, .m = m, .x = X, .y = GY, .out = part};
    const int64_t blocks = (g->Cy + VNC_DW_PLANES - 1) / VNC_DW_PLANES;
    vnc_parallel_for(g->N * blocks, grain_of(g->YS * g->K * VNC_DW_PLANES), dw_bwd_w_units, &j);
    sum_samples(part, g->N, g->Cy * g->K, GW);
    free(part);
    plan_free(&P);
  }
}

/* Channels_last: pixels of Cy channels (the input expanded by the multiplier, x[..., o] =
 * input[..., o / m]), the weight transposed to [K, Cy]. Forward and input gradient: units
 * (n, line); weight gradient: units (n, block of DW_CB channels) into per-sample partials. */
#define DW_CB 64

static void dwcl_fwd_units(void *ctx, int64_t u0, int64_t u1) {
  const dw_job *j = ctx;
  const geom *g = j->g;
  const vnc_dw_lines *L = j->L;
  const int64_t C = g->Cy;
  for (int64_t u = u0; u < u1; u++) {
    const int64_t n = u / j->lines, l = u % j->lines;
    vnc_tier()->dw_cl_lines(L, l, l + 1, C, C, j->out + n * g->YS * C, j->x + n * g->XS * C, j->w, j->b);
  }
}

static void dwcl_bwd_in_units(void *ctx, int64_t u0, int64_t u1) {
  const dw_job *j = ctx;
  const geom *g = j->g;
  const vnc_dw_lines *L = j->L;
  const int64_t C = g->Cy, m = j->m;
  for (int64_t u = u0; u < u1; u++) {
    const int64_t n = u / j->lines, l = u % j->lines;
    float *e = j->out + n * g->XS * C;
    vnc_tier()->dw_cl_lines(L, l, l + 1, C, C, e, j->y + n * g->YS * C, j->w, j->b); /* b: C zeros */
    if (m > 1) /* the expanded gradient summed over the multiplier, j in order */
      for (int64_t i = 0; i < L->n[l]; i++) {
        const int64_t px = L->ybase[l] + i * L->ycs;
        const float *ep = e + px * C;
        float *gp = j->gx + (n * g->XS + px) * g->Cx;
        for (int64_t c = 0; c < g->Cx; c++) {
          float s = ep[c * m];
          for (int64_t jm = 1; jm < m; jm++) s = s + ep[c * m + jm];
          gp[c] = s;
        }
      }
  }
}

static void dwcl_bwd_w_units(void *ctx, int64_t u0, int64_t u1) {
  const dw_job *j = ctx;
  const geom *g = j->g;
  const int64_t C = g->Cy, nb = (C + DW_CB - 1) / DW_CB;
  for (int64_t u = u0; u < u1; u++) {
    const int64_t n = u / nb, c0 = u % nb * DW_CB, cn = C - c0 < DW_CB ? C - c0 : DW_CB;
    float *acc = j->out + n * g->K * C + c0; /* sample n's [K, C] */
    for (int64_t k = 0; k < g->K; k++) memset(acc + k * C, 0, sizeof(float) * (size_t)cn);
    vnc_tier()->dw_cl_dot_lines(j->L, 0, j->lines, cn, C, acc, j->y + n * g->YS * C + c0, j->x + n * g->XS * C + c0);
  }
}

/* The channels_last input expanded by the multiplier (X itself when m == 1). */
static const float *expand_channels(const geom *g, const float *X, float **owned) {
  const int64_t m = g->Cy / g->Cx, pixels = g->N * g->XS;
  *owned = NULL;
  if (m == 1) return X;
  float *e = malloc(sizeof(float) * (size_t)(pixels * g->Cy > 0 ? pixels * g->Cy : 1));
  for (int64_t p = 0; p < pixels; p++)
    for (int64_t o = 0; o < g->Cy; o++) e[p * g->Cy + o] = X[p * g->Cx + o / m];
  *owned = e;
  return e;
}

/* The weight [Cy, K] transposed to [K, Cy]. */
static float *transpose_weight(const geom *g, const float *W) {
  float *wt = malloc(sizeof(float) * (size_t)(g->K * g->Cy > 0 ? g->K * g->Cy : 1));
  for (int64_t o = 0; o < g->Cy; o++)
    for (int64_t k = 0; k < g->K; k++) wt[k * g->Cy + o] = W[o * g->K + k];
  return wt;
}

static void dwcl_forward(const geom *g, const float *X, const float *W, const float *b, float *Y) {
  float *ex, *wt = transpose_weight(g, W), *zero = b ? NULL : calloc((size_t)g->Cy + 1, sizeof(float));
  dw_plan P = plan_forward(g);
  dw_job j = {.g = g, .L = &P.L, .lines = P.lines, .m = g->Cy / g->Cx, .x = expand_channels(g, X, &ex), .w = wt,
              .b = b ? b : zero, .out = Y}; /* every output pixel lies on one of the lines */
  vnc_parallel_for(g->N * P.lines, grain_of(g->ys[2] * g->K * g->Cy), dwcl_fwd_units, &j);
  plan_free(&P);
  free(zero);
  free(wt);
  free(ex);
}

static void dwcl_backward(const geom *g, const float *X, const float *W, const float *GY, float *GX, float *GW) {
  const int64_t m = g->Cy / g->Cx;
  float *wt = transpose_weight(g, W);
  if (GX) {
    dw_plan P = plan_input_grad(g, 1);
    float *e = m > 1 ? malloc(sizeof(float) * (size_t)(g->N * g->XS * g->Cy > 0 ? g->N * g->XS * g->Cy : 1)) : GX;
    float *zero = calloc((size_t)g->Cy + 1, sizeof(float));
    dw_job j = {.g = g, .L = &P.L, .lines = P.lines, .m = m, .w = wt, .b = zero, .y = GY, .out = e, .gx = GX};
    vnc_parallel_for(g->N * P.lines, grain_of(g->xs[2] * g->K * g->Cy), dwcl_bwd_in_units, &j);
    free(zero);
    if (e != GX) free(e);
    plan_free(&P);
  }
  if (GW) {
    dw_plan P = plan_forward(g);
    float *ex, *part = malloc(sizeof(float) * (size_t)(g->N * g->K * g->Cy > 0 ? g->N * g->K * g->Cy : 1));
    dw_job j = {.g = g, .L = &P.L, .lines = P.lines, .m = m, .x = expand_channels(g, X, &ex), .y = GY, .out = part};
    const int64_t nb = (g->Cy + DW_CB - 1) / DW_CB;
    vnc_parallel_for(g->N * nb, grain_of(g->YS * g->K * DW_CB), dwcl_bwd_w_units, &j);
    /* partials [N][K][Cy] summed over the samples in order, then transposed to [Cy, K] */
    sum_samples(part, g->N, g->K * g->Cy, wt);
    for (int64_t o = 0; o < g->Cy; o++)
      for (int64_t k = 0; k < g->K; k++) GW[o * g->K + k] = wt[k * g->Cy + o];
    free(part);
    free(ex);
    plan_free(&P);
  }
  free(wt);
}

/* Channels-last pointwise: X [P, Cx], Y [P, Cy] with P = N * spatial, W [Cy, Cx]. */
static void pw_forward(const geom *g, const float *X, const float *W, const float *b, float *Y) {
  const int64_t P = g->N * g->XS;
  if (b)
    for (int64_t p = 0; p < P; p++) memcpy(Y + p * g->Cy, b, sizeof(float) * (size_t)g->Cy);
  vnc_sgemm(0, 1, P, g->Cy, g->Cx, 1.0f, X, g->Cx, W, g->Cx, b ? 1.0f : 0.0f, Y, g->Cy);
}

static void pw_backward(const geom *g, const float *X, const float *W, const float *GY, float *GX, float *GW) {
  const int64_t P = g->N * g->XS;
  if (GX) vnc_sgemm(0, 0, P, g->Cx, g->Cy, 1.0f, GY, g->Cy, W, g->Cx, 0.0f, GX, g->Cx);
  if (GW) vnc_sgemm(1, 0, g->Cy, g->Cx, P, 1.0f, GY, g->Cy, X, g->Cx, 0.0f, GW, g->Cx);
}

/* The bias gradient of a channels-last grad_out [N, S, O]: per sample the pixels added in
 * order (a vector over channels), then the samples in order. */
static void bias_grad_cl(const float *GY, int64_t N, int64_t S, int64_t O, float *gb) {
  float *acc = malloc(sizeof(float) * (size_t)(O > 0 ? O : 1));
  for (int64_t n = 0; n < N; n++) {
    memset(acc, 0, sizeof(float) * (size_t)O);
    for (int64_t s = 0; s < S; s++) {
      const float *r = GY + (n * S + s) * O;
      for (int64_t o = 0; o < O; o++) acc[o] = acc[o] + r[o];
    }
    for (int64_t o = 0; o < O; o++) gb[o] = n ? gb[o] + acc[o] : acc[o];
  }
  free(acc);
}

typedef struct conv_task {
  vnc_conv_params p;
  const void *in, *w, *b, *go;
  void *out, *gi, *gw, *gb;
} conv_task;

static int64_t vol(const int64_t *s, int n) {
  int64_t v = 1;
  for (int i = 0; i < n; i++) v *= s[i];
  return v;
}

/* Which engine runs a convolution: im2col + GEMM, or a direct one (vnc/conv.h). */
enum { ENGINE_GEMM, ENGINE_DEPTHWISE, ENGINE_DEPTHWISE_CL, ENGINE_POINTWISE_CL };
static int engine_of(const vnc_conv_params *p) {
  if (p->channels_last) return is_depthwise(p) ? ENGINE_DEPTHWISE_CL : ENGINE_POINTWISE_CL;
  return is_depthwise(p) ? ENGINE_DEPTHWISE : ENGINE_GEMM;
}

static float *im2col_buffer(const geom *g) {
  const int64_t n = (g->Cx / g->G) * g->K * g->YS;
  return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
}

/* The float32 result buffer: dst itself for float32, else a temporary (store_f32 after). */
static float *f32_out(void *dst, int32_t dtype, int64_t n) {
  return dtype == VNC_FLOAT32 ? dst : malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
}

static void finish_out(void *dst, int32_t dtype, float *buf, int64_t n) {
  if (buf == dst) return;
  store_f32(dst, dtype, buf, n);
  free(buf);
}

static vnc_status conv_fwd_run(void *arg) {
  conv_task *t = arg;
  const vnc_conv_params *p = &t->p;
  const geom g = geom_of(p);
  const int64_t in_n = p->N * p->C * vol(p->in, p->nspatial), out_n = p->N * p->O * vol(p->out, p->nspatial);
  const int64_t OS = vol(p->out, p->nspatial), w_n = g.Cy * (g.Cx / g.G) * g.K;
  float *oi, *ow, *ob;
  const float *in = as_f32(t->in, p->dtype, in_n, &oi);
  const float *w = as_f32(t->w, p->dtype, w_n, &ow);
  const float *b = as_f32(t->b, p->dtype, p->O, &ob);
  float *out = f32_out(t->out, p->dtype, out_n);
  switch (engine_of(p)) {
    case ENGINE_DEPTHWISE: dw_forward(&g, in, w, b, out); break;
    case ENGINE_DEPTHWISE_CL: dwcl_forward(&g, in, w, b, out); break;
    case ENGINE_POINTWISE_CL: pw_forward(&g, in, w, b, out); break;
    default: {
      if (!p->transposed) {
        to_y(&g, in, w, b, out);
        break;
      }
      float *col = im2col_buffer(&g);
      memset(out, 0, sizeof(float) * (size_t)out_n);
      to_x(&g, in, w, out, col);
      free(col);
      if (b)
        for (int64_t n = 0; n < p->N; n++)
          for (int64_t o = 0; o < p->O; o++) {
            float *r = out + (n * p->O + o) * OS;
            for (int64_t q = 0; q < OS; q++) r[q] += b[o];
          }
    }
  }
  finish_out(t->out, p->dtype, out, out_n);
  free(oi);
  free(ow);
  free(ob);
  return VNC_OK;
}

static vnc_status conv_bwd_run(void *arg) {
  conv_task *t = arg;
  const vnc_conv_params *p = &t->p;
  const geom g = geom_of(p);
  const int64_t in_n = p->N * p->C * vol(p->in, p->nspatial), out_n = p->N * p->O * vol(p->out, p->nspatial);
  const int64_t OS = vol(p->out, p->nspatial), w_n = g.Cy * (g.Cx / g.G) * g.K;
  float *oi, *ow, *og;
  const float *in = as_f32(t->in, p->dtype, in_n, &oi);
  const float *w = as_f32(t->w, p->dtype, w_n, &ow);
  const float *go = as_f32(t->go, p->dtype, out_n, &og);
  float *gi = t->gi ? f32_out(t->gi, p->dtype, in_n) : NULL;
  float *gw = t->gw ? f32_out(t->gw, p->dtype, w_n) : NULL;
  switch (engine_of(p)) {
    case ENGINE_DEPTHWISE: dw_backward(&g, in, w, go, gi, gw); break;
    case ENGINE_DEPTHWISE_CL: dwcl_backward(&g, in, w, go, gi, gw); break;
    case ENGINE_POINTWISE_CL: pw_backward(&g, in, w, go, gi, gw); break;
    default: {
      float *col = im2col_buffer(&g);
      /* X and Y sides of the plain geometry: the convolution's (input, grad_out), or reversed */
      const float *X = p->transposed ? go : in, *Y = p->transposed ? in : go;
      if (gw) {
        memset(gw, 0, sizeof(float) * (size_t)w_n);
        grad_w(&g, X, Y, gw, col);
      }
      if (gi) {
        if (p->transposed) {
          to_y(&g, go, w, NULL, gi);
        } else {
          memset(gi, 0, sizeof(float) * (size_t)in_n);
          to_x(&g, go, w, gi, col);
        }
      }
      free(col);
    }
  }
  if (t->gb) {
    float *gb = calloc((size_t)(p->O > 0 ? p->O : 1), sizeof(float));
    if (p->channels_last)
      bias_grad_cl(go, p->N, OS, p->O, gb);
    else
      for (int64_t o = 0; o < p->O; o++)
        for (int64_t n = 0; n < p->N; n++) gb[o] += vnc_canonical_sum(go + (n * p->O + o) * OS, OS);
    store_f32(t->gb, p->dtype, gb, p->O);
    free(gb);
  }
  if (gi) finish_out(t->gi, p->dtype, gi, in_n);
  if (gw) finish_out(t->gw, p->dtype, gw, w_n);
  free(oi);
  free(ow);
  free(og);
  return VNC_OK;
}

static vnc_status check_conv(const char *op, const vnc_conv_params *p) {
  VNC_CHECK_COMPUTED(op, p->dtype);
  if (p->nspatial < 1 || p->nspatial > 3)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: %d spatial dims (1 to 3 supported)", op, (int)p->nspatial);
  if (p->groups < 1 || p->C % p->groups || p->O % p->groups)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: %lld input and %lld output channels do not split into %lld groups",
                         op, (long long)p->C, (long long)p->O, (long long)p->groups);
  for (int i = 0; i < p->nspatial; i++)
    if (p->stride[i] < 1 || p->dil[i] < 1 || p->pad[i] < 0 || p->k[i] < 1 || p->in[i] < 0 || p->out[i] < 0)
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: invalid kernel size, stride, padding or dilation", op);
  if (!vnc_dtype_is_floating(p->dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "\"%s\" not implemented for '%s'", op, vnc_dtype_name(p->dtype));
  if (p->channels_last && !vnc_conv_channels_last_ok(p))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT,
                         "%s: a channels_last convolution must be depthwise or pointwise (kernel 1, stride 1, no "
                         "padding, one group)", op);
  return VNC_OK;
}

vnc_status vnc_conv_forward(vnc_stream *s, const char *op, const vnc_conv_params *p, const void *input,
                            const void *weight, const void *bias, void *out) {
  vnc_status st = check_conv(op, p);
  if (st != VNC_OK || p->N * p->O * vol(p->out, p->nspatial) == 0) return st;
  conv_task t = {.p = *p, .in = input, .w = weight, .b = bias, .out = out};
  return vnc_launch(s, op, conv_fwd_run, &t, sizeof t, NULL);
}

vnc_status vnc_conv_backward(vnc_stream *s, const char *op, const vnc_conv_params *p, const void *grad_out,
                             const void *input, const void *weight, void *grad_input, void *grad_weight,
                             void *grad_bias) {
  vnc_status st = check_conv(op, p);
  if (st != VNC_OK) return st;
  conv_task t = {.p = *p, .in = input, .w = weight, .go = grad_out, .gi = grad_input, .gw = grad_weight, .gb = grad_bias};
  return vnc_launch(s, op, conv_bwd_run, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- unfold / fold */

/* im2col (to_col) or col2im of every (sample, channel) plane: the convolution's geometry with
 * the samples as further channels (planes are contiguous one after the other on both sides). */
typedef struct fold_task {
  vnc_conv_params p;
  const void *src;
  void *dst;
  int to_col;
} fold_task;

static vnc_status fold_run(void *arg) {
  fold_task *t = arg;
  geom g = geom_of(&t->p);
  g.Cx = t->p.N * t->p.C;
  g.G = 1;
  const int32_t dt = t->p.dtype;
  const int64_t x_n = g.Cx * g.XS, col_n = g.Cx * g.K * g.YS;
  const int64_t src_n = t->to_col ? x_n : col_n, dst_n = t->to_col ? col_n : x_n;
  float *owned_src;
  const float *src = as_f32(t->src, dt, src_n, &owned_src);
  float *dst = dt == VNC_FLOAT32 ? t->dst : malloc(sizeof(float) * (size_t)(dst_n > 0 ? dst_n : 1));
  if (!src || !dst) {
    free(owned_src);
    if (dst != t->dst) free(dst);
    return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "no host memory for a float32 copy");
  }
  if (t->to_col) {
    im2col(&g, (float *)src, dst);
  } else {
    memset(dst, 0, sizeof(float) * (size_t)dst_n);
    col2im(&g, dst, (float *)src);
  }
  if (dst != t->dst) {
    store_f32(t->dst, dt, dst, dst_n);
    free(dst);
  }
  free(owned_src);
  return VNC_OK;
}

static vnc_status fold_launch(vnc_stream *s, const char *op, const vnc_conv_params *p, const void *src, void *dst,
                              int to_col) {
  vnc_conv_params q = *p;
  q.groups = 1;
  q.O = q.C;
  q.transposed = 0;
  q.channels_last = 0;
  /* bool too: its values pass float32 exactly, and fold's sum, nonzero when any term is true,
   * stores as ATen's bool += (a logical or) */
  vnc_conv_params checked = q;
  if (checked.dtype == VNC_BOOL) checked.dtype = VNC_FLOAT32;
  vnc_status st = check_conv(op, &checked);
  if (st != VNC_OK) return st;
  for (int i = 0; i < q.nspatial; i++) {
    const int64_t span = q.dil[i] * (q.k[i] - 1) + 1;
    if (q.out[i] < 1 || q.in[i] + 2 * q.pad[i] < span || (q.in[i] + 2 * q.pad[i] - span) / q.stride[i] + 1 != q.out[i])
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT,
                           "%s: %lld sliding blocks along spatial dim %d do not fit size %lld (kernel %lld, "
                           "dilation %lld, padding %lld, stride %lld)",
                           op, (long long)q.out[i], i, (long long)q.in[i], (long long)q.k[i], (long long)q.dil[i],
                           (long long)q.pad[i], (long long)q.stride[i]);
  }
  if (q.N < 0 || q.C < 0) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: negative batch or channel count", op);
  if (q.N * q.C == 0) return VNC_OK;
  fold_task t = {.p = q, .src = src, .dst = dst, .to_col = to_col};
  return vnc_launch(s, op, fold_run, &t, sizeof t, NULL);
}

vnc_status vnc_unfold(vnc_stream *s, const char *op, const vnc_conv_params *p, const void *input, void *col) {
  return fold_launch(s, op, p, input, col, 1);
}

vnc_status vnc_fold(vnc_stream *s, const char *op, const vnc_conv_params *p, const void *col, void *out) {
  return fold_launch(s, op, p, col, out, 0);
}

/* The 2-D API (and generated code's table entries) over the N-d engine. */
static vnc_conv_params params_2d(const vnc_conv2d *p) {
  vnc_conv_params q;
  memset(&q, 0, sizeof q);
  q.nspatial = 2;
  q.N = p->N;
  q.C = p->C;
  q.O = p->O;
  q.in[0] = p->H, q.in[1] = p->W;
  q.k[0] = p->KH, q.k[1] = p->KW;
  q.out[0] = p->OH, q.out[1] = p->OW;
  q.stride[0] = p->sh, q.stride[1] = p->sw;
  q.pad[0] = p->ph, q.pad[1] = p->pw;
  q.dil[0] = p->dh, q.dil[1] = p->dw;
  q.groups = p->groups;
  q.dtype = p->dtype;
  return q;
}

vnc_status vnc_conv2d_forward(vnc_stream *s, const char *op, const vnc_conv2d *p, const void *input, const void *weight,
                              const void *bias, void *out) {
  const vnc_conv_params q = params_2d(p);
  return vnc_conv_forward(s, op, &q, input, weight, bias, out);
}

vnc_status vnc_conv2d_backward(vnc_stream *s, const char *op, const vnc_conv2d *p, const void *grad_out,
                               const void *input, const void *weight, void *grad_input, void *grad_weight,
                               void *grad_bias) {
  const vnc_conv_params q = params_2d(p);
  return vnc_conv_backward(s, op, &q, grad_out, input, weight, grad_input, grad_weight, grad_bias);
}

/* ---------------------------------------------------------------- batch norm */

typedef struct bn_task {
  int64_t N, C, S;
  int32_t dtype, pdt;
  int training;
  double momentum, eps;
  const void *x, *w, *b, *dy, *sm, *si;
  void *rm, *rv, *y, *save_mean, *save_invstd, *dx, *dw, *db;
} bn_task;

static float pget(const void *p, int32_t dt, int64_t c, float dflt) {
  return p ? (float)vnc_load_f64[dt]((const char *)p + c * (int64_t)vnc_dtype_size(dt)) : dflt;
}
static void pset(void *p, int32_t dt, int64_t c, float v) {
  if (p) vnc_store_f64[dt]((char *)p + c * (int64_t)vnc_dtype_size(dt), v);
}

/* Channel c of x as a contiguous float buffer of N*S values. */
static void gather_channel(const bn_task *t, const void *src, int64_t c, float *buf) {
  const int64_t es = (int64_t)vnc_dtype_size(t->dtype);
  for (int64_t n = 0; n < t->N; n++)
    vnc_to_f32(buf + n * t->S, (const char *)src + ((n * t->C + c) * t->S) * es, t->dtype, 1, t->S);
}

static void scatter_channel(const bn_task *t, void *dst, int64_t c, const float *buf) {
  const int64_t es = (int64_t)vnc_dtype_size(t->dtype);
  for (int64_t n = 0; n < t->N; n++)
    vnc_from_f32((char *)dst + ((n * t->C + c) * t->S) * es, t->dtype, 1, buf + n * t->S, t->S);
}

static void bn_fwd_channels(void *ctx, int64_t c0, int64_t c1) {
  bn_task *t = ctx;
  const int64_t M = t->N * t->S;
  float *x = malloc(sizeof(float) * (size_t)(M > 0 ? M : 1) * 2), *q = x + (M > 0 ? M : 1);
  for (int64_t c = c0; c < c1; c++) {
    gather_channel(t, t->x, c, x);
    float mean, invstd;
    if (t->training) {
      mean = vnc_canonical_sum(x, M) / (float)M;
      for (int64_t i = 0; i < M; i++) q[i] = (x[i] - mean) * (x[i] - mean);
      float var = vnc_canonical_sum(q, M) / (float)M;
      invstd = 1.0f / sqrtf(var + (float)t->eps);
      pset(t->save_mean, t->pdt, c, mean);
      pset(t->save_invstd, t->pdt, c, invstd);
      if (t->rm) pset(t->rm, t->pdt, c, (float)(1.0 - t->momentum) * pget(t->rm, t->pdt, c, 0) + (float)t->momentum * mean);
      if (t->rv) {
        float unbiased = M > 1 ? var * (float)M / (float)(M - 1) : var;
        pset(t->rv, t->pdt, c, (float)(1.0 - t->momentum) * pget(t->rv, t->pdt, c, 0) + (float)t->momentum * unbiased);
      }
    } else {
      mean = pget(t->rm, t->pdt, c, 0.0f);
      invstd = 1.0f / sqrtf(pget(t->rv, t->pdt, c, 1.0f) + (float)t->eps);
    }
    float w = pget(t->w, t->pdt, c, 1.0f), b = pget(t->b, t->pdt, c, 0.0f);
    for (int64_t i = 0; i < M; i++) x[i] = (x[i] - mean) * invstd * w + b;
    scatter_channel(t, t->y, c, x);
  }
  free(x);
}

vnc_status vnc_batch_norm(vnc_stream *s, const char *op, int64_t N, int64_t C, int64_t S, int32_t dtype, const void *x,
                          const void *weight, const void *bias, void *running_mean, void *running_var,
                          int32_t param_dtype, int training, double momentum, double eps, void *y, void *save_mean,
                          void *save_invstd) {
  VNC_CHECK_COMPUTED(op, dtype, param_dtype);
  if (training && N * S <= 1)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "Expected more than 1 value per channel when training, got input size [%lld, %lld, %lld]",
                         (long long)N, (long long)C, (long long)S);
  if (N * C * S == 0) return VNC_OK;
  bn_task t = {.N = N, .C = C, .S = S, .dtype = dtype, .pdt = param_dtype, .training = training, .momentum = momentum,
               .eps = eps, .x = x, .w = weight, .b = bias, .rm = running_mean, .rv = running_var, .y = y,
               .save_mean = save_mean, .save_invstd = save_invstd};
  return vnc_launch_parallel(s, op, bn_fwd_channels, C, 1, &t, sizeof t, NULL);
}

static void bn_bwd_channels(void *ctx, int64_t c0, int64_t c1) {
  bn_task *t = ctx;
  const int64_t M = t->N * t->S;
  float *x = malloc(sizeof(float) * (size_t)(M > 0 ? M : 1) * 3), *g = x + M, *q = g + M;
  for (int64_t c = c0; c < c1; c++) {
    gather_channel(t, t->x, c, x);
    gather_channel(t, t->dy, c, g);
    float mean, invstd;
    if (t->training) {
      mean = pget(t->sm, t->pdt, c, 0.0f);
      invstd = pget(t->si, t->pdt, c, 1.0f);
    } else {
      mean = pget(t->rm, t->pdt, c, 0.0f);
      invstd = 1.0f / sqrtf(pget(t->rv, t->pdt, c, 1.0f) + (float)t->eps);
    }
    for (int64_t i = 0; i < M; i++) x[i] = (x[i] - mean) * invstd; /* x_hat */
    float db = vnc_canonical_sum(g, M);
    for (int64_t i = 0; i < M; i++) q[i] = g[i] * x[i];
    float dw = vnc_canonical_sum(q, M);
    float w = pget(t->w, t->pdt, c, 1.0f);
    pset(t->dw, t->pdt, c, dw);
    pset(t->db, t->pdt, c, db);
    if (t->dx) {
      if (t->training)
        for (int64_t i = 0; i < M; i++) q[i] = w * invstd * ((g[i] - db / (float)M) - x[i] * dw / (float)M);
      else
        for (int64_t i = 0; i < M; i++) q[i] = g[i] * w * invstd;
      scatter_channel(t, t->dx, c, q);
    }
  }
  free(x);
}

vnc_status vnc_batch_norm_backward(vnc_stream *s, const char *op, int64_t N, int64_t C, int64_t S, int32_t dtype,
                                   const void *dy, const void *x, const void *weight, const void *running_mean,
                                   const void *running_var, const void *save_mean, const void *save_invstd,
                                   int32_t param_dtype, int training, double eps, void *dx, void *dweight, void *dbias) {
  VNC_CHECK_COMPUTED(op, dtype, param_dtype);
  if (C == 0) return VNC_OK;
  bn_task t = {.N = N, .C = C, .S = S, .dtype = dtype, .pdt = param_dtype, .training = training, .eps = eps, .x = x,
               .w = weight, .dy = dy, .rm = (void *)running_mean, .rv = (void *)running_var, .sm = save_mean,
               .si = save_invstd, .dx = dx, .dw = dweight, .db = dbias};
  return vnc_launch_parallel(s, op, bn_bwd_channels, C, 1, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- pooling */

typedef struct pool_task {
  vnc_pool2d p;
  int64_t planes, H, W, OH, OW;
  int32_t dtype;
  const void *x, *go;
  const int64_t *idx_in;
  void *out, *gi;
  int64_t *idx;
} pool_task;

static void maxpool_planes(void *ctx, int64_t a, int64_t b) {
  pool_task *t = ctx;
  const vnc_pool2d *p = &t->p;
  const int64_t HW = p->H * p->W, OHW = p->OH * p->OW;
  float *in = malloc(sizeof(float) * (size_t)(HW > 0 ? HW : 1)), *out = malloc(sizeof(float) * (size_t)(OHW > 0 ? OHW : 1));
  const int64_t es = (int64_t)vnc_dtype_size(p->dtype);
  for (int64_t pl = a; pl < b; pl++) {
    vnc_to_f32(in, (const char *)t->x + pl * HW * es, p->dtype, 1, HW);
    for (int64_t y = 0; y < p->OH; y++)
      for (int64_t x = 0; x < p->OW; x++) {
        float best = -INFINITY;
        int64_t bi = -1;
        for (int64_t i = 0; i < p->KH; i++) {
          int64_t iy = y * p->sh - p->ph + i * p->dh;
          if (iy < 0 || iy >= p->H) continue;
          for (int64_t j = 0; j < p->KW; j++) {
            int64_t ix = x * p->sw - p->pw + j * p->dw;
            if (ix < 0 || ix >= p->W) continue;
            float v = in[iy * p->W + ix];
            if (bi < 0 || v > best || isnan(v)) { /* ATen: a later NaN takes over */ best = v; bi = iy * p->W + ix; }
          }
        }
        out[y * p->OW + x] = best;
        t->idx[pl * OHW + y * p->OW + x] = bi;
      }
    vnc_from_f32((char *)t->out + pl * OHW * es, p->dtype, 1, out, OHW);
  }
  free(in);
  free(out);
}

vnc_status vnc_max_pool2d(vnc_stream *s, const char *op, const vnc_pool2d *p, const void *x, void *out, int64_t *indices) {
  VNC_CHECK_COMPUTED(op, p->dtype);
  if (p->N * p->C * p->OH * p->OW == 0) return VNC_OK;
  pool_task t = {.p = *p, .x = x, .out = out, .idx = indices};
  return vnc_launch_parallel(s, op, maxpool_planes, p->N * p->C, 1, &t, sizeof t, NULL);
}

static void maxpool_bwd_planes(void *ctx, int64_t a, int64_t b) {
  pool_task *t = ctx;
  const vnc_pool2d *p = &t->p;
  const int64_t HW = p->H * p->W, OHW = p->OH * p->OW, es = (int64_t)vnc_dtype_size(p->dtype);
  float *gi = malloc(sizeof(float) * (size_t)(HW > 0 ? HW : 1)), *go = malloc(sizeof(float) * (size_t)(OHW > 0 ? OHW : 1));
  for (int64_t pl = a; pl < b; pl++) {
    memset(gi, 0, sizeof(float) * (size_t)HW);
    vnc_to_f32(go, (const char *)t->go + pl * OHW * es, p->dtype, 1, OHW);
    for (int64_t k = 0; k < OHW; k++) {
      int64_t i = t->idx_in[pl * OHW + k];
      if (i >= 0 && i < HW) gi[i] += go[k];
    }
    vnc_from_f32((char *)t->gi + pl * HW * es, p->dtype, 1, gi, HW);
  }
  free(gi);
  free(go);
}

vnc_status vnc_max_pool2d_backward(vnc_stream *s, const char *op, const vnc_pool2d *p, const void *grad_out,
                                   const int64_t *indices, void *grad_in) {
  VNC_CHECK_COMPUTED(op, p->dtype);
  if (p->N * p->C * p->H * p->W == 0) return VNC_OK;
  pool_task t = {.p = *p, .go = grad_out, .idx_in = indices, .gi = grad_in};
  return vnc_launch_parallel(s, op, maxpool_bwd_planes, p->N * p->C, 1, &t, sizeof t, NULL);
}

static int64_t bin_start(int64_t a, int64_t out, int64_t in) { return (a * in) / out; }
static int64_t bin_end(int64_t a, int64_t out, int64_t in) { return ((a + 1) * in + out - 1) / out; }

static void aavg_planes(void *ctx, int64_t a, int64_t b) {
  pool_task *t = ctx;
  const int64_t HW = t->H * t->W, OHW = t->OH * t->OW, es = (int64_t)vnc_dtype_size(t->dtype);
  float *x = malloc(sizeof(float) * (size_t)(HW > 0 ? HW : 1)), *y = malloc(sizeof(float) * (size_t)(OHW > 0 ? OHW : 1));
  for (int64_t pl = a; pl < b; pl++) {
    if (t->gi) { /* backward: x = grad_in plane, y = grad_out plane */
      memset(x, 0, sizeof(float) * (size_t)HW);
      vnc_to_f32(y, (const char *)t->go + pl * OHW * es, t->dtype, 1, OHW);
    } else {
      vnc_to_f32(x, (const char *)t->x + pl * HW * es, t->dtype, 1, HW);
    }
    for (int64_t oy = 0; oy < t->OH; oy++)
      for (int64_t ox = 0; ox < t->OW; ox++) {
        int64_t y0 = bin_start(oy, t->OH, t->H), y1 = bin_end(oy, t->OH, t->H);
        int64_t x0 = bin_start(ox, t->OW, t->W), x1 = bin_end(ox, t->OW, t->W);
        float cnt = (float)((y1 - y0) * (x1 - x0));
        if (t->gi) {
          float g = y[oy * t->OW + ox] / cnt;
          for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++) x[iy * t->W + ix] += g;
        } else {
          float acc = 0.0f;
          for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++) acc += x[iy * t->W + ix];
          y[oy * t->OW + ox] = acc / cnt;
        }
      }
    if (t->gi) vnc_from_f32((char *)t->gi + pl * HW * es, t->dtype, 1, x, HW);
    else vnc_from_f32((char *)t->out + pl * OHW * es, t->dtype, 1, y, OHW);
  }
  free(x);
  free(y);
}

vnc_status vnc_adaptive_avg_pool2d(vnc_stream *s, const char *op, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                   int64_t OW, int32_t dtype, const void *x, void *out) {
  VNC_CHECK_COMPUTED(op, dtype);
  if (planes * OH * OW == 0) return VNC_OK;
  pool_task t = {.planes = planes, .H = H, .W = W, .OH = OH, .OW = OW, .dtype = dtype, .x = x, .out = out};
  return vnc_launch_parallel(s, op, aavg_planes, planes, 1, &t, sizeof t, NULL);
}

vnc_status vnc_adaptive_avg_pool2d_backward(vnc_stream *s, const char *op, int64_t planes, int64_t H, int64_t W,
                                            int64_t OH, int64_t OW, int32_t dtype, const void *grad_out, void *grad_in) {
  VNC_CHECK_COMPUTED(op, dtype);
  if (planes * H * W == 0) return VNC_OK;
  pool_task t = {.planes = planes, .H = H, .W = W, .OH = OH, .OW = OW, .dtype = dtype, .go = grad_out, .gi = grad_in};
  return vnc_launch_parallel(s, op, aavg_planes, planes, 1, &t, sizeof t, NULL);
}
