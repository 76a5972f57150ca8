/* vnc/embedding_bag.h — embedding bags (torch.nn.EmbeddingBag / F.embedding_bag) and their
 * gradients.
 *
 * indices (1-D, n entries) pick rows of weight [num_weights, D]; offsets (1-D) start the bags:
 * bag b holds entries [offsets[b], offsets[b + 1]) — the last bag runs to n, or, with
 * include_last_offset, the last offset closes the previous bag. Entries equal to padding_idx
 * (-1: none) belong to no bag's reduction. Per bag b and column d:
 *   VNC_BAG_SUM   out = sum of weight[idx, d] (times per_sample_weights[i] when given);
 *   VNC_BAG_MEAN  out = that sum / bag_size[b] (0 for an empty bag);
 *   VNC_BAG_MAX   out = the max, max_indices[b, d] = its row (first on ties; 0 / row 0 for an
 *                 empty bag, as ATen's CPU kernel).
 * Side outputs, as ATen's: offset2bag[i] = the bag of entry i, bag_size[b] = the bag's
 * non-padding entries (0 in sum mode), both int64. Sums are in float32, each bag in entry order; bags run in
 * parallel. indices/offsets are int32 or int64 (one dtype); weight, per_sample_weights, out
 * share a floating dtype (float64 through float32). Any strides. Indices, offsets
 * (offsets[0] == 0, non-decreasing, <= n) are validated in the task: a bad one fails it
 * (VNC_ERR_INVALID_ARGUMENT: PyTorch raises RuntimeError) with ATen's message and nothing is
 * written past the checks.
 *
 *     vnc_embedding_bag(stream, "aten::_embedding_bag", &a, &out, &offset2bag, &bag_size, NULL);
 */
#ifndef VNC_EMBEDDING_BAG_H
#define VNC_EMBEDDING_BAG_H

#include <stdint.h>
#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vnc_bag_mode { VNC_BAG_SUM = 0, VNC_BAG_MEAN = 1, VNC_BAG_MAX = 2 } vnc_bag_mode; /* ATen's codes */

typedef struct vnc_bag_args {
  vnc_tensor weight;              /* [num_weights, D] (the dense backward reads only its sizes, dtype) */
  vnc_tensor indices, offsets;    /* 1-D; the backward functions ignore offsets (they read offset2bag) */
  const vnc_tensor *per_sample_weights; /* [n] or NULL (VNC_BAG_SUM only) */
  vnc_bag_mode mode;
  int include_last_offset;
  int64_t padding_idx;            /* -1: none */
} vnc_bag_args;

/* Forward: out [bags, D], offset2bag [n], bag_size [bags] (int64); max_indices [bags, D]
 * (int64) for VNC_BAG_MAX, else NULL. */
vnc_status vnc_embedding_bag(vnc_stream *s, const char *op, const vnc_bag_args *a, const vnc_tensor *out,
                             const vnc_tensor *offset2bag, const vnc_tensor *bag_size,
                             const vnc_tensor *max_indices);

/* Gradient of weight (grad_weight [num_weights, D], fully written) from grad [bags, D] and the
 * forward's offset2bag (each entry's bag, validated), bag_size and max_indices: each non-padding entry i adds its bag's
 * gradient row to row indices[i], scaled by per_sample_weights[i] (sum), 1 / bag_size (mean)
 * and, with scale_grad_by_freq, 1 / the number of entries of that row; max mode adds
 * grad[b, d] to grad_weight[max_indices[b, d], d] for non-empty bags. Entries are added in
 * order (columns in parallel), so sums never depend on the thread count. */
vnc_status vnc_embedding_bag_backward(vnc_stream *s, const char *op, const vnc_bag_args *a, const vnc_tensor *grad,
                                      const vnc_tensor *offset2bag, const vnc_tensor *bag_size,
                                      const vnc_tensor *max_indices, int scale_grad_by_freq,
                                      const vnc_tensor *grad_weight);

/* Gradient of per_sample_weights (sum mode): out[i] = dot(grad[offset2bag[i]], weight[indices[i]])
 * in float32 (entry order over d), 0 for padding entries. out [n] has weight's dtype. */
vnc_status vnc_embedding_bag_psw_backward(vnc_stream *s, const char *op, const vnc_bag_args *a, const vnc_tensor *grad,
                                          const vnc_tensor *offset2bag, const vnc_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
