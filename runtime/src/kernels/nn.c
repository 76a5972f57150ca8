/* Neural-network kernels (see vnc/nn.h). Rows are loaded into float32 buffers through the
 * copy/cast loops, computed, and stored back; sums use the canonical schedule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "tier.h"
#include "vnc/nn.h"
#include "vnc/nn_fused.h"
#include "vnc/threadpool.h"

#define STACK_ROW 4096

static char *row_ptr(const vnc_rows *r, int64_t o, int64_t j, int64_t i) {
  return (char *)r->data + (o * r->outer_stride + j * r->stride + i * r->inner_stride) * (int64_t)vnc_dtype_size(r->dtype);
}

static void load_row(const vnc_rows *r, int64_t o, int64_t i, float *buf) {
  vnc_to_f32(buf, row_ptr(r, o, 0, i), r->dtype, r->stride, r->n);
}

static void store_row(const vnc_rows *r, int64_t o, int64_t i, const float *buf) {
  vnc_from_f32(row_ptr(r, o, 0, i), r->dtype, r->stride, buf, r->n);
}

static float *row_buffer(float *stack, int64_t n) { return n <= STACK_ROW ? stack : malloc(sizeof(float) * (size_t)n); }
static void free_row(float *stack, float *b) { if (b != stack) free(b); }

/* A row prologue and epilogue (vnc/nn_fused.h) as a row loop over [r0, end) drives them, in
 * blocks of about HOOK_FLOATS row elements, small enough to be in cache still when the kernel
 * (after a prologue) or the epilogue reads them. */
#define HOOK_FLOATS 16384

typedef struct row_hooks {
  vnc_range_fn prologue, epilogue; /* NULL: none (the plain kernels) */
  void *ctx;
} row_hooks;

typedef struct hook_state {
  row_hooks h;
  int64_t ready, from, block, end; /* rows before `ready` computed, from `from` not handed over */
} hook_state;

static hook_state hooks_from(const row_hooks *h, int64_t r0, int64_t end, int64_t n) {
  hook_state e = {*h, r0, r0, n >= HOOK_FLOATS ? 1 : HOOK_FLOATS / (n > 0 ? n : 1), end};
  return e;
}

/* Row r is about to be read: the prologue computes the next block of rows first. */
static inline void row_next(hook_state *e, int64_t r) {
  if (e->h.prologue && r == e->ready) {
    e->ready = r + e->block < e->end ? r + e->block : e->end;
    e->h.prologue(e->h.ctx, r, e->ready);
  }
}

/* Rows before r are final: the epilogue gets them once a block is full or r is the end. */
static inline void row_done(hook_state *e, int64_t r) {
  if (e->h.epilogue && (r - e->from >= e->block || r == e->end)) {
    e->h.epilogue(e->h.ctx, e->from, r);
    e->from = r;
  }
}

/* ---------------------------------------------------------------- softmax */

typedef struct softmax_task {
  int log, backward;
  vnc_rows a, b, out; /* forward: a = x; backward: a = grad, b = y */
  row_hooks hooks;
} softmax_task;

/* A float32 row with unit stride is read (and written) in place; others go through buffers. */
static int dense_f32(const vnc_rows *r) { return r->dtype == VNC_FLOAT32 && (r->stride == 1 || r->n == 1); }

static void softmax_rows(void *ctx, int64_t r0, int64_t r1) {
  const softmax_task *t = ctx;
  const int64_t n = t->out.n;
  const vnc_tier_ops *tier = vnc_tier();
  const int da = dense_f32(&t->a), db = t->backward && dense_f32(&t->b), dout = dense_f32(&t->out);
  float s1[STACK_ROW], s2[STACK_ROW], s3[STACK_ROW];
  float *xb = da ? NULL : row_buffer(s1, n), *yb = dout && (db || !t->backward) ? NULL : row_buffer(s2, n);
  float *tmp = row_buffer(s3, n);
  hook_state e = hooks_from(&t->hooks, r0, r1, n);
  for (int64_t r = r0; r < r1; r++) {
    row_next(&e, r);
    int64_t o = r / t->out.inner, i = r % t->out.inner;
    const float *x = da ? (const float *)row_ptr(&t->a, o, 0, i) : xb;
    float *y = yb ? yb : (float *)row_ptr(&t->out, o, 0, i);
    if (!da) load_row(&t->a, o, i, xb);
    const float *yo = NULL;
    if (t->backward) { /* x = grad, b = output */
      yo = db ? (const float *)row_ptr(&t->b, o, 0, i) : y;
      if (!db) load_row(&t->b, o, i, y);
    }
    tier->softmax_row(y, x, yo, n, t->log, t->backward, tmp);
    if (yb) store_row(&t->out, o, i, y);
    row_done(&e, r + 1);
  }
  if (xb) free_row(s1, xb);
  if (yb) free_row(s2, yb);
  free_row(s3, tmp);
}

static vnc_status softmax_run(void *p) {
  softmax_task *t = p;
  int64_t rows = t->out.outer * t->out.inner;
  int64_t grain = t->out.n >= 4096 ? 1 : 4096 / (t->out.n + 1) + 1;
  vnc_parallel_for(rows, grain, softmax_rows, t);
  return VNC_OK;
}

vnc_status vnc_softmax(vnc_stream *s, const char *op, int log, const vnc_rows *x, const vnc_rows *out) {
  return vnc_softmax_fused(s, op, log, x, out, NULL, NULL, NULL);
}

vnc_status vnc_softmax_fused(vnc_stream *s, const char *op, int log, const vnc_rows *x, const vnc_rows *out,
                             vnc_range_fn prologue, vnc_range_fn epilogue, void *ctx) {
  VNC_CHECK_COMPUTED(op, x->dtype, out->dtype);
  if (x->outer * x->n * x->inner == 0) return VNC_OK;
  softmax_task t = {log, 0, *x, *x, *out, {prologue, epilogue, ctx}};
  return vnc_launch(s, op, softmax_run, &t, sizeof t, NULL);
}

vnc_status vnc_softmax_backward(vnc_stream *s, const char *op, int log, const vnc_rows *grad, const vnc_rows *y,
                                const vnc_rows *grad_in) {
  return vnc_softmax_backward_fused(s, op, log, grad, y, grad_in, NULL, NULL, NULL);
}

vnc_status vnc_softmax_backward_fused(vnc_stream *s, const char *op, int log, const vnc_rows *grad, const vnc_rows *y,
                                      const vnc_rows *grad_in, vnc_range_fn prologue, vnc_range_fn epilogue,
                                      void *ctx) {
  VNC_CHECK_COMPUTED(op, grad->dtype, y->dtype, grad_in->dtype);
  if (grad->outer * grad->n * grad->inner == 0) return VNC_OK;
  softmax_task t = {log, 1, *grad, *y, *grad_in, {prologue, epilogue, ctx}};
  return vnc_launch(s, op, softmax_run, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- layer norm */

typedef struct ln_task {
  int64_t M, N;
  int32_t dtype, stat_dtype;
  const void *x, *w, *b, *dy, *mean, *rstd;
  void *y, *out_mean, *out_rstd, *dx, *dw, *db;
  double eps;
  int64_t rb, nblk; /* backward: rows per block, blocks */
  float *part;      /* backward: per block, partial dweight then dbias [N] each */
  row_hooks hooks; /* rows of x (forward), of dy and x (backward); of y (forward), dx (backward) */
} ln_task;

static vnc_rows row_of(const void *base, int32_t dtype, int64_t M, int64_t N) {
  vnc_rows r = {(void *)base, dtype, M, N, 1, N, 1, 1};
  return r;
}

static void load_vec(const void *p, int32_t dtype, int64_t n, float *buf) {
  vnc_rows r = row_of(p, dtype, 1, n);
  load_row(&r, 0, 0, buf);
}

static void ln_fwd_rows(void *ctx, int64_t r0, int64_t r1) {
  const ln_task *t = ctx;
  const int64_t N = t->N;
  const int f32 = t->dtype == VNC_FLOAT32; /* rows read and written in place */
  float s1[STACK_ROW], s2[STACK_ROW], s3[STACK_ROW];
  float *x = f32 ? NULL : row_buffer(s1, N), *w = NULL, *b = NULL;
  if (t->w) {
    w = f32 ? (float *)t->w : row_buffer(s2, N);
    if (!f32) load_vec(t->w, t->dtype, N, w);
  }
  if (t->b) {
    b = f32 ? (float *)t->b : row_buffer(s3, N);
    if (!f32) load_vec(t->b, t->dtype, N, b);
  }
  vnc_rows X = row_of(t->x, t->dtype, t->M, N), Y = row_of(t->y, t->dtype, t->M, N);
  const vnc_tier_ops *tier = vnc_tier();
  hook_state e = hooks_from(&t->hooks, r0, r1, N);
  for (int64_t r = r0; r < r1; r++) {
    row_next(&e, r);
    const float *xr = f32 ? (const float *)row_ptr(&X, r, 0, 0) : x;
    float *yr = f32 ? (float *)row_ptr(&Y, r, 0, 0) : x;
    if (!f32) load_row(&X, r, 0, x);
    const float mean = vnc_canonical_sum(xr, N) / (float)N;
    const float var = vnc_canonical_sum_sq(xr, N, mean) / (float)N; /* canonical sum of (x - mean)^2 */
    const float rstd = 1.0f / sqrtf(var + (float)t->eps);
    tier->norm_row(yr, xr, N, mean, rstd, w, b);
    if (!f32) store_row(&Y, r, 0, x);
    vnc_store_f64[t->stat_dtype]((char *)t->out_mean + r * (int64_t)vnc_dtype_size(t->stat_dtype), mean);
    vnc_store_f64[t->stat_dtype]((char *)t->out_rstd + r * (int64_t)vnc_dtype_size(t->stat_dtype), rstd);
    row_done(&e, r + 1);
  }
  if (!f32) {
    free_row(s1, x);
    if (w) free_row(s2, w);
    if (b) free_row(s3, b);
  }
}

static vnc_status ln_fwd_run(void *p) {
  ln_task *t = p;
  vnc_parallel_for(t->M, t->N >= 4096 ? 1 : 4096 / t->N + 1, ln_fwd_rows, t);
  return VNC_OK;
}

vnc_status vnc_layer_norm(vnc_stream *s, const char *op, int64_t M, int64_t N, int32_t dtype, const void *x,
                          const void *weight, const void *bias, double eps, void *y, void *mean, void *rstd,
                          int32_t stat_dtype) {
  return vnc_layer_norm_fused(s, op, M, N, dtype, x, weight, bias, eps, y, mean, rstd, stat_dtype, NULL, NULL, NULL);
}

vnc_status vnc_layer_norm_fused(vnc_stream *s, const char *op, int64_t M, int64_t N, int32_t dtype, const void *x,
                                const void *weight, const void *bias, double eps, void *y, void *mean, void *rstd,
                                int32_t stat_dtype, vnc_range_fn prologue, vnc_range_fn epilogue, void *ctx) {
  VNC_CHECK_COMPUTED(op, dtype, stat_dtype);
  if (M == 0) return VNC_OK;
  if (N == 0) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: normalized shape has no elements", op);
  ln_task t = {.M = M, .N = N, .dtype = dtype, .stat_dtype = stat_dtype, .x = x, .w = weight, .b = bias,
               .y = y, .out_mean = mean, .out_rstd = rstd, .eps = eps, .hooks = {prologue, epilogue, ctx}};
  return vnc_launch(s, op, ln_fwd_run, &t, sizeof t, NULL);
}

static float stat_at(const void *p, int32_t dt, int64_t r) {
  return (float)vnc_load_f64[dt]((const char *)p + r * (int64_t)vnc_dtype_size(dt));
}

/* The backward in one pass over x and dy: blocks of `rb` rows (the count depends on the shape
 * only) compute dx row by row and add dy * x_hat and dy into their block's partial sums of
 * dweight and dbias in row order; the partials are then added per column in block order. */
#define LN_BLOCKS 64 /* most row blocks: partials take 2 * LN_BLOCKS * N floats */

static void ln_bwd_blocks(void *ctx, int64_t b0, int64_t b1) {
  const ln_task *t = ctx;
  const int64_t N = t->N;
  const int f32 = t->dtype == VNC_FLOAT32;
  float s1[STACK_ROW], s2[STACK_ROW], s3[STACK_ROW], s4[STACK_ROW], s5[STACK_ROW];
  float *xh = row_buffer(s1, N), *g = row_buffer(s2, N), *w = NULL, *x = f32 ? NULL : row_buffer(s4, N);
  float *dy = f32 ? NULL : row_buffer(s5, N);
  if (t->w) {
    w = f32 ? (float *)t->w : row_buffer(s3, N);
    if (!f32) load_vec(t->w, t->dtype, N, w);
  }
  vnc_rows X = row_of(t->x, t->dtype, t->M, N), G = row_of(t->dy, t->dtype, t->M, N), D = row_of(t->dx, t->dtype, t->M, N);
  const vnc_tier_ops *tier = vnc_tier();
  for (int64_t blk = b0; blk < b1; blk++) {
    float *aw = t->part ? t->part + blk * 2 * N : NULL, *ab = aw ? aw + N : NULL;
    if (aw) memset(aw, 0, sizeof(float) * (size_t)(2 * N));
    const int64_t r1 = (blk + 1) * t->rb < t->M ? (blk + 1) * t->rb : t->M;
    hook_state e = hooks_from(&t->hooks, blk * t->rb, r1, N);
    for (int64_t r = blk * t->rb; r < r1; r++) {
      row_next(&e, r);
      const float *xr = x, *gr = dy;
      float *d = t->dx && f32 ? (float *)row_ptr(&D, r, 0, 0) : t->dx ? x : NULL; /* x's buffer is free after */
      if (f32) {
        xr = (const float *)row_ptr(&X, r, 0, 0);
        gr = (const float *)row_ptr(&G, r, 0, 0);
      } else {
        load_row(&X, r, 0, x);
        load_row(&G, r, 0, dy);
      }
      tier->ln_bwd_row(d, xr, gr, w, N, stat_at(t->mean, t->stat_dtype, r), stat_at(t->rstd, t->stat_dtype, r), aw, ab,
                       xh, g);
      if (d && !f32) store_row(&D, r, 0, d);
      row_done(&e, r + 1);
    }
  }
  free_row(s1, xh);
  free_row(s2, g);
  if (w && !f32) free_row(s3, w);
  if (!f32) {
    free_row(s4, x);
    free_row(s5, dy);
  }
}

static void ln_bwd_combine(void *ctx, int64_t c0, int64_t c1) { /* dweight, dbias: partials in block order */
  const ln_task *t = ctx;
  const int64_t N = t->N, es = (int64_t)vnc_dtype_size(t->dtype);
  for (int64_t j = c0; j < c1; j++) {
    float sw = 0.0f, sb = 0.0f;
    for (int64_t blk = 0; blk < t->nblk; blk++) {
      sw += t->part[blk * 2 * N + j];
      sb += t->part[blk * 2 * N + N + j];
    }
    if (t->dw) vnc_store_f64[t->dtype]((char *)t->dw + j * es, sw);
    if (t->db) vnc_store_f64[t->dtype]((char *)t->db + j * es, sb);
  }
}

static vnc_status ln_bwd_run(void *p) {
  ln_task *t = p;
  /* rows per block: at least 16, so each block's partials are worth their N-long add */
  t->rb = (t->M + LN_BLOCKS - 1) / LN_BLOCKS > 16 ? (t->M + LN_BLOCKS - 1) / LN_BLOCKS : 16;
  t->nblk = (t->M + t->rb - 1) / t->rb;
  t->part = NULL;
  if (t->dw || t->db) {
    t->part = malloc(sizeof(float) * (size_t)(t->nblk * 2 * t->N + 1));
    if (!t->part) return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "aten::native_layer_norm_backward: out of host memory");
  }
  if (t->M) vnc_parallel_for(t->nblk, 1, ln_bwd_blocks, t);
  if (t->part) vnc_parallel_for(t->N, 256, ln_bwd_combine, t);
  free(t->part);
  return VNC_OK;
}

vnc_status vnc_layer_norm_backward(vnc_stream *s, const char *op, int64_t M, int64_t N, int32_t dtype, const void *dy,
                                   const void *x, const void *mean, const void *rstd, int32_t stat_dtype,
                                   const void *weight, void *dx, void *dweight, void *dbias) {
  return vnc_layer_norm_backward_fused(s, op, M, N, dtype, dy, x, mean, rstd, stat_dtype, weight, dx, dweight, dbias,
                                       NULL, NULL, NULL);
}

vnc_status vnc_layer_norm_backward_fused(vnc_stream *s, const char *op, int64_t M, int64_t N, int32_t dtype,
                                         const void *dy, const void *x, const void *mean, const void *rstd,
                                         int32_t stat_dtype, const void *weight, void *dx, void *dweight, void *dbias,
                                         vnc_range_fn prologue, vnc_range_fn epilogue, void *ctx) {
  VNC_CHECK_COMPUTED(op, dtype, stat_dtype);
  if (N == 0) return VNC_OK;
  if (epilogue && !dx)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: a row epilogue needs dx (its rows are what it reads)", op);
  ln_task t = {.M = M, .N = N, .dtype = dtype, .stat_dtype = stat_dtype, .x = x, .w = weight, .dy = dy,
               .mean = mean, .rstd = rstd, .dx = M ? dx : NULL, .dw = dweight, .db = dbias,
               .hooks = {prologue, epilogue, ctx}};
  return vnc_launch(s, op, ln_bwd_run, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- NLL loss */

typedef struct nll_task {
  int64_t N, C, ignore, go_stride;
  int32_t dtype;
  int reduction;
  const void *x, *weight, *grad_out, *total;
  const int64_t *target;
  void *out, *total_out, *grad_x;
} nll_task;

static float elem(const void *p, int32_t dt, int64_t k) { return (float)vnc_load_f64[dt]((const char *)p + k * (int64_t)vnc_dtype_size(dt)); }

static vnc_status check_target(const nll_task *t, int64_t n) {
  int64_t c = t->target[n];
  if (c != t->ignore && (c < 0 || c >= t->C))
    return vnc_set_error(VNC_ERR_INDEX, "Target %lld is out of bounds (%lld classes).", (long long)c, (long long)t->C);
  return VNC_OK;
}

static vnc_status nll_run(void *p) {
  nll_task *t = p;
  float *losses = malloc(sizeof(float) * (size_t)(t->N ? t->N : 1)), *ws = malloc(sizeof(float) * (size_t)(t->N ? t->N : 1));
  for (int64_t n = 0; n < t->N; n++) {
    vnc_status st = check_target(t, n);
    if (st != VNC_OK) { free(losses); free(ws); return st; }
    int64_t c = t->target[n];
    float w = c == t->ignore ? 0.0f : t->weight ? elem(t->weight, t->dtype, c) : 1.0f;
    ws[n] = w;
    losses[n] = c == t->ignore ? 0.0f : -elem(t->x, t->dtype, n * t->C + c) * w;
  }
  const int64_t es = (int64_t)vnc_dtype_size(t->dtype);
  if (t->reduction == 0) {
    for (int64_t n = 0; n < t->N; n++) vnc_store_f64[t->dtype]((char *)t->out + n * es, losses[n]);
    vnc_store_f64[t->dtype](t->total_out, 0.0);
  } else {
    float sum = vnc_canonical_sum(losses, t->N), tw = vnc_canonical_sum(ws, t->N);
    vnc_store_f64[t->dtype](t->out, t->reduction == 1 ? sum / tw : sum);
    vnc_store_f64[t->dtype](t->total_out, tw);
  }
  free(losses);
  free(ws);
  return VNC_OK;
}

vnc_status vnc_nll_loss(vnc_stream *s, const char *op, int64_t N, int64_t C, int32_t dtype, const void *x,
                        const int64_t *target, const void *weight, int reduction, int64_t ignore_index, void *out,
                        void *total_weight) {
  VNC_CHECK_COMPUTED(op, dtype);
  nll_task t = {.N = N, .C = C, .ignore = ignore_index, .dtype = dtype, .reduction = reduction, .x = x,
                .weight = weight, .target = target, .out = out, .total_out = total_weight};
  return vnc_launch(s, op, nll_run, &t, sizeof t, NULL);
}

static vnc_status nll_bwd_run(void *p) {
  nll_task *t = p;
  const int64_t es = (int64_t)vnc_dtype_size(t->dtype);
  memset(t->grad_x, 0, (size_t)(t->N * t->C * es));
  float g = t->reduction == 0 ? 0.0f : elem(t->grad_out, t->dtype, 0);
  if (t->reduction == 1) g = g / elem(t->total, t->dtype, 0);
  for (int64_t n = 0; n < t->N; n++) {
    vnc_status st = check_target(t, n);
    if (st != VNC_OK) return st;
    int64_t c = t->target[n];
    if (c == t->ignore) continue;
    float w = t->weight ? elem(t->weight, t->dtype, c) : 1.0f;
    float gn = t->reduction == 0 ? elem(t->grad_out, t->dtype, n * t->go_stride) : g;
    vnc_store_f64[t->dtype]((char *)t->grad_x + (n * t->C + c) * es, -w * gn);
  }
  return VNC_OK;
}

vnc_status vnc_nll_loss_backward(vnc_stream *s, const char *op, int64_t N, int64_t C, int32_t dtype,
                                 const void *grad_out, int64_t grad_out_stride, const int64_t *target,
                                 const void *weight, int reduction, int64_t ignore_index, const void *total_weight,
                                 void *grad_x) {
  VNC_CHECK_COMPUTED(op, dtype);
  if (N * C == 0) return VNC_OK;
  nll_task t = {.N = N, .C = C, .ignore = ignore_index, .go_stride = grad_out_stride, .dtype = dtype,
                .reduction = reduction, .weight = weight, .grad_out = grad_out, .total = total_weight,
                .target = target, .grad_x = grad_x};
  return vnc_launch(s, op, nll_bwd_run, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- row gather / scatter-add */

typedef struct rows_task {
  vnc_rows src, dst;
  const void *index;
  int32_t index_dtype;
  int64_t index_stride, nidx, skip;
  int64_t dim; /* index_select's dim, for its error; -1 otherwise */
  int by_freq, zero_first;
} rows_task;

static int64_t index_at(const rows_task *t, int64_t j) {
  return t->index_dtype == VNC_INT32 ? ((const int32_t *)t->index)[j * t->index_stride]
                                     : ((const int64_t *)t->index)[j * t->index_stride];
}

static vnc_status check_indices(rows_task *t, int64_t limit) {
  for (int64_t j = 0; j < t->nidx; j++) {
    int64_t r = index_at(t, j);
    if (r == t->skip || (r >= 0 && r < limit)) continue;
    /* index_select: ATen's CPU kernel raises RuntimeError from its dim-1 path, IndexError otherwise */
    if (t->dim == 1)
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "INDICES element is out of DATA bounds, id=%lld axis_dim=%lld",
                           (long long)r, (long long)limit);
    if (t->dim >= 0)
      return vnc_set_error(VNC_ERR_INDEX, "index out of range in self (index %lld, dimension %lld with size %lld)",
                           (long long)r, (long long)t->dim, (long long)limit);
    return vnc_set_error(VNC_ERR_INDEX, "index %lld is out of bounds for dimension with size %lld", (long long)r,
                         (long long)limit);
  }
  return VNC_OK;
}

static void gather_rows(void *ctx, int64_t u0, int64_t u1) {
  const rows_task *t = ctx;
  const int64_t es = (int64_t)vnc_dtype_size(t->src.dtype);
  vnc_loop_fn cp = vnc_copy_loop(t->dst.dtype, t->src.dtype);
  for (int64_t u = u0; u < u1; u++) {
    int64_t o = u / t->nidx, j = u % t->nidx, r = index_at(t, j);
    char *ptrs[2] = {row_ptr(&t->dst, o, j, 0), row_ptr(&t->src, o, r, 0)};
    const int64_t st[2] = {t->dst.inner_stride * (int64_t)vnc_dtype_size(t->dst.dtype), t->src.inner_stride * es};
    cp(NULL, ptrs, st, t->src.inner, 0);
  }
}

static vnc_status gather_run(void *p) {
  rows_task *t = p;
  vnc_status st = check_indices(t, t->src.n);
  if (st != VNC_OK) return st;
  vnc_parallel_for(t->src.outer * t->nidx, t->src.inner >= 1024 ? 1 : 1024 / (t->src.inner + 1) + 1, gather_rows, t);
  return VNC_OK;
}

vnc_status vnc_index_select(vnc_stream *s, const char *op, const vnc_rows *src, const void *index, int32_t index_dtype,
                            int64_t index_stride, int64_t nidx, int64_t dim, const vnc_rows *out) {
  if (index_dtype != VNC_INT64 && index_dtype != VNC_INT32)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: index must be int64 or int32, got %s", op, vnc_dtype_name(index_dtype));
  rows_task t = {.src = *src, .dst = *out, .index = index, .index_dtype = index_dtype, .index_stride = index_stride,
                 .nidx = nidx, .skip = INT64_MIN, .dim = dim};
  if (src->dtype == out->dtype) /* rows move bit for bit, any stored dtype */
    t.src.dtype = t.dst.dtype = vnc_width_dtype(src->dtype);
  VNC_CHECK_COMPUTED(op, t.src.dtype, t.dst.dtype);
  if (src->outer * nidx * src->inner == 0) return VNC_OK;
  return vnc_launch(s, op, gather_run, &t, sizeof t, NULL);
}

static void add_cols(void *ctx, int64_t c0, int64_t c1) { /* columns [c0, c1) of every row, j in order */
  const rows_task *t = ctx;
  const int64_t n = c1 - c0;
  float *acc_row = malloc(sizeof(float) * (size_t)n), *src_row = malloc(sizeof(float) * (size_t)n);
  vnc_loop_fn load_dst = vnc_copy_loop(VNC_FLOAT32, t->dst.dtype), load_src = vnc_copy_loop(VNC_FLOAT32, t->src.dtype);
  vnc_loop_fn store_dst = vnc_copy_loop(t->dst.dtype, VNC_FLOAT32);
  const int64_t des = (int64_t)vnc_dtype_size(t->dst.dtype), ses = (int64_t)vnc_dtype_size(t->src.dtype);
  for (int64_t o = 0; o < t->dst.outer; o++)
    for (int64_t j = 0; j < t->nidx; j++) {
      int64_t r = index_at(t, j);
      if (r == t->skip) continue;
      float scale = 1.0f;
      if (t->by_freq) {
        int64_t cnt = 0;
        for (int64_t k = 0; k < t->nidx; k++) cnt += index_at(t, k) == r;
        scale = 1.0f / (float)cnt;
      }
      char *d = row_ptr(&t->dst, o, r, c0), *sr = row_ptr(&t->src, o, j, c0);
      const int64_t dst_st[2] = {4, t->dst.inner_stride * des}, src_st[2] = {4, t->src.inner_stride * ses};
      load_dst(NULL, (char *[]){(char *)acc_row, d}, dst_st, n, 0);
      load_src(NULL, (char *[]){(char *)src_row, sr}, src_st, n, 0);
      for (int64_t i = 0; i < n; i++) acc_row[i] += src_row[i] * scale;
      const int64_t back[2] = {t->dst.inner_stride * des, 4};
      store_dst(NULL, (char *[]){d, (char *)acc_row}, back, n, 0);
    }
  free(acc_row);
  free(src_row);
}

static void zero_rows(void *ctx, int64_t u0, int64_t u1) {
  const rows_task *t = ctx;
  const int64_t es = (int64_t)vnc_dtype_size(t->dst.dtype);
  for (int64_t u = u0; u < u1; u++) {
    int64_t o = u / t->dst.n, j = u % t->dst.n;
    for (int64_t i = 0; i < t->dst.inner; i++) memset(row_ptr(&t->dst, o, j, i), 0, (size_t)es);
  }
}

static vnc_status add_run(void *p) {
  rows_task *t = p;
  vnc_status st = check_indices(t, t->dst.n);
  if (st != VNC_OK) return st;
  if (t->zero_first) vnc_parallel_for(t->dst.outer * t->dst.n, 64, zero_rows, t);
  vnc_parallel_for(t->dst.inner, 512, add_cols, t);
  return VNC_OK;
}

vnc_status vnc_index_add_rows(vnc_stream *s, const char *op, const vnc_rows *dst, const void *index, int32_t index_dtype,
                              int64_t nidx, const vnc_rows *src, int64_t skip_index, int by_freq, int zero_first) {
  if (index_dtype != VNC_INT64 && index_dtype != VNC_INT32)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: index must be int64 or int32, got %s", op, vnc_dtype_name(index_dtype));
  VNC_CHECK_COMPUTED(op, dst->dtype, src->dtype);
  rows_task t = {.src = *src, .dst = *dst, .index = index, .index_dtype = index_dtype, .index_stride = 1, .dim = -1,
                 .nidx = nidx, .skip = skip_index, .by_freq = by_freq, .zero_first = zero_first};
  return vnc_launch(s, op, add_run, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- index fills */

typedef struct fill_index_task {
  vnc_iter it;
  int kind; /* 0 arange, 1 tril, 2 triu, 3 linspace */
  double start, step, end;
  int64_t istart, istep, diag, rows, cols, steps;
} fill_index_task;

static void fill_index_loop(void *ctx, char **data, const int64_t *st, int64_t n, int64_t index) {
  const fill_index_task *t = ctx;
  const int32_t dt = t->it.dtypes[0];
  if (t->kind == 0 && dt == VNC_FLOAT32 && st[0] == 4 && n <= INT32_MAX) { /* dense float32, int64: vectorised */
    float *o = (float *)data[0];
    const double start = t->start, step = t->step, base = (double)index; /* index + k exactly (< 2^53) */
    for (int32_t k = 0; k < (int32_t)n; k++) o[k] = (float)(start + step * (base + (double)k));
    return;
  }
  if (t->kind == 0 && dt == VNC_INT64 && st[0] == 8) {
    int64_t *o = (int64_t *)data[0];
    const int64_t start = t->istart, step = t->istep;
    for (int64_t k = 0; k < n; k++) o[k] = start + step * (index + k);
    return;
  }
  for (int64_t k = 0; k < n; k++) {
    char *p = data[0] + k * st[0];
    int64_t lin = index + k;
    if (t->kind == 0) {
      if (vnc_dtype_is_floating(dt)) vnc_store_f64[dt](p, t->start + t->step * (double)lin);
      else vnc_store_i64[dt](p, t->istart + t->istep * lin);
    } else if (t->kind == 3) { /* ATen's halves: exact at both ends */
      vnc_store_f64[dt](p, lin < t->steps / 2 ? t->start + t->step * (double)lin
                                               : t->end - t->step * (double)(t->steps - lin - 1));
    } else {
      int64_t c = lin % t->cols, r = (lin / t->cols) % t->rows;
      int keep = t->kind == 1 ? c - r <= t->diag : c - r >= t->diag;
      if (keep) memmove(p, data[1] + k * st[1], vnc_dtype_size(dt));
      else memset(p, 0, vnc_dtype_size(dt));
    }
  }
}

static vnc_status fill_index_run(void *p) {
  fill_index_task *t = p;
  vnc_iter_for_each(&t->it, fill_index_loop, t, VNC_ITER_GRAIN);
  return VNC_OK;
}

vnc_status vnc_arange(vnc_stream *s, const char *op, const vnc_tensor *t, double start, double step, int64_t istart,
                      int64_t istep) {
  fill_index_task k = {.kind = 0, .start = start, .step = step, .istart = istart, .istep = istep};
  const vnc_tensor *ops[1] = {t};
  vnc_status st = vnc_iter_init(&k.it, 1, ops, VNC_ITER_KEEP_ORDER);
  if (st != VNC_OK || k.it.numel == 0) return st;
  return vnc_launch(s, op, fill_index_run, &k, sizeof k, NULL);
}

vnc_status vnc_linspace(vnc_stream *s, const char *op, const vnc_tensor *t, double start, double end, int64_t steps) {
  if (t->ndim != 1 || t->sizes[0] != steps || steps < 2)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: expected a 1-D output of steps >= 2 elements", op);
  fill_index_task k = {.kind = 3, .start = start, .end = end, .step = (end - start) / (double)(steps - 1), .steps = steps};
  const vnc_tensor *ops[1] = {t};
  vnc_status st = vnc_iter_init(&k.it, 1, ops, VNC_ITER_KEEP_ORDER);
  if (st != VNC_OK) return st;
  return vnc_launch(s, op, fill_index_run, &k, sizeof k, NULL);
}

vnc_status vnc_tri(vnc_stream *s, const char *op, const vnc_tensor *src, const vnc_tensor *out, int upper, int64_t diag) {
  if (out->ndim < 2 || out->dtype != src->dtype)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: expected matrices of one dtype", op);
  fill_index_task k = {.kind = upper ? 2 : 1, .diag = diag, .rows = out->sizes[out->ndim - 2], .cols = out->sizes[out->ndim - 1]};
  const vnc_tensor *ops[2] = {out, src};
  vnc_status st = vnc_iter_init(&k.it, 2, ops, VNC_ITER_KEEP_ORDER);
  if (st != VNC_OK || k.it.numel == 0) return st;
  return vnc_launch(s, op, fill_index_run, &k, sizeof k, NULL);
}
