/* vnc/sort.h — sorting, selection, binary search and sampling kernels.
 *
 * A "line" is a 1-D slice of a tensor along one dim (`dim`); every kernel here works on each
 * line independently, in parallel over lines, with any strides (negative and zero included)
 * and 0-dim tensors (one line of one element). Tensors of one call share the sizes of every
 * dim but `dim`.
 *
 * Order: elements compare by a monotone 64-bit key of their value — NaN above +inf (every
 * NaN equal), -0.0 equal to +0.0, float16/bfloat16 exactly, float64 through float32 (the
 * device rule). Sorts are stable: equal keys keep their original order, which is also a
 * valid result for a caller that did not ask for stability. Descending order reverses the
 * key order but still keeps equal keys in their original order (as ATen's stable sort).
 *
 * Random kernels draw from Philox4x32-10 (see vnc/kernels.h): element k of the draw uses
 * counter offset + k under `seed`; callers advance their offset by
 * vnc_rng_offset_increment(count) with the count each function names.
 *
 *     vnc_sort(stream, "aten::sort", &x, -1, 0, &values, &indices);
 *
 * Dtypes: every real dtype and bool (uint8, int8/16/32/64, float16, bfloat16, float32,
 * float64); complex is refused with VNC_ERR_UNSUPPORTED.
 */
#ifndef VNC_SORT_H
#define VNC_SORT_H

#include <stdint.h>
#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* values = x sorted along `dim` (ascending, or descending when `descending`), indices (int64)
 * = the positions the values came from. values: x's dtype and shape; either output may be
 * NULL. The outputs may alias x exactly (each line is read whole before it is written). */
vnc_status vnc_sort(vnc_stream *s, const char *op, const vnc_tensor *x, int dim, int descending,
                    const vnc_tensor *values, const vnc_tensor *indices);

/* The k largest (largest != 0) or smallest entries of each line, in sorted order, ties in
 * original order: values (x's dtype) and int64 indices of size k along `dim`. 0 <= k <= n. */
vnc_status vnc_topk(vnc_stream *s, const char *op, const vnc_tensor *x, int dim, int64_t k, int largest,
                    const vnc_tensor *values, const vnc_tensor *indices);

/* out (int64 or int32, values' shape) = for each value v, the number of entries of its
 * boundary line that are < v (right = 0) or <= v (right = 1); NaN values give the line length.
 * `sorted` is 1-D (one line for every value) or has values' sizes except the last dim, each of
 * its lines (last dim) ascending — read in the order sorter (int64, sorted's shape, entries in
 * range) gives when sorter != NULL. sorted and values have one dtype. */
vnc_status vnc_searchsorted(vnc_stream *s, const char *op, const vnc_tensor *sorted, const vnc_tensor *values,
                            const vnc_tensor *sorter, int right, const vnc_tensor *out);

/* out (1-D, n elements, any real dtype that holds n - 1) = a uniformly random permutation of
 * 0..n-1: element i draws a 64-bit key from counter offset + i (n counters); the keys' stable
 * sort is the permutation. */
vnc_status vnc_randperm(vnc_stream *s, const char *op, const vnc_tensor *out, uint64_t seed, uint64_t offset);

/* out [rows, k] (int64) = k category indices per row of probs [rows, ncat] (floating; 1-D
 * probs is one row, then out is [k]). With replacement each draw is independent (row r, draw
 * j uses counter r*k + j); without, the categories are ordered by E/p with E ~ Exp(1)
 * (counter r*ncat + c), which draws sequentially without replacement, and the first k are
 * taken. Counters: rows * (replacement ? k : ncat). A row with a negative, infinite or NaN
 * entry, or summing to 0, fails the task (VNC_ERR_KERNEL) with PyTorch's message; `checked`
 * selects the messages of ATen's up-front check (without replacement or k == 1) over those
 * of its per-row sampler. */
vnc_status vnc_multinomial(vnc_stream *s, const char *op, const vnc_tensor *probs, int64_t k, int replacement,
                           int checked, const vnc_tensor *out, uint64_t seed, uint64_t offset);

#ifdef __cplusplus
}
#endif
#endif
