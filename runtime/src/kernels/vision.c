/* Average pooling, group norm, resampling (interpolation in every mode, adaptive average
 * pooling of volumes, reflection/replication padding) (vnc/vision.h).
 *
 * Every kernel works on (n, c) planes in parallel (group norm: on (n, group) units). A plane
 * is read into a float32 buffer row by row at the image's strides, computed, and written back
 * at the output's strides; backward kernels scatter-add into a zeroed plane buffer in the
 * order of the output elements. Resampling is separable: per dim a table of taps (index,
 * weight) per output coordinate, applied W, then H, then D; one-tap maps (nearest, padding)
 * copy elements of any dtype bit for bit. */
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

/* ---------------------------------------------------------------- resampling */

/* Per dim, each output coordinate o reads cnt[o] <= T taps: input index idx[o*T + t] with
 * weight w[o*T + t]. Tables depend on sizes and scales only and are built at launch. */
typedef struct taps {
  int64_t in, out, T;
  int identity;       /* out == in, one tap of weight 1 at o: the pass is skipped */
  int64_t *idx;
  float *w;
  int32_t *cnt;
} taps;

typedef struct rs_task {
  int32_t dtype;
  vnc_volume in, out;  /* forward: x, out; backward: grad_in, grad_out */
  taps t[3];           /* D, H, W */
} rs_task;

static void rs_release(void *arg) {
  rs_task *r = arg;
  for (int d = 0; d < 3; d++) {
    free(r->t[d].idx);
    free(r->t[d].w);
    free(r->t[d].cnt);
  }
}

/* ATen's nearest_idx (UpSample.h). */
static int64_t nearest_idx(int64_t dst, int64_t in, int64_t out, float scale) {
  if (out == in) return dst;
  if (out == 2 * in) return dst >> 1;
  int64_t src = (int64_t)floorf((float)dst * scale);
  return src < in - 1 ? src : in - 1;
}

/* ATen's nearest_neighbor_exact_compute_source_index: (dst + 0.5) * scale in double, then
 * floorf of that value as a float. */
static int64_t nearest_exact_idx(int64_t dst, int64_t in, float scale) {
  int64_t src = (int64_t)floorf((float)(((double)dst + 0.5) * (double)scale));
  return src < in - 1 ? src : in - 1;
}

/* Reflection and replication source index of padded position j (PaddingKernel.cpp). */
static int64_t pad_idx(vnc_resample_kind kind, int64_t j, int64_t in, int64_t pad_before) {
  const int64_t i_start = pad_before < 0 ? -pad_before : 0, o_start = pad_before > 0 ? pad_before : 0;
  int64_t ip;
  if (kind == VNC_RS_REFLECT) {
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

/* area_pixel_compute_source_index (UpSample.h): linear clamps negative indices to 0, cubic not. */
static float source_index(float scale, int64_t dst, int align_corners, int cubic) {
  if (align_corners) return scale * (float)dst;
  const float src = scale * ((float)dst + 0.5f) - 0.5f;
  return !cubic && src < 0.0f ? 0.0f : src;
}

/* guard_index_and_lambda (UpSample.h). */
static void guard_index_and_lambda(float real, int64_t in, int64_t *i, float *lambda) {
  *i = (int64_t)floorf(real);
  if (*i > in - 1) *i = in - 1;
  float l = real - (float)*i;
  *lambda = l < 0.0f ? 0.0f : l > 1.0f ? 1.0f : l;
}

/* Keys' cubic convolution with A = -0.75 (get_cubic_upsample_coefficients, UpSample.h). */
static void cubic_coefficients(float t, float c[4]) {
  const float A = -0.75f, x1 = t, x2 = 1.0f - t;
#define CC1(x) (((A + 2.0f) * (x) - (A + 3.0f)) * (x) * (x) + 1.0f)
#define CC2(x) (((A * (x) - 5.0f * A) * (x) + 8.0f * A) * (x) - 4.0f * A)
  c[0] = CC2(x1 + 1.0f);
  c[1] = CC1(x1);
  c[2] = CC1(x2);
  c[3] = CC2(x2 + 1.0f);
#undef CC1
#undef CC2
}

static int64_t clamp_idx(int64_t i, int64_t n) { return i < 0 ? 0 : i > n - 1 ? n - 1 : i; }

/* The taps of one dim; returns 0 when out of host memory. */
static int build_taps(taps *tp, const vnc_resample_dim *dm, int64_t in, int64_t out) {
  memset(tp, 0, sizeof *tp);
  tp->in = in;
  tp->out = out;
  switch (dm->kind) {
    case VNC_RS_LINEAR: tp->T = 2; break;
    case VNC_RS_CUBIC: tp->T = 4; break;
    case VNC_RS_AREA: tp->T = (in + out - 1) / (out > 0 ? out : 1) + 1; break;
    default: tp->T = 1;
  }
  const int64_t n = out * tp->T > 0 ? out * tp->T : 1;
  tp->idx = malloc(sizeof(int64_t) * (size_t)n);
  tp->w = malloc(sizeof(float) * (size_t)n);
  tp->cnt = malloc(sizeof(int32_t) * (size_t)(out > 0 ? out : 1));
  if (!tp->idx || !tp->w || !tp->cnt) return 0;
  const float sc = dm->scale;
  for (int64_t o = 0; o < out; o++) {
    int64_t *ix = tp->idx + o * tp->T;
    float *w = tp->w + o * tp->T;
    tp->cnt[o] = (int32_t)tp->T;
    switch (dm->kind) {
      case VNC_RS_NEAREST: ix[0] = nearest_idx(o, in, out, sc), w[0] = 1.0f; break;
      case VNC_RS_NEAREST_EXACT: ix[0] = nearest_exact_idx(o, in, sc), w[0] = 1.0f; break;
      case VNC_RS_REFLECT:
      case VNC_RS_REPLICATE: ix[0] = pad_idx((vnc_resample_kind)dm->kind, o, in, dm->pad_before), w[0] = 1.0f; break;
      case VNC_RS_LINEAR: /* compute_source_index_and_lambda */
        if (out == in) {
          ix[0] = ix[1] = o, w[0] = 1.0f, w[1] = 0.0f;
        } else {
          float l;
          guard_index_and_lambda(source_index(sc, o, dm->align_corners, 0), in, &ix[0], &l);
          ix[1] = ix[0] + (ix[0] < in - 1 ? 1 : 0);
          w[0] = 1.0f - l, w[1] = l;
        }
        break;
      case VNC_RS_CUBIC: {
        int64_t i;
        float l;
        guard_index_and_lambda(source_index(sc, o, dm->align_corners, 1), in, &i, &l);
        cubic_coefficients(l, w);
        for (int t = 0; t < 4; t++) ix[t] = clamp_idx(i - 1 + t, in);
        break;
      }
      case VNC_RS_AREA: { /* adaptive average pooling windows */
        const int64_t a = (o * in) / out, b = ((o + 1) * in + out - 1) / out;
        tp->cnt[o] = (int32_t)(b - a);
        for (int64_t t = 0; t < b - a; t++) ix[t] = a + t, w[t] = 1.0f / (float)(b - a);
        break;
      }
    }
  }
  tp->identity = in == out;
  for (int64_t o = 0; o < out && tp->identity; o++)
    tp->identity = tp->cnt[o] == 1 ? tp->idx[o * tp->T] == o && tp->w[o * tp->T] == 1.0f
                                   : tp->cnt[o] == 2 && tp->idx[o * tp->T] == o && tp->w[o * tp->T] == 1.0f &&
                                         tp->w[o * tp->T + 1] == 0.0f;
  return 1;
}

static void *vol_elem(const vnc_volume *v, int64_t es, int64_t n, int64_t c, int64_t d, int64_t h, int64_t w) {
  return (char *)v->data +
         (n * v->strides[0] + c * v->strides[1] + d * v->strides[2] + h * v->strides[3] + w * v->strides[4]) * es;
}

static void load_vplane(const vnc_volume *v, int32_t dt, int64_t pl, float *buf) {
  const int64_t es = (int64_t)vnc_dtype_size(dt), n = pl / v->C, c = pl % v->C;
  for (int64_t d = 0; d < v->D; d++)
    for (int64_t h = 0; h < v->H; h++)
      vnc_to_f32(buf + (d * v->H + h) * v->W, vol_elem(v, es, n, c, d, h, 0), dt, v->strides[4], v->W);
}

static void store_vplane(const vnc_volume *v, int32_t dt, int64_t pl, const float *buf) {
  const int64_t es = (int64_t)vnc_dtype_size(dt), n = pl / v->C, c = pl % v->C;
  for (int64_t d = 0; d < v->D; d++)
    for (int64_t h = 0; h < v->H; h++)
      vnc_from_f32(vol_elem(v, es, n, c, d, h, 0), dt, v->strides[4], buf + (d * v->H + h) * v->W, v->W);
}

/* One separable pass along the dim of stride `inner` within blocks: src [outer][in][inner] ->
 * dst [outer][out][inner]; each output sums its taps in order (the first product starts it). */
static void pass_fwd(const taps *tp, const float *src, float *dst, int64_t outer, int64_t inner) {
  for (int64_t a = 0; a < outer; a++) {
    const float *s = src + a * tp->in * inner;
    float *d = dst + a * tp->out * inner;
    for (int64_t o = 0; o < tp->out; o++) {
      const int64_t *ix = tp->idx + o * tp->T;
      const float *w = tp->w + o * tp->T;
      float *r = d + o * inner;
      for (int64_t k = 0; k < inner; k++) r[k] = s[ix[0] * inner + k] * w[0];
      for (int32_t t = 1; t < tp->cnt[o]; t++)
        for (int64_t k = 0; k < inner; k++) r[k] += s[ix[t] * inner + k] * w[t];
    }
  }
}

/* The transpose of pass_fwd: dst [outer][in][inner] (zeroed here) += taps of src [outer][out][inner]. */
static void pass_bwd(const taps *tp, const float *src, float *dst, int64_t outer, int64_t inner) {
  memset(dst, 0, sizeof(float) * (size_t)(outer * tp->in * inner));
  for (int64_t a = 0; a < outer; a++) {
    const float *s = src + a * tp->out * inner;
    float *d = dst + a * tp->in * inner;
    for (int64_t o = 0; o < tp->out; o++)
      for (int32_t t = 0; t < tp->cnt[o]; t++) {
        const float w = tp->w[o * tp->T + t];
        float *r = d + tp->idx[o * tp->T + t] * inner;
        for (int64_t k = 0; k < inner; k++) r[k] += s[o * inner + k] * w;
      }
  }
}

/* Forward by planes: W, then H, then D (ATen's nesting: the innermost dim's taps sum first). */
static void rs_fwd_planes(void *ctx, int64_t a, int64_t b) {
  const rs_task *r = ctx;
  const taps *tD = &r->t[0], *tH = &r->t[1], *tW = &r->t[2];
  const int64_t n0 = tD->in * tH->in * tW->in, n1 = tD->in * tH->in * tW->out, n2 = tD->in * tH->out * tW->out;
  float *x = plane_buffer(n0), *b1 = plane_buffer(n1), *b2 = plane_buffer(n2),
        *y = plane_buffer(tD->out * tH->out * tW->out);
  for (int64_t pl = a; pl < b; pl++) {
    load_vplane(&r->in, r->dtype, pl, x);
    const float *cur = x;
    if (!tW->identity) pass_fwd(tW, cur, b1, tD->in * tH->in, 1), cur = b1;
    if (!tH->identity) pass_fwd(tH, cur, b2, tD->in, tW->out), cur = b2;
    if (!tD->identity) pass_fwd(tD, cur, y, 1, tH->out * tW->out), cur = y;
    store_vplane(&r->out, r->dtype, pl, cur);
  }
  free(x);
  free(b1);
  free(b2);
  free(y);
}

static void rs_bwd_planes(void *ctx, int64_t a, int64_t b) {
  const rs_task *r = ctx;
  const taps *tD = &r->t[0], *tH = &r->t[1], *tW = &r->t[2];
  float *go = plane_buffer(tD->out * tH->out * tW->out), *b2 = plane_buffer(tD->in * tH->out * tW->out),
        *b1 = plane_buffer(tD->in * tH->in * tW->out), *gi = plane_buffer(tD->in * tH->in * tW->in);
  for (int64_t pl = a; pl < b; pl++) {
    load_vplane(&r->out, r->dtype, pl, go);
    const float *cur = go;
    if (!tD->identity) pass_bwd(tD, cur, b2, 1, tH->out * tW->out), cur = b2;
    if (!tH->identity) pass_bwd(tH, cur, b1, tD->in, tW->out), cur = b1;
    if (!tW->identity) pass_bwd(tW, cur, gi, tD->in * tH->in, 1), cur = gi;
    store_vplane(&r->in, r->dtype, pl, cur);
  }
  free(go);
  free(b2);
  free(b1);
  free(gi);
}

/* Forward of one-tap maps (nearest, padding): element copies of any dtype, bit for bit. */
static void rs_gather_planes(void *ctx, int64_t a, int64_t b) {
  const rs_task *r = ctx;
  const int64_t es = (int64_t)vnc_dtype_size(r->dtype);
  const taps *tD = &r->t[0], *tH = &r->t[1], *tW = &r->t[2];
  const int64_t ss = r->in.strides[4] * es, ds = r->out.strides[4] * es, OW = tW->out;
  for (int64_t pl = a; pl < b; pl++) {
    const int64_t n = pl / r->out.C, c = pl % r->out.C;
    for (int64_t od = 0; od < tD->out; od++)
      for (int64_t oh = 0; oh < tH->out; oh++) {
        const char *src = vol_elem(&r->in, es, n, c, tD->idx[od], tH->idx[oh], 0);
        char *dst = vol_elem(&r->out, es, n, c, od, oh, 0);
        const int64_t *mw = tW->idx;
        switch (es) {
#define COPY_ROW(T)                                                                   \
  for (int64_t x = 0; x < OW; x++) memcpy(dst + x * ds, src + mw[x] * ss, sizeof(T)); \
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

static vnc_status resample(vnc_stream *s, const char *op, int backward, const vnc_resample_dim dims[3], int32_t dtype,
                           const vnc_volume *in, const vnc_volume *out) {
  if (in->N != out->N || in->C != out->C)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: input and output differ in batch or channels", op);
  if (vnc_dtype_size(dtype) == 0) return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: unknown dtype %d", op, (int)dtype);
  int one_tap = 1;
  const int64_t isz[3] = {in->D, in->H, in->W}, osz[3] = {out->D, out->H, out->W};
  for (int d = 0; d < 3; d++) {
    const int k = dims[d].kind;
    if (k < VNC_RS_NEAREST || k > VNC_RS_REPLICATE)
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: unknown resampling kind %d", op, k);
    one_tap &= k == VNC_RS_NEAREST || k == VNC_RS_NEAREST_EXACT || k == VNC_RS_REFLECT || k == VNC_RS_REPLICATE;
    if ((k == VNC_RS_REFLECT || k == VNC_RS_REPLICATE) && osz[d] != isz[d] + dims[d].pad_before + dims[d].pad_after)
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: output size does not match the input and padding", op);
    if (k == VNC_RS_REFLECT && (dims[d].pad_before >= isz[d] || dims[d].pad_after >= isz[d]))
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: padding size should be less than the corresponding input dimension", op);
  }
  if ((backward || !one_tap) && need_floating(op, dtype) != VNC_OK) return VNC_ERR_UNSUPPORTED;
  const int64_t planes = in->N * in->C, in_n = in->D * in->H * in->W, out_n = out->D * out->H * out->W;
  if (planes == 0 || (!backward && out_n == 0) || (backward && in_n == 0)) return VNC_OK;
  if (in_n == 0) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: cannot resample an empty input to a non-empty output", op);
  rs_task t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.in = *in;
  t.out = *out;
  for (int d = 0; d < 3; d++)
    if (!build_taps(&t.t[d], &dims[d], isz[d], osz[d])) {
      rs_release(&t);
      return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "%s: out of host memory for the interpolation tables", op);
    }
  vnc_range_fn fn = backward ? rs_bwd_planes : one_tap ? rs_gather_planes : rs_fwd_planes;
  return vnc_launch_parallel(s, op, fn, planes, 1, &t, sizeof t, rs_release);
}

vnc_status vnc_resample(vnc_stream *s, const char *op, const vnc_resample_dim dims[3], int32_t dtype,
                        const vnc_volume *x, const vnc_volume *out) {
  return resample(s, op, 0, dims, dtype, x, out);
}

vnc_status vnc_resample_backward(vnc_stream *s, const char *op, const vnc_resample_dim dims[3], int32_t dtype,
                                 const vnc_volume *grad_out, const vnc_volume *grad_in) {
  return resample(s, op, 1, dims, dtype, grad_in, grad_out);
}

/* The 2-D entry points: images are volumes with D = 1. */
static vnc_volume volume_of(const vnc_image *im) {
  vnc_volume v = {im->data, im->N, im->C, 1, im->H, im->W, {im->strides[0], im->strides[1], 0, im->strides[2], im->strides[3]}};
  return v;
}

static vnc_status upsample2d(vnc_stream *s, const char *op, int backward, vnc_upsample_mode mode, int align_corners,
                             float scale_h, float scale_w, int32_t dtype, const vnc_image *in, const vnc_image *out) {
  const int32_t kind = mode == VNC_UPSAMPLE_NEAREST ? VNC_RS_NEAREST : VNC_RS_LINEAR;
  const vnc_resample_dim dims[3] = {{.kind = VNC_RS_NEAREST, .scale = 1.0f},
                                    {.kind = kind, .align_corners = align_corners, .scale = scale_h},
                                    {.kind = kind, .align_corners = align_corners, .scale = scale_w}};
  const vnc_volume vi = volume_of(in), vo = volume_of(out);
  return resample(s, op, backward, dims, dtype, &vi, &vo);
}

vnc_status vnc_upsample2d(vnc_stream *s, const char *op, vnc_upsample_mode mode, int align_corners, float scale_h,
                          float scale_w, int32_t dtype, const vnc_image *x, const vnc_image *out) {
  return upsample2d(s, op, 0, mode, align_corners, scale_h, scale_w, dtype, x, out);
}

vnc_status vnc_upsample2d_backward(vnc_stream *s, const char *op, vnc_upsample_mode mode, int align_corners,
                                   float scale_h, float scale_w, int32_t dtype, const vnc_image *grad_out,
                                   const vnc_image *grad_in) {
  return upsample2d(s, op, 1, mode, align_corners, scale_h, scale_w, dtype, grad_in, grad_out);
}

static vnc_status pad2d(vnc_stream *s, const char *op, int backward, vnc_pad_mode mode, const int64_t pad[4],
                        int32_t dtype, const vnc_image *in, const vnc_image *out) {
  const int32_t kind = mode == VNC_PAD_REFLECT ? VNC_RS_REFLECT : VNC_RS_REPLICATE;
  const vnc_resample_dim dims[3] = {{.kind = VNC_RS_REPLICATE},
                                    {.kind = kind, .pad_before = pad[2], .pad_after = pad[3]},
                                    {.kind = kind, .pad_before = pad[0], .pad_after = pad[1]}};
  const vnc_volume vi = volume_of(in), vo = volume_of(out);
  return resample(s, op, backward, dims, dtype, &vi, &vo);
}

vnc_status vnc_pad2d(vnc_stream *s, const char *op, vnc_pad_mode mode, const int64_t pad[4], int32_t dtype,
                     const vnc_image *x, const vnc_image *out) {
  return pad2d(s, op, 0, mode, pad, dtype, x, out);
}

vnc_status vnc_pad2d_backward(vnc_stream *s, const char *op, vnc_pad_mode mode, const int64_t pad[4], int32_t dtype,
                              const vnc_image *grad_out, const vnc_image *grad_in) {
  return pad2d(s, op, 1, mode, pad, dtype, grad_in, grad_out);
}

/* ---------------------------------------------------------------- pooling of volumes */

typedef enum { POOL_AVG, POOL_MAX, POOL_ADAPTIVE_MAX } pool_kind;

typedef struct vpool_task {
  pool_kind kind;
  vnc_pool3d_params p;
  int32_t dtype;
  vnc_volume in, out, idx; /* forward: x, out, indices; backward: grad_in, grad_out, indices */
} vpool_task;

/* The window of output o along one dim: [*a, *b) clipped to the input, and its size before the
 * clip to the input (the padded extent, for count_include_pad). */
static int64_t avg_window(int64_t o, int64_t in, int64_t k, int64_t st, int64_t pad, int64_t *a, int64_t *b) {
  int64_t s = o * st - pad, e = s + k < in + pad ? s + k : in + pad;
  const int64_t padded = e - s;
  *a = s < 0 ? 0 : s;
  *b = e > in ? in : e;
  return padded;
}

static int64_t adaptive_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
static int64_t adaptive_end(int64_t o, int64_t out, int64_t in) { return ((o + 1) * in + out - 1) / out; }

static void vpool_fwd_planes(void *ctx, int64_t a, int64_t b) {
  const vpool_task *t = ctx;
  const vnc_volume *x = &t->in, *y = &t->out;
  const int64_t D = x->D, H = x->H, W = x->W, OD = y->D, OH = y->H, OW = y->W;
  const vnc_pool3d_params *p = &t->p;
  float *in = plane_buffer(D * H * W), *out = plane_buffer(OD * OH * OW);
  for (int64_t pl = a; pl < b; pl++) {
    load_vplane(x, t->dtype, pl, in);
    const int64_t n = pl / y->C, c = pl % y->C;
    for (int64_t od = 0; od < OD; od++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          float *o = out + (od * OH + oh) * OW + ow;
          if (t->kind == POOL_AVG) { /* ATen's avg_pool3d: clipped window, divisor rules */
            int64_t d0, d1, h0, h1, w0, w1;
            const int64_t size = avg_window(od, D, p->k[0], p->stride[0], p->pad[0], &d0, &d1) *
                                 avg_window(oh, H, p->k[1], p->stride[1], p->pad[1], &h0, &h1) *
                                 avg_window(ow, W, p->k[2], p->stride[2], p->pad[2], &w0, &w1);
            if (d0 >= d1 || h0 >= h1 || w0 >= w1) {
              *o = 0.0f;
              continue;
            }
            float sum = 0.0f;
            for (int64_t d = d0; d < d1; d++)
              for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++) sum += in[(d * H + h) * W + w];
            const int64_t div = p->divisor ? p->divisor : p->count_include_pad ? size : (d1 - d0) * (h1 - h0) * (w1 - w0);
            *o = sum / (float)div;
            continue;
          }
          /* max: ATen's rule (val > max || isnan(val)); the index starts at the window's first element */
          int64_t lo[3], hi[3], step[3];
          const int64_t os[3] = {od, oh, ow}, ins[3] = {D, H, W}, outs[3] = {OD, OH, OW};
          for (int i = 0; i < 3; i++) {
            if (t->kind == POOL_ADAPTIVE_MAX) {
              lo[i] = adaptive_start(os[i], outs[i], ins[i]);
              hi[i] = adaptive_end(os[i], outs[i], ins[i]);
              step[i] = 1;
            } else {
              lo[i] = os[i] * p->stride[i] - p->pad[i];
              hi[i] = lo[i] + (p->k[i] - 1) * p->dil[i] + 1;
              step[i] = p->dil[i];
              while (lo[i] < 0) lo[i] += p->dil[i];
              if (hi[i] > ins[i]) hi[i] = ins[i];
            }
          }
          float best = -INFINITY;
          int64_t bi = (lo[0] * H + lo[1]) * W + lo[2];
          for (int64_t d = lo[0]; d < hi[0]; d += step[0])
            for (int64_t h = lo[1]; h < hi[1]; h += step[1])
              for (int64_t w = lo[2]; w < hi[2]; w += step[2]) {
                const int64_t k = (d * H + h) * W + w;
                const float v = in[k];
                if (v > best || isnan(v)) best = v, bi = k;
              }
          *o = best;
          *(int64_t *)vol_elem(&t->idx, 8, n, c, od, oh, ow) = bi;
        }
    store_vplane(y, t->dtype, pl, out);
  }
  free(in);
  free(out);
}

static void vpool_bwd_planes(void *ctx, int64_t a, int64_t b) {
  const vpool_task *t = ctx;
  const vnc_volume *gi = &t->in, *go = &t->out;
  const int64_t D = gi->D, H = gi->H, W = gi->W, OD = go->D, OH = go->H, OW = go->W, N = D * H * W;
  const vnc_pool3d_params *p = &t->p;
  float *g = plane_buffer(N), *o = plane_buffer(OD * OH * OW);
  for (int64_t pl = a; pl < b; pl++) {
    memset(g, 0, sizeof(float) * (size_t)N);
    load_vplane(go, t->dtype, pl, o);
    const int64_t n = pl / go->C, c = pl % go->C;
    for (int64_t od = 0; od < OD; od++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          const float v = o[(od * OH + oh) * OW + ow];
          if (t->kind != POOL_AVG) {
            const int64_t k = *(const int64_t *)vol_elem(&t->idx, 8, n, c, od, oh, ow);
            if (k >= 0 && k < N) g[k] += v;
            continue;
          }
          int64_t d0, d1, h0, h1, w0, w1;
          const int64_t size = avg_window(od, D, p->k[0], p->stride[0], p->pad[0], &d0, &d1) *
                               avg_window(oh, H, p->k[1], p->stride[1], p->pad[1], &h0, &h1) *
                               avg_window(ow, W, p->k[2], p->stride[2], p->pad[2], &w0, &w1);
          if (d0 >= d1 || h0 >= h1 || w0 >= w1) continue;
          const int64_t div = p->divisor ? p->divisor : p->count_include_pad ? size : (d1 - d0) * (h1 - h0) * (w1 - w0);
          const float share = v / (float)div;
          for (int64_t d = d0; d < d1; d++)
            for (int64_t h = h0; h < h1; h++)
              for (int64_t w = w0; w < w1; w++) g[(d * H + h) * W + w] += share;
        }
    store_vplane(gi, t->dtype, pl, g);
  }
  free(g);
  free(o);
}

static vnc_status vpool_launch(vnc_stream *s, const char *op, pool_kind kind, int backward, const vnc_pool3d_params *p,
                               int32_t dtype, const vnc_volume *in, const vnc_volume *out, const vnc_volume *idx) {
  vnc_status st = need_floating(op, dtype);
  if (st != VNC_OK) return st;
  if (in->N != out->N || in->C != out->C || (idx && (idx->D != out->D || idx->H != out->H || idx->W != out->W)))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: input, output and indices shapes disagree", op);
  if (p)
    for (int i = 0; i < 3; i++)
      if (p->k[i] < 1 || p->stride[i] < 1 || p->pad[i] < 0 || p->dil[i] < 1)
        return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: invalid kernel size, stride, padding or dilation", op);
  const int64_t planes = in->N * in->C;
  if (planes == 0 || (backward ? in->D * in->H * in->W : out->D * out->H * out->W) == 0) return VNC_OK;
  if (!backward && in->D * in->H * in->W == 0)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: cannot pool an empty input", op);
  vpool_task t;
  memset(&t, 0, sizeof t);
  t.kind = kind;
  if (p) t.p = *p;
  t.dtype = dtype;
  t.in = *in;
  t.out = *out;
  if (idx) t.idx = *idx;
  return vnc_launch_parallel(s, op, backward ? vpool_bwd_planes : vpool_fwd_planes, planes, 1, &t, sizeof t, NULL);
}

vnc_status vnc_avg_pool3d(vnc_stream *s, const char *op, const vnc_pool3d_params *p, int32_t dtype, const vnc_volume *x,
                          const vnc_volume *out) {
  return vpool_launch(s, op, POOL_AVG, 0, p, dtype, x, out, NULL);
}

vnc_status vnc_avg_pool3d_backward(vnc_stream *s, const char *op, const vnc_pool3d_params *p, int32_t dtype,
                                   const vnc_volume *grad_out, const vnc_volume *grad_in) {
  return vpool_launch(s, op, POOL_AVG, 1, p, dtype, grad_in, grad_out, NULL);
}

vnc_status vnc_max_pool3d(vnc_stream *s, const char *op, const vnc_pool3d_params *p, int32_t dtype, const vnc_volume *x,
                          const vnc_volume *out, const vnc_volume *indices) {
  return vpool_launch(s, op, p ? POOL_MAX : POOL_ADAPTIVE_MAX, 0, p, dtype, x, out, indices);
}

vnc_status vnc_max_pool3d_backward(vnc_stream *s, const char *op, int32_t dtype, const vnc_volume *grad_out,
                                   const vnc_volume *indices, const vnc_volume *grad_in) {
  return vpool_launch(s, op, POOL_MAX, 1, NULL, dtype, grad_in, grad_out, indices);
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
  VNC_CHECK_COMPUTED(op, param_dtype, stat_dtype);
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
  VNC_CHECK_COMPUTED(op, param_dtype, stat_dtype);
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

/* ---------------------------------------------------------------- grid sampling
 *
 * ATen's CPU kernels computed in float32, in their formulas and operation order: images as the
 * vectorized kernel (GridSamplerKernel.cpp), volumes as the scalar one (GridSampler.cpp). CPU's
 * x86 build compiles the vectorized kernel with multiply-adds fused into FMAs; the image path
 * fuses the same ones (fmaf: the unnormalization, the reflection, the weighted sums, the cubic
 * coefficients), so float32 results (and the taps a point selects) equal CPU's bit for bit, but
 * for the order of grad_x's sums. Three passes: x, the grid (and grad_out) are read into float32
 * buffers; points are computed in parallel (a point's taps once, then every channel); results
 * are written back at the outputs' strides. grad_x is computed per (n, c) plane instead (each
 * plane owned by one thread), recomputing the points' taps. */

/* One spatial dim's coordinate map. */
typedef struct gs_axis {
  int64_t size;
  float scale;      /* d unnormalized / d grid coordinate */
  float maxv;       /* size - 1 */
  float low, twice_span; /* reflection about low and low + span */
  int empty;             /* a single-point reflection: every coordinate is 0 */
} gs_axis;

static gs_axis gs_axis_of(int64_t size, int align) {
  gs_axis a = {.size = size, .maxv = (float)(size - 1)};
  a.scale = (float)(align ? size - 1 : size) / 2.0f;
  a.low = align ? 0.0f : -0.5f;
  a.twice_span = (float)(align ? size - 1 : size) * 2.0f;
  a.empty = align ? size <= 1 : size <= 0;
  return a;
}

/* ---- images: the vectorized kernel's ComputeLocation */

/* clamp to [0, size - 1]; NaN goes to 0 (the operand order of the vectorized clamp). */
static float gs_clip(const gs_axis *a, float v) {
  v = v > 0.0f ? v : 0.0f;
  return v < a->maxv ? v : a->maxv;
}

/* Reflection into [low, low + span]; *sign = the sign of d result / d v (0 if empty). */
static float gs_reflect(const gs_axis *a, float v, float *sign) {
  if (a->empty) {
    *sign = 0.0f;
    return 0.0f;
  }
  const float in = v - a->low, abs_in = fabsf(in);
  const float extra = fmaf(-truncf(abs_in / a->twice_span), a->twice_span, abs_in), reflected = a->twice_span - extra;
  const int flip = extra > reflected;
  *sign = (flip ^ (in < 0.0f)) ? -1.0f : 1.0f;
  return (isnan(extra) ? extra : flip ? reflected : extra) + a->low;
}

/* The padding of an unnormalized coordinate; *mult (may be NULL) = d result / d grid coordinate:
 * the scale, times the reflection's sign, 0 where clipping holds it (at the borders, or NaN). */
static float gs_pad(const gs_axis *a, int padding, float v, float *mult) {
  float sign = 1.0f;
  if (padding == VNC_GRID_ZEROS) {
    if (mult) *mult = a->scale;
    return v;
  }
  if (padding == VNC_GRID_REFLECTION) v = gs_reflect(a, v, &sign);
  if (mult) *mult = v > 0.0f && v < a->maxv ? sign * a->scale : 0.0f;
  return gs_clip(a, v);
}

static float gs_unnormalize(const gs_axis *a, float g, int align) {
  return align ? (g + 1.0f) * a->scale : fmaf(g + 1.0f, a->scale, -0.5f);
}

/* An integral float as an index as the vectorized kernel converts it (int32): NaN and values
 * outside int32 give INT32_MIN. */
static int64_t gs_index(float v) { return v >= -2147483648.0f && v < 2147483648.0f ? (int64_t)v : INT32_MIN; }

/* ---- volumes: the scalar kernel's grid_sampler_compute_source_index(_set_grad) */

/* An index as static_cast<int64_t> on x86: NaN and values outside int64 give INT64_MIN. */
static int64_t gs_index64(float v) { return v >= -9.2233720e18f && v < 9.2233720e18f ? (int64_t)v : INT64_MIN; }

/* (int)floor(q) is even, with x86's conversion (NaN and overflow give INT_MIN: even). */
static int gs_even(float q) {
  const float f = floorf(q);
  return !(f >= -2147483648.0f && f < 2147483648.0f) || ((int64_t)f % 2) == 0;
}

/* The scalar kernel's padding. Forward (mult NULL): std::min/max clipping (NaN to size - 1) and
 * fmod reflection; backward: the _set_grad variants (NaN passes, derivative 1). */
static float gs3_source(const gs_axis *a, int padding, int align, float g, float *mult) {
  float v = align ? ((g + 1.0f) / 2.0f) * a->maxv : ((g + 1.0f) * (float)a->size - 1.0f) / 2.0f;
  float d = a->scale;
  if (padding == VNC_GRID_REFLECTION) {
    if (a->empty) {
      v = 0.0f, d = 0.0f;
    } else {
      const float span = a->twice_span / 2.0f;
      float in = v - a->low, sign = 1.0f;
      if (in < 0.0f) in = -in, sign = -1.0f;
      const float extra = fmodf(in, span);
      if (gs_even(in / span)) {
        v = extra + a->low;
      } else {
        v = span - extra + a->low, sign = -sign;
      }
      d = d * sign;
    }
  }
  if (padding != VNC_GRID_ZEROS) {
    if (!mult) {
      v = v < 0.0f ? 0.0f : v; /* std::max(v, 0): NaN stays */
      v = v < a->maxv ? v : a->maxv;
    } else if (v <= 0.0f) {
      v = 0.0f, d = d * 0.0f;
    } else if (v >= a->maxv) {
      v = a->maxv, d = d * 0.0f;
    }
  }
  if (mult) *mult = d;
  return v;
}

/* Keys' cubic convolution coefficients (A = -0.75) of the 4 taps at distances 1 + t, t, 1 - t,
 * 2 - t, and their derivatives, in the operation order of CPU's x86 build, which fuses
 * multiply-adds into FMAs: the inner taps' polynomials always, the outer taps' and the
 * derivatives' only in its backward kernel without an input gradient (`fused`). */
static void gs_cubic(float t, float c[4], float d[4], int fused) {
  const float A = -0.75f;
#define GS_MAD(a, b, c) (fused ? fmaf(a, b, c) : (a) * (b) + (c))
  float x = t + 1.0f;
  c[0] = GS_MAD(GS_MAD(GS_MAD(A, x, -5.0f * A), x, 8.0f * A), x, -4.0f * A);
  c[1] = fmaf(fmaf(A + 2.0f, t, -(A + 3.0f)) * t, t, 1.0f);
  x = 1.0f - t;
  c[2] = fmaf(fmaf(A + 2.0f, x, -(A + 3.0f)) * x, x, 1.0f);
  x = 2.0f - t;
  c[3] = GS_MAD(GS_MAD(GS_MAD(A, x, -5.0f * A), x, 8.0f * A), x, -4.0f * A);
  x = -1.0f - t;
  d[0] = GS_MAD(GS_MAD(-3.0f * A, x, -10.0f * A), x, -8.0f * A);
  x = 0.0f - t;
  d[1] = GS_MAD(-3.0f * (A + 2.0f), x, -2.0f * (A + 3.0f)) * x;
  x = 1.0f - t;
  d[2] = GS_MAD(3.0f * (A + 2.0f), x, -2.0f * (A + 3.0f)) * x;
  x = 2.0f - t;
  d[3] = GS_MAD(GS_MAD(3.0f * A, x, -10.0f * A), x, 8.0f * A);
#undef GS_MAD
}

/* The taps of one point: plane offsets (-1: outside; reads 0, receives nothing) and weights.
 * Linear: taps k = (z bit, y bit, x bit) (nw, ne, sw, se[, then the bottom four]) of product
 * weights a[x][bx] * a[y][by] (* a[z][bz]); nearest: one tap of weight 1; bicubic: taps
 * k = 4 * y tap + x tap, weighted by a[0] and a[1] in ATen's nested sums. */
typedef struct gs_point {
  int n;
  int64_t off[16];
  float w[8];
  float a[3][4];  /* per axis (x, y, z): its taps' 1-D weights */
  float da[2][4]; /* bicubic: d a / d coordinate */
  float mult[3];  /* d coordinate / d grid coordinate */
} gs_point;

typedef struct gs_task {
  vnc_grid_sample_params p;
  int32_t dtype;
  int backward;
  vnc_volume x, out, gx; /* forward: out; backward: out = grad_out, gx = grad_x (data NULL: none) */
  vnc_grid grid, ggrid;
  int64_t N, C, P, S;    /* batch, channels, grid points per sample, input plane size */
  gs_axis ax[3];         /* x (W), y (H), z (D) */
  float *xf, *gf, *of, *ggf; /* x planes, grid (N x nd x P), out / grad_out planes, grid grads */
} gs_task;

static void gs_release(void *arg) {
  gs_task *t = arg;
  free(t->xf);
  free(t->gf);
  free(t->of);
  free(t->ggf);
}

static int gs_in(int64_t i, int64_t n) { return i > -1 && i < n; }

static int64_t gs_offset(const gs_task *t, int64_t ix, int64_t iy, int64_t iz, int inside) {
  return inside ? (iz * t->x.H + iy) * t->x.W + ix : -1;
}

/* Volumes: trilinear and nearest taps of the scalar kernel. */
static void gs_locate3(const gs_task *t, const float g[3], int backward, gs_point *pt) {
  const int64_t sz[3] = {t->x.W, t->x.H, t->x.D};
  int64_t i0[3];
  for (int d = 0; d < 3; d++) {
    const float c = gs3_source(&t->ax[d], t->p.padding, t->p.align_corners, g[d], backward ? &pt->mult[d] : NULL);
    if (t->p.interp == VNC_GRID_NEAREST) {
      i0[d] = gs_index64(nearbyintf(c));
    } else {
      i0[d] = gs_index64(floorf(c));
      pt->a[d][0] = (float)(i0[d] + 1) - c;
      pt->a[d][1] = c - (float)i0[d];
    }
  }
  if (t->p.interp == VNC_GRID_NEAREST) {
    pt->n = 1;
    pt->w[0] = 1.0f;
    pt->off[0] = gs_offset(t, i0[0], i0[1], i0[2], gs_in(i0[0], sz[0]) && gs_in(i0[1], sz[1]) && gs_in(i0[2], sz[2]));
    return;
  }
  pt->n = 8;
  for (int k = 0; k < 8; k++) {
    const int bx = k & 1, by = (k >> 1) & 1, bz = k >> 2;
    const int64_t ix = i0[0] + bx, iy = i0[1] + by, iz = i0[2] + bz;
    pt->off[k] = gs_offset(t, ix, iy, iz, gs_in(ix, sz[0]) && gs_in(iy, sz[1]) && gs_in(iz, sz[2]));
    pt->w[k] = pt->a[0][bx] * pt->a[1][by] * pt->a[2][bz];
  }
}

/* Images: the vectorized kernel's taps. */
static void gs_locate2(const gs_task *t, const float g[3], int backward, gs_point *pt) {
  const int pad = t->p.padding, align = t->p.align_corners, bound = pad != VNC_GRID_ZEROS;
  const gs_axis *ax = &t->ax[0], *ay = &t->ax[1];
  const int64_t W = t->x.W, H = t->x.H;
  const float ux = gs_unnormalize(ax, g[0], align), uy = gs_unnormalize(ay, g[1], align);
  if (t->p.interp == VNC_GRID_BICUBIC) {
    const float fx = floorf(ux), fy = floorf(uy);
    const int fused = backward && !t->gx.data;
    gs_cubic(ux - fx, pt->a[0], pt->da[0], fused);
    gs_cubic(uy - fy, pt->a[1], pt->da[1], fused);
    pt->mult[0] = ax->scale;
    pt->mult[1] = ay->scale;
    pt->n = 16;
    for (int j = 0; j < 4; j++)
      for (int i = 0; i < 4; i++) {
        const int64_t ix = gs_index(gs_pad(ax, pad, fx + (float)(i - 1), NULL));
        const int64_t iy = gs_index(gs_pad(ay, pad, fy + (float)(j - 1), NULL));
        pt->off[4 * j + i] = gs_offset(t, ix, iy, 0, bound || (gs_in(ix, W) && gs_in(iy, H)));
      }
    return;
  }
  const float x = gs_pad(ax, pad, ux, &pt->mult[0]), y = gs_pad(ay, pad, uy, &pt->mult[1]);
  if (t->p.interp == VNC_GRID_NEAREST) {
    const int64_t ix = gs_index(nearbyintf(x)), iy = gs_index(nearbyintf(y));
    pt->n = 1;
    pt->w[0] = 1.0f;
    pt->off[0] = gs_offset(t, ix, iy, 0, bound || (gs_in(ix, W) && gs_in(iy, H)));
    return;
  }
  const float fx = floorf(x), fy = floorf(y);
  pt->a[0][1] = x - fx, pt->a[0][0] = 1.0f - pt->a[0][1]; /* w, e */
  pt->a[1][1] = y - fy, pt->a[1][0] = 1.0f - pt->a[1][1]; /* n, s */
  const int64_t i0[2] = {gs_index(fx), gs_index(fy)};
  pt->n = 4;
  for (int k = 0; k < 4; k++) {
    const int bx = k & 1, by = k >> 1;
    const int64_t ix = i0[0] + bx, iy = i0[1] + by;
    /* border/reflection keep the west and north taps inside; zeros padding checks each */
    const int xin = bound ? !bx || ix < W : gs_in(ix, W), yin = bound ? !by || iy < H : gs_in(iy, H);
    pt->off[k] = gs_offset(t, ix, iy, 0, xin && yin);
    pt->w[k] = pt->a[1][by] * pt->a[0][bx];
  }
}

static void gs_locate(const gs_task *t, int64_t n, int64_t p, int backward, gs_point *pt) {
  float g[3] = {0.0f, 0.0f, 0.0f};
  for (int k = 0; k < t->p.nd; k++) g[k] = t->gf[(n * t->p.nd + k) * t->P + p];
  if (t->p.nd == 3) {
    gs_locate3(t, g, backward, pt);
  } else {
    gs_locate2(t, g, backward, pt);
  }
}

static float gs_at(const float *plane, int64_t off) { return off >= 0 ? plane[off] : 0.0f; }

/* The sample of one plane at a located point. */
static float gs_sample(const gs_task *t, const gs_point *pt, const float *plane) {
  if (t->p.interp == VNC_GRID_NEAREST) return gs_at(plane, pt->off[0]);
  if (t->p.interp == VNC_GRID_BICUBIC) {
    const float *wx = pt->a[0], *wy = pt->a[1];
    float acc = 0.0f;
    for (int j = 0; j < 4; j++) {
      const int64_t *o = pt->off + 4 * j;
      const float row = fmaf(wx[0], gs_at(plane, o[0]), wx[1] * gs_at(plane, o[1])) + wx[2] * gs_at(plane, o[2]) +
                        wx[3] * gs_at(plane, o[3]);
      acc = j ? fmaf(wy[j], row, acc) : wy[0] * row;
    }
    return acc;
  }
  if (t->p.nd == 3) { /* outside taps skipped */
    float acc = 0.0f;
    for (int k = 0; k < pt->n; k++)
      if (pt->off[k] >= 0) acc += plane[pt->off[k]] * pt->w[k];
    return acc;
  }
  float acc = gs_at(plane, pt->off[0]) * pt->w[0]; /* outside taps read 0 */
  for (int k = 1; k < pt->n; k++) acc = fmaf(gs_at(plane, pt->off[k]), pt->w[k], acc);
  return acc;
}

/* Reads the planes of x (and grad_out) into float32. */
static void gs_load_planes(void *ctx, int64_t a, int64_t b) {
  const gs_task *t = ctx;
  for (int64_t pl = a; pl < b; pl++) {
    load_vplane(&t->x, t->dtype, pl, t->xf + pl * t->S);
    if (t->backward) load_vplane(&t->out, t->dtype, pl, t->of + pl * t->P);
  }
}

/* Grid rows (n, d, h) to or from the float32 coordinate planes buf[n][k][p]. */
static void gs_grid_rows(const gs_task *t, const vnc_grid *g, float *buf, int store, int64_t a, int64_t b) {
  const int64_t es = (int64_t)vnc_dtype_size(t->dtype), nd = t->p.nd;
  for (int64_t r = a; r < b; r++) {
    const int64_t h = r % g->H, d = (r / g->H) % g->D, n = r / (g->H * g->D);
    for (int64_t k = 0; k < nd; k++) {
      char *e = (char *)g->data + (n * g->strides[0] + d * g->strides[1] + h * g->strides[2] + k * g->strides[4]) * es;
      float *f = buf + (n * nd + k) * t->P + (d * g->H + h) * g->W;
      if (store) {
        vnc_from_f32(e, t->dtype, g->strides[3], f, g->W);
      } else {
        vnc_to_f32(f, e, t->dtype, g->strides[3], g->W);
      }
    }
  }
}

static void gs_load_grid(void *ctx, int64_t a, int64_t b) {
  const gs_task *t = ctx;
  gs_grid_rows(t, &t->grid, t->gf, 0, a, b);
}

static void gs_store_grid_grad(void *ctx, int64_t a, int64_t b) {
  const gs_task *t = ctx;
  gs_grid_rows(t, &t->ggrid, t->ggf, 1, a, b);
}

static void gs_fwd_points(void *ctx, int64_t a, int64_t b) {
  const gs_task *t = ctx;
  gs_point pt;
  for (int64_t q = a; q < b; q++) {
    const int64_t n = q / t->P, p = q % t->P;
    gs_locate(t, n, p, 0, &pt);
    for (int64_t c = 0; c < t->C; c++) t->of[(n * t->C + c) * t->P + p] = gs_sample(t, &pt, t->xf + (n * t->C + c) * t->S);
  }
}

static void gs_store_out(void *ctx, int64_t a, int64_t b) {
  const gs_task *t = ctx;
  for (int64_t pl = a; pl < b; pl++) store_vplane(&t->out, t->dtype, pl, t->of + pl * t->P);
}

/* grad_x of (n, c) planes: grad_out scattered through each point's taps, points in order. */
static void gs_bwd_input_planes(void *ctx, int64_t a, int64_t b) {
  const gs_task *t = ctx;
  float *gi = plane_buffer(t->S);
  gs_point pt;
  for (int64_t pl = a; pl < b; pl++) {
    const int64_t n = pl / t->C;
    const float *go = t->of + pl * t->P;
    memset(gi, 0, sizeof(float) * (size_t)t->S);
    for (int64_t p = 0; p < t->P; p++) {
      gs_locate(t, n, p, 1, &pt);
      const float g = go[p];
      if (t->p.interp == VNC_GRID_BICUBIC) {
        for (int i = 0; i < 4; i++)
          for (int j = 0; j < 4; j++) {
            const int64_t o = pt.off[4 * j + i];
            if (o >= 0) gi[o] += g * pt.a[0][i] * pt.a[1][j];
          }
      } else {
        for (int k = 0; k < pt.n; k++)
          if (pt.off[k] >= 0) gi[pt.off[k]] += pt.w[k] * g;
      }
    }
    store_vplane(&t->gx, t->dtype, pl, gi);
  }
  free(gi);
}

/* grad_grid of points: the derivative of the samples by the point's coordinates, summed over
 * channels in order, times d coordinate / d grid coordinate. */
static void gs_bwd_grid_points(void *ctx, int64_t a, int64_t b) {
  const gs_task *t = ctx;
  gs_point pt;
  for (int64_t q = a; q < b; q++) {
    const int64_t n = q / t->P, p = q % t->P;
    float gr[3] = {0.0f, 0.0f, 0.0f};
    if (t->p.interp != VNC_GRID_NEAREST) {
      gs_locate(t, n, p, 1, &pt);
      const float(*A)[4] = pt.a;
      for (int64_t c = 0; c < t->C; c++) {
        const float *x = t->xf + (n * t->C + c) * t->S, g = t->of[(n * t->C + c) * t->P + p];
        if (t->p.interp == VNC_GRID_BICUBIC) {
          for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
              const float v = gs_at(x, pt.off[4 * j + i]);
              gr[0] = fmaf(-(v * g * pt.da[0][i]), A[1][j], gr[0]);
              gr[1] = fmaf(-(v * g * pt.da[1][j]), A[0][i], gr[1]);
            }
        } else if (t->p.nd == 2) { /* (n, s, w, e) = (A[1][1], A[1][0], A[0][1], A[0][0]) */
          const float nw = gs_at(x, pt.off[0]), ne = gs_at(x, pt.off[1]), sw = gs_at(x, pt.off[2]),
                      se = gs_at(x, pt.off[3]);
          gr[0] = fmaf(fmaf(se - sw, A[1][1], (ne - nw) * A[1][0]), g, gr[0]);
          gr[1] = fmaf(fmaf(se - ne, A[0][1], (sw - nw) * A[0][0]), g, gr[1]);
        } else { /* each inside tap: its weight's derivative along each axis */
          for (int k = 0; k < 8; k++) {
            if (pt.off[k] < 0) continue;
            const float v = x[pt.off[k]];
            const int bx = k & 1, by = (k >> 1) & 1, bz = k >> 2;
            const float dx = v * A[1][by] * A[2][bz] * g, dy = v * A[0][bx] * A[2][bz] * g,
                        dz = v * A[0][bx] * A[1][by] * g;
            gr[0] = bx ? gr[0] + dx : gr[0] - dx;
            gr[1] = by ? gr[1] + dy : gr[1] - dy;
            gr[2] = bz ? gr[2] + dz : gr[2] - dz;
          }
        }
      }
      for (int k = 0; k < t->p.nd; k++) gr[k] = pt.mult[k] * gr[k];
    }
    for (int k = 0; k < t->p.nd; k++) t->ggf[(n * t->p.nd + k) * t->P + p] = gr[k];
  }
}

/* grad_x when the grid has no points: zero planes (t->of holds one). */
static void gs_zero_planes(void *ctx, int64_t a, int64_t b) {
  const gs_task *t = ctx;
  for (int64_t pl = a; pl < b; pl++) store_vplane(&t->gx, t->dtype, pl, t->of);
}

static vnc_status gs_run(void *arg) {
  gs_task *t = arg;
  const int64_t rows = t->N * t->grid.D * t->grid.H;
  vnc_parallel_for(t->N * t->C, 1, gs_load_planes, t);
  vnc_parallel_for(rows, 1, gs_load_grid, t);
  if (!t->backward) {
    vnc_parallel_for(t->N * t->P, 256, gs_fwd_points, t);
    vnc_parallel_for(t->N * t->C, 1, gs_store_out, t);
    return VNC_OK;
  }
  if (t->gx.data) vnc_parallel_for(t->N * t->C, 1, gs_bwd_input_planes, t);
  vnc_parallel_for(t->N * t->P, 256, gs_bwd_grid_points, t);
  vnc_parallel_for(rows, 1, gs_store_grid_grad, t);
  return VNC_OK;
}

static int gs_same_points(const vnc_grid *a, const vnc_grid *b) {
  return a->N == b->N && a->D == b->D && a->H == b->H && a->W == b->W;
}

static vnc_status grid_sample(vnc_stream *s, const char *op, int backward, const vnc_grid_sample_params *p,
                              int32_t dtype, const vnc_volume *x, const vnc_grid *grid, const vnc_volume *out,
                              const vnc_volume *gx, const vnc_grid *ggrid) {
  vnc_status st = need_floating(op, dtype);
  if (st != VNC_OK) return st;
  if ((p->nd != 2 && p->nd != 3) || p->interp < VNC_GRID_BILINEAR || p->interp > VNC_GRID_BICUBIC ||
      (p->nd == 3 && p->interp == VNC_GRID_BICUBIC) || p->padding < VNC_GRID_ZEROS || p->padding > VNC_GRID_REFLECTION)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: unsupported %d-D interpolation mode %d or padding mode %d", op,
                         (int)p->nd, (int)p->interp, (int)p->padding);
  if ((p->nd == 2 && (x->D != 1 || grid->D != 1)) || grid->N != x->N || out->N != x->N || out->C != x->C ||
      out->D != grid->D || out->H != grid->H || out->W != grid->W ||
      (gx && (gx->N != x->N || gx->C != x->C || gx->D != x->D || gx->H != x->H || gx->W != x->W)) ||
      (ggrid && !gs_same_points(ggrid, grid)))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: input, grid and output shapes disagree", op);
  if (x->D < 1 || x->H < 1 || x->W < 1) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: empty input spatial size", op);
  gs_task t;
  memset(&t, 0, sizeof t);
  t.p = *p;
  t.dtype = dtype;
  t.backward = backward;
  t.x = *x;
  t.out = *out;
  if (gx) t.gx = *gx;
  t.grid = *grid;
  if (ggrid) t.ggrid = *ggrid;
  t.N = x->N, t.C = x->C, t.P = grid->D * grid->H * grid->W, t.S = x->D * x->H * x->W;
  t.ax[0] = gs_axis_of(x->W, p->align_corners);
  t.ax[1] = gs_axis_of(x->H, p->align_corners);
  t.ax[2] = gs_axis_of(x->D, p->align_corners);
  if (t.N * t.P == 0 || (!backward && t.C == 0)) {
    if (!backward || !gx || t.N * t.C == 0) return VNC_OK;
    t.of = calloc((size_t)t.S, sizeof(float)); /* no points: grad_x is 0 */
    if (!t.of) return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    return vnc_launch_parallel(s, op, gs_zero_planes, t.N * t.C, 1, &t, sizeof t, gs_release);
  }
  const int64_t xn = t.N * t.C * t.S, on = t.N * t.C * t.P, gn = t.N * p->nd * t.P;
  t.xf = malloc(sizeof(float) * (size_t)(xn > 0 ? xn : 1));
  t.gf = malloc(sizeof(float) * (size_t)gn);
  t.of = malloc(sizeof(float) * (size_t)(on > 0 ? on : 1));
  if (backward) t.ggf = malloc(sizeof(float) * (size_t)gn);
  if (!t.xf || !t.gf || !t.of || (backward && !t.ggf)) {
    gs_release(&t);
    return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "%s: out of host memory for the sampling buffers", op);
  }
  return vnc_launch(s, op, gs_run, &t, sizeof t, gs_release);
}

vnc_status vnc_grid_sample(vnc_stream *s, const char *op, const vnc_grid_sample_params *p, int32_t dtype,
                           const vnc_volume *x, const vnc_grid *grid, const vnc_volume *out) {
  return grid_sample(s, op, 0, p, dtype, x, grid, out, NULL, NULL);
}

vnc_status vnc_grid_sample_backward(vnc_stream *s, const char *op, const vnc_grid_sample_params *p, int32_t dtype,
                                    const vnc_volume *grad_out, const vnc_volume *x, const vnc_grid *grid,
                                    const vnc_volume *grad_x, const vnc_grid *grad_grid) {
  if (!grad_grid) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: grad_grid is required", op);
  return grid_sample(s, op, 1, p, dtype, x, grid, grad_out, grad_x, grad_grid);
}
