/* vnc/jit_graph.h — what generated C sees of the runtime (included by every generated
 * translation unit, and by the runtime to fill the table).
 *
 * Generated code calls the runtime's public kernels (vnc_gemm, vnc_reduce, ...) through a
 * table of function pointers that the loader hands to the unit's exported `vnc_jit_bind`
 * right after dlopen: `vnc_rt->gemm(...)` is `vnc_gemm(...)`. No symbol of the runtime needs
 * to be exported from the process. Elementwise bodies come from vnc/ew_inline.h (the rows
 * of vnc/ew_table.h), conversions from dtype.h: the same sources the eager kernels are
 * built from, so compiled results equal eager's.
 *
 * A generated graph function returns the first failing status; VNC_JIT_TRY does that. Every
 * runtime call a graph makes on its own stream runs inline, in order (see vnc_launch).
 */
#ifndef VNC_JIT_GRAPH_H
#define VNC_JIT_GRAPH_H

#include <stdint.h>
#include "vnc.h"
#include "jit.h"
#include "nn_fused.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The runtime functions generated code may call: X(name) stands for vnc_<name>. */
#define VNC_JIT_API(X)                                                                        \
  X(set_error) X(tensor_contiguous) X(parallel_for) X(iter_init) X(iter_for_each) X(elementwise) X(reduce) X(copy) \
  X(reduce_fused) \
  X(fill) X(gemm) X(gemm_fused) X(softmax) X(softmax_backward) X(layer_norm) X(layer_norm_backward)         \
  X(softmax_fused) X(softmax_backward_fused) X(layer_norm_fused) X(layer_norm_backward_fused)            \
  X(nll_loss) X(nll_loss_backward) X(index_select) X(index_add_rows) X(arange) X(tri)         \
  X(attention_forward) X(attention_backward) X(conv2d_forward) X(conv2d_backward)             \
  X(batch_norm) X(batch_norm_backward) X(max_pool2d) X(max_pool2d_backward)                   \
  X(adaptive_avg_pool2d) X(adaptive_avg_pool2d_backward) X(index)

#define VNC_JIT_API_VERSION 4

typedef struct vnc_jit_api {
  uint32_t version; /* VNC_JIT_API_VERSION */
  uint32_t size;    /* sizeof(vnc_jit_api) */
#define VNC_JIT_API_MEMBER(name) __typeof__(&vnc_##name) name;
  VNC_JIT_API(VNC_JIT_API_MEMBER)
#undef VNC_JIT_API_MEMBER
} vnc_jit_api;

/* The runtime's table (filled once). */
const vnc_jit_api *vnc_jit_api_table(void);

#ifdef __cplusplus
}
#endif

#ifdef VNC_JIT_GENERATED
/* Inside a generated unit: runtime calls go through the table bound at load time, written
 * vnc_rt->gemm(...) for vnc_gemm(...). */
#include "ew_inline.h"
#include "dtype.h"

/* Marks the functions the loader looks up (units build with -fvisibility=hidden). */
#define VNC_JIT_EXPORT __attribute__((visibility("default")))

static const vnc_jit_api *vnc_rt;
VNC_JIT_EXPORT int vnc_jit_bind(const vnc_jit_api *api) {
  if (!api || api->version != VNC_JIT_API_VERSION || api->size != sizeof(vnc_jit_api)) return 1;
  vnc_rt = api;
  return 0;
}
/* What a generated loop gets from its segment: the buffer table, and a flag a body sets on an
 * invalid value (integer division by zero), checked after the loop. */
typedef struct vnc_jit_loop_ctx {
  char *const *B;
  int fault;
} vnc_jit_loop_ctx;

/* Returns the status of a failing runtime call from the enclosing graph function. */
#define VNC_JIT_TRY(call)             \
  do {                                \
    vnc_status jit_st_ = (call);      \
    if (jit_st_ != VNC_OK) return jit_st_; \
  } while (0)
#endif /* VNC_JIT_GENERATED */

#endif
