/* Kernels of issue 11 checked without PyTorch against independent references:
 *  - convolution 1-D to 3-D: the transposed convolution is the adjoint of the plain one
 *    (<conv(x), y> == <x, conv_transpose(y)> for the same weight), and a plain 3-D convolution
 *    equals a direct sum; the direct depthwise kernel (NCHW and channels_last) equals the
 *    im2col + GEMM path per channel, forward and gradients, and a channels_last pointwise
 *    convolution (one GEMM) the NCHW one;
 *  - resampling (linear, cubic, area, nearest, padding): the backward is the adjoint of the
 *    forward (<R x, y> == <x, R^T y>), and trilinear resampling of an affine volume is exact;
 *  - histogram bins equal a direct count; CTC loss equals the sum over every alignment;
 *  - fold is the adjoint of unfold (<unfold(x), c> == <x, fold(c)>), and unfold of an index
 *    image holds each block's elements;
 *  - cdist equals a direct double-precision p-norm, and its gradient a central difference;
 *  - grid sampling: grad_x is the adjoint of the forward map, and grad_grid a central difference. */
#include <math.h>
#include <stdlib.h>
#include "check.h"

static vnc_stream *S;

static float frand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (float)((*s >> 8) & 0xFFFF) / 65536.0f - 0.5f;
}
static float *rnd(int64_t n, unsigned seed) {
  float *p = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) p[i] = frand(&seed);
  return p;
}
static double dot(const float *a, const float *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}
static int64_t vol(const int64_t *s, int n) {
  int64_t v = 1;
  for (int i = 0; i < n; i++) v *= s[i];
  return v;
}

static void conv_adjoint(int nd, int64_t stride, int64_t pad, int64_t dil, int64_t groups) {
  vnc_conv_params p = {.nspatial = nd, .N = 2, .C = 4, .O = 6, .groups = groups, .dtype = VNC_FLOAT32};
  const int64_t in[3] = {7, 6, 5}, k[3] = {3, 2, 3};
  for (int i = 0; i < nd; i++) {
    p.in[i] = in[i], p.k[i] = k[i], p.stride[i] = stride, p.pad[i] = pad, p.dil[i] = dil;
    p.out[i] = (p.in[i] + 2 * pad - dil * (k[i] - 1) - 1) / stride + 1;
  }
  const int64_t xn = p.N * p.C * vol(p.in, nd), yn = p.N * p.O * vol(p.out, nd), wn = p.O * (p.C / groups) * vol(p.k, nd);
  float *x = rnd(xn, 1), *w = rnd(wn, 2), *y = rnd(yn, 3), *cx = malloc(sizeof(float) * yn), *ty = malloc(sizeof(float) * xn);
  CHECK_OK(vnc_conv_forward(S, "conv", &p, x, w, NULL, cx));
  /* the transposed convolution from Y (C = O channels) back to X, same weight [O, C/g, k] */
  vnc_conv_params q = p;
  q.transposed = 1, q.C = p.O, q.O = p.C;
  for (int i = 0; i < nd; i++) q.in[i] = p.out[i], q.out[i] = p.in[i];
  CHECK_OK(vnc_conv_forward(S, "conv_transpose", &q, y, w, NULL, ty));
  CHECK_OK(vnc_stream_synchronize(S));
  const double a = dot(cx, y, yn), b = dot(x, ty, xn);
  CHECK(fabs(a - b) <= 1e-4 * (fabs(a) + 1.0));
  free(x), free(w), free(y), free(cx), free(ty);
}

static void conv3d_direct(void) {
  vnc_conv_params p = {.nspatial = 3, .N = 1, .C = 2, .O = 3, .groups = 1, .dtype = VNC_FLOAT32,
                       .in = {4, 5, 3}, .k = {2, 3, 2}, .stride = {1, 2, 1}, .pad = {1, 0, 1}, .dil = {1, 1, 1}};
  for (int i = 0; i < 3; i++) p.out[i] = (p.in[i] + 2 * p.pad[i] - (p.k[i] - 1) - 1) / p.stride[i] + 1;
  float *x = rnd(2 * 60, 4), *w = rnd(3 * 2 * 12, 5), *b = rnd(3, 6), *y = malloc(sizeof(float) * 3 * vol(p.out, 3));
  CHECK_OK(vnc_conv_forward(S, "conv3d", &p, x, w, b, y));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1;
  for (int64_t o = 0; o < 3; o++)
    for (int64_t a = 0; a < p.out[0]; a++)
      for (int64_t bb = 0; bb < p.out[1]; bb++)
        for (int64_t c = 0; c < p.out[2]; c++) {
          double s = b[o];
          for (int64_t ci = 0; ci < 2; ci++)
            for (int64_t i = 0; i < 2; i++)
              for (int64_t j = 0; j < 3; j++)
                for (int64_t l = 0; l < 2; l++) {
                  const int64_t d = a - 1 + i, h = bb * 2 + j, ww = c - 1 + l;
                  if (d >= 0 && d < 4 && h >= 0 && h < 5 && ww >= 0 && ww < 3)
                    s += (double)w[((o * 2 + ci) * 2 + i) * 6 + j * 2 + l] * x[((ci * 4 + d) * 5 + h) * 3 + ww];
                }
          ok &= fabs(s - y[((o * p.out[0] + a) * p.out[1] + bb) * p.out[2] + c]) < 1e-5;
        }
  CHECK(ok);
  free(x), free(w), free(b), free(y);
}

/* [N, C, S] -> [N, S, C] (channels_last), or back with `back`. */
static float *relayout(const float *src, int64_t N, int64_t C, int64_t S, int back) {
  float *d = malloc(sizeof(float) * (size_t)(N * C * S));
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t s = 0; s < S; s++) {
        const int64_t nchw = (n * C + c) * S + s, nhwc = (n * S + s) * C + c;
        if (back) d[nchw] = src[nhwc];
        else d[nhwc] = src[nchw];
      }
  return d;
}

static int close_to(const float *a, const float *b, int64_t n, const char *what) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabsf(a[i] - b[i]) <= 1e-4f * (1.0f + fabsf(b[i])))) {
      fprintf(stderr, "%s [%lld]: %g vs %g\n", what, (long long)i, a[i], b[i]);
      return 0;
    }
  return 1;
}

/* Forward (with bias) and the three gradients of a convolution, in p's layout. */
typedef struct conv_run { float *y, *gx, *gw, *gb; } conv_run;
static conv_run run_conv(const vnc_conv_params *p, const float *x, const float *w, const float *b, const float *gy) {
  const int64_t xn = p->N * p->C * vol(p->in, p->nspatial), yn = p->N * p->O * vol(p->out, p->nspatial);
  const int64_t wn = p->O * (p->C / p->groups) * vol(p->k, p->nspatial);
  conv_run r = {malloc(sizeof(float) * yn), malloc(sizeof(float) * xn), malloc(sizeof(float) * wn),
                malloc(sizeof(float) * p->O)};
  CHECK_OK(vnc_conv_forward(S, "conv", p, x, w, b, r.y));
  CHECK_OK(vnc_conv_backward(S, "conv_backward", p, gy, x, w, r.gx, r.gw, r.gb));
  CHECK_OK(vnc_stream_synchronize(S));
  return r;
}
static void free_run(conv_run *r) { free(r->y), free(r->gx), free(r->gw), free(r->gb); }

/* The direct depthwise kernel against the im2col + GEMM path: channel c of a depthwise
 * convolution is a plain one-channel one (C = 1, groups 1: the GEMM path) of input channel c
 * with weights [m, 1, k...]; forward and every gradient. Then the same convolution with
 * channels_last operands gives the same values. */
static void depthwise_vs_gemm(int nd, int64_t m, int64_t stride, int64_t pad, int64_t dil) {
  const int64_t N = 2, C = 3, in[3] = {7, 6, 9}, k[3] = {3, 2, 3};
  vnc_conv_params p = {.nspatial = nd, .N = N, .C = C, .O = C * m, .groups = C, .dtype = VNC_FLOAT32};
  for (int i = 0; i < nd; i++) {
    p.in[i] = in[i], p.k[i] = k[i], p.stride[i] = stride, p.pad[i] = pad, p.dil[i] = dil;
    p.out[i] = (p.in[i] + 2 * pad - dil * (k[i] - 1) - 1) / stride + 1;
  }
  const int64_t XS = vol(p.in, nd), YS = vol(p.out, nd), K = vol(p.k, nd), O = p.O;
  float *x = rnd(N * C * XS, 7), *w = rnd(O * K, 8), *b = rnd(O, 9), *gy = rnd(N * O * YS, 10);
  conv_run d = run_conv(&p, x, w, b, gy);
  vnc_conv_params q = p;
  q.C = 1, q.O = m, q.groups = 1;
  float *xc = malloc(sizeof(float) * N * XS), *gyc = malloc(sizeof(float) * N * m * YS);
  int ok = 1;
  for (int64_t c = 0; c < C; c++) {
    for (int64_t n = 0; n < N; n++) {
      memcpy(xc + n * XS, x + (n * C + c) * XS, sizeof(float) * XS);
      memcpy(gyc + n * m * YS, gy + (n * O + c * m) * YS, sizeof(float) * m * YS);
    }
    conv_run r = run_conv(&q, xc, w + c * m * K, b + c * m, gyc);
    for (int64_t n = 0; n < N; n++) {
      ok &= close_to(d.y + (n * O + c * m) * YS, r.y + n * m * YS, m * YS, "depthwise forward");
      ok &= close_to(d.gx + (n * C + c) * XS, r.gx + n * XS, XS, "depthwise grad_input");
    }
    ok &= close_to(d.gw + c * m * K, r.gw, m * K, "depthwise grad_weight");
    ok &= close_to(d.gb + c * m, r.gb, m, "depthwise grad_bias");
    free_run(&r);
  }
  /* channels_last: [N, spatial, C] operands, the same values */
  vnc_conv_params l = p;
  l.channels_last = 1;
  CHECK(vnc_conv_channels_last_ok(&l));
  float *xl = relayout(x, N, C, XS, 0), *gyl = relayout(gy, N, O, YS, 0);
  conv_run cl = run_conv(&l, xl, w, b, gyl);
  float *y2 = relayout(cl.y, N, O, YS, 1), *gx2 = relayout(cl.gx, N, C, XS, 1);
  ok &= close_to(y2, d.y, N * O * YS, "channels_last depthwise forward");
  ok &= close_to(gx2, d.gx, N * C * XS, "channels_last depthwise grad_input");
  ok &= close_to(cl.gw, d.gw, O * K, "channels_last depthwise grad_weight");
  ok &= close_to(cl.gb, d.gb, O, "channels_last depthwise grad_bias");
  if (!ok) fprintf(stderr, "depthwise %dd m=%lld stride=%lld pad=%lld dil=%lld\n", nd, (long long)m,
                   (long long)stride, (long long)pad, (long long)dil);
  CHECK(ok);
  free_run(&d), free_run(&cl);
  free(x), free(w), free(b), free(gy), free(xc), free(gyc), free(xl), free(gyl), free(y2), free(gx2);
}

/* A pointwise convolution on channels_last operands (one GEMM) equals the NCHW one; other
 * geometries are refused in that layout. */
static void pointwise_channels_last(int nd) {
  const int64_t N = 2, C = 5, O = 4, in[3] = {3, 4, 6};
  vnc_conv_params p = {.nspatial = nd, .N = N, .C = C, .O = O, .groups = 1, .dtype = VNC_FLOAT32};
  for (int i = 0; i < nd; i++) p.in[i] = p.out[i] = in[i], p.k[i] = p.stride[i] = p.dil[i] = 1;
  const int64_t P = vol(p.in, nd);
  float *x = rnd(N * C * P, 11), *w = rnd(O * C, 12), *b = rnd(O, 13), *gy = rnd(N * O * P, 14);
  conv_run d = run_conv(&p, x, w, b, gy);
  vnc_conv_params l = p;
  l.channels_last = 1;
  float *xl = relayout(x, N, C, P, 0), *gyl = relayout(gy, N, O, P, 0);
  conv_run cl = run_conv(&l, xl, w, b, gyl);
  float *y2 = relayout(cl.y, N, O, P, 1), *gx2 = relayout(cl.gx, N, C, P, 1);
  CHECK(close_to(y2, d.y, N * O * P, "pointwise forward") && close_to(gx2, d.gx, N * C * P, "pointwise grad_input") &&
        close_to(cl.gw, d.gw, O * C, "pointwise grad_weight") && close_to(cl.gb, d.gb, O, "pointwise grad_bias"));
  l.stride[0] = 2; /* strided: not one GEMM */
  CHECK(!vnc_conv_channels_last_ok(&l));
  CHECK(vnc_conv_forward(S, "conv", &l, xl, w, b, y2) == VNC_ERR_INVALID_ARGUMENT);
  free_run(&d), free_run(&cl);
  free(x), free(w), free(b), free(gy), free(xl), free(gyl), free(y2), free(gx2);
}

static vnc_volume dense(float *p, int64_t N, int64_t C, int64_t D, int64_t H, int64_t W) {
  vnc_volume v = {p, N, C, D, H, W, {C * D * H * W, D * H * W, H * W, W, 1}};
  return v;
}

static void resample_adjoint(int kind, int align) {
  const int64_t N = 2, C = 2, in[3] = {3, 5, 4}, out[3] = {5, 4, 7};
  vnc_resample_dim dims[3];
  for (int d = 0; d < 3; d++) {
    dims[d] = (vnc_resample_dim){.kind = kind, .align_corners = align, .scale = (float)in[d] / (float)out[d]};
    if (kind == VNC_RS_REFLECT || kind == VNC_RS_REPLICATE) dims[d].pad_before = 1, dims[d].pad_after = out[d] - in[d] - 1;
  }
  const int64_t xn = N * C * vol(in, 3), yn = N * C * vol(out, 3);
  float *x = rnd(xn, 7), *y = rnd(yn, 8), *rx = malloc(sizeof(float) * yn), *ry = malloc(sizeof(float) * xn);
  vnc_volume xv = dense(x, N, C, in[0], in[1], in[2]), rxv = dense(rx, N, C, out[0], out[1], out[2]);
  vnc_volume yv = dense(y, N, C, out[0], out[1], out[2]), ryv = dense(ry, N, C, in[0], in[1], in[2]);
  CHECK_OK(vnc_resample(S, "resample", dims, VNC_FLOAT32, &xv, &rxv));
  CHECK_OK(vnc_resample_backward(S, "resample_backward", dims, VNC_FLOAT32, &yv, &ryv));
  CHECK_OK(vnc_stream_synchronize(S));
  const double a = dot(rx, y, yn), b = dot(x, ry, xn);
  if (fabs(a - b) > 1e-4 * (fabs(a) + 1.0)) fprintf(stderr, "kind %d align %d: %g vs %g\n", kind, align, a, b);
  CHECK(fabs(a - b) <= 1e-4 * (fabs(a) + 1.0));
  free(x), free(y), free(rx), free(ry);
}

static void trilinear_affine(void) {
  /* f(d, h, w) = 1 + 2d - 3h + 0.5w is reproduced exactly by linear interpolation (align_corners) */
  float x[3 * 4 * 5], y[5 * 7 * 3];
  for (int d = 0; d < 3; d++)
    for (int h = 0; h < 4; h++)
      for (int w = 0; w < 5; w++) x[(d * 4 + h) * 5 + w] = 1.0f + 2.0f * d - 3.0f * h + 0.5f * w;
  const int64_t in[3] = {3, 4, 5}, out[3] = {5, 7, 3};
  vnc_resample_dim dims[3];
  for (int d = 0; d < 3; d++)
    dims[d] = (vnc_resample_dim){.kind = VNC_RS_LINEAR, .align_corners = 1, .scale = (float)(in[d] - 1) / (float)(out[d] - 1)};
  vnc_volume xv = dense(x, 1, 1, 3, 4, 5), yv = dense(y, 1, 1, 5, 7, 3);
  CHECK_OK(vnc_resample(S, "trilinear", dims, VNC_FLOAT32, &xv, &yv));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1;
  for (int d = 0; d < 5; d++)
    for (int h = 0; h < 7; h++)
      for (int w = 0; w < 3; w++) {
        const double sd = d * 2.0 / 4, sh = h * 3.0 / 6, sw = w * 4.0 / 2;
        ok &= fabs(y[(d * 7 + h) * 3 + w] - (1.0 + 2.0 * sd - 3.0 * sh + 0.5 * sw)) < 1e-5;
      }
  CHECK(ok);
}

static void histogram_counts(void) {
  float x[1000], edges[11], hist[10];
  unsigned seed = 9;
  for (int i = 0; i < 1000; i++) x[i] = frand(&seed) * 3.0f;
  for (int i = 0; i <= 10; i++) edges[i] = -1.0f + 0.2f * (float)i;
  vnc_tensor xt = vnc_tensor_contiguous(x, VNC_FLOAT32, 1, (int64_t[]){1000});
  vnc_tensor et = vnc_tensor_contiguous(edges, VNC_FLOAT32, 1, (int64_t[]){11});
  vnc_tensor ht = vnc_tensor_contiguous(hist, VNC_FLOAT32, 1, (int64_t[]){10});
  CHECK_OK(vnc_histogram(S, "histogram", &xt, NULL, &et, VNC_BINS_SEARCH, &ht));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1;
  for (int b = 0; b < 10; b++) {
    int c = 0;
    for (int i = 0; i < 1000; i++) c += x[i] >= edges[b] && (b == 9 ? x[i] <= edges[10] : x[i] < edges[b + 1]);
    ok &= hist[b] == (float)c;
  }
  CHECK(ok);
}

/* -log of the probability of target {1, 2} over every alignment of T = 4 steps, 3 labels. */
static void ctc_brute_force(void) {
  enum { T = 4, C = 3 };
  float lp[T * C];
  unsigned seed = 11;
  for (int t = 0; t < T; t++) {
    double z = 0, e[C];
    for (int c = 0; c < C; c++) z += e[c] = exp(frand(&seed) * 4.0);
    for (int c = 0; c < C; c++) lp[t * C + c] = (float)log(e[c] / z);
  }
  int64_t target[2] = {1, 2}, in_len[1] = {T}, tg_len[1] = {2};
  double p = 0;
  for (int path = 0; path < 81; path++) { /* 3^4 alignments */
    int a[T], q = path, n = 0, out[T], prev = -1;
    for (int t = 0; t < T; t++) a[t] = q % 3, q /= 3;
    for (int t = 0; t < T; t++) {
      if (a[t] != 0 && a[t] != prev) out[n++] = a[t];
      prev = a[t];
    }
    if (n == 2 && out[0] == 1 && out[1] == 2) {
      double lpp = 0;
      for (int t = 0; t < T; t++) lpp += lp[t * C + a[t]];
      p += exp(lpp);
    }
  }
  float nll, alpha[T * 5];
  vnc_ctc_args args = {.log_probs = vnc_tensor_contiguous(lp, VNC_FLOAT32, 3, (int64_t[]){T, 1, C}),
                       .targets = vnc_tensor_contiguous(target, VNC_INT64, 2, (int64_t[]){1, 2}),
                       .input_lengths = in_len, .target_lengths = tg_len, .blank = 0};
  vnc_tensor nt = vnc_tensor_contiguous(&nll, VNC_FLOAT32, 1, (int64_t[]){1});
  vnc_tensor at = vnc_tensor_contiguous(alpha, VNC_FLOAT32, 3, (int64_t[]){1, T, 5});
  CHECK_OK(vnc_ctc_loss(S, "ctc", &args, &nt, &at));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(fabs(nll + log(p)) < 1e-5);
  int64_t bad[2] = {1, 7};   /* a label outside [0, C): the task fails, the stream recovers */
  args.targets = vnc_tensor_contiguous(bad, VNC_INT64, 2, (int64_t[]){1, 2});
  CHECK_OK(vnc_ctc_loss(S, "ctc", &args, &nt, &at));
  CHECK(vnc_stream_synchronize(S) == VNC_ERR_INDEX);
  CHECK_OK(vnc_stream_synchronize(S));
}

static void unfold_fold(int64_t stride, int64_t pad, int64_t dil) {
  vnc_conv_params p = {.nspatial = 2, .N = 2, .C = 3, .groups = 1, .dtype = VNC_FLOAT32,
                       .in = {7, 6}, .k = {3, 2}, .stride = {stride, stride}, .pad = {pad, pad}, .dil = {dil, dil}};
  for (int i = 0; i < 2; i++) p.out[i] = (p.in[i] + 2 * pad - dil * (p.k[i] - 1) - 1) / stride + 1;
  const int64_t K = 6, L = p.out[0] * p.out[1], xn = 2 * 3 * 42, cn = 2 * 3 * K * L;
  float *x = rnd(xn, 7), *c = rnd(cn, 8), *ux = malloc(sizeof(float) * cn), *fc = malloc(sizeof(float) * xn);
  CHECK_OK(vnc_unfold(S, "unfold", &p, x, ux));
  CHECK_OK(vnc_fold(S, "fold", &p, c, fc));
  CHECK_OK(vnc_stream_synchronize(S));
  const double a = dot(ux, c, cn), b = dot(x, fc, xn);
  CHECK(fabs(a - b) <= 1e-4 * (fabs(a) + 1.0));
  /* unfold of the index image: entry (n, c*K + (i*2 + j), oy*OW + ox) is element
   * (oy*stride - pad + i*dil, ox*stride - pad + j*dil) of plane (n, c), or 0 outside */
  for (int64_t e = 0; e < xn; e++) x[e] = (float)(e + 1);
  CHECK_OK(vnc_unfold(S, "unfold", &p, x, ux));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1;
  for (int64_t plane = 0; plane < 6; plane++)
    for (int64_t kk = 0; kk < K; kk++)
      for (int64_t l = 0; l < L; l++) {
        const int64_t y = (l / p.out[1]) * stride - pad + (kk / 2) * dil, xx = (l % p.out[1]) * stride - pad + (kk % 2) * dil;
        const float want = y < 0 || y >= 7 || xx < 0 || xx >= 6 ? 0.0f : (float)(plane * 42 + y * 6 + xx + 1);
        ok &= ux[(plane * K + kk) * L + l] == want;
      }
  CHECK(ok);
  free(x), free(c), free(ux), free(fc);
}

/* The p-norm of a - b in double, coordinate kd of a moved by da. */
static double norm_ref(const float *a, const float *b, int64_t m, double p, int64_t kd, double da) {
  double agg = 0;
  for (int64_t k = 0; k < m; k++) {
    const double t = fabs((double)a[k] + (k == kd ? da : 0.0) - b[k]);
    if (p == 0) agg += t != 0;
    else if (isinf(p)) agg = t > agg ? t : agg;
    else agg += pow(t, p);
  }
  return p == 0 || isinf(p) ? agg : pow(agg, 1.0 / p);
}

static void cdist_direct(double p) {
  const int64_t B = 2, R1 = 3, R2 = 4, M = 5;
  float *x1 = rnd(B * R1 * M, 9), *x2 = rnd(B * R2 * M, 10), *d = malloc(sizeof(float) * B * R1 * R2);
  float *g = malloc(sizeof(float) * B * R1 * R2), *g1 = malloc(sizeof(float) * B * R1 * M);
  CHECK_OK(vnc_cdist(S, "cdist", B, R1, R2, M, p, VNC_FLOAT32, x1, x2, d));
  for (int64_t i = 0; i < B * R1 * R2; i++) g[i] = 1.0f;
  CHECK_OK(vnc_cdist_backward(S, "cdist_backward", B, R1, R2, M, p, VNC_FLOAT32, g, x1, x2, d, g1));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < R1; i++)
      for (int64_t j = 0; j < R2; j++) {
        const double want = norm_ref(x1 + (b * R1 + i) * M, x2 + (b * R2 + j) * M, M, p, -1, 0.0);
        ok &= fabs(d[(b * R1 + i) * R2 + j] - want) <= 1e-5 * (want + 1.0);
      }
  CHECK(ok);
  /* d/dx1 of the sum of all distances, by central differences in double (p = 0: zero) */
  ok = 1;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < R1; i++)
      for (int64_t k = 0; k < M; k++) {
        const float *a = x1 + (b * R1 + i) * M;
        double sum[2] = {0, 0};
        for (int s = 0; s < 2; s++)
          for (int64_t j = 0; j < R2; j++) sum[s] += norm_ref(a, x2 + (b * R2 + j) * M, M, p, k, s ? 1e-6 : -1e-6);
        const double want = p == 0 ? 0 : (sum[1] - sum[0]) / 2e-6;
        ok &= fabs(g1[(b * R1 + i) * M + k] - want) <= 1e-3 * (fabs(want) + 1.0);
      }
  CHECK(ok);
  free(x1), free(x2), free(d), free(g), free(g1);
}

/* Grid sampling of x (2, 3, [4,] 5, 6) at [3 x] 4 x 7 points: <GS(x), y> == <x, GS^T y>. */
static void grid_sample_adjoint(int nd, int interp, int padding, int align) {
  const int64_t N = 2, C = 3, D = nd == 3 ? 4 : 1, H = 5, W = 6, GD = nd == 3 ? 3 : 1, GH = 4, GW = 7;
  const int64_t xn = N * C * D * H * W, P = GD * GH * GW, yn = N * C * P, gn = N * P * nd;
  const vnc_grid_sample_params p = {.nd = nd, .interp = interp, .padding = padding, .align_corners = align};
  float *x = rnd(xn, 11), *y = rnd(yn, 12), *g = rnd(gn, 13), *gx = malloc(sizeof(float) * xn),
        *sx = malloc(sizeof(float) * yn), *gg = malloc(sizeof(float) * gn);
  for (int64_t i = 0; i < gn; i++) g[i] *= 2.8f; /* [-1.4, 1.4): some points outside */
  const int64_t gs[5] = {P * nd, GH * GW * nd, GW * nd, nd, 1};
  const vnc_grid gv = {g, N, GD, GH, GW, {gs[0], gs[1], gs[2], gs[3], gs[4]}},
                 ggv = {gg, N, GD, GH, GW, {gs[0], gs[1], gs[2], gs[3], gs[4]}};
  const vnc_volume xv = dense(x, N, C, D, H, W), yv = dense(y, N, C, GD, GH, GW), sv = dense(sx, N, C, GD, GH, GW),
                   gxv = dense(gx, N, C, D, H, W);
  CHECK_OK(vnc_grid_sample(S, "grid_sample", &p, VNC_FLOAT32, &xv, &gv, &sv));
  CHECK_OK(vnc_grid_sample_backward(S, "grid_sample_backward", &p, VNC_FLOAT32, &yv, &xv, &gv, &gxv, &ggv));
  CHECK_OK(vnc_stream_synchronize(S));
  const double a = dot(sx, y, yn), b = dot(x, gx, xn);
  if (fabs(a - b) > 1e-4 * (fabs(a) + 1.0))
    fprintf(stderr, "grid_sample %dd %d %d %d: %g vs %g\n", nd, interp, padding, align, a, b);
  CHECK(fabs(a - b) <= 1e-4 * (fabs(a) + 1.0));
  free(x), free(y), free(g), free(gx), free(sx), free(gg);
}

/* grad_grid of <GS(x), y> against central differences, at points away from the kinks of the
 * interpolation (integral pixel coordinates) and of the padding (inside the image). */
static void grid_sample_grid_grad(int nd, int interp, int padding, int align) {
  const int64_t N = 1, C = 2, D = nd == 3 ? 4 : 1, H = 5, W = 6, GD = nd == 3 ? 2 : 1, GH = 3, GW = 4;
  const int64_t P = GD * GH * GW, yn = N * C * P, gn = P * nd, size[3] = {W, H, D};
  const vnc_grid_sample_params p = {.nd = nd, .interp = interp, .padding = padding, .align_corners = align};
  float *x = rnd(N * C * D * H * W, 21), *y = rnd(yn, 22), *u = rnd(gn, 23), *g = malloc(sizeof(float) * gn),
        *gg = malloc(sizeof(float) * gn), *s = malloc(sizeof(float) * yn);
  for (int64_t i = 0; i < gn; i++) { /* a pixel coordinate 1 + k + [0.25, 0.75), as a grid coordinate */
    const int64_t n = size[i % nd], k = (int64_t)((u[i] + 0.5f) * 997.0f) % (n - 2);
    const double pix = 1.0 + (double)k + 0.5 + (double)u[i] * 0.5, scale = align ? (n - 1) / 2.0 : n / 2.0;
    g[i] = (float)(align ? pix / scale - 1.0 : (pix + 0.5) / scale - 1.0);
  }
  const int64_t gs[5] = {P * nd, GH * GW * nd, GW * nd, nd, 1};
  const vnc_grid gv = {g, N, GD, GH, GW, {gs[0], gs[1], gs[2], gs[3], gs[4]}},
                 ggv = {gg, N, GD, GH, GW, {gs[0], gs[1], gs[2], gs[3], gs[4]}};
  const vnc_volume xv = dense(x, N, C, D, H, W), yv = dense(y, N, C, GD, GH, GW), sv = dense(s, N, C, GD, GH, GW);
  CHECK_OK(vnc_grid_sample_backward(S, "grid_sample_backward", &p, VNC_FLOAT32, &yv, &xv, &gv, NULL, &ggv));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1;
  for (int64_t i = 0; i < gn; i++) {
    const float g0 = g[i], eps = 1e-3f;
    double f[2];
    for (int side = 0; side < 2; side++) {
      g[i] = g0 + (side ? eps : -eps);
      CHECK_OK(vnc_grid_sample(S, "grid_sample", &p, VNC_FLOAT32, &xv, &gv, &sv));
      CHECK_OK(vnc_stream_synchronize(S));
      f[side] = dot(s, y, yn);
    }
    g[i] = g0;
    const double d = (f[1] - f[0]) / (2.0 * (double)eps);
    if (fabs(d - gg[i]) > 2e-3 + 1e-2 * fabs(d)) {
      fprintf(stderr, "grid_sample grad %dd %d %d %d [%lld]: %g vs %g\n", nd, interp, padding, align, (long long)i, d,
              gg[i]);
      ok = 0;
    }
  }
  CHECK(ok);
  free(x), free(y), free(u), free(g), free(gg), free(s);
}

int main(void) {
  CHECK_OK(vnc_stream_get(0, 0, &S));
  for (int nd = 1; nd <= 3; nd++) {
    conv_adjoint(nd, 1, 0, 1, 1);
    conv_adjoint(nd, 2, 1, 1, 2);
    conv_adjoint(nd, 3, 2, 2, 1);
  }
  conv3d_direct();
  for (int nd = 1; nd <= 3; nd++) {
    depthwise_vs_gemm(nd, 1, 1, 1, 1);
    depthwise_vs_gemm(nd, 2, 1, 0, 1);
    depthwise_vs_gemm(nd, 1, 2, 1, 1);
    depthwise_vs_gemm(nd, 2, 2, 2, 2);
    depthwise_vs_gemm(nd, 1, 3, 4, 2); /* padding past the kernel's reach */
    pointwise_channels_last(nd);
  }
  const int kinds[] = {VNC_RS_NEAREST, VNC_RS_NEAREST_EXACT, VNC_RS_LINEAR, VNC_RS_CUBIC, VNC_RS_AREA, VNC_RS_REFLECT,
                       VNC_RS_REPLICATE};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    for (int align = 0; align <= 1; align++) resample_adjoint(kinds[i], align);
  trilinear_affine();
  histogram_counts();
  ctc_brute_force();
  unfold_fold(1, 0, 1);
  unfold_fold(2, 1, 2);
  const double ps[] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, INFINITY};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) cdist_direct(ps[i]);
  for (int nd = 2; nd <= 3; nd++)
    for (int interp = VNC_GRID_BILINEAR; interp <= (nd == 2 ? VNC_GRID_BICUBIC : VNC_GRID_NEAREST); interp++)
      for (int padding = VNC_GRID_ZEROS; padding <= VNC_GRID_REFLECTION; padding++)
        for (int align = 0; align <= 1; align++) {
          grid_sample_adjoint(nd, interp, padding, align);
          if (interp != VNC_GRID_NEAREST) grid_sample_grid_grad(nd, interp, padding, align);
        }
  CHECK_DONE();
}
