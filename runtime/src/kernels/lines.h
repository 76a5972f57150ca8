/* Lines: the 1-D slices of tensors along one dim, enumerated over the other dims (outermost
 * first, the last other dim fastest). Shared by sort.c and scan.c (not installed). */
#ifndef VNC_KERNELS_LINES_H
#define VNC_KERNELS_LINES_H

#include <stdint.h>
#include "vnc/status.h"
#include "vnc/tensor.h"

#define VNC_LINES_MAX_OPS 4

typedef struct vnc_lines {
  int32_t ndim;                  /* dims other than the line dim */
  int64_t sizes[VNC_MAX_DIMS];   /* their sizes, outermost first */
  int64_t count;                 /* number of lines: product of sizes */
  int nops;
  char *data[VNC_LINES_MAX_OPS];
  int32_t dtypes[VNC_LINES_MAX_OPS];
  int64_t es[VNC_LINES_MAX_OPS];   /* element size in bytes */
  int64_t len[VNC_LINES_MAX_OPS];  /* line length (may differ per operand: topk, searchsorted) */
  int64_t step[VNC_LINES_MAX_OPS]; /* bytes between elements of a line */
  int64_t strides[VNC_LINES_MAX_OPS][VNC_MAX_DIMS]; /* bytes, per other dim */
} vnc_lines;

/* Lines of `nops` tensors of equal ndim along `dim` (negative counts from the end; ignored
 * for 0-dim tensors, which are one line of one element). Sizes other than dim must match. */
static inline vnc_status vnc_lines_init(vnc_lines *l, int nops, const vnc_tensor *const *ts, int dim, const char *op) {
  const int32_t nd = ts[0]->ndim;
  if (nops > VNC_LINES_MAX_OPS) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: too many operands", op);
  int d = nd == 0 ? 0 : dim < 0 ? dim + nd : dim;
  if (nd > 0 && (d < 0 || d >= nd))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: dim %d out of range for %d dims", op, dim, (int)nd);
  l->nops = nops;
  l->ndim = nd > 0 ? nd - 1 : 0;
  l->count = 1;
  for (int o = 0; o < nops; o++) {
    const vnc_tensor *t = ts[o];
    if (t->ndim != nd) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: operands differ in dims", op);
    l->data[o] = t->data;
    l->dtypes[o] = t->dtype;
    l->es[o] = (int64_t)vnc_dtype_size(t->dtype);
    if (l->es[o] == 0) return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: unknown dtype %d", op, (int)t->dtype);
    l->len[o] = nd ? t->sizes[d] : 1;
    l->step[o] = nd ? t->strides[d] * l->es[o] : 0;
    for (int i = 0, k = 0; i < nd; i++) {
      if (i == d) continue;
      if (t->sizes[i] != ts[0]->sizes[i])
        return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: operand sizes differ in dim %d", op, i);
      l->sizes[k] = t->sizes[i];
      l->strides[o][k] = t->strides[i] * l->es[o];
      k++;
    }
  }
  for (int k = 0; k < l->ndim; k++) l->count *= l->sizes[k];
  return VNC_OK;
}

/* Base address of line `line` (0 <= line < count) of every operand. */
static inline void vnc_lines_base(const vnc_lines *l, int64_t line, char **ptrs) {
  for (int o = 0; o < l->nops; o++) ptrs[o] = l->data[o];
  for (int k = l->ndim - 1; k >= 0; k--) {
    int64_t i = line % l->sizes[k];
    line /= l->sizes[k];
    for (int o = 0; o < l->nops; o++) ptrs[o] += i * l->strides[o][k];
  }
}

#endif
