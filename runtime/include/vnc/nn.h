/* vnc/nn.h — neural-network kernels: softmax family, layer norm, NLL loss, row gather and
 * scatter-add (index_select, embedding backward), index fills (arange, tril/triu).
 *
 * "Rows" address a tensor as [outer, n, inner] around one dim: element (o, j, i) lives at
 * data + o*outer_stride + j*stride + i*inner_stride (element strides), so any dim of any
 * strided tensor is a row set. Floating inputs compute in float32 (float64 by the device
 * rule), with the reduction schedule of vnc/reduce.h where a sum is taken.
 *
 * Index errors (a class or row index outside its range) fail the task with VNC_ERR_INDEX,
 * naming the op and the index, before anything out of range is read or written.
 */
#ifndef VNC_NN_H
#define VNC_NN_H

#include <stdint.h>
#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vnc_rows {
  void *data;
  int32_t dtype;
  int64_t outer, n, inner;                   /* sizes */
  int64_t outer_stride, stride, inner_stride; /* element strides */
} vnc_rows;

/* out = softmax(x) or log_softmax(x) along the rows (log != 0). */
vnc_status vnc_softmax(vnc_stream *s, const char *op, int log, const vnc_rows *x, const vnc_rows *out);
/* grad_in = y * (g - sum(g * y))            (softmax, y = output)
 * grad_in = g - exp(y) * sum(g)              (log_softmax, y = output) */
vnc_status vnc_softmax_backward(vnc_stream *s, const char *op, int log, const vnc_rows *grad,
                                const vnc_rows *y, const vnc_rows *grad_in);

/* Layer norm over the last N elements of M contiguous rows. weight/bias may be NULL.
 * mean and rstd (M floats of `stat_dtype`) receive the statistics (biased variance). */
vnc_status vnc_layer_norm(vnc_stream *s, const char *op, int64_t M, int64_t N, int32_t dtype,
                          const void *x, const void *weight, const void *bias, double eps, void *y,
                          void *mean, void *rstd, int32_t stat_dtype);
/* Gradients of layer norm; any of dx, dweight, dbias may be NULL (not wanted). */
vnc_status vnc_layer_norm_backward(vnc_stream *s, const char *op, int64_t M, int64_t N, int32_t dtype,
                                   const void *dy, const void *x, const void *mean, const void *rstd,
                                   int32_t stat_dtype, const void *weight, void *dx, void *dweight,
                                   void *dbias);

/* NLL loss of log-probabilities x [N, C] (contiguous) against int64 targets [N].
 * reduction: 0 none (out [N]), 1 mean, 2 sum. weight [C] may be NULL. total_weight receives
 * the summed weight of non-ignored targets. */
vnc_status vnc_nll_loss(vnc_stream *s, const char *op, int64_t N, int64_t C, int32_t dtype, const void *x,
                        const int64_t *target, const void *weight, int reduction, int64_t ignore_index,
                        void *out, void *total_weight);
/* grad_x [N, C] (contiguous, written whole) from grad_out (scalar or [N]). */
vnc_status vnc_nll_loss_backward(vnc_stream *s, const char *op, int64_t N, int64_t C, int32_t dtype,
                                 const void *grad_out, int64_t grad_out_stride, const int64_t *target,
                                 const void *weight, int reduction, int64_t ignore_index,
                                 const void *total_weight, void *grad_x);

/* out rows j = src rows index[j] (index: int64 or int32, `nidx` entries, element stride
 * `index_stride`); src and out are row sets with the same outer/inner. `dim` (the tensor dim
 * the rows run along) picks ATen's CPU error for an index outside [0, src->n): dim 1
 * VNC_ERR_INVALID_ARGUMENT "INDICES element is out of DATA bounds", others VNC_ERR_INDEX
 * "index out of range in self". */
vnc_status vnc_index_select(vnc_stream *s, const char *op, const vnc_rows *src, const void *index,
                            int32_t index_dtype, int64_t index_stride, int64_t nidx, int64_t dim,
                            const vnc_rows *out);
/* dst rows index[j] += scale_j * src rows j, in order of j (deterministic); rows equal to
 * skip_index are skipped; with by_freq, scale_j = 1 / count(index[j]). dst is zeroed first
 * when zero_first. */
vnc_status vnc_index_add_rows(vnc_stream *s, const char *op, const vnc_rows *dst, const void *index,
                              int32_t index_dtype, int64_t nidx, const vnc_rows *src, int64_t skip_index,
                              int by_freq, int zero_first);

/* Fills t (any strides, logical row-major order k) with start + k * step, computed in
 * double for floating dtypes and int64 for integers (as ATen's arange). */
vnc_status vnc_arange(vnc_stream *s, const char *op, const vnc_tensor *t, double start, double step,
                      int64_t istart, int64_t istep);
/* Fills the 1-D t (steps >= 2 elements, any stride) as ATen's linspace for integer outputs:
 * step = (end - start) / (steps - 1) in double; element i < steps / 2 is start + step * i,
 * the others end - step * (steps - 1 - i), each converted with a C cast (truncation). Any
 * real dtype (floating outputs get the double value rounded once). */
vnc_status vnc_linspace(vnc_stream *s, const char *op, const vnc_tensor *t, double start, double end, int64_t steps);
/* Zeroes the elements above (tril, upper = 0) or below (triu, upper = 1) diagonal `diag` of
 * each matrix in out, copying the rest from src (same shape, any strides). */
vnc_status vnc_tri(vnc_stream *s, const char *op, const vnc_tensor *src, const vnc_tensor *out, int upper,
                   int64_t diag);

#ifdef __cplusplus
}
#endif
#endif
