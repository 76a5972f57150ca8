/* vnc/reduce.h — reductions over the dims of an iteration geometry.
 *
 * The geometry is the one PyTorch's reduction TensorIterator builds (make_reduction):
 * operands 0..nout-1 are outputs whose strides are 0 along the reduced dims, the last
 * operand is the input. Floating inputs (float16, bfloat16, float32, float64 by the device
 * rule) accumulate in float32, integers in int64, any/all in bool.
 *
 * Order: each output's reduction follows one fixed schedule that depends on the geometry
 * alone, never on the thread count: the reduced index range is cut into chunks of
 * VNC_REDUCE_CHUNK elements, each chunk into blocks of VNC_REDUCE_BLOCK elements, each block
 * into runs of 128 elements summed in 8 interleaved lanes; runs, blocks and chunks are
 * combined pairwise. Fused and compiled code
 * following the same schedule reproduce results bit for bit.
 *
 *     vnc_reduce(stream, "aten::sum", VNC_RED_SUM, &it, 1, NULL);
 */
#ifndef VNC_REDUCE_H
#define VNC_REDUCE_H

#include <stdint.h>
#include "iter.h"
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VNC_REDUCE_BLOCK 4096
#define VNC_REDUCE_CHUNK 65536

typedef enum vnc_reduce_op {
  VNC_RED_SUM,
  VNC_RED_MEAN,      /* sum / count */
  VNC_RED_PROD,
  VNC_RED_AMAX,      /* NaN propagates */
  VNC_RED_AMIN,
  VNC_RED_MAX_INDEX, /* outputs: values, int64 indices (first index on ties; first NaN wins) */
  VNC_RED_MIN_INDEX,
  VNC_RED_ARGMAX,    /* output: int64 indices only */
  VNC_RED_ARGMIN,
  VNC_RED_ANY,
  VNC_RED_ALL,
  VNC_RED_NORM,      /* params.p: 0 (count nonzero), inf, -inf, or any p > 0 */
  VNC_RED_VAR,       /* params.correction; params.take_sqrt for std; two passes */
  VNC_RED_COUNT
} vnc_reduce_op;

typedef struct vnc_reduce_params {
  double p;          /* norm order */
  double correction; /* var/std: divisor is count - correction */
  int32_t take_sqrt; /* std */
} vnc_reduce_params;

/* Enqueues the reduction. `nout` is 1, or 2 for MAX_INDEX/MIN_INDEX. A reduction over zero
 * elements writes the identity (sum 0, prod 1, any false, all true) or NaN (mean, var);
 * max/min/arg* over zero elements are refused with VNC_ERR_INVALID_ARGUMENT (callers raise
 * PyTorch's error first). */
vnc_status vnc_reduce(vnc_stream *s, const char *op_name, vnc_reduce_op op, const vnc_iter *it,
                      int nout, const vnc_reduce_params *params);

/* A pointwise producer fused into a reduction: writes the values of `n` consecutive reduced
 * elements to out (float32 for floating reductions, int64 for integer ones), given each
 * producer input's address of the first of them and byte stride along them. */
typedef void (*vnc_reduce_producer)(void *ctx, char *const *in, const int64_t *strides, int64_t n, void *out);

/* vnc_reduce of values computed on the fly instead of read: operands nout..it->nops-1 of `it`
 * are the producer's inputs in the reduction's geometry, `value_dtype` the dtype of the
 * values (it picks the accumulation, as the input dtype does for vnc_reduce). Same schedule,
 * hence the same result as reducing the stored values. `ctx` must stay valid until the task
 * has run (a compiled graph calls this inline). */
vnc_status vnc_reduce_fused(vnc_stream *s, const char *op_name, vnc_reduce_op op, const vnc_iter *it, int nout,
                            const vnc_reduce_params *params, int32_t value_dtype, vnc_reduce_producer producer,
                            void *ctx);

#ifdef __cplusplus
}
#endif
#endif
