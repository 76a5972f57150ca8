/* vnc/vision.h — image kernels: average pooling, group norm, nearest/bilinear upsampling,
 * reflection/replication padding, and the general resampling of 1-D to 3-D volumes behind
 * them (every interpolation mode, adaptive average pooling, padding), grid sampling, each with
 * its backward.
 *
 * Images are (N, C, H, W) at any element strides (NCHW, channels-last, views); a 3-D
 * (C, H, W) input is N = 1. Floating dtypes (float16, bfloat16, float32, float64 by the device
 * rule) compute in float32; a backward is a scatter-add per (n, c) plane in the order of the
 * output elements, so its sums never depend on the thread count. Index formulas are ATen's
 * CPU kernels' (aten/src/ATen/native/cpu/AvgPoolKernel.cpp, UpSampleKernel.cpp,
 * PaddingKernel.cpp, group_norm_kernel.cpp).
 *
 *     vnc_image x = {ptr, 2, 3, 8, 8, {192, 64, 8, 1}}, y = {...};
 *     vnc_avg_pool2d_params p = {.KH = 2, .KW = 2, .sh = 2, .sw = 2, .count_include_pad = 1};
 *     vnc_avg_pool2d(stream, "aten::avg_pool2d", &p, VNC_FLOAT32, &x, &y);
 */
#ifndef VNC_VISION_H
#define VNC_VISION_H

#include <stdint.h>
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A (N, C, H, W) tensor the runtime does not own: element [0,0,0,0] and strides in elements. */
typedef struct vnc_image {
  void *data;
  int64_t N, C, H, W;
  int64_t strides[4];
} vnc_image;

typedef struct vnc_avg_pool2d_params {
  int64_t KH, KW, sh, sw, ph, pw;
  int32_t count_include_pad;
  int64_t divisor; /* divisor_override, or 0 for none */
} vnc_avg_pool2d_params;

/* out[n, c, oy, ox] = sum of x over the window clipped to the input / divisor, where the
 * divisor is `divisor` if set, else the window size clipped to the padded input
 * (count_include_pad) or to the input; an empty window gives 0. Floating dtypes, and int64
 * (exact sums, truncating division as ATen). `out` has the output's H and W. */
vnc_status vnc_avg_pool2d(vnc_stream *s, const char *op, const vnc_avg_pool2d_params *p, int32_t dtype,
                          const vnc_image *x, const vnc_image *out);
/* grad_in (the input's shape; fully written) from grad_out. Floating dtypes. */
vnc_status vnc_avg_pool2d_backward(vnc_stream *s, const char *op, const vnc_avg_pool2d_params *p, int32_t dtype,
                                   const vnc_image *grad_out, const vnc_image *grad_in);

typedef enum vnc_upsample_mode {
  VNC_UPSAMPLE_NEAREST,  /* src = nearest_idx (ATen): dst if sizes equal, dst >> 1 if doubled,
                            else min(floor(dst * scale), in - 1) in float32 */
  VNC_UPSAMPLE_BILINEAR  /* ATen's compute_source_index_and_lambda, weights in float32 */
} vnc_upsample_mode;

/* Upsampling of x into out (sizes from the images). scale_h/scale_w are the float32 ratios
 * ATen computes (compute_scales_value for nearest, area_pixel_compute_scale for bilinear).
 * Nearest copies elements of any dtype (element size 1, 2, 4, 8 or 16 bytes); bilinear
 * takes floating dtypes. */
vnc_status vnc_upsample2d(vnc_stream *s, const char *op, vnc_upsample_mode mode, int align_corners, float scale_h,
                          float scale_w, int32_t dtype, const vnc_image *x, const vnc_image *out);
/* grad_in (fully written) = the transpose of the forward map applied to grad_out. Floating. */
vnc_status vnc_upsample2d_backward(vnc_stream *s, const char *op, vnc_upsample_mode mode, int align_corners,
                                   float scale_h, float scale_w, int32_t dtype, const vnc_image *grad_out,
                                   const vnc_image *grad_in);

typedef enum vnc_pad_mode { VNC_PAD_REFLECT, VNC_PAD_REPLICATE } vnc_pad_mode;

/* out = x padded by (left, right, top, bottom) (negative values crop); out has the padded
 * sizes. Reflection needs each pad < the input size along its dim (the caller checks). Any
 * dtype (an element copy). */
vnc_status vnc_pad2d(vnc_stream *s, const char *op, vnc_pad_mode mode, const int64_t pad[4], int32_t dtype,
                     const vnc_image *x, const vnc_image *out);
/* grad_in (fully written) = sum of grad_out over the elements each input element fed. Floating. */
vnc_status vnc_pad2d_backward(vnc_stream *s, const char *op, vnc_pad_mode mode, const int64_t pad[4], int32_t dtype,
                              const vnc_image *grad_out, const vnc_image *grad_in);

/* ---------------------------------------------------------------- resampling of volumes
 *
 * A (N, C, D, H, W) tensor at any element strides; a 1-D signal is D = H = 1, an image D = 1. */
typedef struct vnc_volume {
  void *data;
  int64_t N, C, D, H, W;
  int64_t strides[5];
} vnc_volume;

/* How one dim maps output coordinates to input taps (ATen's formulas, UpSample.h and
 * PaddingKernel.cpp / AdaptiveAveragePooling.cpp):
 *   NEAREST        nearest_idx (scale: compute_scales_value in float32);
 *   NEAREST_EXACT  min(floor((o + 0.5) * scale), in - 1);
 *   LINEAR         compute_source_index_and_lambda, two taps (scale: area_pixel_compute_scale);
 *   CUBIC          Keys' convolution, A = -0.75, four taps clamped to the input (bicubic);
 *   AREA           the adaptive average pooling window [floor(o in / out), ceil((o + 1) in / out));
 *   REFLECT, REPLICATE  padding by pad_before / pad_after (negative values crop). */
typedef enum vnc_resample_kind {
  VNC_RS_NEAREST,
  VNC_RS_NEAREST_EXACT,
  VNC_RS_LINEAR,
  VNC_RS_CUBIC,
  VNC_RS_AREA,
  VNC_RS_REFLECT,
  VNC_RS_REPLICATE
} vnc_resample_kind;

typedef struct vnc_resample_dim {
  int32_t kind;                  /* vnc_resample_kind */
  int32_t align_corners;         /* LINEAR, CUBIC */
  float scale;                   /* NEAREST, NEAREST_EXACT, LINEAR, CUBIC */
  int64_t pad_before, pad_after; /* REFLECT, REPLICATE (reflection needs each < the input size) */
} vnc_resample_dim;

/* out = x resampled along D, H and W by dims[0..2] (sizes from the volumes; N and C equal): the
 * separable weighted sum of each dim's taps, W first, then H, then D (ATen's nesting). A dim
 * whose output equals its input under an identity map is not touched. When every dim is a
 * one-tap kind (nearest, padding) elements of any dtype are copied bit for bit; otherwise x is
 * floating and computed in float32. */
vnc_status vnc_resample(vnc_stream *s, const char *op, const vnc_resample_dim dims[3], int32_t dtype,
                        const vnc_volume *x, const vnc_volume *out);
/* grad_in (fully written) = the transpose of the map applied to grad_out: a scatter-add per
 * (n, c) plane in the order of grad_out's elements. Floating. */
vnc_status vnc_resample_backward(vnc_stream *s, const char *op, const vnc_resample_dim dims[3], int32_t dtype,
                                 const vnc_volume *grad_out, const vnc_volume *grad_in);

/* ---------------------------------------------------------------- pooling of volumes
 *
 * Windows along D, H and W (ATen's avg_pool3d / max_pool3d / adaptive max pooling kernels,
 * aten/src/ATen/native/cpu/AvgPoolKernel.cpp, MaxPoolKernel.cpp, AdaptiveMaxPoolKernel.cpp).
 * Floating dtypes, float32 compute; planes in parallel; backward kernels scatter-add per
 * plane in output order. 1-D and 2-D pools are volumes with D (and H) = 1. */
typedef struct vnc_pool3d_params {
  int64_t k[3], stride[3], pad[3], dil[3]; /* D, H, W; avg pooling ignores dil */
  int32_t count_include_pad;               /* avg */
  int64_t divisor;                         /* avg: divisor_override, 0 for none */
} vnc_pool3d_params;

/* out = window means (windows clipped to the input; an empty window gives 0; divisor: the
 * override, else the window clipped to the padded input (count_include_pad) or to the input). */
vnc_status vnc_avg_pool3d(vnc_stream *s, const char *op, const vnc_pool3d_params *p, int32_t dtype, const vnc_volume *x,
                          const vnc_volume *out);
vnc_status vnc_avg_pool3d_backward(vnc_stream *s, const char *op, const vnc_pool3d_params *p, int32_t dtype,
                                   const vnc_volume *grad_out, const vnc_volume *grad_in);
/* Max pooling with int64 indices (flat d*H*W + h*W + w within the plane, `indices` shaped like
 * out): a value replaces the running max when greater or NaN; the index starts at the
 * window's first element. p == NULL: adaptive max pooling (windows [floor(o in / out),
 * ceil((o + 1) in / out)) per dim). */
vnc_status vnc_max_pool3d(vnc_stream *s, const char *op, const vnc_pool3d_params *p, int32_t dtype, const vnc_volume *x,
                          const vnc_volume *out, const vnc_volume *indices);
/* grad_in (fully written) = grad_out added at the recorded indices (max and adaptive max). */
vnc_status vnc_max_pool3d_backward(vnc_stream *s, const char *op, int32_t dtype, const vnc_volume *grad_out,
                                   const vnc_volume *indices, const vnc_volume *grad_in);

/* ---------------------------------------------------------------- grid sampling
 *
 * F.grid_sample (ATen's grid_sampler_2d / grid_sampler_3d and their backward): out[n, c, p]
 * samples x[n, c] at the grid's point p = (x, y[, z]) in [-1, 1] (-1: the first pixel's outer
 * edge, or its centre with align_corners). Floating dtypes, float32 compute, in the formulas and
 * operation order of ATen's CPU kernels (float32 results equal CPU's but for the order of
 * grad_x's sums), which differ between images and volumes:
 *  - images (nd = 2, aten/src/ATen/native/cpu/GridSamplerKernel.cpp): unnormalize as
 *    (g + 1) * scale (- 0.5); border padding clips to [0, size - 1], NaN to 0; reflection
 *    reflects about the edges (or corner centres), then clips; nearest rounds half to even;
 *    bicubic is Keys' convolution (A = -0.75) over 4 x 4 taps, each tap's coordinate padded on
 *    its own. With zeros padding an outside tap reads 0 and its weight still multiplies it (a
 *    NaN or infinite point gives NaN in bilinear and bicubic modes, 0 in nearest mode); the
 *    backward clips a NaN coordinate to 0 with derivative 0 (CPU's reads unchecked memory);
 *  - volumes (nd = 3, aten/src/ATen/native/GridSampler.cpp, GridSampler.h): bilinear
 *    (trilinear) and nearest; unnormalize as ((g + 1) * size - 1) / 2; clipping sends NaN to
 *    size - 1 in the forward; outside taps are skipped (a NaN point samples 0 with zeros padding). */
typedef enum vnc_grid_interp { VNC_GRID_BILINEAR, VNC_GRID_NEAREST, VNC_GRID_BICUBIC } vnc_grid_interp;
typedef enum vnc_grid_padding { VNC_GRID_ZEROS, VNC_GRID_BORDER, VNC_GRID_REFLECTION } vnc_grid_padding;

typedef struct vnc_grid_sample_params {
  int32_t nd;            /* 2: images (x's and the grid's D = 1, points (x, y)); 3: volumes, points (x, y, z) */
  int32_t interp;        /* vnc_grid_interp (ATen's GridSamplerInterpolation values); bicubic: images only */
  int32_t padding;       /* vnc_grid_padding (ATen's GridSamplerPadding values) */
  int32_t align_corners;
} vnc_grid_sample_params;

/* A sampling grid (N, D, H, W, nd) at any element strides (N, D, H, W, coordinate). */
typedef struct vnc_grid {
  void *data;
  int64_t N, D, H, W;
  int64_t strides[5];
} vnc_grid;

/* out (N, C, grid D, grid H, grid W) = x (N, C, D, H, W) sampled at the grid's points. x, grid
 * and out share `dtype`. */
vnc_status vnc_grid_sample(vnc_stream *s, const char *op, const vnc_grid_sample_params *p, int32_t dtype,
                           const vnc_volume *x, const vnc_grid *grid, const vnc_volume *out);
/* grad_x (x's shape, fully written; NULL to skip it) and grad_grid (the grid's shape, fully
 * written) from grad_out (out's shape). Atomic-free and deterministic: grad_x by (n, c) planes,
 * each scatter-adding in the order of the grid's points; grad_grid by points, summing over
 * channels in order. A nearest sample's grid gradient is 0, and so is a coordinate's where
 * border or reflection clipping holds it. */
vnc_status vnc_grid_sample_backward(vnc_stream *s, const char *op, const vnc_grid_sample_params *p, int32_t dtype,
                                    const vnc_volume *grad_out, const vnc_volume *x, const vnc_grid *grid,
                                    const vnc_volume *grad_x, const vnc_grid *grad_grid);

/* Group norm of x viewed as (N, C, S, 1) images (S = spatial size), G groups of C / G
 * channels: per (n, g), mean and biased variance over the group's (c, s) elements in that
 * order (the canonical sum of vnc/reduce.h), rstd = 1 / sqrt(max(var, 0) + eps),
 * y = (x - mean) * rstd * weight[c] + bias[c]. weight/bias (C elements of param_dtype) may be
 * NULL; mean/rstd are N x G contiguous of stat_dtype. */
vnc_status vnc_group_norm(vnc_stream *s, const char *op, int64_t G, int32_t dtype, const vnc_image *x,
                          const void *weight, const void *bias, int32_t param_dtype, double eps, const vnc_image *y,
                          void *mean, void *rstd, int32_t stat_dtype);
/* Gradients of vnc_group_norm (ATen's formulas): dx (an image like x, or NULL), dweight and
 * dbias (C elements of param_dtype, or NULL). dy is an image like x. */
vnc_status vnc_group_norm_backward(vnc_stream *s, const char *op, int64_t G, int32_t dtype, const vnc_image *dy,
                                   const vnc_image *x, const void *mean, const void *rstd, int32_t stat_dtype,
                                   const void *weight, int32_t param_dtype, const vnc_image *dx, void *dweight,
                                   void *dbias);

#ifdef __cplusplus
}
#endif
#endif
