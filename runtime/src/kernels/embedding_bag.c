/* Embedding bags and their gradients (vnc/embedding_bag.h). A task first validates the
 * indices and offsets (serially: they are small) and derives each entry's bag, then reduces
 * bags (forward) or columns (backward) in parallel, each in entry order. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "vnc/embedding_bag.h"

typedef struct bag_task {
  vnc_bag_args a;
  vnc_tensor psw;          /* per_sample_weights (data NULL when absent) */
  vnc_tensor out, o2b, bsz, maxi, grad;
  int out_is_forward;      /* o2b is written (forward), not read */
  int64_t n, bags, rows, D;
  int64_t *start;          /* bags + 1 entry boundaries, owned */
  int64_t *bag_of;         /* n entries, owned */
  int64_t *row;            /* n rows (-1 for padding), owned */
  int64_t *freq;           /* rows counts (scale_grad_by_freq), owned */
} bag_task;

static void bag_release(void *p) {
  bag_task *t = p;
  free(t->start);
  free(t->bag_of);
  free(t->row);
  free(t->freq);
}

static int64_t ld_index(const vnc_tensor *t, int64_t i) {
  const char *p = (const char *)t->data + i * t->strides[0] * (int64_t)vnc_dtype_size(t->dtype);
  return t->dtype == VNC_INT64 ? *(const int64_t *)p : (int64_t)*(const int32_t *)p;
}

static char *elem2(const vnc_tensor *t, int64_t i, int64_t j) {
  return (char *)t->data + (i * t->strides[0] + j * t->strides[1]) * (int64_t)vnc_dtype_size(t->dtype);
}

static void st_i64(const vnc_tensor *t, int64_t i, int64_t v) {
  *(int64_t *)((char *)t->data + i * t->strides[0] * 8) = v;
}

/* Bag boundaries and each entry's bag (from the offsets, forward; from offset2bag, backward)
 * and row (-1 for padding); validates as ATen does (its messages where it has one). */
static vnc_status bag_prepare(bag_task *t) {
  const int64_t n = t->n;
  if (t->o2b.data && !t->out_is_forward) { /* backward: the bags the forward assigned */
    for (int64_t i = 0; i < n; i++) {
      const int64_t b = *(const int64_t *)((const char *)t->o2b.data + i * t->o2b.strides[0] * 8);
      if (b < 0 || b >= t->bags)
        return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "embedding_bag: offset2bag[%lld] = %lld is out of range for %lld bags",
                             (long long)i, (long long)b, (long long)t->bags);
      t->bag_of[i] = b;
    }
  } else {
    const int64_t noff = t->a.offsets.sizes[0];
    for (int64_t b = 0; b < noff; b++) {
      const int64_t o = ld_index(&t->a.offsets, b);
      if (b == 0 && o != 0)
        return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to "
                                            "start from position 0. However, got %lld", (long long)o);
      if (b > 0 && o < t->start[b - 1])
        return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "offsets must be non-decreasing, but offsets[%lld] = %lld follows %lld",
                             (long long)b, (long long)o, (long long)t->start[b - 1]);
      if (o > n)
        return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "offsets[-1] can not be greater than input's length %lld but got "
                                            "offsets[-1] of %lld", (long long)n, (long long)o);
      if (b <= t->bags) t->start[b] = o;
    }
    if (!t->a.include_last_offset) t->start[t->bags] = n;
    for (int64_t b = 0; b < t->bags; b++)
      for (int64_t i = t->start[b]; i < t->start[b + 1]; i++) t->bag_of[i] = b;
    /* entries after the closing offset (include_last_offset) belong to no bag */
    for (int64_t i = t->start[t->bags]; i < n; i++) t->bag_of[i] = t->bags;
  }
  for (int64_t i = 0; i < n; i++) {
    const int64_t r = ld_index(&t->a.indices, i);
    if (r < 0 || r >= t->rows)
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "embedding_bag: index %lld of entry %lld is out of range for a weight of "
                                          "%lld rows", (long long)r, (long long)i, (long long)t->rows);
    t->row[i] = r == t->a.padding_idx ? -1 : r;
    if (t->freq && r != t->a.padding_idx) t->freq[r]++;
  }
  return VNC_OK;
}

static float psw_at(const bag_task *t, int64_t i) {
  const vnc_tensor *p = &t->psw;
  return (float)vnc_load_f64[p->dtype]((const char *)p->data + i * p->strides[0] * (int64_t)vnc_dtype_size(p->dtype));
}


#define BAG_AHEAD 12 /* entries ahead whose weight rows are prefetched */

static void bag_fwd(void *ctx, int64_t b0, int64_t b1) {
  const bag_task *t = ctx;
  const int64_t D = t->D;
  float *acc = malloc(sizeof(float) * (size_t)(2 * D > 0 ? 2 * D : 1)), *row = acc + D;
  int64_t *arg = t->maxi.data ? malloc(sizeof(int64_t) * (size_t)(D > 0 ? D : 1)) : NULL;
  const int32_t wdt = t->a.weight.dtype;
  const int direct = wdt == VNC_FLOAT32 && t->a.weight.strides[1] == 1; /* rows read in place */
  const int64_t row_bytes = t->a.weight.strides[1] == 1 ? D * (int64_t)vnc_dtype_size(wdt) : 0;
  for (int64_t b = b0; b < b1; b++) {
    int64_t count = 0;
    for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
    if (arg) memset(arg, 0, sizeof(int64_t) * (size_t)D);
    for (int64_t i = t->start[b]; i < t->start[b + 1]; i++) {
      const int64_t r = t->row[i];
      if (i + BAG_AHEAD < t->n && t->row[i + BAG_AHEAD] >= 0) /* rows come from anywhere in the table */
        for (int64_t q = 0; q < row_bytes; q += 64) __builtin_prefetch(elem2(&t->a.weight, t->row[i + BAG_AHEAD], 0) + q);
      if (r < 0) continue;
      const float *x = row;
      if (direct) x = (const float *)elem2(&t->a.weight, r, 0);
      else vnc_to_f32(row, elem2(&t->a.weight, r, 0), wdt, t->a.weight.strides[1], D);
      if (t->a.mode == VNC_BAG_MAX) {
        for (int64_t d = 0; d < D; d++)
          if (count == 0 || x[d] > acc[d]) {
            acc[d] = x[d];
            arg[d] = r;
          }
      } else {
        const float w = t->psw.data ? psw_at(t, i) : 1.0f;
        for (int64_t d = 0; d < D; d++) acc[d] += t->psw.data ? x[d] * w : x[d];
      }
      count++;
    }
    if (t->a.mode == VNC_BAG_MEAN && count > 0)
      for (int64_t d = 0; d < D; d++) acc[d] /= (float)count;
    vnc_from_f32(elem2(&t->out, b, 0), t->out.dtype, t->out.strides[1], acc, D);
    if (arg)
      for (int64_t d = 0; d < D; d++) *(int64_t *)elem2(&t->maxi, b, d) = arg[d];
    st_i64(&t->bsz, b, t->a.mode == VNC_BAG_SUM ? 0 : count);
  }
  free(acc);
  free(arg);
}

static vnc_status bag_fwd_run(void *p) {
  bag_task *t = p;
  vnc_status st = bag_prepare(t);
  if (st != VNC_OK) return st;
  for (int64_t i = 0; i < t->n; i++) st_i64(&t->o2b, i, t->bag_of[i] < t->bags ? t->bag_of[i] : t->bags - 1);
  vnc_parallel_for(t->bags, 1 + 65536 / (t->D * (t->n / (t->bags ? t->bags : 1) + 1) + 1), bag_fwd, t);
  return VNC_OK;
}

/* Columns [d0, d1) of grad_weight: zeroed, then every entry's contribution in entry order. */
static void bag_bwd_cols(void *ctx, int64_t d0, int64_t d1) {
  const bag_task *t = ctx;
  const int64_t w = d1 - d0, rows = t->rows;
  float *gw = calloc((size_t)(rows * w > 0 ? rows * w : 1), sizeof(float)), *g = malloc(sizeof(float) * (size_t)(w > 0 ? w : 1));
  const vnc_tensor *gt = &t->grad, *gwt = &t->out;
  if (t->a.mode == VNC_BAG_MAX) {
    for (int64_t b = 0; b < t->bags; b++) {
      if (*(const int64_t *)((const char *)t->bsz.data + b * t->bsz.strides[0] * 8) == 0) continue; /* empty bag */
      vnc_to_f32(g, elem2(gt, b, d0), gt->dtype, gt->strides[1], w);
      for (int64_t d = 0; d < w; d++) {
        const int64_t r = *(const int64_t *)elem2(&t->maxi, b, d0 + d);
        if (r >= 0 && r < rows) gw[r * w + d] += g[d];
      }
    }
  } else {
    for (int64_t i = 0; i < t->n; i++) {
      const int64_t r = t->row[i], b = t->bag_of[i];
      if (r < 0 || b >= t->bags) continue;
      float scale = t->psw.data ? psw_at(t, i) : 1.0f;
      if (t->a.mode == VNC_BAG_MEAN) {
        const int64_t c = *(const int64_t *)((const char *)t->bsz.data + b * t->bsz.strides[0] * 8);
        if (c > 0) scale /= (float)c;
      }
      if (t->freq) scale /= (float)t->freq[r];
      vnc_to_f32(g, elem2(gt, b, d0), gt->dtype, gt->strides[1], w);
      for (int64_t d = 0; d < w; d++) gw[r * w + d] += g[d] * scale;
    }
  }
  for (int64_t r = 0; r < rows; r++) vnc_from_f32(elem2(gwt, r, d0), gwt->dtype, gwt->strides[1], gw + r * w, w);
  free(gw);
  free(g);
}

static vnc_status bag_bwd_run(void *p) {
  bag_task *t = p;
  vnc_status st = bag_prepare(t);
  if (st != VNC_OK) return st;
  vnc_parallel_for(t->D, 8, bag_bwd_cols, t);
  return VNC_OK;
}

static void psw_entries(void *ctx, int64_t i0, int64_t i1) {
  const bag_task *t = ctx;
  const int64_t D = t->D;
  float *a = malloc(sizeof(float) * (size_t)(2 * D > 0 ? 2 * D : 1)), *b = a + D;
  for (int64_t i = i0; i < i1; i++) {
    float dot = 0.0f;
    const int64_t r = t->row[i], bag = t->bag_of[i];
    if (r >= 0 && bag < t->bags) {
      vnc_to_f32(a, elem2(&t->grad, bag, 0), t->grad.dtype, t->grad.strides[1], D);
      vnc_to_f32(b, elem2(&t->a.weight, r, 0), t->a.weight.dtype, t->a.weight.strides[1], D);
      for (int64_t d = 0; d < D; d++) dot += a[d] * b[d];
    }
    vnc_from_f32((char *)t->out.data + i * t->out.strides[0] * (int64_t)vnc_dtype_size(t->out.dtype), t->out.dtype, 1, &dot, 1);
  }
  free(a);
}

static vnc_status psw_run(void *p) {
  bag_task *t = p;
  vnc_status st = bag_prepare(t);
  if (st != VNC_OK) return st;
  vnc_parallel_for(t->n, 256, psw_entries, t);
  return VNC_OK;
}

/* Argument checks on the caller's thread and the task's buffers. */
/* bags < 0: counted from the offsets (forward); else given (backward, from offset2bag). */
static vnc_status bag_init(bag_task *t, const char *op, const vnc_bag_args *a, int64_t bags, int need_freq) {
  memset(t, 0, sizeof *t);
  t->a = *a;
  const vnc_tensor *w = &a->weight;
  VNC_CHECK_COMPUTED(op, w->dtype, a->per_sample_weights ? a->per_sample_weights->dtype : w->dtype);
  if (w->ndim != 2 || !vnc_dtype_is_floating(w->dtype))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: weight must be a 2-D floating tensor", op);
  if (a->indices.ndim != 1 || (a->indices.dtype != VNC_INT64 && a->indices.dtype != VNC_INT32) ||
      (bags < 0 && (a->offsets.ndim != 1 || a->indices.dtype != a->offsets.dtype)))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: indices and offsets must be 1-D int32 or int64 of one dtype", op);
  if ((unsigned)a->mode > VNC_BAG_MAX) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: unknown mode %d", op, (int)a->mode);
  t->n = a->indices.sizes[0];
  t->rows = w->sizes[0];
  t->D = w->sizes[1];
  const int64_t noff = bags < 0 ? a->offsets.sizes[0] : 0;
  t->bags = bags >= 0 ? bags : a->include_last_offset ? (noff > 0 ? noff - 1 : 0) : noff;
  if (a->per_sample_weights) {
    const vnc_tensor *p = a->per_sample_weights;
    if (a->mode != VNC_BAG_SUM || p->ndim != 1 || p->sizes[0] != t->n || p->dtype != w->dtype)
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: per_sample_weights must be 1-D like indices, of weight's dtype, "
                                                     "in sum mode", op);
    t->psw = *p;
  }
  t->start = malloc(sizeof(int64_t) * (size_t)(t->bags + 2));
  t->bag_of = malloc(sizeof(int64_t) * (size_t)(t->n > 0 ? t->n : 1));
  t->row = malloc(sizeof(int64_t) * (size_t)(t->n > 0 ? t->n : 1));
  t->freq = need_freq ? calloc((size_t)(t->rows > 0 ? t->rows : 1), sizeof(int64_t)) : NULL;
  if (!t->start || !t->bag_of || !t->row || (need_freq && !t->freq)) {
    bag_release(t);
    return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  return VNC_OK;
}

static int shape2(const vnc_tensor *t, int64_t a, int64_t b) { return t->ndim == 2 && t->sizes[0] == a && t->sizes[1] == b; }
static int shape1(const vnc_tensor *t, int64_t a, int32_t dt) { return t->ndim == 1 && t->sizes[0] == a && t->dtype == dt; }

vnc_status vnc_embedding_bag(vnc_stream *s, const char *op, const vnc_bag_args *a, const vnc_tensor *out,
                             const vnc_tensor *offset2bag, const vnc_tensor *bag_size, const vnc_tensor *max_indices) {
  bag_task t;
  vnc_status st = bag_init(&t, op, a, -1, 0);
  if (st != VNC_OK) return st;
  if (!shape2(out, t.bags, t.D) || out->dtype != a->weight.dtype || !shape1(offset2bag, t.n, VNC_INT64) ||
      !shape1(bag_size, t.bags, VNC_INT64) || (a->mode == VNC_BAG_MAX) != (max_indices != NULL) ||
      (max_indices && (!shape2(max_indices, t.bags, t.D) || max_indices->dtype != VNC_INT64))) {
    bag_release(&t);
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: output shapes or dtypes do not match the bags", op);
  }
  t.out = *out;
  t.o2b = *offset2bag;
  t.out_is_forward = 1;
  t.bsz = *bag_size;
  if (max_indices) t.maxi = *max_indices;
  return vnc_launch(s, op, bag_fwd_run, &t, sizeof t, bag_release);
}

vnc_status vnc_embedding_bag_backward(vnc_stream *s, const char *op, const vnc_bag_args *a, const vnc_tensor *grad,
                                      const vnc_tensor *offset2bag, const vnc_tensor *bag_size,
                                      const vnc_tensor *max_indices, int scale_grad_by_freq,
                                      const vnc_tensor *grad_weight) {
  bag_task t;
  VNC_CHECK_COMPUTED(op, grad->dtype, grad_weight->dtype);
  vnc_status st = bag_init(&t, op, a, grad->ndim == 2 ? grad->sizes[0] : 0, scale_grad_by_freq && a->mode != VNC_BAG_MAX);
  if (st != VNC_OK) return st;
  if (!shape1(offset2bag, t.n, VNC_INT64) || !shape2(grad, t.bags, t.D) || !shape2(grad_weight, t.rows, t.D) || grad_weight->dtype != a->weight.dtype ||
      !shape1(bag_size, t.bags, VNC_INT64) || (a->mode == VNC_BAG_MAX && (!max_indices || !shape2(max_indices, t.bags, t.D)))) {
    bag_release(&t);
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: gradient shapes do not match the bags", op);
  }
  t.grad = *grad;
  t.o2b = *offset2bag;
  t.out = *grad_weight;
  t.bsz = *bag_size;
  if (max_indices) t.maxi = *max_indices;
  return vnc_launch(s, op, bag_bwd_run, &t, sizeof t, bag_release);
}

vnc_status vnc_embedding_bag_psw_backward(vnc_stream *s, const char *op, const vnc_bag_args *a, const vnc_tensor *grad,
                                          const vnc_tensor *offset2bag, const vnc_tensor *out) {
  bag_task t;
  VNC_CHECK_COMPUTED(op, grad->dtype, out->dtype);
  vnc_status st = bag_init(&t, op, a, grad->ndim == 2 ? grad->sizes[0] : 0, 0);
  if (st != VNC_OK) return st;
  if (!shape1(offset2bag, t.n, VNC_INT64) || !shape2(grad, t.bags, t.D) || !shape1(out, t.n, a->weight.dtype)) {
    bag_release(&t);
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: gradient shapes do not match the bags", op);
  }
  t.grad = *grad;
  t.o2b = *offset2bag;
  t.out = *out;
  return vnc_launch(s, op, psw_run, &t, sizeof t, bag_release);
}
