/* vnc/iter.h — the strided iteration engine (the role of ATen's TensorIterator): broadcasting,
 * dimension reordering and coalescing, 64-bit byte offsets, threaded over linear ranges.
 * An op supplies only an inner loop over one run of elements. */
#ifndef VNC_ITER_H
#define VNC_ITER_H

#include <stdint.h>
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VNC_ITER_MAX_OPERANDS 8
#define VNC_ITER_GRAIN 32768 /* elements per parallel chunk at least */

enum {
  /* Keep logical row-major order, so `index` in the loop is the element's linear index
   * in operand 0 (RNG needs it); otherwise dims are reordered for memory locality. */
  VNC_ITER_KEEP_ORDER = 1
};

typedef struct vnc_iter {
  int nops, ndim;                  /* dims stored innermost first */
  int64_t numel;
  int64_t shape[VNC_MAX_DIMS];
  int64_t strides[VNC_ITER_MAX_OPERANDS][VNC_MAX_DIMS]; /* bytes */
  char *data[VNC_ITER_MAX_OPERANDS];
  int32_t dtypes[VNC_ITER_MAX_OPERANDS];
} vnc_iter;

/* Inner loop: n elements; operand k's first element at data[k], step strides[k] bytes;
 * `index` is the linear position of the first element in iteration order. */
typedef void (*vnc_loop_fn)(void *ctx, char **data, const int64_t *strides, int64_t n, int64_t index);

/* ops[0] is the output and defines the shape; the others broadcast to it. Fails with
 * VNC_ERR_INVALID_ARGUMENT naming both shapes when they do not broadcast. A caller that has
 * already computed the geometry (PyTorch's TensorIterator does) may fill vnc_iter itself. */
vnc_status vnc_iter_init(vnc_iter *it, int nops, const vnc_tensor *const *ops, int flags);
/* Runs `fn` over all elements, in parallel chunks of at least `grain` elements. */
void vnc_iter_for_each(const vnc_iter *it, vnc_loop_fn fn, void *ctx, int64_t grain);

#ifdef __cplusplus
}
#endif
#endif
