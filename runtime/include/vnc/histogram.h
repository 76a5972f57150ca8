/* vnc/histogram.h — histograms of floating tensors (torch.histc, torch.histogram).
 *
 * Every element v of x (any shape and strides) with edges[0] <= v <= edges[B] adds its weight
 * (1, or the matching element of `weight`, x's shape) to bin pos of hist (B bins): bins hold
 * [edges[i], edges[i+1]) except the last, which also holds its right edge; NaN and values
 * outside the edges are skipped. pos is found as ATen's CPU kernel finds it
 * (aten/src/ATen/native/cpu/HistogramKernel.cpp):
 *   VNC_BINS_LINEAR         (int64)((v - e0) * B / (eB - e0)), in float32 (torch.histc);
 *   VNC_BINS_LINEAR_SEARCH  the same, corrected to the neighbouring bin the edges say
 *                           (torch.histogram with a bin count: edges from linspace);
 *   VNC_BINS_SEARCH         binary search in the edges (torch.histogram with given edges).
 * Sums run in double over fixed chunks of elements combined in chunk order, then are stored
 * once: results never depend on the thread count. x, weight, edges and hist share one
 * floating dtype (float64 through float32, the device rule); edges and hist are 1-D at any
 * stride, hist is fully written.
 *
 *     vnc_histogram(stream, "aten::histc", &x, NULL, &edges, VNC_BINS_LINEAR, &hist);
 */
#ifndef VNC_HISTOGRAM_H
#define VNC_HISTOGRAM_H

#include <stdint.h>
#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vnc_bins_mode { VNC_BINS_LINEAR, VNC_BINS_LINEAR_SEARCH, VNC_BINS_SEARCH } vnc_bins_mode;

/* weight may be NULL. Fails with VNC_ERR_INVALID_ARGUMENT when edges is not B + 1 elements
 * for hist's B >= 1, or the dtypes or shapes disagree; VNC_ERR_UNSUPPORTED for non-floating x. */
vnc_status vnc_histogram(vnc_stream *s, const char *op, const vnc_tensor *x, const vnc_tensor *weight,
                         const vnc_tensor *edges, vnc_bins_mode mode, const vnc_tensor *hist);

#ifdef __cplusplus
}
#endif
#endif
