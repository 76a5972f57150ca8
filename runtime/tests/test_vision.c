/* Image kernels (vnc/vision.h) against direct loops: average pooling (padding, divisor,
 * channels-last strides, int64), nearest/bilinear upsampling (every output value against
 * ATen's source-index rules; the backward by the adjoint identity), padding, group norm
 * (statistics and every normalised value), and refusals. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "check.h"

static vnc_stream *S;

/* ATen's source coordinate of output index d for an input of size in (upsample_bilinear2d:
 * area_pixel_compute_source_index; align_corners maps corners to corners). */
static double source_index(int64_t d, int64_t in, int64_t out, int align) {
  if (align) return out > 1 ? (double)d * (double)(in - 1) / (double)(out - 1) : 0.0;
  const double s = (d + 0.5) * (double)in / (double)out - 0.5;
  return s < 0 ? 0 : s;
}

/* Direct bilinear and nearest upsampling of one (h, w) plane at output (oy, ox). */
static double upsample_ref(const float *plane, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t oy, int64_t ox,
                           int mode, int align) {
  if (mode == 0) { /* nearest: floor(dst * in / out), clamped */
    int64_t sy = (int64_t)floor((double)oy * (double)h / (double)oh), sx = (int64_t)floor((double)ox * (double)w / (double)ow);
    if (sy > h - 1) sy = h - 1;
    if (sx > w - 1) sx = w - 1;
    return plane[sy * w + sx];
  }
  const double sy = source_index(oy, h, oh, align), sx = source_index(ox, w, ow, align);
  const int64_t y0 = (int64_t)sy, x0 = (int64_t)sx, y1 = y0 + (y0 < h - 1), x1 = x0 + (x0 < w - 1);
  const double ly = sy - (double)y0, lx = sx - (double)x0;
  return (1 - ly) * ((1 - lx) * plane[y0 * w + x0] + lx * plane[y0 * w + x1]) +
         ly * ((1 - lx) * plane[y1 * w + x0] + lx * plane[y1 * w + x1]);
}

static vnc_image nchw(void *p, int64_t N, int64_t C, int64_t H, int64_t W) {
  vnc_image im = {p, N, C, H, W, {C * H * W, H * W, W, 1}};
  return im;
}

int main(void) {
  CHECK_OK(vnc_stream_get(0, 0, &S));
  enum { N = 2, C = 3, H = 5, W = 6 };
  static float x[N * C * H * W], xl[N * H * W * C], y[N * C * 3 * 3], yl[N * C * 3 * 3];
  for (int i = 0; i < N * C * H * W; i++) x[i] = (float)((i * 7) % 13) - 6.0f;
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int h = 0; h < H; h++)
        for (int w = 0; w < W; w++) xl[((n * H + h) * W + w) * C + c] = x[((n * C + c) * H + h) * W + w];

  /* avg pool 3x3 stride 2 pad 1, count_include_pad off: output 3x3 */
  vnc_avg_pool2d_params p = {.KH = 3, .KW = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .count_include_pad = 0};
  vnc_image xi = nchw(x, N, C, H, W), yi = nchw(y, N, C, 3, 3);
  CHECK_OK(vnc_avg_pool2d(S, "avg_pool2d", &p, VNC_FLOAT32, &xi, &yi));
  vnc_image xli = {xl, N, C, H, W, {H * W * C, 1, W * C, C}}; /* channels-last */
  vnc_image yli = {yl, N, C, 3, 3, {9 * C, 1, 3 * C, C}};
  CHECK_OK(vnc_avg_pool2d(S, "avg_pool2d", &p, VNC_FLOAT32, &xli, &yli));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1;
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int oy = 0; oy < 3; oy++)
        for (int ox = 0; ox < 3; ox++) {
          double s = 0;
          int cnt = 0;
          for (int i = oy * 2 - 1; i < oy * 2 + 2; i++)
            for (int j = ox * 2 - 1; j < ox * 2 + 2; j++)
              if (i >= 0 && i < H && j >= 0 && j < W) s += x[((n * C + c) * H + i) * W + j], cnt++;
          float v = y[((n * C + c) * 3 + oy) * 3 + ox];
          ok &= fabs(v - s / cnt) < 1e-5;
          ok &= v == yl[((n * 3 + oy) * 3 + ox) * C + c];
        }
  CHECK(ok);

  /* int64 with a divisor override: truncating division */
  static int64_t xi64[4], yi64[1];
  xi64[0] = 7, xi64[1] = 8, xi64[2] = -9, xi64[3] = 1; /* sum 7 */
  vnc_avg_pool2d_params pd = {.KH = 2, .KW = 2, .sh = 2, .sw = 2, .count_include_pad = 1, .divisor = 3};
  vnc_image a = nchw(xi64, 1, 1, 2, 2), b = nchw(yi64, 1, 1, 1, 1);
  CHECK_OK(vnc_avg_pool2d(S, "avg_pool2d", &pd, VNC_INT64, &a, &b));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(yi64[0] == 2);

  /* upsampling: <up(x), g> == <x, up_backward(g)> for nearest and bilinear */
  enum { OH = 7, OW = 11 };
  static float u[N * C * OH * OW], g[N * C * OH * OW], gx[N * C * H * W];
  for (int i = 0; i < N * C * OH * OW; i++) g[i] = (float)((i * 5) % 9) / 4.0f - 1.0f;
  for (int mode = 0; mode < 2; mode++)
    for (int align = 0; align < 2; align++) {
      vnc_image ui = nchw(u, N, C, OH, OW), gi = nchw(g, N, C, OH, OW), gxi = nchw(gx, N, C, H, W);
      float sh = align ? (float)(H - 1) / (OH - 1) : (float)H / OH, sw = align ? (float)(W - 1) / (OW - 1) : (float)W / OW;
      CHECK_OK(vnc_upsample2d(S, "up", (vnc_upsample_mode)mode, align, sh, sw, VNC_FLOAT32, &xi, &ui));
      CHECK_OK(vnc_upsample2d_backward(S, "up_bwd", (vnc_upsample_mode)mode, align, sh, sw, VNC_FLOAT32, &gi, &gxi));
      CHECK_OK(vnc_stream_synchronize(S));
      double l = 0, r = 0;
      for (int i = 0; i < N * C * OH * OW; i++) l += (double)u[i] * g[i];
      for (int i = 0; i < N * C * H * W; i++) r += (double)x[i] * gx[i];
      CHECK(fabs(l - r) < 1e-3);
      int up_ok = 1;
      for (int nc = 0; nc < N * C; nc++)
        for (int oy = 0; oy < OH; oy++)
          for (int ox = 0; ox < OW; ox++)
            up_ok &= fabs(u[(nc * OH + oy) * OW + ox] - upsample_ref(x + nc * H * W, H, W, OH, OW, oy, ox, mode, align)) <
                     1e-5;
      CHECK(up_ok);
    }

  /* padding: reflect (2, 1, 1, 0) of one row 0..W-1 */
  static float row[W], padded[W + 3];
  for (int i = 0; i < W; i++) row[i] = (float)i;
  vnc_image ri = nchw(row, 1, 1, 1, W), pi = nchw(padded, 1, 1, 1, W + 3);
  const int64_t pad[4] = {2, 1, 0, 0}, bad[4] = {W, 0, 0, 0};
  CHECK_OK(vnc_pad2d(S, "pad", VNC_PAD_REFLECT, pad, VNC_FLOAT32, &ri, &pi));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(padded[0] == 2 && padded[1] == 1 && padded[2] == 0 && padded[W + 1] == W - 1 && padded[W + 2] == W - 2);
  vnc_image pbad = nchw(padded, 1, 1, 1, 2 * W);
  CHECK(vnc_pad2d(S, "pad", VNC_PAD_REFLECT, bad, VNC_FLOAT32, &ri, &pbad) == VNC_ERR_INVALID_ARGUMENT);

  /* group norm: per-group mean and rstd; output has mean 0 */
  static float gy[N * C * H * W], mean[N * 1], rstd[N * 1];
  vnc_image gn_x = {x, N, C, H * W, 1, {C * H * W, H * W, 1, 0}}, gn_y = {gy, N, C, H * W, 1, {C * H * W, H * W, 1, 0}};
  CHECK_OK(vnc_group_norm(S, "group_norm", 1, VNC_FLOAT32, &gn_x, NULL, NULL, VNC_FLOAT32, 1e-5, &gn_y, mean, rstd,
                          VNC_FLOAT32));
  CHECK_OK(vnc_stream_synchronize(S));
  for (int n = 0; n < N; n++) {
    double s = 0, q = 0;
    for (int i = 0; i < C * H * W; i++) s += x[n * C * H * W + i];
    s /= C * H * W;
    for (int i = 0; i < C * H * W; i++) q += (x[n * C * H * W + i] - s) * (x[n * C * H * W + i] - s);
    const double r = 1.0 / sqrt(q / (C * H * W) + 1e-5);
    CHECK(fabs(mean[n] - s) < 1e-5 && fabs(rstd[n] - r) < 1e-5);
    int values_ok = 1; /* every output is (x - mean) * rstd */
    for (int i = 0; i < C * H * W; i++) values_ok &= fabs(gy[n * C * H * W + i] - (x[n * C * H * W + i] - s) * r) < 1e-5;
    CHECK(values_ok);
  }
  CHECK(vnc_group_norm(S, "group_norm", 2, VNC_FLOAT32, &gn_x, NULL, NULL, VNC_FLOAT32, 1e-5, &gn_y, mean, rstd,
                       VNC_FLOAT32) == VNC_ERR_INVALID_ARGUMENT);
  CHECK(vnc_upsample2d(S, "up", VNC_UPSAMPLE_BILINEAR, 0, 1.0f, 1.0f, VNC_INT32, &xi, &yi) == VNC_ERR_UNSUPPORTED);
  CHECK_DONE();
}
