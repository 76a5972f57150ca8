/* vnc/index.h — indexed copies: advanced indexing, gather/scatter (with reductions),
 * index_add/index_copy/index_fill, and nonzero.
 *
 * One engine serves them all, as in ATen's index kernels: the caller builds an iteration
 * (vnc_iter) whose operand 0 is the destination and operand 1 the source, and in which the
 * side being indexed has stride 0 along every indexed dim. Operands 2 .. 2+nidx-1 are int64
 * index tensors broadcast to the iteration shape. For element e the byte offset
 *     off(e) = sum_j idx_j[e] * strides[j]
 * is added to the indexed side:
 *     VNC_INDEX_GATHER:  dst[e]        = src[e] + off(e)          (index, gather)
 *     VNC_INDEX_SCATTER: dst[e] + off(e) (op)= src[e]            (index_put_, scatter, index_add)
 * dst and src have the same dtype: without a reduction any dtype the runtime stores (elements
 * move by their size, float8, uint16-64 and bits included); a reduction computes, in the dtypes
 * that define it (else VNC_ERR_UNSUPPORTED before anything is enqueued). Every index is checked against sizes[j] before anything is
 * written: outside [0, size) (or [-size, size) with VNC_INDEX_WRAP, negatives counting from the
 * end) the task fails with VNC_ERR_INDEX "index I is out of bounds for dimension D with size S".
 * Scatters with a reduction run serially in iteration order (every duplicate index is
 * applied, results do not depend on the thread count); plain copies run in parallel (with
 * duplicate indices one of the writes wins, as PyTorch documents).
 */
#ifndef VNC_INDEX_H
#define VNC_INDEX_H

#include <stdint.h>
#include "iter.h"
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VNC_INDEX_MAX 6 /* index operands: VNC_ITER_MAX_OPERANDS - 2 */

enum { VNC_INDEX_GATHER = 0, VNC_INDEX_SCATTER = 1 };
/* flags. VNC_INDEX_RANGE_AS_INVALID: an index out of range fails with VNC_ERR_INVALID_ARGUMENT
 * instead of VNC_ERR_INDEX (PyTorch raises RuntimeError for gather, scatter and index_add, and
 * IndexError for the other indexed copies). */
enum { VNC_INDEX_WRAP = 1, VNC_INDEX_RANGE_AS_INVALID = 2 };

/* Scatter reductions. MAX/MIN propagate NaN (as PyTorch's amax/amin); bool SUM is "or" and
 * PROD "and"; MAX/MIN are not defined for complex dtypes. */
typedef enum vnc_index_reduce {
  VNC_REDUCE_NONE = 0,
  VNC_REDUCE_SUM = 1,
  VNC_REDUCE_PROD = 2,
  VNC_REDUCE_MAX = 3,
  VNC_REDUCE_MIN = 4
} vnc_index_reduce;

/* `dim` names the indexed dim in error messages (the first one when nidx > 1). */
vnc_status vnc_index(vnc_stream *s, const char *op, const vnc_iter *it, int direction, int nidx,
                     const int64_t *sizes, const int64_t *strides, int64_t dim, int flags,
                     vnc_index_reduce reduce);

/* Number of nonzero elements of `x` (any strides; NaN and -0.0 as PyTorch: NaN counts,
 * -0.0 does not) into *count, a host location written when the task runs: synchronize
 * the stream before reading it. */
vnc_status vnc_count_nonzero(vnc_stream *s, const char *op, const vnc_tensor *x, int64_t *count);
/* Row-major coordinates of the `count` nonzero elements of `x` into out [count, ndim] (int64;
 * element (r, d) at out[r * row_step + d * col_step]); `count` must equal the number
 * vnc_count_nonzero gave, else VNC_ERR_INVALID_ARGUMENT. */
vnc_status vnc_nonzero(vnc_stream *s, const char *op, const vnc_tensor *x, int64_t *out, int64_t count,
                       int64_t row_step, int64_t col_step);

#ifdef __cplusplus
}
#endif
#endif
