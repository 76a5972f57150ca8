/* vnc/gemm.h — batched matrix multiplication through BLAS (OpenBLAS from scipy-openblas32, or
 * the sgemm installed by vnc_gemm_set_provider).
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
#include "threadpool.h"

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

/* vnc_gemm, then `epilogue(epilogue_ctx, r0, r1)` on rows [r0, r1) of C (rows numbered across
 * the batch: b * M + i) once their values are final: tile by tile, on the pool thread that
 * computed the tile, while it is in cache (a compiled graph runs the pointwise consumer of the
 * product there: bias, activation, residual add). Every row is passed exactly once; calls
 * for disjoint ranges may run concurrently. NULL epilogue: vnc_gemm. */
vnc_status vnc_gemm_fused(vnc_stream *s, const char *op, int64_t batch, int64_t M, int64_t N, int64_t K,
                          double alpha, const vnc_matrix *A, const vnc_matrix *B, double beta,
                          const vnc_matrix *C, vnc_range_fn epilogue, void *epilogue_ctx);

/* A BLAS sgemm with the Fortran interface (column-major, arguments by reference). */
typedef void (*vnc_sgemm_fn)(const char *trans_a, const char *trans_b, const int *m, const int *n, const int *k,
                             const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
                             const float *beta, float *c, const int *ldc);

/* Routes every float32 product (GEMM, convolution, ...) to `sgemm`, called on the runtime's
 * pool threads one tile at a time; `set_local_threads`, when given, is called with 1 on the
 * calling thread first, so a threaded BLAS computes each tile on that thread alone, and with
 * the value it returned afterwards (MKL's mkl_set_num_threads_local contract). NULL
 * `sgemm` restores the built-in OpenBLAS. Call before the first product. */
void vnc_gemm_set_provider(const char *name, vnc_sgemm_fn sgemm, int (*set_local_threads)(int));
/* "openblas" or the name given to vnc_gemm_set_provider. */
const char *vnc_gemm_provider(void);

#ifdef __cplusplus
}
#endif
#endif
