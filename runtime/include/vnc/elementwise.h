/* vnc/elementwise.h — launching the elementwise instruction set (vnc/ew_table.h).
 *
 * The caller supplies the iteration geometry (operand 0 is the output, then the inputs, in
 * the op's order) — built with vnc_iter_init or taken from PyTorch's TensorIterator — and a
 * compute dtype: inputs of other dtypes are converted on the fly, the result is converted to
 * the output's dtype. Floating compute dtypes all compute in float32 (bfloat16 and float16
 * as PyTorch's CPU kernels do, the result rounded to them before an output of another dtype;
 * float64 by the device rule); complex128 through complex64.
 *
 *     vnc_iter it; const vnc_tensor *ops[3] = {&out, &a, &b};
 *     vnc_iter_init(&it, 3, ops, 0);
 *     vnc_ew_params p = {.f = {1.0}, .i = {1}};                  // alpha = 1
 *     vnc_elementwise(stream, "aten::add", VNC_EW_add, &it, VNC_FLOAT32, &p, 0, NULL);
 */
#ifndef VNC_ELEMENTWISE_H
#define VNC_ELEMENTWISE_H

#include <stdint.h>
#include "ew_table.h"
#include "iter.h"
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Scalar operands: bit k of scalar_mask marks operand k as a constant whose value (one
 * element of dtype it->dtypes[k]) is scalars[k]; its data pointer and strides are ignored. */
typedef unsigned char vnc_scalar_bytes[16];

/* 1 if `op` has a body for the type class of `compute_dtype`. */
int vnc_elementwise_supports(vnc_ew_op op, int32_t compute_dtype);
/* Number of inputs of `op` (1 to 3). */
int vnc_elementwise_arity(vnc_ew_op op);
/* The name of `op` ("add"). */
const char *vnc_elementwise_name(vnc_ew_op op);

/* Enqueues `op`. Fails before enqueueing with VNC_ERR_UNSUPPORTED ("<op_name> is not
 * implemented for <dtype>") or VNC_ERR_INVALID_ARGUMENT (operand count). Integer division
 * by zero fails at run time with "ZeroDivisionError" (sticky, like any kernel error). */
vnc_status vnc_elementwise(vnc_stream *s, const char *op_name, vnc_ew_op op, const vnc_iter *it,
                           int32_t compute_dtype, const vnc_ew_params *params,
                           uint32_t scalar_mask, const vnc_scalar_bytes *scalars);

/* Plan cache: each launch resolves a plan (kernel, conversions, contiguity, grain) keyed by
 * (op, dtypes, shape, strides) — never by parameter values. Bounded LRU
 * (TORCH_NEURONX_PLAN_CACHE_SIZE entries, default 4096). */
typedef struct vnc_plan_cache_stats {
  int64_t hits, misses, entries, evictions, capacity;
} vnc_plan_cache_stats;
void vnc_plan_cache_get_stats(vnc_plan_cache_stats *out);
void vnc_plan_cache_clear(void);

#ifdef __cplusplus
}
#endif
#endif
