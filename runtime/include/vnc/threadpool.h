/* vnc/threadpool.h — the runtime's one thread pool for kernel work.
 *
 * Sized to the machine's online CPUs (TORCH_NEURONX_NUM_THREADS overrides), shared by all
 * streams; the calling thread takes part. If another stream's kernel holds the pool, the
 * call runs on the caller's thread alone rather than waiting. Idle workers block on a
 * condition variable; they never spin.
 *
 *     static void body(void *ctx, int64_t begin, int64_t end) { ... }
 *     vnc_parallel_for(n, 32768, body, &ctx);
 */
#ifndef VNC_THREADPOOL_H
#define VNC_THREADPOOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*vnc_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Calls fn over disjoint ranges covering [0, n), each at least `grain` long except the
 * last; ranges depend on n, grain and the pool size only. Returns when all are done. */
void vnc_parallel_for(int64_t n, int64_t grain, vnc_range_fn fn, void *ctx);

/* Threads vnc_parallel_for uses now, the caller's included: a hint for sizing work units
 * (kernels' results never depend on it). */
int vnc_threadpool_size(void);

#ifdef __cplusplus
}
#endif
#endif
