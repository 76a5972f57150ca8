/* vnc/nn_fused.h — the row kernels of vnc/nn.h with row hooks: a *prologue* that computes
 * each block of input rows just before the kernel reads them, and an *epilogue* that runs on
 * each block of finished output rows, both on the pool thread that handles those rows, while
 * they are in cache. Compiled graphs use them to run the pointwise producer of a softmax or
 * layer norm's input (a residual add, a scale and mask) and its pointwise consumer (a residual
 * add after layer_norm_backward, a scale after softmax) without separate passes over memory,
 * as vnc_gemm_fused does for a product's consumer (vnc/gemm.h).
 *
 *     static void prologue(void *ctx, int64_t r0, int64_t r1) {  write rows [r0, r1) of x  }
 *     static void epilogue(void *ctx, int64_t r0, int64_t r1) {  rows [r0, r1) of out are final  }
 *     vnc_softmax_fused(s, "aten::_softmax", 0, &x, &out, prologue, epilogue, &ctx);
 *
 * Contract, for every entry point: a row is one of the kernel's rows (softmax: index
 * o * inner + i of vnc_rows; layer norm: one of the M rows). Each hook (either may be NULL)
 * is called on disjoint ranges covering every row exactly once: the prologue before the
 * kernel reads those rows of its row inputs (softmax: x, or grad and y; layer norm: x;
 * backward: dy and x; it may compute nothing else: weight, bias and statistics may be read
 * before it runs), and the epilogue after the rows' output values (and, for
 * vnc_layer_norm_fused, their mean and rstd) are stored. Calls may run concurrently on different threads, so a hook must touch only its own
 * rows of whatever it writes. Neither is called when the kernel has no elements to compute.
 * With both NULL these are the plain kernels of vnc/nn.h (which call them so). Kept out of
 * vnc/nn.h and vnc/vnc.h so that the eager glue does not depend on it; generated code reaches
 * it through vnc/jit_graph.h.
 */
#ifndef VNC_NN_FUSED_H
#define VNC_NN_FUSED_H

#include <stdint.h>
#include "nn.h"
#include "threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* vnc_softmax with row hooks (rows of x; rows of out). */
vnc_status vnc_softmax_fused(vnc_stream *s, const char *op, int log, const vnc_rows *x, const vnc_rows *out,
                             vnc_range_fn prologue, vnc_range_fn epilogue, void *ctx);
/* vnc_softmax_backward with row hooks (rows of grad and y; rows of grad_in). */
vnc_status vnc_softmax_backward_fused(vnc_stream *s, const char *op, int log, const vnc_rows *grad,
                                      const vnc_rows *y, const vnc_rows *grad_in, vnc_range_fn prologue,
                                      vnc_range_fn epilogue, void *ctx);
/* vnc_layer_norm with row hooks (rows of x; rows of y, their mean and rstd stored). */
vnc_status vnc_layer_norm_fused(vnc_stream *s, const char *op, int64_t M, int64_t N, int32_t dtype, const void *x,
                                const void *weight, const void *bias, double eps, void *y, void *mean, void *rstd,
                                int32_t stat_dtype, vnc_range_fn prologue, vnc_range_fn epilogue, void *ctx);
/* vnc_layer_norm_backward with row hooks (rows of dy and x; rows of dx, which must not be NULL
 * when an epilogue is given; dweight and dbias are complete only when the call returns). */
vnc_status vnc_layer_norm_backward_fused(vnc_stream *s, const char *op, int64_t M, int64_t N, int32_t dtype,
                                         const void *dy, const void *x, const void *mean, const void *rstd,
                                         int32_t stat_dtype, const void *weight, void *dx, void *dweight, void *dbias,
                                         vnc_range_fn prologue, vnc_range_fn epilogue, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
