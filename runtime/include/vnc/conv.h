/* vnc/conv.h — convolution (1-D to 3-D, plain and transposed; im2col + BLAS GEMM, a direct
 * depthwise kernel, channels_last depthwise and pointwise convolutions in their layout),
 * unfold/fold, batch norm, max and adaptive average pooling. Tensors are contiguous; floating dtypes compute in float32
 * (float64 by the device rule).
 *
 * Convolution: out[n, g*Og+o, y, x] = bias[o] + sum over (c, i, j) of
 *   w[g*Og+o, c, i, j] * in[n, g*Cg+c, y*sh - ph + i*dh, x*sw - pw + j*dw]  (zero outside).
 */
#ifndef VNC_CONV_H
#define VNC_CONV_H

#include <stdint.h>
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A convolution with 1 to 3 spatial dims (arrays: the first `nspatial` entries, outermost
 * first), plain or transposed, on contiguous tensors:
 *   plain:      input [N, C, in...], weight [O, C / groups, k...], output [N, O, out...],
 *               out = (in + 2 pad - dil (k - 1) - 1) / stride + 1;
 *   transposed: input [N, C, in...], weight [C, O / groups, k...], output [N, O, out...],
 *               the adjoint of the plain convolution from [N, O, out...] to [N, C, in...]
 *               (out = (in - 1) stride - 2 pad + dil (k - 1) + output_padding + 1; the
 *               caller passes it). bias: [O] or NULL.
 * Products run through BLAS sgemm per (sample, group); im2col rows and col2im channels in
 * parallel. A depthwise convolution (plain, groups == C > 1, any channel multiplier O / C)
 * runs as a direct kernel instead: per (sample, channel) plane, each output row a sum of
 * shifted input rows (its forward and input gradient), the weight gradient per (sample,
 * channel) in fixed lanes, samples then added in order. Every sum has a fixed order
 * (results never depend on the thread count).
 *
 * channels_last: input, output, grad_out and grad_input are [N, spatial..., C] (PyTorch's
 * channels_last / channels_last_3d memory order); the weight stays [O, C / groups, k...].
 * Only where vnc_conv_channels_last_ok() holds (else VNC_ERR_INVALID_ARGUMENT): a depthwise
 * convolution (channels innermost in its loops) or a pointwise one (k = 1, stride 1, no
 * padding, one group: one GEMM [N * spatial, C] x [C, O]). */
typedef struct vnc_conv_params {
  int32_t nspatial, transposed;
  int64_t N, C, O, groups;
  int64_t in[3], k[3], out[3], stride[3], pad[3], dil[3];
  int32_t dtype;
  int32_t channels_last;
} vnc_conv_params;

/* 1 when the convolution p describes runs in the channels_last layout without a copy (see
 * above): plain, and depthwise or pointwise. */
int vnc_conv_channels_last_ok(const vnc_conv_params *p);

vnc_status vnc_conv_forward(vnc_stream *s, const char *op, const vnc_conv_params *p, const void *input,
                            const void *weight, const void *bias, void *out);
/* Gradients of input, weight and bias (each may be NULL: not wanted) from grad_out (the
 * output's shape); the weight gradient sums samples in order. */
vnc_status vnc_conv_backward(vnc_stream *s, const char *op, const vnc_conv_params *p, const void *grad_out,
                             const void *input, const void *weight, void *grad_input, void *grad_weight,
                             void *grad_bias);

/* Unfold (im2col, F.unfold) and fold (col2im, F.fold), each the other's adjoint, on
 * contiguous tensors, with the convolution's geometry (nspatial, N, C, in, k, out, stride,
 * pad, dil, dtype; O, groups and transposed are ignored):
 *   vnc_unfold: input [N, C, in...] -> col [N, C * K, L], K = prod(k), L = prod(out),
 *     col[n, c*K + kk, l] = input[n, c, l*stride - pad + kk*dil] (per dim; zero outside);
 *   vnc_fold:   col [N, C * K, L] -> out [N, C, in...], the sum of the entries landing on each
 *     element (kernel offsets in order, as ATen's col2im), zero where none does.
 * out[i] must be (in[i] + 2 pad[i] - dil[i] (k[i] - 1) - 1) / stride[i] + 1 >= 1. Floating
 * dtypes and bool compute in float32 (float64 by the device rule; bool's fold is a logical or,
 * as ATen's bool +=); others: VNC_ERR_UNSUPPORTED. */
vnc_status vnc_unfold(vnc_stream *s, const char *op, const vnc_conv_params *p, const void *input, void *col);
vnc_status vnc_fold(vnc_stream *s, const char *op, const vnc_conv_params *p, const void *col, void *out);

/* The 2-D plain convolution (vnc_conv_forward with nspatial = 2), kept for generated code. */
typedef struct vnc_conv2d {
  int64_t N, C, H, W;     /* input */
  int64_t O, KH, KW;      /* weight: O x (C / groups) x KH x KW */
  int64_t OH, OW;         /* output */
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int32_t dtype;
} vnc_conv2d;

vnc_status vnc_conv2d_forward(vnc_stream *s, const char *op, const vnc_conv2d *p, const void *input,
                              const void *weight, const void *bias, void *out);
/* Any of grad_input, grad_weight, grad_bias may be NULL (not wanted). */
vnc_status vnc_conv2d_backward(vnc_stream *s, const char *op, const vnc_conv2d *p, const void *grad_out,
                               const void *input, const void *weight, void *grad_input, void *grad_weight,
                               void *grad_bias);

/* Batch norm over N x C x S (S = spatial size). Training: batch statistics (biased variance
 * normalises; running stats, if given, move by momentum with the unbiased variance) are
 * written to save_mean/save_invstd (C floats). Eval: running stats normalise. weight, bias,
 * running_mean, running_var may be NULL. Parameters and stats have `param_dtype`. */
vnc_status vnc_batch_norm(vnc_stream *s, const char *op, int64_t N, int64_t C, int64_t S, int32_t dtype,
                          const void *x, const void *weight, const void *bias, void *running_mean, void *running_var,
                          int32_t param_dtype, int training, double momentum, double eps, void *y,
                          void *save_mean, void *save_invstd);
/* Gradients; training uses save_mean/save_invstd, eval running stats. NULL outputs are skipped. */
vnc_status vnc_batch_norm_backward(vnc_stream *s, const char *op, int64_t N, int64_t C, int64_t S, int32_t dtype,
                                   const void *dy, const void *x, const void *weight, const void *running_mean,
                                   const void *running_var, const void *save_mean, const void *save_invstd,
                                   int32_t param_dtype, int training, double eps, void *dx, void *dweight,
                                   void *dbias);

typedef struct vnc_pool2d {
  int64_t N, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
  int32_t dtype;
} vnc_pool2d;

/* Max pooling with int64 indices (flat h * W + w per plane); NaN wins, first on ties. */
vnc_status vnc_max_pool2d(vnc_stream *s, const char *op, const vnc_pool2d *p, const void *x, void *out,
                          int64_t *indices);
vnc_status vnc_max_pool2d_backward(vnc_stream *s, const char *op, const vnc_pool2d *p, const void *grad_out,
                                   const int64_t *indices, void *grad_in);
/* Adaptive average pooling of (N*C) planes H x W to OH x OW (PyTorch's start/end bins). */
vnc_status vnc_adaptive_avg_pool2d(vnc_stream *s, const char *op, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                   int64_t OW, int32_t dtype, const void *x, void *out);
vnc_status vnc_adaptive_avg_pool2d_backward(vnc_stream *s, const char *op, int64_t planes, int64_t H, int64_t W,
                                            int64_t OH, int64_t OW, int32_t dtype, const void *grad_out, void *grad_in);

#ifdef __cplusplus
}
#endif
#endif
