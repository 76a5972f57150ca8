/* vnc/nn_fused.h — the row kernels of vnc/nn.h with a row epilogue: a callback that runs on
 * each block of finished output rows, on the pool thread that computed them, while they are
 * still in cache. Compiled graphs use it to run the pointwise consumer of a softmax or layer
 * norm (a residual add after layer_norm_backward, a scale after softmax) without a second
 * pass over memory, as vnc_gemm_fused does for products (vnc/gemm.h).
 *
 *     static void epilogue(void *ctx, int64_t r0, int64_t r1) {  rows [r0, r1) of out are final  }
 *     vnc_softmax_fused(s, "aten::_softmax", 0, &x, &out, epilogue, &ctx);
 *
 * Contract, for every entry point: a row is the kernel's output row (softmax: index
 * o * inner + i of vnc_rows; layer norm: one of the M rows); `epilogue` is called on disjoint
 * ranges covering every row exactly once, each after the rows' values (and, for
 * vnc_layer_norm_fused, their mean and rstd) are stored; calls may run concurrently on
 * different threads, so the epilogue must touch only its own rows of whatever it writes.
 * It is not called when the output has no elements. A NULL epilogue is the plain kernel of
 * vnc/nn.h (which calls these with NULL). Kept out of vnc/nn.h and vnc/vnc.h so that the eager
 * glue does not depend on it; generated code reaches it through vnc/jit_graph.h.
 */
#ifndef VNC_NN_FUSED_H
#define VNC_NN_FUSED_H

#include <stdint.h>
#include "nn.h"
#include "threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* vnc_softmax, then `epilogue` on finished rows of out. */
vnc_status vnc_softmax_fused(vnc_stream *s, const char *op, int log, const vnc_rows *x, const vnc_rows *out,
                             vnc_range_fn epilogue, void *epilogue_ctx);
/* vnc_softmax_backward, then `epilogue` on finished rows of grad_in. */
vnc_status vnc_softmax_backward_fused(vnc_stream *s, const char *op, int log, const vnc_rows *grad,
                                      const vnc_rows *y, const vnc_rows *grad_in, vnc_range_fn epilogue,
                                      void *epilogue_ctx);
/* vnc_layer_norm, then `epilogue` on finished rows of y (mean and rstd of those rows stored). */
vnc_status vnc_layer_norm_fused(vnc_stream *s, const char *op, int64_t M, int64_t N, int32_t dtype, const void *x,
                                const void *weight, const void *bias, double eps, void *y, void *mean, void *rstd,
                                int32_t stat_dtype, vnc_range_fn epilogue, void *epilogue_ctx);
/* vnc_layer_norm_backward, then `epilogue` on finished rows of dx (dx must not be NULL when an
 * epilogue is given; dweight and dbias are complete only when the call returns). */
vnc_status vnc_layer_norm_backward_fused(vnc_stream *s, const char *op, int64_t M, int64_t N, int32_t dtype,
                                         const void *dy, const void *x, const void *mean, const void *rstd,
                                         int32_t stat_dtype, const void *weight, void *dx, void *dweight, void *dbias,
                                         vnc_range_fn epilogue, void *epilogue_ctx);

#ifdef __cplusplus
}
#endif
#endif
