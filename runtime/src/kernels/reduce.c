/* Reductions with a schedule fixed by the geometry (see vnc/reduce.h): work units are
 * (output element, chunk) pairs run on the thread pool; chunk partials are combined in a
 * fixed pairwise order afterwards. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "tier.h"
#include "vnc/reduce.h"
#include "vnc/threadpool.h"

typedef enum { ACC_F, ACC_I } acc_kind;

typedef struct partial {
  double f;      /* ACC_F value (float arithmetic, widened only for storage) */
  int64_t i;     /* ACC_I value */
  int64_t idx;   /* arg reductions: index of the value; -1 none */
  int64_t cnt;   /* elements seen */
} partial;

typedef struct red_task {
  vnc_iter it;
  vnc_reduce_op op;
  int nout;
  acc_kind acc;
  vnc_reduce_params P;
  int nred, nouter;
  int red_dims[VNC_MAX_DIMS], outer_dims[VNC_MAX_DIMS];
  int64_t R, O, nchunks;
  float *means;   /* VAR second pass: per-output mean */
  partial *parts; /* O * nchunks */
  int64_t tw;     /* tiled path: outputs per tile (see tile_width) */
  vnc_reduce_producer producer; /* fused input (vnc_reduce_fused), else NULL */
  void *pctx;
} red_task;

static int wants_max(vnc_reduce_op op) {
  return op == VNC_RED_AMAX || op == VNC_RED_MAX_INDEX || op == VNC_RED_ARGMAX;
}

/* Byte offset in operand k of linear index `lin` over the iterator dims `dims` (first fastest). */
static int64_t dims_offset(const red_task *t, int k, const int *dims, int ndims, int64_t lin) {
  if (ndims == 1) return lin * t->it.strides[k][dims[0]]; /* lin < shape: no division */
  int64_t off = 0;
  for (int j = 0; j < ndims; j++) {
    int d = dims[j];
    off += (lin % t->it.shape[d]) * t->it.strides[k][d];
    lin /= t->it.shape[d];
  }
  return off;
}

/* Offsets (bytes) of output element `o` / reduced element `r` in operand k. */
static int64_t outer_offset(const red_task *t, int k, int64_t o) { return dims_offset(t, k, t->outer_dims, t->nouter, o); }
static int64_t red_offset(const red_task *t, int k, int64_t r) { return dims_offset(t, k, t->red_dims, t->nred, r); }

/* Input elements r0..r0+n-1 (reduced index order) of output o as float or int64: a
 * pointer into the input when they are already dense in the accumulation type, else
 * converted into buf. */
static const void *produce_run(const red_task *t, int64_t o, int64_t r0, int64_t n, void *buf);

static const void *load_run(const red_task *t, int64_t o, int64_t r0, int64_t n, void *buf) {
  if (t->producer) return produce_run(t, o, r0, n, buf);
  const int in = t->it.nops - 1;
  const char *base = t->it.data[in] + outer_offset(t, in, o);
  const int32_t acc_dt = t->acc == ACC_F ? VNC_FLOAT32 : VNC_INT64;
  const int64_t acc_sz = t->acc == ACC_F ? 4 : 8;
  if (t->nred > 0 && t->it.dtypes[in] == acc_dt && t->it.strides[in][t->red_dims[0]] == acc_sz) {
    int d0 = t->red_dims[0];
    if (r0 % t->it.shape[d0] + n <= t->it.shape[d0]) return base + red_offset(t, in, r0); /* one dense run */
  }
  vnc_loop_fn conv = vnc_copy_loop(acc_dt, t->it.dtypes[in]);
  int64_t done = 0;
  while (done < n) {
    int64_t r = r0 + done, rem = r, off = 0, run = n - done;
    for (int j = 0; j < t->nred; j++) {
      int d = t->red_dims[j];
      int64_t idx = rem % t->it.shape[d];
      if (j == 0 && t->it.shape[d] - idx < run) run = t->it.shape[d] - idx;
      off += idx * t->it.strides[in][d];
      rem /= t->it.shape[d];
    }
    if (t->nred == 0) run = n - done;
    char *ptrs[2] = {(char *)buf + done * acc_sz, (char *)base + off};
    const int64_t strides[2] = {acc_sz, t->nred ? t->it.strides[in][t->red_dims[0]] : 0};
    if (t->it.dtypes[in] == acc_dt && strides[1] == acc_sz) memcpy(ptrs[0], ptrs[1], (size_t)(run * acc_sz));
    else conv(NULL, ptrs, strides, run, 0);
    done += run;
  }
  return buf;
}

/* The same elements computed by a fused producer from its inputs (operands nout..nops-1), a run
 * along the innermost reduced dim at a time. */
static const void *produce_run(const red_task *t, int64_t o, int64_t r0, int64_t n, void *buf) {
  const int64_t acc_sz = t->acc == ACC_F ? 4 : 8;
  char *ptrs[VNC_ITER_MAX_OPERANDS];
  int64_t strides[VNC_ITER_MAX_OPERANDS];
  int64_t done = 0;
  while (done < n) {
    int64_t run = n - done;
    if (t->nred > 0) {
      const int d0 = t->red_dims[0];
      const int64_t idx = (r0 + done) % t->it.shape[d0];
      if (t->it.shape[d0] - idx < run) run = t->it.shape[d0] - idx;
    }
    for (int k = t->nout; k < t->it.nops; k++) {
      ptrs[k - t->nout] = t->it.data[k] + outer_offset(t, k, o) + red_offset(t, k, r0 + done);
      strides[k - t->nout] = t->nred ? t->it.strides[k][t->red_dims[0]] : 0;
    }
    t->producer(t->pctx, ptrs, strides, run, (char *)buf + done * acc_sz);
    done += run;
  }
  return buf;
}

/* Combines partials pairwise: ((p0 + p1) + (p2 + p3)) + ... */
static float pairwise_f(float *v, int64_t n);

#define RUN 128 /* elements per 8-lane run */

/* The canonical sum of one block (runs of 128 in 8 lanes, run sums pairwise): the tier's
 * vectorised loop (tier_kernels.c). */
static float lanes_sum_f(const float *x, int64_t n, int kind, float shift, float pw) {
  return vnc_tier()->block_sum(x, n, kind, shift, pw);
}

static float pairwise_f(float *v, int64_t n) { return vnc_pairwise_sum(v, n); }

/* Output o's values summed in double, or with `mean` their squared deviations from it: var's
 * float32 passes overflow for values near FLT_MAX, CPU PyTorch's double Welford does not (var
 * of seven 3e38 is 0, not inf; std of values near 1e38 is finite). */
static double sum_f64(const red_task *t, int64_t o, const double *mean) {
  float buf[VNC_REDUCE_BLOCK];
  double s = 0.0;
  for (int64_t b = 0; b < t->R; b += VNC_REDUCE_BLOCK) {
    const int64_t n = t->R - b < VNC_REDUCE_BLOCK ? t->R - b : VNC_REDUCE_BLOCK;
    const float *x = load_run(t, o, b, n, buf);
    for (int64_t i = 0; i < n; i++) s += mean ? ((double)x[i] - *mean) * ((double)x[i] - *mean) : x[i];
  }
  return s;
}

/* The partial of output o over reduced range [r0, r1). */
static partial reduce_range(const red_task *t, int64_t o, int64_t r0, int64_t r1) {
  partial p = {0.0, 0, -1, r1 - r0};
  union {
    float f[VNC_REDUCE_BLOCK];
    int64_t i[VNC_REDUCE_BLOCK];
  } buf;
  float blocks[VNC_REDUCE_CHUNK / VNC_REDUCE_BLOCK + 1];
  int64_t nb = 0;
  const vnc_reduce_op op = t->op;
  int first = 1;
  float fv = 0.0f;
  int64_t iv = 0;
  if (op == VNC_RED_PROD) { fv = 1.0f; iv = 1; }
  if (op == VNC_RED_ALL) iv = 1;
  for (int64_t b = r0; b < r1; b += VNC_REDUCE_BLOCK) {
    int64_t n = r1 - b < VNC_REDUCE_BLOCK ? r1 - b : VNC_REDUCE_BLOCK;
    const void *data = load_run(t, o, b, n, &buf);
    if (t->acc == ACC_F) {
      const float *x = data;
      switch (op) {
        case VNC_RED_SUM: case VNC_RED_MEAN: blocks[nb++] = lanes_sum_f(x, n, 0, 0.0f, 0.0f); break;
        case VNC_RED_VAR: {
          float shift = t->means ? t->means[o] : 0.0f;
          blocks[nb++] = lanes_sum_f(x, n, t->means ? 1 : 0, shift, 0.0f);
          break;
        }
        case VNC_RED_NORM:
          if (t->P.p == 2.0) blocks[nb++] = lanes_sum_f(x, n, 1, 0.0f, 0.0f);
          else if (t->P.p == 1.0) blocks[nb++] = lanes_sum_f(x, n, 3, 0.0f, 0.0f);
          else if (t->P.p == 0.0) {
            float c = 0;
            for (int64_t i = 0; i < n; i++) c += x[i] != 0.0f;
            blocks[nb++] = c;
          } else if (isinf(t->P.p)) { /* max |x| or min |x|, NaN propagates */
            for (int64_t i = 0; i < n; i++) {
              float a = fabsf(x[i]);
              if (first) {
                fv = a;
                first = 0;
              } else if (!isnan(fv) && (isnan(a) || (t->P.p > 0 ? a > fv : a < fv))) {
                fv = a;
              }
            }
          } else blocks[nb++] = lanes_sum_f(x, n, 2, 0.0f, (float)t->P.p);
          break;
        case VNC_RED_PROD:
          for (int64_t i = 0; i < n; i++) fv *= x[i];
          break;
        case VNC_RED_ANY: for (int64_t i = 0; i < n; i++) iv |= x[i] != 0.0f; break;
        case VNC_RED_ALL: for (int64_t i = 0; i < n; i++) iv &= x[i] != 0.0f; break;
        default: { /* amax/amin and arg reductions: first extreme, NaN wins */
          if (!first && isnan(fv)) break;
          const int mx = wants_max(op);
          const float m = mx ? vnc_tier()->row_max(x, n) : vnc_tier()->row_min(x, n); /* vectorised */
          float v = m;
          int64_t i = -1;
          if (isnan(m) || m == 0.0f || (op != VNC_RED_AMAX && op != VNC_RED_AMIN)) {
            /* its first occurrence: the index, and the first zero's own sign or NaN's bits */
            if (isnan(m)) for (i = 0; !isnan(x[i]); i++) {}
            else for (i = 0; x[i] != m; i++) {}
            v = x[i];
          }
          if (first || isnan(v) || (mx ? v > fv : v < fv)) {
            fv = v;
            p.idx = b + i;
            first = 0;
          }
        }
      }
    } else {
      const int64_t *x = data;
      switch (op) {
        case VNC_RED_SUM: case VNC_RED_MEAN: for (int64_t i = 0; i < n; i++) iv += x[i]; break;
        case VNC_RED_PROD: for (int64_t i = 0; i < n; i++) iv *= x[i]; break;
        case VNC_RED_ANY: for (int64_t i = 0; i < n; i++) iv |= x[i] != 0; break;
        case VNC_RED_ALL: for (int64_t i = 0; i < n; i++) iv &= x[i] != 0; break;
        default: {
          int mx = wants_max(op);
          for (int64_t i = 0; i < n; i++) {
            if (first || (mx ? x[i] > iv : x[i] < iv)) { iv = x[i]; p.idx = b + i; first = 0; }
          }
        }
      }
    }
  }
  p.f = nb ? pairwise_f(blocks, nb) : fv;
  p.i = iv;
  return p;
}

/* Combines chunk partials of one output in fixed order. */
static partial combine(const red_task *t, partial *ps, int64_t n) {
  if (n == 1) return ps[0];
  partial r = ps[0];
  const vnc_reduce_op op = t->op;
  int sum_like = op == VNC_RED_SUM || op == VNC_RED_MEAN || op == VNC_RED_VAR ||
                 (op == VNC_RED_NORM && !isinf(t->P.p));
  if (t->acc == ACC_F && sum_like) {
    float v[64];
    float *vals = n <= 64 ? v : malloc(sizeof(float) * (size_t)n);
    for (int64_t k = 0; k < n; k++) vals[k] = (float)ps[k].f;
    r.f = pairwise_f(vals, n);
    if (vals != v) free(vals);
    return r;
  }
  for (int64_t k = 1; k < n; k++) {
    partial q = ps[k];
    switch (op) {
      case VNC_RED_SUM: case VNC_RED_MEAN: r.i += q.i; break;
      case VNC_RED_PROD: r.f = (float)r.f * (float)q.f; r.i *= q.i; break;
      case VNC_RED_ANY: r.i |= q.i; break;
      case VNC_RED_ALL: r.i &= q.i; break;
      default: {
        int mx = wants_max(op) || (op == VNC_RED_NORM && t->P.p > 0);
        if (t->acc == ACC_F) {
          if (isnan(r.f)) break;
          if (isnan(q.f) || (mx ? q.f > r.f : q.f < r.f)) { r.f = q.f; r.idx = q.idx; }
        } else if (mx ? q.i > r.i : q.i < r.i) {
          r.i = q.i;
          r.idx = q.idx;
        }
      }
    }
  }
  return r;
}

/* ---- tiled path: up to TILE consecutive outputs along the innermost dim at once -----
 * For sums whose innermost iterator dim is an output dim (column sums), one pass over the
 * input rows serves a tile of outputs. Each output still follows the canonical schedule exactly
 * (runs of RUN in 8 lanes, runs/blocks pairwise), so results equal the per-output path. */
#define TILE VNC_TILE_OUTPUTS

static int extreme_op(vnc_reduce_op op) { return op >= VNC_RED_AMAX && op <= VNC_RED_ARGMIN; }

static int tiled(const red_task *t) {
  const int in = t->it.nops - 1;
  return !t->producer && t->acc == ACC_F &&
         (t->op == VNC_RED_SUM || t->op == VNC_RED_MEAN || t->op == VNC_RED_VAR || extreme_op(t->op)) &&
         t->nouter > 0 && t->nred > 0 &&
         llabs(t->it.strides[in][t->outer_dims[0]]) < llabs(t->it.strides[in][t->red_dims[0]]);
}

/* Input row r of a tile of nt outputs starting at `base` as float32: in place when `direct`
 * (float32, unit stride), else converted into `row`. */
static const float *tile_row(const red_task *t, const char *base, int64_t r, int64_t nt, int direct, float *row) {
  const int in = t->it.nops - 1;
  const char *p = base + red_offset(t, in, r);
  if (direct) return (const float *)p;
  char *ptrs[2] = {(char *)row, (char *)p};
  const int64_t strides[2] = {4, t->it.strides[in][t->outer_dims[0]]};
  vnc_copy_loop(VNC_FLOAT32, t->it.dtypes[in])(NULL, ptrs, strides, nt, 0);
  return row;
}

/* Extremes of a tile of outputs, a row of nt at a time (vectorised across the row): the first
 * extreme of each column in reduced order, NaN winning and then staying. */
static void extreme_tile(const red_task *t, int64_t o0, int64_t nt, int64_t r0, int64_t r1, float *val,
                         int64_t *at) {
  const int in = t->it.nops - 1, mx = wants_max(t->op), with_idx = t->op != VNC_RED_AMAX && t->op != VNC_RED_AMIN;
  const char *base = t->it.data[in] + outer_offset(t, in, o0);
  const int64_t st0 = t->it.strides[in][t->outer_dims[0]];
  const int direct = t->it.dtypes[in] == VNC_FLOAT32 && st0 == 4;
  float m[TILE], row[TILE];
  int32_t idx[TILE]; /* row within the chunk (< VNC_REDUCE_CHUNK): float32's width, one vector */
  const float *x0 = tile_row(t, base, r0, nt, direct, row);
  memcpy(m, x0, sizeof(float) * (size_t)nt);
  memset(idx, 0, sizeof idx);
  int32_t *ix = with_idx ? idx : NULL;
  if (direct && t->nred == 1) { /* rows at one stride (whole floats): one call for the rest */
    const int64_t rs = t->it.strides[in][t->red_dims[0]] / 4;
    vnc_tier()->tile_extreme(m, ix, x0 + rs, rs, r1 - r0 - 1, nt, mx, 1);
  } else { /* rows gathered (converted, or across reduced dims) one at a time, the same rule */
    for (int64_t r = r0 + 1; r < r1; r++)
      vnc_tier()->tile_extreme(m, ix, tile_row(t, base, r, nt, direct, row), 0, 1, nt, mx, (int32_t)(r - r0));
  }
  memcpy(val, m, sizeof(float) * (size_t)nt);
  for (int64_t j = 0; j < nt; j++) at[j] = with_idx ? r0 + idx[j] : -1;
}

/* vnc_pairwise_sum of v[0..n)[j] for every column j < nt at once (the same tree per column,
 * vectorised across columns); the sums end in v[0]. */
static void pairwise_cols(float (*v)[TILE], int64_t n, int64_t nt) {
  while (n > 1) {
    int64_t h = 0;
    for (int64_t i = 0; i + 1 < n; i += 2, h++)
      for (int64_t j = 0; j < nt; j++) v[h][j] = v[i][j] + v[i + 1][j];
    if (n & 1) memmove(v[h++], v[n - 1], sizeof(float) * (size_t)nt);
    n = h;
  }
}

static void reduce_tile(const red_task *t, int64_t o0, int64_t nt, int64_t r0, int64_t r1, float *val) {
  const int in = t->it.nops - 1;
  const char *base = t->it.data[in] + outer_offset(t, in, o0);
  const int64_t st0 = t->it.strides[in][t->outer_dims[0]];
  const int direct = t->it.dtypes[in] == VNC_FLOAT32 && st0 == 4;
  float shift[TILE];
  for (int64_t j = 0; j < nt; j++) shift[j] = t->means ? t->means[o0 + j] : 0.0f;
  const int square = t->means != NULL;
  float blocks[VNC_REDUCE_CHUNK / VNC_REDUCE_BLOCK + 1][TILE];
  float runs[VNC_REDUCE_BLOCK / RUN + 1][TILE];
  float lanes[8][VNC_TILE_OUTPUTS], row[TILE];
  int64_t nb = 0;
  for (int64_t b = r0; b < r1; b += VNC_REDUCE_BLOCK) {
    int64_t bend = r1 - b < VNC_REDUCE_BLOCK ? r1 : b + VNC_REDUCE_BLOCK, nr = 0;
    for (int64_t q = b; q < bend; q += RUN) {
      int64_t qend = bend - q < RUN ? bend : q + RUN;
      memset(lanes, 0, sizeof lanes);
      if (direct && t->nred == 1) { /* rows at one stride: the tier's vectorised loop */
        const int64_t rs = t->it.strides[in][t->red_dims[0]];
        vnc_tier()->tile_run(lanes, (const float *)(base + q * rs), rs / 4, qend - q, nt, square ? shift : NULL);
      } else {
        for (int64_t r = q; r < qend; r++) {
          const float *x = tile_row(t, base, r, nt, direct, row);
          float *l = lanes[(r - q) & 7];
          if (square) for (int64_t j = 0; j < nt; j++) { float v = x[j] - shift[j]; l[j] += v * v; }
          else for (int64_t j = 0; j < nt; j++) l[j] += x[j];
        }
      }
      for (int64_t j = 0; j < nt; j++)
        runs[nr][j] = ((lanes[0][j] + lanes[1][j]) + (lanes[2][j] + lanes[3][j])) +
                      ((lanes[4][j] + lanes[5][j]) + (lanes[6][j] + lanes[7][j]));
      nr++;
    }
    pairwise_cols(runs, nr, nt);
    memcpy(blocks[nb], runs[0], sizeof(float) * (size_t)nt);
    nb++;
  }
  pairwise_cols(blocks, nb, nt);
  memcpy(val, blocks[0], sizeof(float) * (size_t)nt);
}

/* Outputs per tile: TILE (each input row read as one stretch of up to 1 KB: a tile's pass
 * touches one page per row, so narrow tiles of a wide matrix cost a TLB miss per few cache
 * lines), narrowed to 128 or 64 while that leaves fewer than two units of work per pool
 * thread. Every output's schedule is its own, so the width changes no result. */
static int64_t tile_width(const red_task *t) {
  const int64_t s0 = t->it.shape[t->outer_dims[0]], want = 2 * (int64_t)vnc_threadpool_size();
  int64_t tw = TILE;
  while (tw > 64 && (t->O / s0) * ((s0 + tw - 1) / tw) * t->nchunks < want) tw /= 2;
  return tw;
}

static void store_direct(const red_task *t, int64_t o, partial p);
static void store_tile(const red_task *t, int64_t o0, int64_t nt, const float *val, const int64_t *at);
static void store_outputs(red_task *t, int64_t o, partial p);
static int direct_store(const red_task *t);

static void tile_body(void *ctx, int64_t u0, int64_t u1) {
  red_task *t = ctx;
  const int64_t s0 = t->it.shape[t->outer_dims[0]], tw = t->tw, tiles = (s0 + tw - 1) / tw;
  float val[TILE];
  int64_t at[TILE];
  for (int64_t u = u0; u < u1; u++) {
    int64_t c = u % t->nchunks, tile = (u / t->nchunks) % tiles, row = u / t->nchunks / tiles;
    int64_t o0 = row * s0 + tile * tw, nt = s0 - tile * tw < tw ? s0 - tile * tw : tw;
    int64_t r0 = c * VNC_REDUCE_CHUNK, r1 = r0 + VNC_REDUCE_CHUNK < t->R ? r0 + VNC_REDUCE_CHUNK : t->R;
    if (extreme_op(t->op)) extreme_tile(t, o0, nt, r0, r1, val, at);
    else reduce_tile(t, o0, nt, r0, r1, val);
    if (!t->parts && direct_store(t)) /* stored at once */
      store_tile(t, o0, nt, val, at);
    else if (!t->parts) /* one chunk: stored at once, converted */
      for (int64_t j = 0; j < nt; j++)
        store_outputs(t, o0 + j, (partial){val[j], 0, extreme_op(t->op) ? at[j] : -1, r1 - r0});
    else
      for (int64_t j = 0; j < nt; j++)
        t->parts[(o0 + j) * t->nchunks + c] = (partial){val[j], 0, extreme_op(t->op) ? at[j] : -1, r1 - r0};
  }
}

/* Whether each output's elements are one dense float32 run of at most a block summed as it is
 * (global average pooling, means over a short last dim): then unit_body sums each run with the
 * tier's block_sum directly, reduce_range's steps for that case without their per-output cost. */
static int dense_rows(const red_task *t) {
  const int in = t->it.nops - 1;
  return !t->parts && direct_store(t) && !t->producer && (t->op == VNC_RED_SUM || t->op == VNC_RED_MEAN) && t->nred == 1 &&
         t->it.dtypes[in] == VNC_FLOAT32 && t->it.strides[in][t->red_dims[0]] == 4 && t->R <= VNC_REDUCE_BLOCK;
}

static void unit_body(void *ctx, int64_t u0, int64_t u1) {
  red_task *t = ctx;
  if (dense_rows(t)) { /* one chunk per output (R <= a block), stored at once */
    const int in = t->it.nops - 1;
    const int64_t ld = t->nouter == 1 ? t->it.strides[in][t->outer_dims[0]] : 1;
    float v[TILE];
    for (int64_t o = u0; o < u1;) {
      /* rows at one stride (whole floats) side by side, else one at a time */
      const int64_t m = ld % 4 != 0 ? 1 : u1 - o > TILE ? TILE : u1 - o;
      vnc_tier()->row_sums((const float *)(t->it.data[in] + outer_offset(t, in, o)), ld / 4, t->R, m, v);
      for (int64_t k = 0; k < m; k++, o++) {
        const float y = t->op == VNC_RED_MEAN ? v[k] / (float)t->R : v[k]; /* finalize_f's value */
        memcpy(t->it.data[0] + outer_offset(t, 0, o), &y, sizeof y);
      }
    }
    return;
  }
  for (int64_t u = u0; u < u1; u++) {
    int64_t o = u / t->nchunks, c = u % t->nchunks;
    int64_t r0 = c * VNC_REDUCE_CHUNK, r1 = r0 + VNC_REDUCE_CHUNK < t->R ? r0 + VNC_REDUCE_CHUNK : t->R;
    if (t->parts) t->parts[u] = reduce_range(t, o, r0, r1);
    else if (direct_store(t)) store_direct(t, o, reduce_range(t, o, r0, r1)); /* one chunk: stored at once */
    else store_outputs(t, o, reduce_range(t, o, r0, r1));
  }
}

static double finalize_f(const red_task *t, partial p) {
  double n = (double)t->R;
  switch (t->op) {
    case VNC_RED_MEAN: return t->acc == ACC_F ? (double)((float)p.f / (float)n) : (double)p.i / n;
    case VNC_RED_NORM:
      if (t->P.p == 0.0 || t->P.p == 1.0 || isinf(t->P.p)) return p.f;
      if (t->P.p == 2.0) return sqrtf((float)p.f);
      return powf((float)p.f, (float)(1.0 / t->P.p));
    case VNC_RED_VAR: {
      float v = (float)p.f / (float)fmax(n - t->P.correction, 0.0);
      return t->P.take_sqrt ? sqrtf(v) : v;
    }
    default: return p.f;
  }
}

static void store_outputs(red_task *t, int64_t o, partial p) {
  char *out0 = t->it.data[0] + outer_offset(t, 0, o);
  int32_t dt0 = t->it.dtypes[0];
  switch (t->op) {
    case VNC_RED_ARGMAX: case VNC_RED_ARGMIN: vnc_store_i64[dt0](out0, p.idx); return;
    case VNC_RED_ANY: case VNC_RED_ALL: vnc_store_i64[dt0](out0, p.i); return;
    case VNC_RED_VAR:
      if (isinf(p.f) && isfinite(t->means[o])) { /* overflowed in float32: again in double */
        const double m = t->means[o], v = sum_f64(t, o, &m) / fmax((double)t->R - t->P.correction, 0.0);
        vnc_store_f64[dt0](out0, t->P.take_sqrt ? sqrt(v) : v);
        return;
      }
      vnc_store_f64[dt0](out0, finalize_f(t, p));
      return;
    default:
      if (t->acc == ACC_F || t->op == VNC_RED_MEAN) vnc_store_f64[dt0](out0, finalize_f(t, p));
      else vnc_store_i64[dt0](out0, p.i);
  }
  if (t->nout == 2) vnc_store_i64[t->it.dtypes[1]](t->it.data[1] + outer_offset(t, 1, o), p.idx);
}

/* Whether each output is one float32 value or int64 index stored as it is: then a partial is
 * stored as soon as it is computed (store_direct), without the partials array. */
static int direct_store(const red_task *t) {
  const int32_t dt0 = t->it.dtypes[0];
  const int arg = t->op == VNC_RED_ARGMAX || t->op == VNC_RED_ARGMIN,
            plain = t->op == VNC_RED_SUM || t->op == VNC_RED_MEAN || t->op == VNC_RED_AMAX || t->op == VNC_RED_AMIN;
  return t->nout == 1 && t->nchunks == 1 && t->acc == ACC_F &&
         ((plain && dt0 == VNC_FLOAT32) || (arg && dt0 == VNC_INT64));
}

static void store_direct(const red_task *t, int64_t o, partial p) {
  char *dst = t->it.data[0] + outer_offset(t, 0, o);
  if (t->op == VNC_RED_ARGMAX || t->op == VNC_RED_ARGMIN) {
    memcpy(dst, &p.idx, sizeof(int64_t));
  } else {
    const float v = (float)finalize_f(t, p);
    memcpy(dst, &v, sizeof v);
  }
}

/* store_direct for a tile's nt outputs, consecutive along outer_dims[0]: one offset, then steps. */
static void store_tile(const red_task *t, int64_t o0, int64_t nt, const float *val, const int64_t *at) {
  char *dst = t->it.data[0] + outer_offset(t, 0, o0);
  const int64_t st = t->it.strides[0][t->outer_dims[0]];
  if (t->op == VNC_RED_ARGMAX || t->op == VNC_RED_ARGMIN) {
    for (int64_t j = 0; j < nt; j++) memcpy(dst + j * st, &at[j], sizeof(int64_t));
    return;
  }
  const float n = (float)t->R, *q = val;
  float mean[TILE];
  if (t->op == VNC_RED_MEAN) { /* finalize_f's value */
    for (int64_t j = 0; j < nt; j++) mean[j] = val[j] / n;
    q = mean;
  }
  if (st == 4) memcpy(dst, q, sizeof(float) * (size_t)nt);
  else for (int64_t j = 0; j < nt; j++) memcpy(dst + j * st, &q[j], sizeof(float));
}

/* Combines and stores outputs [o0, o1) (each written once: safe in parallel). */
static void store_body(void *ctx, int64_t o0, int64_t o1) {
  red_task *t = ctx;
  if (direct_store(t)) {
    for (int64_t o = o0; o < o1; o++) store_direct(t, o, t->parts[o]);
    return;
  }
  for (int64_t o = o0; o < o1; o++) store_outputs(t, o, combine(t, t->parts + o * t->nchunks, t->nchunks));
}

static void run_pass(red_task *t) {
  if (tiled(t)) {
    t->tw = tile_width(t);
    int64_t s0 = t->it.shape[t->outer_dims[0]], tiles = (s0 + t->tw - 1) / t->tw;
    vnc_parallel_for((t->O / s0) * tiles * t->nchunks, 1, tile_body, t);
  } else {
    vnc_parallel_for(t->O * t->nchunks, 1, unit_body, t);
  }
}

static vnc_status red_run(void *p) {
  red_task *t = p;
  /* One chunk per output: each output is stored as it is computed, with no partials array (32
   * bytes per output: a sum over dim 0 of a wide tensor would need several times the input's
   * size in host memory). var's two passes keep the array. */
  if (t->R > 0 && t->op != VNC_RED_VAR && t->nchunks == 1) {
    t->parts = NULL;
    run_pass(t);
    return VNC_OK;
  }
  t->parts = malloc(sizeof(partial) * (size_t)(t->O * t->nchunks));
  if (!t->parts) return vnc_set_error(VNC_ERR_INTERNAL, "out of host memory for reduction partials");
  if (t->R == 0) {
    for (int64_t o = 0; o < t->O; o++) {
      partial e = {t->op == VNC_RED_PROD ? 1.0 : 0.0, t->op == VNC_RED_PROD || t->op == VNC_RED_ALL, -1, 0};
      if (t->op == VNC_RED_MEAN || t->op == VNC_RED_VAR) e.f = NAN;
      store_outputs(t, o, e);
    }
    free(t->parts);
    return VNC_OK;
  }
  if (t->op == VNC_RED_VAR) { /* pass 1: means */
    t->means = malloc(sizeof(float) * (size_t)t->O);
    if (!t->means) { free(t->parts); return vnc_set_error(VNC_ERR_INTERNAL, "out of host memory"); }
    float *m = t->means; /* pass 1 runs with means == NULL: plain sums */
    t->means = NULL;
    run_pass(t);
    for (int64_t o = 0; o < t->O; o++) {
      m[o] = (float)combine(t, t->parts + o * t->nchunks, t->nchunks).f / (float)t->R;
      if (!isfinite(m[o])) m[o] = (float)(sum_f64(t, o, NULL) / (double)t->R); /* overflowed, or inf/NaN (kept) */
    }
    t->means = m;
  }
  run_pass(t);
  vnc_parallel_for(t->O, 4096, store_body, t);
  free(t->parts);
  free(t->means);
  return VNC_OK;
}

static vnc_status reduce_launch(vnc_stream *s, const char *op_name, vnc_reduce_op op, const vnc_iter *it, int nout,
                                const vnc_reduce_params *params, int32_t in_dt, vnc_reduce_producer producer,
                                void *pctx);

vnc_status vnc_reduce(vnc_stream *s, const char *op_name, vnc_reduce_op op, const vnc_iter *it,
                      int nout, const vnc_reduce_params *params) {
  if (nout < 1 || nout > 2 || it->nops != nout + 1)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: expected %d outputs and one input", op_name, nout);
  return reduce_launch(s, op_name, op, it, nout, params, it->dtypes[it->nops - 1], NULL, NULL);
}

vnc_status vnc_reduce_fused(vnc_stream *s, const char *op_name, vnc_reduce_op op, const vnc_iter *it, int nout,
                            const vnc_reduce_params *params, int32_t value_dtype, vnc_reduce_producer producer,
                            void *ctx) {
  if (nout < 1 || nout > 2 || it->nops <= nout || !producer)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: expected %d outputs, producer inputs and a producer", op_name,
                         nout);
  return reduce_launch(s, op_name, op, it, nout, params, value_dtype, producer, ctx);
}

/* Merges neighbours of the list dims[0..*n) (fastest first) where dims[j + 1] continues dims[j]
 * in operands k0.. (the others have stride 0 there): the linear index over the list, and so the
 * reduced order or the output numbering, stays the same, and runs get longer (sum over (0, 2, 3)
 * of NCHW: an H*W run per image, not W, when the iterator put C between W and H). */
static void merge_dims(red_task *t, int *dims, int *n, int k0) {
  for (int j = 0; j + 1 < *n;) {
    const int a = dims[j], b = dims[j + 1];
    int ok = 1;
    for (int k = k0; k < t->it.nops; k++) ok &= t->it.strides[k][b] == t->it.strides[k][a] * t->it.shape[a];
    if (!ok) {
      j++;
      continue;
    }
    t->it.shape[a] *= t->it.shape[b];
    t->it.shape[b] = 1;
    for (int k = 0; k < t->it.nops; k++) t->it.strides[k][b] = 0;
    memmove(dims + j + 1, dims + j + 2, sizeof(int) * (size_t)(*n - j - 2));
    (*n)--;
  }
}

static vnc_status reduce_launch(vnc_stream *s, const char *op_name, vnc_reduce_op op, const vnc_iter *it, int nout,
                                const vnc_reduce_params *params, int32_t in_dt, vnc_reduce_producer producer,
                                void *pctx) {
  if (op < 0 || op >= VNC_RED_COUNT)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: unknown reduction %d", op_name, (int)op);
  vnc_status st = vnc_check_iter_computed(op_name, it);
  if (st != VNC_OK) return st;
  VNC_CHECK_COMPUTED(op_name, in_dt);
  red_task t;
  memset(&t, 0, sizeof t);
  t.it = *it;
  t.op = op;
  t.nout = nout;
  t.producer = producer;
  t.pctx = pctx;
  if (params) t.P = *params;
  if (vnc_dtype_is_complex(in_dt))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s is not implemented for %s", op_name, vnc_dtype_name(in_dt));
  int floating = vnc_dtype_is_floating(in_dt);
  t.acc = floating || op == VNC_RED_NORM || op == VNC_RED_VAR ? ACC_F : ACC_I;
  if (op == VNC_RED_ANY || op == VNC_RED_ALL) t.acc = floating ? ACC_F : ACC_I; /* test x != 0 in the input type */
  t.R = 1;
  t.O = 1;
  for (int d = 0; d < it->ndim; d++) {
    int reduced = it->strides[0][d] == 0 && (nout < 2 || it->strides[1][d] == 0);
    if (it->shape[d] == 1 && !reduced) continue;
    if (reduced) {
      t.red_dims[t.nred++] = d;
      t.R *= it->shape[d];
    } else {
      t.outer_dims[t.nouter++] = d;
      t.O *= it->shape[d];
    }
  }
  if (it->numel == 0 && t.R != 0) t.O = 0;
  /* Outputs are numbered with the outer dim of smallest input stride first (tiles run along it). */
  for (int j = 1; j < t.nouter; j++) {
    int in = it->nops - 1;
    if (llabs(it->strides[in][t.outer_dims[j]]) < llabs(it->strides[in][t.outer_dims[0]])) {
      int tmp = t.outer_dims[0];
      t.outer_dims[0] = t.outer_dims[j];
      t.outer_dims[j] = tmp;
    }
  }
  merge_dims(&t, t.red_dims, &t.nred, nout);
  merge_dims(&t, t.outer_dims, &t.nouter, 0);
  if (t.R == 0 && (wants_max(op) || op == VNC_RED_AMIN || op == VNC_RED_MIN_INDEX || op == VNC_RED_ARGMIN))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: cannot reduce over zero elements", op_name);
  if (t.O == 0) return VNC_OK;
  t.nchunks = t.R == 0 ? 1 : (t.R + VNC_REDUCE_CHUNK - 1) / VNC_REDUCE_CHUNK;
  return (it->numel <= VNC_SMALL_TASK ? vnc_launch_small : vnc_launch)(s, op_name, red_run, &t, sizeof t, NULL);
}

static float canonical_sum_kind(const float *x, int64_t n, int kind, float shift);
float vnc_canonical_sum(const float *x, int64_t n) { return canonical_sum_kind(x, n, 0, 0.0f); }
float vnc_canonical_sum_sq(const float *x, int64_t n, float shift) { return canonical_sum_kind(x, n, 1, shift); }

static float canonical_sum_kind(const float *x, int64_t n, int kind, float shift) {
  float chunks[64], *cs = chunks;
  int64_t nc = (n + VNC_REDUCE_CHUNK - 1) / VNC_REDUCE_CHUNK;
  if (nc > 64) cs = malloc(sizeof(float) * (size_t)nc);
  for (int64_t c = 0; c < nc; c++) {
    float blocks[VNC_REDUCE_CHUNK / VNC_REDUCE_BLOCK];
    int64_t nb = 0, c0 = c * VNC_REDUCE_CHUNK, c1 = c0 + VNC_REDUCE_CHUNK < n ? c0 + VNC_REDUCE_CHUNK : n;
    for (int64_t b = c0; b < c1; b += VNC_REDUCE_BLOCK)
      blocks[nb++] = lanes_sum_f(x + b, c1 - b < VNC_REDUCE_BLOCK ? c1 - b : VNC_REDUCE_BLOCK, kind, shift, 0.0f);
    cs[c] = pairwise_f(blocks, nb);
  }
  float r = pairwise_f(cs, nc);
  if (cs != chunks) free(cs);
  return r;
}
