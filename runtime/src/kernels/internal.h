/* Kernel-internal helpers shared by the kernels/ files (not installed). */
#ifndef VNC_KERNELS_INTERNAL_H
#define VNC_KERNELS_INTERNAL_H

#include "vnc/iter.h"

/* The copy/cast inner loop from dtype `src` to dtype `dst` (operands: dst, src). */
vnc_loop_fn vnc_copy_loop(int32_t dst, int32_t src);

/* The canonical float sum of n contiguous floats (schedule of vnc/reduce.h). */
float vnc_canonical_sum(const float *x, int64_t n);

#endif
