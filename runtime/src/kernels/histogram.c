/* Histograms (vnc/histogram.h). x (and weight) are read through a KEEP_ORDER iteration in
 * chunks of HIST_CHUNK elements; each chunk accumulates its own double histogram, and the
 * chunk histograms are added in chunk order at the end. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "vnc/histogram.h"

#define HIST_CHUNK 32768

typedef struct hist_task {
  vnc_iter it;           /* operands: x[, weight] */
  int weighted;
  vnc_bins_mode mode;
  int64_t bins;
  vnc_tensor edges_src;  /* read when the task runs (an earlier task may write it) */
  float *edges;          /* bins + 1 edges in float32, owned */
  double *partial;       /* chunks x bins, owned */
  int64_t chunks;
  vnc_tensor hist;
  atomic_int failed;
} hist_task;

static void hist_release(void *p) {
  hist_task *t = p;
  free(t->edges);
  free(t->partial);
}

/* First edge index > v among edges[lo, hi), minus 1 (std::upper_bound - 1). */
static int64_t upper_bound_1(const float *e, int64_t lo, int64_t hi, float v) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (e[mid] <= v) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

/* v rounded to the input dtype: ATen computes the linear position in the input's scalar type,
 * and c10::Half / c10::BFloat16 round each operation's result. */
static float in_dtype(int32_t dt, float v) {
  if (dt == VNC_FLOAT16) return vnc_f16_to_f32(vnc_f32_to_f16(v));
  if (dt == VNC_BFLOAT16) return vnc_bf16_to_f32(vnc_f32_to_bf16(v));
  return v;
}

static int64_t bin_of(const hist_task *t, float v) {
  const float *e = t->edges, lo = e[0], hi = e[t->bins];
  const int32_t dt = t->it.dtypes[0];
  int64_t pos;
  if (t->mode == VNC_BINS_SEARCH) {
    pos = upper_bound_1(e, 0, t->bins + 1, v);
  } else {
    const float num = in_dtype(dt, in_dtype(dt, v - lo) * in_dtype(dt, (float)t->bins));
    pos = (int64_t)in_dtype(dt, num / in_dtype(dt, hi - lo));
    if (t->mode == VNC_BINS_LINEAR_SEARCH) {
      const int64_t a = pos - 1 > 0 ? pos - 1 : 0, b = pos + 2 < t->bins + 1 ? pos + 2 : t->bins + 1;
      pos = upper_bound_1(e, a, b, v);
    }
  }
  if (pos >= t->bins) pos = t->bins - 1; /* the last bin holds its right edge */
  return pos < 0 ? 0 : pos;
}

typedef struct chunk_ctx {
  const hist_task *t;
  double *h;
} chunk_ctx;

static void hist_loop(void *ctx, char **data, const int64_t *st, int64_t n, int64_t index) {
  (void)index;
  chunk_ctx *c = ctx;
  const hist_task *t = c->t;
  float xv[256], wv[256];
  for (int64_t k0 = 0; k0 < n; k0 += 256) {
    const int64_t m = n - k0 < 256 ? n - k0 : 256;
    vnc_to_f32(xv, data[0] + k0 * st[0], t->it.dtypes[0], st[0] / (int64_t)vnc_dtype_size(t->it.dtypes[0]), m);
    if (t->weighted) vnc_to_f32(wv, data[1] + k0 * st[1], t->it.dtypes[1], st[1] / (int64_t)vnc_dtype_size(t->it.dtypes[1]), m);
    for (int64_t k = 0; k < m; k++) {
      const float v = xv[k];
      if (!(v >= t->edges[0] && v <= t->edges[t->bins])) continue; /* NaN and outside */
      c->h[bin_of(t, v)] += t->weighted ? (double)wv[k] : 1.0;
    }
  }
}

static void hist_chunks(void *ctx, int64_t a, int64_t b) {
  hist_task *t = ctx;
  for (int64_t ch = a; ch < b; ch++) {
    chunk_ctx c = {t, t->partial + ch * t->bins};
    const int64_t lo = ch * HIST_CHUNK, hi = lo + HIST_CHUNK < t->it.numel ? lo + HIST_CHUNK : t->it.numel;
    vnc_iter_run(&t->it, hist_loop, &c, lo, hi);
  }
}

static vnc_status hist_run(void *p) {
  hist_task *t = p;
  const vnc_tensor *e = &t->edges_src;
  vnc_to_f32(t->edges, e->data, e->dtype, e->strides[0], t->bins + 1);
  vnc_parallel_for(t->chunks, 1, hist_chunks, t);
  const int64_t es = (int64_t)vnc_dtype_size(t->hist.dtype);
  for (int64_t b = 0; b < t->bins; b++) {
    double s = 0.0;
    for (int64_t ch = 0; ch < t->chunks; ch++) s += t->partial[ch * t->bins + b];
    vnc_store_f64[t->hist.dtype]((char *)t->hist.data + b * t->hist.strides[0] * es, (double)(float)s);
  }
  return VNC_OK;
}

vnc_status vnc_histogram(vnc_stream *s, const char *op, const vnc_tensor *x, const vnc_tensor *weight,
                         const vnc_tensor *edges, vnc_bins_mode mode, const vnc_tensor *hist) {
  if (!vnc_dtype_is_floating(x->dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "\"%s\" not implemented for '%s'", op, vnc_dtype_name(x->dtype));
  if (hist->ndim != 1 || edges->ndim != 1 || hist->sizes[0] < 1 || edges->sizes[0] != hist->sizes[0] + 1)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: expected B >= 1 bins and B + 1 edges", op);
  if (edges->dtype != x->dtype || hist->dtype != x->dtype || (weight && weight->dtype != x->dtype))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: input, weight, edges and hist must share one dtype", op);
  hist_task t;
  memset(&t, 0, sizeof t);
  const vnc_tensor *ops[2] = {x, weight};
  vnc_status st = vnc_iter_init(&t.it, weight ? 2 : 1, ops, VNC_ITER_KEEP_ORDER);
  if (st != VNC_OK) return st;
  if (weight && (weight->ndim != x->ndim || memcmp(weight->sizes, x->sizes, sizeof(int64_t) * (size_t)x->ndim)))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: weight must have the input's shape", op);
  t.weighted = weight != NULL;
  t.mode = mode;
  t.bins = hist->sizes[0];
  t.hist = *hist;
  t.chunks = (t.it.numel + HIST_CHUNK - 1) / HIST_CHUNK;
  t.edges = malloc(sizeof(float) * (size_t)(t.bins + 1));
  t.partial = calloc((size_t)(t.chunks > 0 ? t.chunks : 1) * (size_t)t.bins, sizeof(double));
  if (!t.edges || !t.partial) {
    hist_release(&t);
    return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "%s: out of host memory for %lld bins", op, (long long)t.bins);
  }
  t.edges_src = *edges;
  return vnc_launch(s, op, hist_run, &t, sizeof t, hist_release);
}
