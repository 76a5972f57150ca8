/* vnc/gemm.h — batched matrix multiplication through BLAS (OpenBLAS, scipy-openblas32).
 *
 * C[b] = alpha * A[b] @ B[b] + beta * C[b] for b < batch, with A[b] M x K, B[b] K x N and
 * C[b] M x N, each given by a base pointer and element strides (any strides; operands
 * without a unit stride are packed first). Floating dtypes compute in float32 (float64 by
 * the device rule; bfloat16/float16 converted to float32 and back); integer dtypes
 * accumulate exactly in int64. beta == 0 ignores C's contents (NaN included), as BLAS.
 *
 *     vnc_matrix a = {pa, 0, K, 1, VNC_FLOAT32}, b = {pb, 0, N, 1, VNC_FLOAT32}, c = {pc, 0, N, 1, VNC_FLOAT32};
 *     vnc_gemm(stream, "aten::mm", 1, M, N, K, 1.0, &a, &b, 0.0, &c);
 */
#ifndef VNC_GEMM_H
#define VNC_GEMM_H

#include <stdint.h>
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vnc_matrix {
  void *data;
  int64_t batch_stride, row_stride, col_stride; /* elements */
  int32_t dtype;
} vnc_matrix;

/* Fails before enqueueing (VNC_ERR_INVALID_ARGUMENT) for mismatched dtypes or dims over
 * 2^31 - 1, (VNC_ERR_UNSUPPORTED) for complex or bool. */
vnc_status vnc_gemm(vnc_stream *s, const char *op, int64_t batch, int64_t M, int64_t N, int64_t K,
                    double alpha, const vnc_matrix *A, const vnc_matrix *B, double beta,
                    const vnc_matrix *C);

#ifdef __cplusplus
}
#endif
#endif
