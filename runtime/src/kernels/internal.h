/* Kernel-internal helpers shared by the kernels/ files (not installed). */
#ifndef VNC_KERNELS_INTERNAL_H
#define VNC_KERNELS_INTERNAL_H

#include "vnc/iter.h"
#include "vnc/stream.h"
#include "vnc/threadpool.h"

/* The copy/cast inner loop from dtype `src` to dtype `dst` (operands: dst, src); NULL unless
 * both are dtypes the kernels compute with (vnc_check_computed). */
vnc_loop_fn vnc_copy_loop(int32_t dst, int32_t src);

/* VNC_OK when each of the n dtypes is one the kernels compute with (vnc_dtype_size() != 0): the
 * loops of vnc_copy_loop, vnc_to_f32 and vnc_from_f32 and the runtime-typed loads and stores of
 * dtype.h exist for it. Else VNC_ERR_UNSUPPORTED naming op and the dtype (the PyTorch glue turns
 * it into the visible CPU fallback). Every kernel entry that converts or computes checks each
 * dtype it is given with it, on the caller's thread, before launching: the dtypes the device only
 * stores (float8, float4, uint16 to uint64, bits) reach only kernels that move bytes (vnc_copy
 * between equal dtypes, vnc_fill, vnc_index without a reduction, vnc_index_select). */
vnc_status vnc_check_computed(const char *op, int n, const int32_t *dtypes);
#define VNC_CHECK_COMPUTED(op, ...)                                                                    \
  do {                                                                                                 \
    const int32_t vnc_dts_[] = {__VA_ARGS__};                                                          \
    const vnc_status vnc_st_ = vnc_check_computed(op, (int)(sizeof vnc_dts_ / sizeof vnc_dts_[0]), vnc_dts_); \
    if (vnc_st_ != VNC_OK) return vnc_st_;                                                             \
  } while (0)
/* vnc_check_computed over the operands of an iterator built by the caller. */
vnc_status vnc_check_iter_computed(const char *op, const vnc_iter *it);
/* The integer dtype of `dtype`'s element width (uint8, int16, int32 or int64), for kernels that
 * move elements bit for bit; complex128 and unknown codes are returned unchanged. */
int32_t vnc_width_dtype(int32_t dtype);
/* vnc_width_dtype for the stored-only dtypes; computed dtypes are returned unchanged. */
int32_t vnc_byte_alias(int32_t dtype);

/* n elements of `dtype` at src (element stride `stride`) into contiguous floats, and back. */
void vnc_to_f32(float *dst, const void *src, int32_t dtype, int64_t stride, int64_t n);
void vnc_from_f32(void *dst, int32_t dtype, int64_t stride, const float *src, int64_t n);

/* Enqueues a task that runs fn(ctx, begin, end) over [0, n) on the thread pool in chunks of
 * at least `grain` units, ctx being the task's copy of `payload`; `release` (may be NULL) gets
 * that copy once, after the task ran or was dropped. The wrapper every "one parallel loop"
 * kernel would otherwise write. */
vnc_status vnc_launch_parallel(vnc_stream *s, const char *op, vnc_range_fn fn, int64_t n, int64_t grain,
                               const void *payload, size_t payload_size, vnc_release_fn release);

/* Runs fn over the elements [begin, end) of the iteration order on the calling thread
 * (a caller that fixes its own chunking, independent of the thread count). */
void vnc_iter_run(const vnc_iter *it, vnc_loop_fn fn, void *ctx, int64_t begin, int64_t end);

/* Kernels on at most this many elements launch with vnc_launch_small (run on the caller's
 * thread when the stream is idle): the hand-off to the worker costs more than they do. */
#define VNC_SMALL_TASK 4096

/* The canonical float sum of n contiguous floats (schedule of vnc/reduce.h). */
float vnc_canonical_sum(const float *x, int64_t n);
/* The canonical sum of (x[i] - shift)^2, each term rounded as computed alone. */
float vnc_canonical_sum_sq(const float *x, int64_t n, float shift);

/* Row-major float32 GEMM through BLAS: C = alpha * op(A) @ op(B) + beta * C. */
void vnc_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* vnc_sgemm, calling epilogue(ctx, row0 + i, row0 + i + m) on each tile of whole rows
 * [i, i + m) of C as soon as it is final, on the thread that computed it (cache-hot). */
void vnc_sgemm_rows(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc, vnc_range_fn epilogue,
                    void *epilogue_ctx, int64_t row0);

#endif
