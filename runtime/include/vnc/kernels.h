/* vnc/kernels.h — launches of the runtime's native kernels.
 *
 * Each call validates its arguments on the caller's thread (returning
 * VNC_ERR_INVALID_ARGUMENT / VNC_ERR_UNSUPPORTED before anything is enqueued), copies the
 * tensor views into a task and enqueues it on `s`. The memory behind the views must stay
 * valid until the task has run: device memory is kept by stream-ordered reuse; host memory
 * is the caller's to keep (or to synchronize on).
 *
 *     vnc_tensor d = vnc_tensor_contiguous(dst, VNC_FLOAT32, 1, (int64_t[]){n});
 *     vnc_tensor x = vnc_tensor_contiguous(src, VNC_INT64, 1, (int64_t[]){n});
 *     vnc_copy(stream, "aten::copy_", &d, &x);    // cast int64 -> float32
 */
#ifndef VNC_KERNELS_H
#define VNC_KERNELS_H

#include <stdint.h>
#include "status.h"
#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst = src, broadcasting src to dst's shape and converting dtype as C casts do
 * (bfloat16/float16 round to nearest even; float64 to 16-bit types goes through float32,
 * as c10 does; complex to real keeps the real part). Any strides. Stored-only dtypes
 * (above VNC_DTYPE_END) copy between equal dtypes only; other pairs: VNC_ERR_UNSUPPORTED
 * (vnc_copy_supported says beforehand). */
vnc_status vnc_copy(vnc_stream *s, const char *op, const vnc_tensor *dst, const vnc_tensor *src);
/* Whether vnc_copy converts from dtype `src` to dtype `dst`. */
int vnc_copy_supported(int32_t dst, int32_t src);
/* Every element of dst = *value, one element of dst's dtype (vnc_dtype_storage_size bytes;
 * stored-only dtypes included). */
vnc_status vnc_fill(vnc_stream *s, const char *op, const vnc_tensor *dst, const void *value);

/* Random fills on the Philox4x32-10 generator (Salmon et al., "Parallel Random Numbers:
 * As Easy as 1, 2, 3", SC'11). Element k (row-major logical index) draws from counter
 * (offset + k) under key `seed`, so values depend on (seed, offset, k) only — never on
 * strides or thread count. Callers advance their offset by vnc_rng_offset_increment(numel). */
uint64_t vnc_rng_offset_increment(int64_t numel);
/* The distributions drawn by vnc_rng_draw, with their parameters (a, b). Each refuses the
 * arguments ATen refuses, with ATen's message (VNC_ERR_INVALID_ARGUMENT). Arithmetic is
 * float32 (float64 outputs follow the device rule). */
typedef enum {
  VNC_RNG_UNIFORM,     /* [a, b) */
  VNC_RNG_NORMAL,      /* mean a, std b >= 0 (Box-Muller) */
  VNC_RNG_EXPONENTIAL, /* rate a > 0: -log(1 - u) / a */
  VNC_RNG_CAUCHY,      /* median a, scale b > 0: a + b tan(pi (u - 1/2)) */
  VNC_RNG_LOG_NORMAL,  /* exp(normal(a, b)), b > 0 */
  VNC_RNG_GEOMETRIC,   /* success probability a in (0, 1): ceil(log(u) / log1p(-a)), b unused;
                        * any real dtype but bool (integers saturate at int64's range) */
  VNC_RNG_DIST_COUNT
} vnc_rng_dist;
/* Fills t (any strides) from distribution `dist`. Floating dtypes only, except geometric. */
vnc_status vnc_rng_draw(vnc_stream *s, const vnc_tensor *t, vnc_rng_dist dist, double a, double b,
                        uint64_t seed, uint64_t offset);
/* Uniform in [from, to). Floating dtypes only. */
vnc_status vnc_rng_uniform(vnc_stream *s, const vnc_tensor *t, double from, double to,
                           uint64_t seed, uint64_t offset);
/* Normal(mean, std) by Box-Muller. Floating dtypes only. */
vnc_status vnc_rng_normal(vnc_stream *s, const vnc_tensor *t, double mean, double std,
                          uint64_t seed, uint64_t offset);
/* Integers uniform in [from, from + range); range 0 means 2^64. Any real dtype. */
vnc_status vnc_rng_random(vnc_stream *s, const vnc_tensor *t, int64_t from, uint64_t range,
                          uint64_t seed, uint64_t offset);
/* 1 with probability p (a scalar, or the tensor `p` broadcast to t when p_tensor != NULL). */
vnc_status vnc_rng_bernoulli(vnc_stream *s, const vnc_tensor *t, double p,
                             const vnc_tensor *p_tensor, uint64_t seed, uint64_t offset);
/* Exponential with rate lambd (-log(1-u)/lambd). Floating dtypes only. */
vnc_status vnc_rng_exponential(vnc_stream *s, const vnc_tensor *t, double lambd,
                               uint64_t seed, uint64_t offset);
/* t[i] ~ Poisson(rates[i]) (rates broadcast to t), as ATen's CPU sampler: product of uniforms
 * below rate 10, Hoermann's transformed rejection (PTRS) from 10 on; the extra uniforms of a
 * rejection loop come from the element's further Philox rounds, so the offset still advances
 * by vnc_rng_offset_increment(numel). A negative, NaN or infinite rate fails the task with
 * ATen's "invalid Poisson rate" (a sticky stream error). Floating dtypes only. */
vnc_status vnc_rng_poisson(vnc_stream *s, const vnc_tensor *t, const vnc_tensor *rates,
                           uint64_t seed, uint64_t offset);

#ifdef __cplusplus
}
#endif
#endif
