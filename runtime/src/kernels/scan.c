/* Scans along one dim and the log-sum-exp reduction (see vnc/scan.h).
 *
 * Lines are processed in tiles of up to SCAN_TILE neighbours along the fastest other dim:
 * for each position of the scanned dim the tile's elements are converted into a buffer
 * (float32 or int64), combined with the tile's accumulators and stored. Each line is still
 * combined strictly in index order, so results depend on the shape alone. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "lines.h"
#include "vnc/scan.h"
#include "vnc/threadpool.h"

#define SCAN_TILE 64

typedef struct scan_task {
  vnc_lines l; /* 0: x, 1: out */
  vnc_scan_op op;
  int floating;      /* accumulate in float32 (else int64) */
  int wide;          /* a float32 (or float64) sum: the running sum in double, as CPU's acc_type */
  int dense;         /* a float32 sum whose lines are dense: scan_units runs line by line */
  int64_t fast;      /* lines along the fastest other dim (1 if none) */
  int64_t tiles;     /* tiles per group of `fast` lines */
} scan_task;

/* a + b = s + *err exactly (Knuth's TwoSum; needs -ffp-contract=off). */
static inline float two_sum(float a, float b, float *err) {
  const float s = a + b, bb = s - a;
  *err = (a - (s - bb)) + (b - bb);
  return s;
}

/* Float accumulators of one tile: sums as ATen's CPU kernel (the running sum in double for
 * float32 lines, `wide`, in float for 16-bit ones; each output the running sum rounded). */
static void combine_f32(vnc_scan_op op, float *acc, float *comp, double *wsum, int wide, const float *x, int64_t w,
                        int first) {
  if (op == VNC_SCAN_SUM && wide) {
    for (int64_t i = 0; i < w; i++) {
      wsum[i] = (first ? 0.0 : wsum[i]) + (double)x[i]; /* from ATen's identity: a leading -0.0 gives +0.0 */
      acc[i] = (float)wsum[i];
    }
    return;
  }
  for (int64_t i = 0; i < w; i++) {
    const float v = x[i];
    if (first) { /* sums start from ATen's identity (+0, -inf): a leading -0.0 gives +0.0 */
      acc[i] = op == VNC_SCAN_PROD ? v : v + 0.0f;
      comp[i] = 0.0f;
      continue;
    }
    switch (op) {
      case VNC_SCAN_SUM:
        acc[i] = acc[i] + v;
        break;
      case VNC_SCAN_PROD:
        acc[i] = acc[i] * v;
        break;
      case VNC_SCAN_LOGSUMEXP: {
        /* acc + comp is the running value: log(exp(acc + comp) + exp(v)) = hi + log1p(e) plus
         * comp weighted by d/d(acc) = exp(acc) / (exp(acc) + exp(v)); the rounding of each
         * step goes back into comp, so long lines and large magnitudes stay within an ulp. */
        const float a = acc[i];
        if (isnan(a) || isnan(v) || isinf(a) || isinf(v)) {
          acc[i] = isnan(a) || isnan(v) ? NAN : a >= v ? a : v; /* the larger infinity dominates */
          comp[i] = 0.0f;
          break;
        }
        const int a_hi = a >= v;
        const float e = expf(a_hi ? v - a : a - v), t = log1pf(e), w = a_hi ? 1.0f / (1.0f + e) : e / (1.0f + e);
        float err, lo;
        const float s = two_sum(a_hi ? a : v, t, &err);
        lo = err + comp[i] * w;
        acc[i] = two_sum(s, lo, &comp[i]);
        break;
      }
    }
  }
}

static void combine_i64(vnc_scan_op op, int64_t *acc, const int64_t *x, int64_t w, int first) {
  for (int64_t i = 0; i < w; i++) {
    if (first) acc[i] = x[i];
    else if (op == VNC_SCAN_SUM) acc[i] = acc[i] + x[i]; /* wraps (-fwrapv), as ATen's int64 accumulation */
    else acc[i] = acc[i] * x[i];
  }
}

static void scan_units(void *ctx, int64_t u0, int64_t u1) {
  const scan_task *t = ctx;
  const vnc_lines *l = &t->l;
  const int64_t n = l->len[0];
  const int last = l->ndim - 1; /* the fastest other dim, or -1 */
  const int32_t acc_dt = t->floating ? VNC_FLOAT32 : VNC_INT64;
  const vnc_loop_fn load = vnc_copy_loop(acc_dt, l->dtypes[0]), store = vnc_copy_loop(l->dtypes[1], acc_dt);
  const int64_t fx = last >= 0 ? l->strides[0][last] : 0, fo = last >= 0 ? l->strides[1][last] : 0;
  float fbuf[SCAN_TILE], facc[SCAN_TILE], comp[SCAN_TILE];
  double wsum[SCAN_TILE];
  int64_t ibuf[SCAN_TILE], iacc[SCAN_TILE];
  char *const buf = t->floating ? (char *)fbuf : (char *)ibuf;
  char *const accp = t->floating ? (char *)facc : (char *)iacc;
  const int64_t abytes = t->floating ? 4 : 8;
  if (t->dense) { /* float32 lines dense along the scanned dim: one line after another */
    for (int64_t u = u0; u < u1; u++) {
      char *p[2];
      vnc_lines_base(l, u, p);
      const float *x = (const float *)p[0];
      float *y = (float *)p[1];
      double a = 0.0;
      for (int64_t j = 0; j < n; j++) y[j] = (float)(a += (double)x[j]);
    }
    return;
  }
  for (int64_t u = u0; u < u1; u++) {
    const int64_t group = u / t->tiles, i0 = (u % t->tiles) * SCAN_TILE;
    const int64_t w = t->fast - i0 < SCAN_TILE ? t->fast - i0 : SCAN_TILE;
    char *p[2];
    vnc_lines_base(l, group * t->fast + i0, p);
    for (int64_t j = 0; j < n; j++) {
      load(NULL, (char *[]){buf, p[0] + j * l->step[0]}, (const int64_t[]){abytes, fx}, w, 0);
      if (t->floating) combine_f32(t->op, facc, comp, wsum, t->wide, fbuf, w, j == 0);
      else combine_i64(t->op, iacc, ibuf, w, j == 0);
      store(NULL, (char *[]){p[1] + j * l->step[1], accp}, (const int64_t[]){fo, abytes}, w, 0);
    }
  }
}

static vnc_status scan_run(void *p) {
  scan_task *t = p;
  if (t->dense) {
    const int64_t n = t->l.len[0];
    vnc_parallel_for(t->l.count, n >= 32768 ? 1 : 32768 / n + 1, scan_units, t);
    return VNC_OK;
  }
  const int64_t units = t->l.count / t->fast * t->tiles, n = t->l.len[0];
  const int64_t per_unit = n * SCAN_TILE;
  vnc_parallel_for(units, per_unit >= 32768 ? 1 : 32768 / per_unit + 1, scan_units, t);
  return VNC_OK;
}

vnc_status vnc_scan(vnc_stream *s, const char *op_name, vnc_scan_op op, const vnc_tensor *x, int dim,
                    const vnc_tensor *out) {
  if (vnc_dtype_is_complex(x->dtype) || vnc_dtype_is_complex(out->dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s is not implemented for complex tensors on neuron", op_name);
  const int floating = vnc_dtype_is_floating(out->dtype);
  if (op == VNC_SCAN_LOGSUMEXP && !floating)
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s expects a floating output, got %s", op_name, vnc_dtype_name(out->dtype));
  scan_task t;
  memset(&t, 0, sizeof t);
  const vnc_tensor *ops[2] = {x, out};
  vnc_status st = vnc_lines_init(&t.l, 2, ops, dim, op_name);
  if (st != VNC_OK) return st;
  if (t.l.len[0] != t.l.len[1]) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: out must have x's shape", op_name);
  if (t.l.count == 0 || t.l.len[0] == 0) return VNC_OK;
  if (!vnc_copy_loop(VNC_FLOAT32, x->dtype)) return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: unknown dtype", op_name);
  t.op = op;
  t.floating = floating;
  t.wide = op == VNC_SCAN_SUM && (x->dtype == VNC_FLOAT32 || x->dtype == VNC_FLOAT64);
  t.dense = op == VNC_SCAN_SUM && x->dtype == VNC_FLOAT32 && out->dtype == VNC_FLOAT32 && t.l.step[0] == 4 &&
            t.l.step[1] == 4;
  t.fast = t.l.ndim > 0 ? t.l.sizes[t.l.ndim - 1] : 1;
  t.tiles = (t.fast + SCAN_TILE - 1) / SCAN_TILE;
  return vnc_launch(s, op_name, scan_run, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- logsumexp */

typedef struct lse_task {
  vnc_lines l; /* 0: x [rows, n], 1: out [rows, 1] */
  atomic_int failed;
} lse_task;

static void lse_rows(void *ctx, int64_t r0, int64_t r1) {
  lse_task *t = ctx;
  const vnc_lines *l = &t->l;
  const int64_t n = l->len[0];
  float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
  if (!x) {
    atomic_store(&t->failed, 1);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    char *p[2];
    vnc_lines_base(l, r, p);
    vnc_to_f32(x, p[0], l->dtypes[0], l->step[0] / l->es[0], n);
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) mx = (isnan(x[j]) || x[j] > mx) && !isnan(mx) ? x[j] : mx;
    float res;
    if (isnan(mx) || isinf(mx)) {
      res = mx; /* NaN; all -inf (or empty) gives -inf; any +inf gives +inf */
    } else {
      for (int64_t j = 0; j < n; j++) x[j] = expf(x[j] - mx);
      res = logf(vnc_canonical_sum(x, n)) + mx;
    }
    vnc_from_f32(p[1], l->dtypes[1], 1, &res, 1);
  }
  free(x);
}

static vnc_status lse_run(void *p) {
  lse_task *t = p;
  const int64_t n = t->l.len[0];
  vnc_parallel_for(t->l.count, n >= 4096 ? 1 : 4096 / (n + 1) + 1, lse_rows, t);
  if (atomic_load(&t->failed)) return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "could not allocate logsumexp buffers");
  return VNC_OK;
}

vnc_status vnc_logsumexp(vnc_stream *s, const char *op_name, const vnc_tensor *x, const vnc_tensor *out) {
  if (!vnc_dtype_is_floating(x->dtype) || !vnc_dtype_is_floating(out->dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s expects floating tensors", op_name);
  if (x->ndim != 2 || out->ndim != 1 || out->sizes[0] != x->sizes[0])
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: expected x [rows, n] and out [rows]", op_name);
  vnc_tensor o = *x; /* out as [rows, 1] */
  o.data = out->data;
  o.dtype = out->dtype;
  o.sizes[1] = 1;
  o.strides[0] = out->strides[0];
  o.strides[1] = 0;
  lse_task t;
  memset(&t, 0, sizeof t);
  const vnc_tensor *ops[2] = {x, &o};
  vnc_status st = vnc_lines_init(&t.l, 2, ops, 1, op_name);
  if (st != VNC_OK) return st;
  if (t.l.count == 0) return VNC_OK;
  atomic_init(&t.failed, 0);
  return vnc_launch(s, op_name, lse_run, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- cummax / cummin */

typedef struct cumext_task {
  vnc_lines l; /* 0: x, 1: values, 2: indices */
  int is_max, floating;
  atomic_int failed;
} cumext_task;

/* Each line read whole into float32 or int64, scanned in index order, the winning elements'
 * bytes copied to values (exact for every dtype). */
static void cumext_lines(void *ctx, int64_t a, int64_t b) {
  cumext_task *t = ctx;
  const vnc_lines *l = &t->l;
  const int64_t n = l->len[0], es = l->es[0];
  const int32_t buf_dt = t->floating ? VNC_FLOAT32 : VNC_INT64;
  const vnc_loop_fn load = vnc_copy_loop(buf_dt, l->dtypes[0]);
  void *buf = malloc((size_t)(n > 0 ? n : 1) * 8);
  if (!buf) {
    atomic_store(&t->failed, 1);
    return;
  }
  const float *fx = buf;
  const int64_t *ix = buf;
  for (int64_t line = a; line < b; line++) {
    char *p[3];
    vnc_lines_base(l, line, p);
    load(NULL, (char *[]){buf, p[0]}, (const int64_t[]){t->floating ? 4 : 8, l->step[0]}, n, 0);
    int64_t best = 0;
    for (int64_t j = 0; j < n; j++) {
      int take;
      if (j == 0) take = 1;
      else if (t->floating) /* ATen: isnan(x) || (!isnan(best) && x >= best) (<= for cummin): a NaN takes over */
        take = isnan(fx[j]) || (!isnan(fx[best]) && (t->is_max ? fx[j] >= fx[best] : fx[j] <= fx[best]));
      else
        take = t->is_max ? ix[j] >= ix[best] : ix[j] <= ix[best];
      if (take) best = j;
      memcpy(p[1] + j * l->step[1], p[0] + best * l->step[0], (size_t)es);
      *(int64_t *)(p[2] + j * l->step[2]) = best;
    }
  }
  free(buf);
}

static vnc_status cumext_run(void *p) {
  cumext_task *t = p;
  const int64_t n = t->l.len[0];
  vnc_parallel_for(t->l.count, n >= 4096 ? 1 : 4096 / (n + 1) + 1, cumext_lines, t);
  if (atomic_load(&t->failed)) return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "out of host memory for a scan buffer");
  return VNC_OK;
}

vnc_status vnc_cum_extreme(vnc_stream *s, const char *op_name, const vnc_tensor *x, int dim, int is_max,
                           const vnc_tensor *values, const vnc_tensor *indices) {
  if (vnc_dtype_is_complex(x->dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s is not implemented for complex tensors on neuron", op_name);
  if (values->dtype != x->dtype || indices->dtype != VNC_INT64)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: values must have x's dtype and indices int64", op_name);
  cumext_task t;
  memset(&t, 0, sizeof t);
  const vnc_tensor *ops[3] = {x, values, indices};
  vnc_status st = vnc_lines_init(&t.l, 3, ops, dim, op_name);
  if (st != VNC_OK) return st;
  if (t.l.len[0] != t.l.len[1] || t.l.len[0] != t.l.len[2])
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: values and indices must have x's shape", op_name);
  if (t.l.count == 0 || t.l.len[0] == 0) return VNC_OK;
  t.is_max = is_max;
  t.floating = vnc_dtype_is_floating(x->dtype);
  atomic_init(&t.failed, 0);
  return vnc_launch(s, op_name, cumext_run, &t, sizeof t, NULL);
}
