/* Pairwise p-norm distances and their gradient (vnc/distance.h). One task per call: operands
 * converted to float32 once when they are not float32, rows of x1 in parallel (each row's
 * results depend on that row only, so never on the thread count). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "vnc/distance.h"
#include "vnc/threadpool.h"

/* The norms, as ATen's Dist<scalar_t> structs: map of t = |a - b|, reduction, finish, and
 * the gradient term of diff = a - b. std::min/std::max semantics (a NaN second operand is not
 * taken) are written out; sign is ATen's (NaN stays NaN). */
typedef enum norm { N_ZERO, N_ONE, N_TWO, N_INF, N_LT2, N_P } norm;

static norm norm_of(float p) {
  if (p == 0.0f) return N_ZERO;
  if (p == 1.0f) return N_ONE;
  if (p == 2.0f) return N_TWO;
  if (isinf(p)) return N_INF;
  return p < 2.0f ? N_LT2 : N_P;
}

static inline float sign_of(float x) { return isnan(x) ? x : (float)((x > 0.0f) - (x < 0.0f)); }

/* dist of one pair of rows of m coordinates. */
static inline float pair_dist(norm n, float p, const float *a, const float *b, int64_t m) {
  float agg = 0.0f;
  switch (n) {
    case N_ZERO:
      for (int64_t k = 0; k < m; k++) {
        const float c = ceilf(fabsf(a[k] - b[k]));
        agg = agg + (1.0f < c ? 1.0f : c);
      }
      return agg;
    case N_ONE:
      for (int64_t k = 0; k < m; k++) agg = agg + fabsf(a[k] - b[k]);
      return agg;
    case N_TWO:
      for (int64_t k = 0; k < m; k++) {
        const float t = fabsf(a[k] - b[k]);
        agg = agg + t * t;
      }
      return sqrtf(agg);
    case N_INF:
      for (int64_t k = 0; k < m; k++) {
        const float t = fabsf(a[k] - b[k]);
        agg = agg < t ? t : agg;
      }
      return agg;
    case N_LT2:
    case N_P:
      for (int64_t k = 0; k < m; k++) agg = agg + powf(fabsf(a[k] - b[k]), p);
      return (float)pow((double)agg, 1.0 / (double)p);
  }
  return agg;
}

/* The gradient term of coordinate difference `diff` (grad g, distance dist). */
static inline float pair_grad(norm n, float p, float diff, float g, float dist) {
  switch (n) {
    case N_ZERO:
      return 0.0f;
    case N_ONE:
      return g * sign_of(diff);
    case N_TWO:
      return dist == 0.0f ? 0.0f : g * diff / dist;
    case N_INF: {
      const float c = ceilf(fabsf(fabsf(diff) - dist));
      return g * sign_of(diff) * (1.0f - (c < 1.0f ? c : 1.0f));
    }
    case N_LT2:
      if (dist == 0.0f || (diff == 0.0f && p < 1.0f)) return 0.0f;
      return sign_of(diff) * powf(fabsf(diff), p - 1.0f) * g / powf(dist, p - 1.0f);
    case N_P:
      return dist == 0.0f ? 0.0f : diff * powf(fabsf(diff), p - 2.0f) * g / powf(dist, p - 1.0f);
  }
  return 0.0f;
}

typedef struct cdist_task {
  int64_t B, R1, R2, M;
  float p;
  int32_t dtype, backward;
  const void *x1, *x2, *grad, *dist;
  void *out;
  /* float32 views while the task runs */
  const float *fx1, *fx2, *fgrad, *fdist;
  float *fout;
} cdist_task;

/* Rows [r0, r1) of x1 over all batches (row r = b * R1 + i). */
static void cdist_rows(void *ctx, int64_t r0, int64_t r1) {
  const cdist_task *t = ctx;
  const norm n = norm_of(t->p);
  const int64_t M = t->M, R2 = t->R2;
  for (int64_t r = r0; r < r1; r++) {
    const float *a = t->fx1 + r * M, *x2 = t->fx2 + (r / t->R1) * R2 * M;
    if (!t->backward) {
      float *d = t->fout + r * R2;
      for (int64_t j = 0; j < R2; j++) d[j] = pair_dist(n, t->p, a, x2 + j * M, M);
      continue;
    }
    float *g1 = t->fout + r * M;
    const float *g = t->fgrad + r * R2, *dist = t->fdist + r * R2;
    for (int64_t k = 0; k < M; k++) g1[k] = 0.0f;
    if (n == N_ZERO) continue;
    for (int64_t j = 0; j < R2; j++) {
      const float *b = x2 + j * M;
      for (int64_t k = 0; k < M; k++) g1[k] = g1[k] + pair_grad(n, t->p, a[k] - b[k], g[j], dist[j]);
    }
  }
}

static vnc_status cdist_run(void *arg) {
  cdist_task *t = arg;
  const int32_t dt = t->dtype;
  const int64_t n1 = t->B * t->R1 * t->M, n2 = t->B * t->R2 * t->M, nd = t->B * t->R1 * t->R2;
  const int64_t nout = t->backward ? n1 : nd;
  const void *srcs[4] = {t->x1, t->x2, t->grad, t->dist};
  const int64_t counts[4] = {n1, n2, nd, nd};
  const float *views[4] = {NULL, NULL, NULL, NULL};
  float *owned[5] = {NULL, NULL, NULL, NULL, NULL};
  vnc_status st = VNC_OK;
  for (int i = 0; i < 4; i++) {
    if (!srcs[i]) continue;
    if (dt == VNC_FLOAT32) {
      views[i] = srcs[i];
      continue;
    }
    owned[i] = malloc(sizeof(float) * (size_t)(counts[i] > 0 ? counts[i] : 1));
    if (!owned[i]) goto oom;
    vnc_to_f32(owned[i], srcs[i], dt, 1, counts[i]);
    views[i] = owned[i];
  }
  if (dt == VNC_FLOAT32) {
    t->fout = t->out;
  } else {
    t->fout = owned[4] = malloc(sizeof(float) * (size_t)(nout > 0 ? nout : 1));
    if (!owned[4]) goto oom;
  }
  t->fx1 = views[0], t->fx2 = views[1], t->fgrad = views[2], t->fdist = views[3];
  vnc_parallel_for(t->B * t->R1, 1 + 16384 / (1 + t->R2 * t->M), cdist_rows, t);
  if (dt != VNC_FLOAT32) vnc_from_f32(t->out, dt, 1, t->fout, nout);
  goto done;
oom:
  st = vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "no host memory for a float32 copy");
done:
  for (int i = 0; i < 5; i++) free(owned[i]);
  return st;
}

static vnc_status cdist_launch(vnc_stream *s, const char *op, cdist_task *t) {
  if (t->B < 0 || t->R1 < 0 || t->R2 < 0 || t->M < 0)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: negative size", op);
  if (!(t->p >= 0.0f)) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: p must be non-negative, got %g", op, t->p);
  VNC_CHECK_COMPUTED(op, t->dtype);
  if (!vnc_dtype_is_floating(t->dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "\"%s\" not implemented for '%s'", op, vnc_dtype_name(t->dtype));
  if (t->B * t->R1 * (t->backward ? t->M : t->R2) == 0) return VNC_OK;
  return vnc_launch(s, op, cdist_run, t, sizeof *t, NULL);
}

vnc_status vnc_cdist(vnc_stream *s, const char *op, int64_t B, int64_t R1, int64_t R2, int64_t M, double p,
                     int32_t dtype, const void *x1, const void *x2, void *dist) {
  cdist_task t = {.B = B, .R1 = R1, .R2 = R2, .M = M, .p = (float)p, .dtype = dtype, .x1 = x1, .x2 = x2, .out = dist};
  return cdist_launch(s, op, &t);
}

vnc_status vnc_cdist_backward(vnc_stream *s, const char *op, int64_t B, int64_t R1, int64_t R2, int64_t M, double p,
                              int32_t dtype, const void *grad, const void *x1, const void *x2, const void *dist,
                              void *grad_x1) {
  cdist_task t = {.B = B, .R1 = R1, .R2 = R2, .M = M, .p = (float)p, .dtype = dtype, .backward = 1,
                  .x1 = x1, .x2 = x2, .grad = grad, .dist = dist, .out = grad_x1};
  return cdist_launch(s, op, &t);
}
