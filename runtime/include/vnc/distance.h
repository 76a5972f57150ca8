/* vnc/distance.h — pairwise p-norm distances between the rows of two batched matrices
 * (torch.cdist's _cdist_forward / _cdist_backward), with ATen's CPU formulas
 * (aten/src/ATen/native/cpu/DistanceOpsKernel.cpp, Dist<scalar_t>).
 *
 *   float x1[B][R1][M], x2[B][R2][M], d[B][R1][R2];
 *   vnc_cdist(s, "aten::_cdist_forward", B, R1, R2, M, 3.0, VNC_FLOAT32, x1, x2, d);
 *
 * Per pair of rows (a, b), with t = |a_k - b_k|:
 *   p = 0:   sum_k min(ceil(t), 1)       (the number of differing coordinates)
 *   p = 1:   sum_k t
 *   p = 2:   sqrt(sum_k t * t)            (the direct form; ATen's GEMM form is the caller's)
 *   p = inf: max_k t                      (std::max's NaN rule: a NaN term is skipped)
 *   else:    (sum_k t^p)^(1/p)
 * Sums run over k in order in float32 (float64 inputs too, by the device rule).
 *
 * The gradient with respect to x1 (x2's is the same call with the operands swapped and grad,
 * dist transposed): g1[i][k] = sum over j in order of f(a_k - b_k, grad[i][j], dist[i][j]),
 *   p = 0: 0;  p = 1: grad sign(diff);  p = 2: dist == 0 ? 0 : grad diff / dist;
 *   p = inf: grad sign(diff) (|diff| == dist);
 *   p < 2: dist == 0 or (diff == 0 and p < 1) ? 0 : sign(diff) |diff|^(p-1) grad / dist^(p-1);
 *   else: dist == 0 ? 0 : diff |diff|^(p-2) grad / dist^(p-1).
 * Tensors are contiguous; floating dtypes (others: VNC_ERR_UNSUPPORTED); p >= 0. */
#ifndef VNC_DISTANCE_H
#define VNC_DISTANCE_H

#include <stdint.h>
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dist[B][R1][R2] from x1[B][R1][M] and x2[B][R2][M], all of `dtype`. */
vnc_status vnc_cdist(vnc_stream *s, const char *op, int64_t B, int64_t R1, int64_t R2, int64_t M, double p,
                     int32_t dtype, const void *x1, const void *x2, void *dist);
/* grad_x1[B][R1][M] from grad[B][R1][R2], x1, x2 and the forward's dist[B][R1][R2]. */
vnc_status vnc_cdist_backward(vnc_stream *s, const char *op, int64_t B, int64_t R1, int64_t R2, int64_t M, double p,
                              int32_t dtype, const void *grad, const void *x1, const void *x2, const void *dist,
                              void *grad_x1);

#ifdef __cplusplus
}
#endif
#endif
