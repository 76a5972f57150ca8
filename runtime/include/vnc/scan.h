/* vnc/scan.h — scans (cumulative sum, product, log-sum-exp, max, min) and log-sum-exp reduction along one dim.
 *
 * x and out have the same sizes and any strides (0-dim: one element). Order is fixed by the
 * shape alone: each line along `dim` is combined from index 0 upward, one element at a time,
 * whatever the thread count; lines are processed in parallel, in tiles of neighbouring lines.
 *
 * Accumulation follows out's dtype: floating outputs (float16, bfloat16, float32, float64 by
 * the device rule) accumulate in float32 — sums with Kahan compensation —, integer and bool
 * outputs in int64 (wrapping), stored with C casts. x is read in its own dtype and converted
 * as C casts do (callers that need ATen's "cast the input to the result dtype first" pass x
 * already converted). Complex dtypes are refused with VNC_ERR_UNSUPPORTED.
 *
 *     vnc_scan(stream, "aten::cumsum", VNC_SCAN_SUM, &x, 0, &out);
 */
#ifndef VNC_SCAN_H
#define VNC_SCAN_H

#include <stdint.h>
#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vnc_scan_op {
  VNC_SCAN_SUM,          /* out[j] = x[0] + ... + x[j] */
  VNC_SCAN_PROD,         /* out[j] = x[0] * ... * x[j] */
  VNC_SCAN_LOGSUMEXP     /* out[j] = log(exp(x[0]) + ... + exp(x[j])); floating outputs only */
} vnc_scan_op;

vnc_status vnc_scan(vnc_stream *s, const char *op_name, vnc_scan_op op, const vnc_tensor *x, int dim,
                    const vnc_tensor *out);

/* out[r] = log(sum_j exp(x[r, j])) over the last dim of x [rows, n] (any strides), computed in
 * float32 as max + log(sum exp(x - max)) with the canonical sum of vnc/reduce.h; an infinite
 * max is used as is (all -inf gives -inf, any +inf gives +inf), NaN propagates. n == 0 gives
 * -inf. x and out are floating; out is [rows] (any stride). */
vnc_status vnc_logsumexp(vnc_stream *s, const char *op_name, const vnc_tensor *x, const vnc_tensor *out);

/* Running maximum (is_max) or minimum along `dim`: values[j] = the extreme of x[0..j] (x's
 * dtype, the element's bytes copied), indices[j] (int64) = its position. As ATen's
 * cummax/cummin: a later equal value takes over the index; once a NaN is met it stays, with
 * the index of that first NaN. Real dtypes and bool (floating compare in float32, the
 * device rule for float64; integers in int64). values and indices have x's sizes. */
vnc_status vnc_cum_extreme(vnc_stream *s, const char *op_name, const vnc_tensor *x, int dim, int is_max,
                           const vnc_tensor *values, const vnc_tensor *indices);

#ifdef __cplusplus
}
#endif
#endif
