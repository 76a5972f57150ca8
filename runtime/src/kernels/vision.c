/* Average pooling, group norm, nearest/bilinear upsampling and 2-D padding (vnc/vision.h).
 *
 * Every kernel works on (n, c) planes in parallel (group norm: on (n, group) units). A plane
 * is read into a float32 buffer row by row at the image's strides, computed, and written back
 * at the output's strides; backward kernels scatter-add into a zeroed plane buffer in the
 * order of the output elements. Nearest upsampling and padding are gathers by two index maps
 * (one per output row, one per output column) and copy elements of any dtype bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "vnc/threadpool.h"
#include "vnc/vision.h"

static void *at_elem(const vnc_image *im, int64_t es, int64_t n, int64_t c, int64_t h, int64_t w) {
  return (char *)im->data + (n * im->strides[0] + c * im->strides[1] + h * im->strides[2] + w * im->strides[3]) * es;
}

static void load_plane(const vnc_image *im, int32_t dt, int64_t pl, float *buf) {
  const int64_t es = (int64_t)vnc_dtype_size(dt), n = pl / im->C, c = pl % im->C;
  for (int64_t h = 0; h < im->H; h++) vnc_to_f32(buf + h * im->W, at_elem(im, es, n, c, h, 0), dt, im->strides[3], im->W);
}

static void store_plane(const vnc_image *im, int32_t dt, int64_t pl, const float *buf) {
  const int64_t es = (int64_t)vnc_dtype_size(dt), n = pl / im->C, c = pl % im->C;
  for (int64_t h = 0; h < im->H; h++) vnc_from_f32(at_elem(im, es, n, c, h, 0), dt, im->strides[3], buf + h * im->W, im->W);
}

static float *plane_buffer(int64_t n) { return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1)); }

static vnc_status need_floating(const char *op, int32_t dtype) {
  if (!vnc_dtype_is_floating(dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "\"%s\" not implemented for '%s'", op, vnc_dtype_name(dtype));
  return VNC_OK;
}

/* ---------------------------------------------------------------- average pooling */

typedef struct avg_task {
  vnc_avg_pool2d_params p;
  int32_t dtype;
  vnc_image in, out; /* forward: x, out; backward: grad_in, grad_out */
} avg_task;

/* The window of output (oy, ox) clipped to the input, and its divisor (AvgPoolKernel.cpp). */
typedef struct window {
  int64_t h0, h1, w0, w1, div;
} window;

static window window_of(const avg_task *t, int64_t oy, int64_t ox) {
  const vnc_avg_pool2d_params *p = &t->p;
  const int64_t H = t->in.H, W = t->in.W;
  window w;
  w.h0 = oy * p->sh - p->ph;
  w.w0 = ox * p->sw - p->pw;
  w.h1 = w.h0 + p->KH < H + p->ph ? w.h0 + p->KH : H + p->ph;
  w.w1 = w.w0 + p->KW < W + p->pw ? w.w0 + p->KW : W + p->pw;
  const int64_t pool_size = (w.h1 - w.h0) * (w.w1 - w.w0);
  if (w.h0 < 0) w.h0 = 0;
  if (w.w0 < 0) w.w0 = 0;
  if (w.h1 > H) w.h1 = H;
  if (w.w1 > W) w.w1 = W;
  w.div = p->divisor ? p->divisor : p->count_include_pad ? pool_size : (w.h1 - w.h0) * (w.w1 - w.w0);
  return w;
}

static void avg_fwd_planes(void *ctx, int64_t a, int64_t b) {
  const avg_task *t = ctx;
  const int64_t W = t->in.W, OH = t->out.H, OW = t->out.W;
  float *x = plane_buffer(t->in.H * W), *y = plane_buffer(OH * OW);
  for (int64_t pl = a; pl < b; pl++) {
    load_plane(&t->in, t->dtype, pl, x);
    for (int64_t oy = 0; oy < OH; oy++)
      for (int64_t ox = 0; ox < OW; ox++) {
        window w = window_of(t, oy, ox);
        if (w.h0 >= w.h1 || w.w0 >= w.w1) {
          y[oy * OW + ox] = 0.0f;
          continue;
        }
        float sum = 0.0f;
        for (int64_t ih = w.h0; ih < w.h1; ih++)
          for (int64_t iw = w.w0; iw < w.w1; iw++) sum += x[ih * W + iw];
        y[oy * OW + ox] = sum / (float)w.div;
      }
    store_plane(&t->out, t->dtype, pl, y);
  }
  free(x);
  free(y);
}

static void avg_fwd_planes_i64(void *ctx, int64_t a, int64_t b) {
  const avg_task *t = ctx;
  for (int64_t pl = a; pl < b; pl++) {
    const int64_t n = pl / t->in.C, c = pl % t->in.C;
    for (int64_t oy = 0; oy < t->out.H; oy++)
      for (int64_t ox = 0; ox < t->out.W; ox++) {
        window w = window_of(t, oy, ox);
        int64_t sum = 0;
        for (int64_t ih = w.h0; ih < w.h1; ih++)
          for (int64_t iw = w.w0; iw < w.w1; iw++) sum += *(const int64_t *)at_elem(&t->in, 8, n, c, ih, iw);
        *(int64_t *)at_elem(&t->out, 8, n, c, oy, ox) = (w.h0 >= w.h1 || w.w0 >= w.w1) ? 0 : sum / w.div;
      }
  }
}

static void avg_bwd_planes(void *ctx, int64_t a, int64_t b) {
  const avg_task *t = ctx;
  const int64_t W = t->in.W, OH = t->out.H, OW = t->out.W;
  float *gi = plane_buffer(t->in.H * W), *go = plane_buffer(OH * OW);
  for (int64_t pl = a; pl < b; pl++) {
    memset(gi, 0, sizeof(float) * (size_t)(t->in.H * W));
    load_plane(&t->out, t->dtype, pl, go);
    for (int64_t oy = 0; oy < OH; oy++)
      for (int64_t ox = 0; ox < OW; ox++) {
        window w = window_of(t, oy, ox);
        if (w.h0 >= w.h1 || w.w0 >= w.w1) continue;
        const float g = go[oy * OW + ox] / (float)w.div;
        for (int64_t ih = w.h0; ih < w.h1; ih++)
          for (int64_t iw = w.w0; iw < w.w1; iw++) gi[ih * W + iw] += g;
      }
    store_plane(&t->in, t->dtype, pl, gi);
  }
  free(gi);
  free(go);
}

static vnc_status check_avg(const char *op, const vnc_avg_pool2d_params *p) {
  if (p->KH < 1 || p->KW < 1 || p->sh < 1 || p->sw < 1 || p->ph < 0 || p->pw < 0)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: invalid kernel size, stride, padding or divisor", op);
  return VNC_OK;
}

vnc_status vnc_avg_pool2d(vnc_stream *s, const char *op, const vnc_avg_pool2d_params *p, int32_t dtype,
                          const vnc_image *x, const vnc_image *out) {
  vnc_status st = check_avg(op, p);
  if (st == VNC_OK && dtype != VNC_INT64) st = need_floating(op, dtype);
  if (st != VNC_OK || out->N * out->C * out->H * out->W == 0) return st;
  avg_task t = {.p = *p, .dtype = dtype, .in = *x, .out = *out};
  return vnc_launch_parallel(s, op, dtype == VNC_INT64 ? avg_fwd_planes_i64 : avg_fwd_planes, x->N * x->C, 1, &t,
                             sizeof t, NULL);
}

vnc_status vnc_avg_pool2d_backward(vnc_stream *s, const char *op, const vnc_avg_pool2d_params *p, int32_t dtype,
                                   const vnc_image *grad_out, const vnc_image *grad_in) {
  vnc_status st = check_avg(op, p);
  if (st == VNC_OK) st = need_floating(op, dtype);
  if (st != VNC_OK || grad_in->N * grad_in->C * grad_in->H * grad_in->W == 0) return st;
  avg_task t = {.p = *p, .dtype = dtype, .in = *grad_in, .out = *grad_out};
  return vnc_launch_parallel(s, op, avg_bwd_planes, grad_in->N * grad_in->C, 1, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- gathers by index maps */

/* out[n, c, y, x] = in[n, c, map[y], map[OH + x]] (forward), or the scatter-add transpose. */
typedef struct gather_task {
  int32_t dtype;
  vnc_image in, out;
  int64_t *map; /* OH + OW source indices, owned by the task */
} gather_task;

static void gather_release(void *arg) { free(((gather_task *)arg)->map); }

static void gather_planes(void *ctx, int64_t a, int64_t b) {
  const gather_task *t = ctx;
  const int64_t es = (int64_t)vnc_dtype_size(t->dtype), OH = t->out.H, OW = t->out.W;
  const int64_t *mh = t->map, *mw = t->map + OH;
  for (int64_t pl = a; pl < b; pl++) {
    const int64_t n = pl / t->out.C, c = pl % t->out.C;
    for (int64_t y = 0; y < OH; y++) {
      const char *src = at_elem(&t->in, es, n, c, mh[y], 0);
      char *dst = at_elem(&t->out, es, n, c, y, 0);
      const int64_t ss = t->in.strides[3] * es, ds = t->out.strides[3] * es;
      switch (es) {
#define COPY_ROW(T)                                                                             \
  for (int64_t x = 0; x < OW; x++) memcpy(dst + x * ds, src + mw[x] * ss, sizeof(T));          \
  break;
        case 1: COPY_ROW(uint8_t)
        case 2: COPY_ROW(uint16_t)
        case 4: COPY_ROW(uint32_t)
        case 8: COPY_ROW(uint64_t)
        default:
          for (int64_t x = 0; x < OW; x++) memcpy(dst + x * ds, src + mw[x] * ss, (size_t)es);
#undef COPY_ROW
      }
    }
  }
}

static void scatter_planes(void *ctx, int64_t a, int64_t b) {
  const gather_task *t = ctx;
  const int64_t OH = t->out.H, OW = t->out.W, W = t->in.W;
  const int64_t *mh = t->map, *mw = t->map + OH;
  float *gi = plane_buffer(t->in.H * W), *go = plane_buffer(OH * OW);
  for (int64_t pl = a; pl < b; pl++) {
    memset(gi, 0, sizeof(float) * (size_t)(t->in.H * W));
    load_plane(&t->out, t->dtype, pl, go);
    for (int64_t y = 0; y < OH; y++)
      for (int64_t x = 0; x < OW; x++) gi[mh[y] * W + mw[x]] += go[y * OW + x];
    store_plane(&t->in, t->dtype, pl, gi);
  }
  free(gi);
  free(go);
}

/* Launches the gather (backward = 0) or the scatter-add (backward = 1) with `map` (owned). */
static vnc_status launch_gather(vnc_stream *s, const char *op, int backward, int32_t dtype, const vnc_image *in,
                                const vnc_image *out, int64_t *map) {
  gather_task t = {.dtype = dtype, .in = *in, .out = *out, .map = map};
  return backward ? vnc_launch_parallel(s, op, scatter_planes, in->N * in->C, 1, &t, sizeof t, gather_release)
                  : vnc_launch_parallel(s, op, gather_planes, out->N * out->C, 1, &t, sizeof t, gather_release);
}

static int64_t *new_map(const char *op, int64_t n, vnc_status *st) {
  int64_t *m = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  *st = m ? VNC_OK : vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "%s: out of host memory for %lld indices", op, (long long)n);
  return m;
}

/* ATen's nearest_idx (UpSample.h). */
static int64_t nearest_idx(int64_t dst, int64_t in, int64_t out, float scale) {
  if (out == in) return dst;
  if (out == 2 * in) return dst >> 1;
  int64_t src = (int64_t)floorf((float)dst * scale);
  return src < in - 1 ? src : in - 1;
}

/* Reflection and replication source index of padded position j (PaddingKernel.cpp). */
static int64_t pad_idx(vnc_pad_mode mode, int64_t j, int64_t in, int64_t pad_before) {
  const int64_t i_start = pad_before < 0 ? -pad_before : 0, o_start = pad_before > 0 ? pad_before : 0;
  int64_t ip;
  if (mode == VNC_PAD_REFLECT) {
    if (j < pad_before) ip = pad_before * 2 - j;
    else if (j < in + pad_before) ip = j;
    else ip = (in + pad_before - 1) * 2 - j;
  } else {
    if (j < pad_before) ip = pad_before;
    else if (j < in + pad_before) ip = j;
    else ip = in + pad_before - 1;
  }
  return ip - o_start + i_start;
}

/* ---------------------------------------------------------------- bilinear */

typedef struct bilinear_task {
  int32_t dtype;
  vnc_image in, out;
  int64_t *idx;  /* h0[OH] h1[OH] w0[OW] w1[OW] */
  float *lam;    /* lh0[OH] lh1[OH] lw0[OW] lw1[OW] */
} bilinear_task;

static void bilinear_release(void *arg) {
  bilinear_task *t = arg;
  free(t->idx);
  free(t->lam);
}

/* ATen's compute_source_index_and_lambda in float32. */
static void source_and_lambda(int64_t dst, int64_t in, int64_t out, float scale, int align_corners, int64_t *i0,
                              int64_t *i1, float *l0, float *l1) {
  if (out == in) {
    *i0 = *i1 = dst;
    *l0 = 1.0f;
    *l1 = 0.0f;
    return;
  }
  float real;
  if (align_corners) {
    real = scale * (float)dst;
  } else {
    real = scale * ((float)dst + 0.5f) - 0.5f;
    if (real < 0.0f) real = 0.0f;
  }
  int64_t i = (int64_t)floorf(real);
  if (i > in - 1) i = in - 1;
  float l = real - (float)i;
  l = l < 0.0f ? 0.0f : l > 1.0f ? 1.0f : l;
  *i0 = i;
  *i1 = i + (i < in - 1 ? 1 : 0);
  *l1 = l;
  *l0 = 1.0f - l;
}

static void bilinear_fwd_planes(void *ctx, int64_t a, int64_t b) {
  const bilinear_task *t = ctx;
  const int64_t OH = t->out.H, OW = t->out.W, W = t->in.W;
  const int64_t *h0 = t->idx, *h1 = h0 + OH, *w0 = h1 + OH, *w1 = w0 + OW;
  const float *lh0 = t->lam, *lh1 = lh0 + OH, *lw0 = lh1 + OH, *lw1 = lw0 + OW;
  float *x = plane_buffer(t->in.H * W), *y = plane_buffer(OH * OW);
  for (int64_t pl = a; pl < b; pl++) {
    load_plane(&t->in, t->dtype, pl, x);
    for (int64_t oy = 0; oy < OH; oy++) {
      const float *r0 = x + h0[oy] * W, *r1 = x + h1[oy] * W;
      for (int64_t ox = 0; ox < OW; ox++) {
        float top = r0[w0[ox]] * lw0[ox] + r0[w1[ox]] * lw1[ox];
        float bot = r1[w0[ox]] * lw0[ox] + r1[w1[ox]] * lw1[ox];
        y[oy * OW + ox] = top * lh0[oy] + bot * lh1[oy];
      }
    }
    store_plane(&t->out, t->dtype, pl, y);
  }
  free(x);
  free(y);
}

static void bilinear_bwd_planes(void *ctx, int64_t a, int64_t b) {
  const bilinear_task *t = ctx;
  const int64_t OH = t->out.H, OW = t->out.W, W = t->in.W;
  const int64_t *h0 = t->idx, *h1 = h0 + OH, *w0 = h1 + OH, *w1 = w0 + OW;
  const float *lh0 = t->lam, *lh1 = lh0 + OH, *lw0 = lh1 + OH, *lw1 = lw0 + OW;
  float *gi = plane_buffer(t->in.H * W), *go = plane_buffer(OH * OW);
  for (int64_t pl = a; pl < b; pl++) {
    memset(gi, 0, sizeof(float) * (size_t)(t->in.H * W));
    load_plane(&t->out, t->dtype, pl, go);
    for (int64_t oy = 0; oy < OH; oy++)
      for (int64_t ox = 0; ox < OW; ox++) {
        const float g = go[oy * OW + ox];
        gi[h0[oy] * W + w0[ox]] += lh0[oy] * lw0[ox] * g;
        gi[h0[oy] * W + w1[ox]] += lh0[oy] * lw1[ox] * g;
        gi[h1[oy] * W + w0[ox]] += lh1[oy] * lw0[ox] * g;
        gi[h1[oy] * W + w1[ox]] += lh1[oy] * lw1[ox] * g;
      }
    store_plane(&t->in, t->dtype, pl, gi);
  }
  free(gi);
  free(go);
}

/* ---------------------------------------------------------------- upsampling */

static vnc_status upsample(vnc_stream *s, const char *op, int backward, vnc_upsample_mode mode, int align_corners,
                           float scale_h, float scale_w, int32_t dtype, const vnc_image *in, const vnc_image *out) {
  if (in->N != out->N || in->C != out->C)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: input and output differ in batch or channels", op);
  if ((backward || mode == VNC_UPSAMPLE_BILINEAR) && need_floating(op, dtype) != VNC_OK) return VNC_ERR_UNSUPPORTED;
  if (vnc_dtype_size(dtype) == 0) return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: unknown dtype %d", op, (int)dtype);
  const int64_t planes = in->N * in->C, OH = out->H, OW = out->W;
  if (planes == 0 || (!backward && OH * OW == 0) || (backward && in->H * in->W == 0)) return VNC_OK;
  if (in->H * in->W == 0)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: cannot upsample an empty input to a non-empty output", op);
  vnc_status st;
  if (mode == VNC_UPSAMPLE_NEAREST) {
    int64_t *map = new_map(op, OH + OW, &st);
    if (!map) return st;
    for (int64_t y = 0; y < OH; y++) map[y] = nearest_idx(y, in->H, OH, scale_h);
    for (int64_t x = 0; x < OW; x++) map[OH + x] = nearest_idx(x, in->W, OW, scale_w);
    return launch_gather(s, op, backward, dtype, in, out, map);
  }
  bilinear_task t = {.dtype = dtype, .in = *in, .out = *out};
  t.idx = new_map(op, 2 * (OH + OW), &st);
  t.lam = malloc(sizeof(float) * (size_t)(2 * (OH + OW) > 0 ? 2 * (OH + OW) : 1));
  if (!t.idx || !t.lam) {
    free(t.idx);
    free(t.lam);
    return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "%s: out of host memory for the interpolation tables", op);
  }
  for (int64_t y = 0; y < OH; y++)
    source_and_lambda(y, in->H, OH, scale_h, align_corners, &t.idx[y], &t.idx[OH + y], &t.lam[y], &t.lam[OH + y]);
  for (int64_t x = 0; x < OW; x++)
    source_and_lambda(x, in->W, OW, scale_w, align_corners, &t.idx[2 * OH + x], &t.idx[2 * OH + OW + x],
                      &t.lam[2 * OH + x], &t.lam[2 * OH + OW + x]);
  return backward ? vnc_launch_parallel(s, op, bilinear_bwd_planes, t.in.N * t.in.C, 1, &t, sizeof t, bilinear_release)
                  : vnc_launch_parallel(s, op, bilinear_fwd_planes, t.out.N * t.out.C, 1, &t, sizeof t,
                                        bilinear_release);
}

vnc_status vnc_upsample2d(vnc_stream *s, const char *op, vnc_upsample_mode mode, int align_corners, float scale_h,
                          float scale_w, int32_t dtype, const vnc_image *x, const vnc_image *out) {
  return upsample(s, op, 0, mode, align_corners, scale_h, scale_w, dtype, x, out);
}

vnc_status vnc_upsample2d_backward(vnc_stream *s, const char *op, vnc_upsample_mode mode, int align_corners,
                                   float scale_h, float scale_w, int32_t dtype, const vnc_image *grad_out,
                                   const vnc_image *grad_in) {
  return upsample(s, op, 1, mode, align_corners, scale_h, scale_w, dtype, grad_in, grad_out);
}

/* ---------------------------------------------------------------- padding */

static vnc_status pad2d(vnc_stream *s, const char *op, int backward, vnc_pad_mode mode, const int64_t pad[4],
                        int32_t dtype, const vnc_image *in, const vnc_image *out) {
  if (in->N != out->N || in->C != out->C || out->W != in->W + pad[0] + pad[1] || out->H != in->H + pad[2] + pad[3])
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: output size does not match the input and padding", op);
  if (mode == VNC_PAD_REFLECT && (pad[0] >= in->W || pad[1] >= in->W || pad[2] >= in->H || pad[3] >= in->H))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: padding size should be less than the corresponding input dimension", op);
  if (backward && need_floating(op, dtype) != VNC_OK) return VNC_ERR_UNSUPPORTED;
  if (vnc_dtype_size(dtype) == 0) return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: unknown dtype %d", op, (int)dtype);
  const int64_t planes = in->N * in->C, OH = out->H, OW = out->W;
  if (planes == 0 || (!backward && OH * OW == 0) || (backward && in->H * in->W == 0)) return VNC_OK;
  if (in->H * in->W == 0) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: cannot pad an empty input", op);
  vnc_status st;
  int64_t *map = new_map(op, OH + OW, &st);
  if (!map) return st;
  for (int64_t y = 0; y < OH; y++) map[y] = pad_idx(mode, y, in->H, pad[2]);
  for (int64_t x = 0; x < OW; x++) map[OH + x] = pad_idx(mode, x, in->W, pad[0]);
  return launch_gather(s, op, backward, dtype, in, out, map);
}

vnc_status vnc_pad2d(vnc_stream *s, const char *op, vnc_pad_mode mode, const int64_t pad[4], int32_t dtype,
                     const vnc_image *x, const vnc_image *out) {
  return pad2d(s, op, 0, mode, pad, dtype, x, out);
}

vnc_status vnc_pad2d_backward(vnc_stream *s, const char *op, vnc_pad_mode mode, const int64_t pad[4], int32_t dtype,
                              const vnc_image *grad_out, const vnc_image *grad_in) {
  return pad2d(s, op, 1, mode, pad, dtype, grad_in, grad_out);
}

/* ---------------------------------------------------------------- group norm */

typedef struct gn_task {
  int64_t G;
  int32_t dtype, pdt, sdt;
  double eps;
  vnc_image x, y, dy, dx;
  const void *w, *b, *mean_in, *rstd_in;
  void *mean, *rstd, *dw, *db;
  float *ds, *dbs; /* backward: per (n, c) sums, N x C, owned */
} gn_task;

static void gn_release(void *arg) {
  gn_task *t = arg;
  free(t->ds);
}

static float elem_at(const void *p, int32_t dt, int64_t i, float dflt) {
  return p ? (float)vnc_load_f64[dt]((const char *)p + i * (int64_t)vnc_dtype_size(dt)) : dflt;
}

/* Channels [c0, c0 + D) of sample n of image `im`, each spatial run of S values in order. */
static void load_group(const vnc_image *im, int32_t dt, int64_t n, int64_t c0, int64_t D, float *buf) {
  const int64_t es = (int64_t)vnc_dtype_size(dt), S = im->H;
  for (int64_t c = 0; c < D; c++) vnc_to_f32(buf + c * S, at_elem(im, es, n, c0 + c, 0, 0), dt, im->strides[2], S);
}

static void store_group(const vnc_image *im, int32_t dt, int64_t n, int64_t c0, int64_t D, const float *buf) {
  const int64_t es = (int64_t)vnc_dtype_size(dt), S = im->H;
  for (int64_t c = 0; c < D; c++) vnc_from_f32(at_elem(im, es, n, c0 + c, 0, 0), dt, im->strides[2], buf + c * S, S);
}

static void gn_fwd_units(void *ctx, int64_t a, int64_t b) {
  const gn_task *t = ctx;
  const int64_t C = t->x.C, S = t->x.H, D = C / t->G, M = D * S;
  float *x = plane_buffer(M), *q = plane_buffer(M);
  for (int64_t u = a; u < b; u++) {
    const int64_t n = u / t->G, g = u % t->G;
    load_group(&t->x, t->dtype, n, g * D, D, x);
    const float mean = vnc_canonical_sum(x, M) / (float)M;
    for (int64_t i = 0; i < M; i++) q[i] = (x[i] - mean) * (x[i] - mean);
    const float var = vnc_canonical_sum(q, M) / (float)M;
    const float rstd = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + (float)t->eps);
    for (int64_t c = 0; c < D; c++) {
      const float w = elem_at(t->w, t->pdt, g * D + c, 1.0f), bb = elem_at(t->b, t->pdt, g * D + c, 0.0f);
      float *r = x + c * S;
      for (int64_t i = 0; i < S; i++) r[i] = (r[i] - mean) * rstd * w + bb;
    }
    store_group(&t->y, t->dtype, n, g * D, D, x);
    vnc_store_f64[t->sdt]((char *)t->mean + u * (int64_t)vnc_dtype_size(t->sdt), mean);
    vnc_store_f64[t->sdt]((char *)t->rstd + u * (int64_t)vnc_dtype_size(t->sdt), rstd);
  }
  free(x);
  free(q);
}

/* Per (n, group): ds[n, c] = sum_s dy * x, db[n, c] = sum_s dy, then dx (ATen's c1, c2, c3). */
static void gn_bwd_units(void *ctx, int64_t a, int64_t b) {
  const gn_task *t = ctx;
  const int64_t C = t->x.C, S = t->x.H, D = C / t->G, M = D * S;
  float *x = plane_buffer(M), *g = plane_buffer(M), *q = plane_buffer(M > 2 * D ? M : 2 * D);
  for (int64_t u = a; u < b; u++) {
    const int64_t n = u / t->G, grp = u % t->G;
    load_group(&t->x, t->dtype, n, grp * D, D, x);
    load_group(&t->dy, t->dtype, n, grp * D, D, g);
    for (int64_t c = 0; c < D; c++) {
      for (int64_t i = 0; i < S; i++) q[i] = g[c * S + i] * x[c * S + i];
      t->ds[n * C + grp * D + c] = vnc_canonical_sum(q, S);
      t->dbs[n * C + grp * D + c] = vnc_canonical_sum(g + c * S, S);
    }
    if (!t->dx.data) continue;
    const float mean = elem_at(t->mean_in, t->sdt, u, 0.0f), rstd = elem_at(t->rstd_in, t->sdt, u, 1.0f);
    for (int64_t c = 0; c < D; c++) {
      const float w = elem_at(t->w, t->pdt, grp * D + c, 1.0f);
      q[c] = t->ds[n * C + grp * D + c] * w;
      q[D + c] = t->dbs[n * C + grp * D + c] * w;
    }
    const float ds_g = vnc_canonical_sum(q, D), db_g = vnc_canonical_sum(q + D, D);
    const float s = 1.0f / (float)M;
    const float c2 = (db_g * mean - ds_g) * rstd * rstd * rstd * s;
    const float c3 = -c2 * mean - db_g * rstd * s;
    for (int64_t c = 0; c < D; c++) {
      const float c1 = rstd * elem_at(t->w, t->pdt, grp * D + c, 1.0f);
      float *r = q + c * S;
      for (int64_t i = 0; i < S; i++) r[i] = c1 * g[c * S + i] + c2 * x[c * S + i] + c3;
    }
    store_group(&t->dx, t->dtype, n, grp * D, D, q);
  }
  free(x);
  free(g);
  free(q);
}

/* dweight[c] = sum_n (ds - db * mean) * rstd, dbias[c] = sum_n db, each a canonical sum over n. */
static void gn_bwd_params(void *ctx, int64_t a, int64_t b) {
  const gn_task *t = ctx;
  const int64_t N = t->x.N, C = t->x.C, D = C / t->G;
  float *v = plane_buffer(N), *u = plane_buffer(N);
  for (int64_t c = a; c < b; c++) {
    const int64_t grp = c / D;
    for (int64_t n = 0; n < N; n++) {
      const float mean = elem_at(t->mean_in, t->sdt, n * t->G + grp, 0.0f);
      const float rstd = elem_at(t->rstd_in, t->sdt, n * t->G + grp, 1.0f);
      v[n] = (t->ds[n * C + c] - t->dbs[n * C + c] * mean) * rstd;
      u[n] = t->dbs[n * C + c];
    }
    if (t->dw) vnc_store_f64[t->pdt]((char *)t->dw + c * (int64_t)vnc_dtype_size(t->pdt), vnc_canonical_sum(v, N));
    if (t->db) vnc_store_f64[t->pdt]((char *)t->db + c * (int64_t)vnc_dtype_size(t->pdt), vnc_canonical_sum(u, N));
  }
  free(v);
  free(u);
}

static vnc_status gn_bwd_run(void *arg) {
  gn_task *t = arg;
  vnc_parallel_for(t->x.N * t->G, 1, gn_bwd_units, t);
  if (t->dw || t->db) vnc_parallel_for(t->x.C, 16, gn_bwd_params, t);
  return VNC_OK;
}

static vnc_status check_gn(const char *op, int64_t G, int32_t dtype, const vnc_image *x) {
  if (G < 1 || x->C % G)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: %lld channels do not split into %lld groups", op,
                         (long long)x->C, (long long)G);
  if (x->W != 1) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: images must be (N, C, S, 1)", op);
  return need_floating(op, dtype);
}

vnc_status vnc_group_norm(vnc_stream *s, const char *op, int64_t G, int32_t dtype, const vnc_image *x,
                          const void *weight, const void *bias, int32_t param_dtype, double eps, const vnc_image *y,
                          void *mean, void *rstd, int32_t stat_dtype) {
  vnc_status st = check_gn(op, G, dtype, x);
  if (st != VNC_OK || x->N * x->C == 0) return st;
  if (x->H == 0) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: empty spatial size", op);
  gn_task t = {.G = G, .dtype = dtype, .pdt = param_dtype, .sdt = stat_dtype, .eps = eps, .x = *x, .y = *y,
               .w = weight, .b = bias, .mean = mean, .rstd = rstd};
  return vnc_launch_parallel(s, op, gn_fwd_units, t.x.N * t.G, 1, &t, sizeof t, NULL);
}

vnc_status vnc_group_norm_backward(vnc_stream *s, const char *op, int64_t G, int32_t dtype, const vnc_image *dy,
                                   const vnc_image *x, const void *mean, const void *rstd, int32_t stat_dtype,
                                   const void *weight, int32_t param_dtype, const vnc_image *dx, void *dweight,
                                   void *dbias) {
  vnc_status st = check_gn(op, G, dtype, x);
  if (st != VNC_OK || x->N * x->C * x->H == 0) return st;
  gn_task t = {.G = G, .dtype = dtype, .pdt = param_dtype, .sdt = stat_dtype, .x = *x, .dy = *dy,
               .mean_in = mean, .rstd_in = rstd, .w = weight, .dw = dweight, .db = dbias};
  if (dx) t.dx = *dx;
  t.ds = malloc(sizeof(float) * (size_t)(2 * x->N * x->C));
  if (!t.ds) return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  t.dbs = t.ds + x->N * x->C;
  return vnc_launch(s, op, gn_bwd_run, &t, sizeof t, gn_release);
}
