/* Copy with broadcasting and dtype conversion (every pair, table-generated) and fill. */
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "vnc/iter.h"
#include "internal.h"
#include "tier.h"
#include "vnc/kernels.h"

/* copy_<D>_<S>: one inner loop per (destination, source) dtype pair. */
#define DEF_COPY(D, S)                                                                    \
  static void copy_##D##_##S(void *ctx, char **data, const int64_t *st, int64_t n, int64_t i0) { \
    (void)ctx; (void)i0;                                                                  \
    char *d = data[0];                                                                    \
    const char *s = data[1];                                                              \
    if (st[0] == (int64_t)sizeof(VNC_STORAGE_##D) && st[1] == (int64_t)sizeof(VNC_STORAGE_##S)) { \
      for (int64_t i = 0; i < n; i++)                                                     \
        VNC_STORE_##D(d + i * (int64_t)sizeof(VNC_STORAGE_##D),                           \
                      VNC_LOAD_##S(s + i * (int64_t)sizeof(VNC_STORAGE_##S)));            \
    } else {                                                                              \
      for (int64_t i = 0; i < n; i++) VNC_STORE_##D(d + i * st[0], VNC_LOAD_##S(s + i * st[1])); \
    }                                                                                     \
  }
#define DEF_COPY_ROW(D) VNC_DTYPES_A(DEF_COPY, D)
VNC_DTYPES(DEF_COPY_ROW)

/* float16 / bfloat16 <-> float32 dense runs: the tier's vector conversions (F16C on x86-64-v3
 * and up for float16; integer lanes for bfloat16), the same bits as dtype.h's. */
#define HALF_COPY(H, name)                                                                              \
  static void copy_##name##_to_f32(void *ctx, char **data, const int64_t *st, int64_t n, int64_t i0) {   \
    if (st[0] == 4 && st[1] == 2) vnc_tier()->name##_to_f32((float *)data[0], (const uint16_t *)data[1], n); \
    else copy_FLOAT32_##H(ctx, data, st, n, i0);                                                         \
  }                                                                                                      \
  static void copy_f32_to_##name(void *ctx, char **data, const int64_t *st, int64_t n, int64_t i0) {   \
    if (st[0] == 2 && st[1] == 4) vnc_tier()->f32_to_##name((uint16_t *)data[0], (const float *)data[1], n); \
    else copy_##H##_FLOAT32(ctx, data, st, n, i0);                                                       \
  }
HALF_COPY(FLOAT16, f16)
HALF_COPY(BFLOAT16, bf16)

#define COPY_ENTRY(D, S) [VNC_##S] = copy_##D##_##S,
#define COPY_ROW(D) [VNC_##D] = {VNC_DTYPES_A(COPY_ENTRY, D)},
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init" /* the float16 and bfloat16 entries replaced */
static const vnc_loop_fn copy_table[VNC_DTYPE_END][VNC_DTYPE_END] = {
    VNC_DTYPES(COPY_ROW)[VNC_FLOAT32][VNC_FLOAT16] = copy_f16_to_f32,
    [VNC_FLOAT16][VNC_FLOAT32] = copy_f32_to_f16, [VNC_FLOAT32][VNC_BFLOAT16] = copy_bf16_to_f32,
    [VNC_BFLOAT16][VNC_FLOAT32] = copy_f32_to_bf16};
#pragma GCC diagnostic pop

/* Runtime-typed stores and loads. */
#define DEF_RT(D)                                                                          \
  static void store_f64_##D(void *p, double v) { VNC_STORE_##D(p, v); }                   \
  static void store_i64_##D(void *p, int64_t v) { VNC_STORE_##D(p, v); }                  \
  static double load_f64_##D(const void *p) { return (double)VNC_LOAD_##D(p); }
VNC_DTYPES(DEF_RT)
#define RT_STORE_F(D) [VNC_##D] = store_f64_##D,
#define RT_STORE_I(D) [VNC_##D] = store_i64_##D,
#define RT_LOAD_F(D) [VNC_##D] = load_f64_##D,
const vnc_store_f64_fn vnc_store_f64[VNC_DTYPE_END] = {VNC_DTYPES(RT_STORE_F)};
const vnc_store_i64_fn vnc_store_i64[VNC_DTYPE_END] = {VNC_DTYPES(RT_STORE_I)};
const vnc_load_f64_fn vnc_load_f64[VNC_DTYPE_END] = {VNC_DTYPES(RT_LOAD_F)};

/* Same-dtype copies of dense runs are memcpy; a dense run written from a reversed run, or
 * backwards from a dense one (flip), or from another stride, takes typed loads and stores,
 * which the compiler vectorises. */
#define STRIDED_COPY(T)                                                                    \
  static void strided_##T(T *d, const char *s, const int64_t *st, int64_t n) {             \
    if (st[0] < 0)                                                                         \
      for (int64_t i = 0; i < n; i++) d[-i] = ((const T *)s)[i];                           \
    else if (st[1] == -(int64_t)sizeof(T))                                                 \
      for (int64_t i = 0; i < n; i++) d[i] = ((const T *)s)[-i];                           \
    else                                                                                   \
      for (int64_t i = 0; i < n; i++) memcpy(d + i, s + i * st[1], sizeof(T));             \
  }
STRIDED_COPY(uint8_t)
STRIDED_COPY(uint16_t)
STRIDED_COPY(uint32_t)
STRIDED_COPY(uint64_t)

static void copy_bytes(void *ctx, char **data, const int64_t *st, int64_t n, int64_t i0) {
  (void)i0;
  int64_t es = *(const int64_t *)ctx;
  if (st[0] == es && st[1] == es) {
    memmove(data[0], data[1], (size_t)(n * es));
    return;
  }
  const int typed = st[0] == es || (st[0] == -es && st[1] == es);
  switch (typed ? es : 0) {
    case 1: strided_uint8_t((uint8_t *)data[0], data[1], st, n); return;
    case 2: strided_uint16_t((uint16_t *)data[0], data[1], st, n); return;
    case 4: strided_uint32_t((uint32_t *)data[0], data[1], st, n); return;
    case 8: strided_uint64_t((uint64_t *)data[0], data[1], st, n); return;
    default:
      for (int64_t i = 0; i < n; i++) memcpy(data[0] + i * st[0], data[1] + i * st[1], (size_t)es);
  }
}

typedef struct copy_task {
  vnc_iter it;
  int64_t elem_size;
  int q; /* same-dtype transpose: the source's dense dim (see transpose_dim), else -1 */
} copy_task;

/* ---- same-dtype transposes (x.t().contiguous(), NCHW <-> NHWC, heads merged back) ----
 * A destination dense along iterator dim 0 and a source dense along another dim q: a run along
 * dim 0 reads one element per source cache line. Copied by the tier's transpose instead, 8 x 8
 * tiles in registers, TB source rows per work unit; the bytes copied are the same. */
#define TB 32

static int transpose_dim(const vnc_iter *it, int64_t es) {
  if (it->ndim < 2 || it->strides[0][0] != es || llabs(it->strides[1][0]) == es || it->shape[0] < 8) return -1;
  for (int q = 1; q < it->ndim; q++)
    if (it->strides[1][q] == es && it->shape[q] >= 8) return q;
  return -1;
}

/* Units: (index over the dims other than 0 and q, block of TB along dim 0), each all of q: the
 * tier's loop reads TB source rows along q while it writes 8-element pieces of each destination
 * run. */
static int64_t transpose_blocks(const copy_task *t) { return (t->it.shape[0] + TB - 1) / TB; }

static void transpose_body(void *ctx, int64_t u0, int64_t u1) {
  const copy_task *t = ctx;
  const vnc_iter *it = &t->it;
  const int q = t->q;
  const int64_t nb = transpose_blocks(t);
  for (int64_t u = u0; u < u1; u++) {
    int64_t rem = u / nb;
    char *d = it->data[0];
    const char *s = it->data[1];
    for (int k = 1; k < it->ndim; k++) {
      if (k == q) continue;
      const int64_t idx = rem % it->shape[k];
      rem /= it->shape[k];
      d += idx * it->strides[0][k];
      s += idx * it->strides[1][k];
    }
    const int64_t i0 = u % nb * TB, ni = it->shape[0] - i0 < TB ? it->shape[0] - i0 : TB, s0 = it->strides[1][0];
    vnc_tier()->transpose(t->elem_size, d + i0 * t->elem_size, it->strides[0][q], s + i0 * s0, s0, ni, it->shape[q]);
  }
}

static vnc_status copy_run(void *p) {
  copy_task *t = p;
  int32_t dd = t->it.dtypes[0], sd = t->it.dtypes[1];
  if (t->q > 0) {
    const int64_t units = t->it.numel / (t->it.shape[0] * t->it.shape[t->q]) * transpose_blocks(t);
    vnc_parallel_for(units, 1 + VNC_ITER_GRAIN / (t->it.numel / units), transpose_body, t);
  } else if (dd == sd) vnc_iter_for_each(&t->it, copy_bytes, &t->elem_size, VNC_ITER_GRAIN);
  else vnc_iter_for_each(&t->it, copy_table[dd][sd], NULL, VNC_ITER_GRAIN);
  return VNC_OK;
}

int32_t vnc_width_dtype(int32_t dtype) {
  switch (vnc_dtype_storage_size(dtype)) {
    case 1: return VNC_UINT8;
    case 2: return VNC_INT16;
    case 4: return VNC_INT32;
    case 8: return VNC_INT64;
    default: return dtype;
  }
}

int32_t vnc_byte_alias(int32_t dtype) { return dtype >= 0 && dtype < VNC_DTYPE_END ? dtype : vnc_width_dtype(dtype); }

vnc_status vnc_check_computed(const char *op, int n, const int32_t *dtypes) {
  for (int k = 0; k < n; k++) {
    if (vnc_dtype_size(dtypes[k]) != 0) continue;
    if (vnc_dtype_storage_size(dtypes[k]) != 0)
      return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s is not implemented for %s on neuron (a dtype the device stores "
                           "but does not compute with)", op ? op : "kernel", vnc_dtype_name(dtypes[k]));
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: unknown dtype code %d", op ? op : "kernel", (int)dtypes[k]);
  }
  return VNC_OK;
}

vnc_status vnc_check_iter_computed(const char *op, const vnc_iter *it) {
  return vnc_check_computed(op, it->nops, it->dtypes);
}

int vnc_copy_supported(int32_t dst, int32_t src) {
  if (dst == src) return vnc_dtype_storage_size(dst) != 0;
  return dst >= 0 && dst < VNC_DTYPE_END && src >= 0 && src < VNC_DTYPE_END && copy_table[dst][src] != NULL;
}

vnc_status vnc_copy(vnc_stream *s, const char *op, const vnc_tensor *dst, const vnc_tensor *src) {
  if (!vnc_copy_supported(dst->dtype, src->dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "copy from %s to %s is not supported",
                         vnc_dtype_name(src->dtype), vnc_dtype_name(dst->dtype));
  copy_task t;
  vnc_tensor d = *dst, x = *src;
  d.dtype = vnc_byte_alias(d.dtype);
  x.dtype = vnc_byte_alias(x.dtype);
  const vnc_tensor *ops[2] = {&d, &x};
  vnc_status st = vnc_iter_init(&t.it, 2, ops, 0);
  if (st != VNC_OK) return st;
  if (t.it.numel == 0) return VNC_OK;
  t.elem_size = (int64_t)vnc_dtype_size(d.dtype);
  const int pow2 = t.elem_size == 1 || t.elem_size == 2 || t.elem_size == 4 || t.elem_size == 8;
  t.q = d.dtype == x.dtype && pow2 ? transpose_dim(&t.it, t.elem_size) : -1;
  return (t.it.numel <= VNC_SMALL_TASK ? vnc_launch_small : vnc_launch)(s, op ? op : "aten::copy_", copy_run, &t,
                                                                       sizeof t, NULL);
}

typedef struct fill_task {
  vnc_iter it;
  int64_t elem_size;
  unsigned char value[16];
} fill_task;

static void fill_loop(void *ctx, char **data, const int64_t *st, int64_t n, int64_t i0) {
  (void)i0;
  const fill_task *t = ctx;
  int64_t es = t->elem_size;
  char *d = data[0];
  switch (es) { /* typed stores so the compiler vectorises dense runs */
#define FILL_CASE(T)                                                            \
  case sizeof(T): {                                                             \
    T v;                                                                        \
    memcpy(&v, t->value, sizeof v);                                             \
    if (st[0] == sizeof(T)) for (int64_t i = 0; i < n; i++) ((T *)d)[i] = v;    \
    else for (int64_t i = 0; i < n; i++) *(T *)(d + i * st[0]) = v;             \
    return;                                                                     \
  }
    FILL_CASE(uint8_t)
    FILL_CASE(uint16_t)
    FILL_CASE(uint32_t)
    FILL_CASE(uint64_t)
#undef FILL_CASE
    default:
      for (int64_t i = 0; i < n; i++) memcpy(d + i * st[0], t->value, (size_t)es);
  }
}

static vnc_status fill_run(void *p) {
  fill_task *t = p;
  vnc_iter_for_each(&t->it, fill_loop, t, VNC_ITER_GRAIN);
  return VNC_OK;
}

vnc_status vnc_fill(vnc_stream *s, const char *op, const vnc_tensor *dst, const void *value) {
  fill_task t;
  vnc_tensor d = *dst;
  d.dtype = vnc_byte_alias(d.dtype);
  const vnc_tensor *ops[1] = {&d};
  vnc_status st = vnc_iter_init(&t.it, 1, ops, 0);
  if (st != VNC_OK) return st;
  if (t.it.numel == 0) return VNC_OK;
  t.elem_size = (int64_t)vnc_dtype_size(d.dtype);
  memcpy(t.value, value, (size_t)t.elem_size);
  return (t.it.numel <= VNC_SMALL_TASK ? vnc_launch_small : vnc_launch)(s, op ? op : "aten::fill_", fill_run, &t,
                                                                       sizeof t, NULL);
}

vnc_loop_fn vnc_copy_loop(int32_t dst, int32_t src) {
  if (dst < 0 || dst >= VNC_DTYPE_END || src < 0 || src >= VNC_DTYPE_END) return NULL;
  return copy_table[dst][src];
}

void vnc_to_f32(float *dst, const void *src, int32_t dtype, int64_t stride, int64_t n) {
  const int64_t es = (int64_t)vnc_dtype_size(dtype);
  char *ptrs[2] = {(char *)dst, (char *)src};
  const int64_t st[2] = {4, stride * es};
  copy_table[VNC_FLOAT32][dtype](NULL, ptrs, st, n, 0);
}

void vnc_from_f32(void *dst, int32_t dtype, int64_t stride, const float *src, int64_t n) {
  const int64_t es = (int64_t)vnc_dtype_size(dtype);
  char *ptrs[2] = {(char *)dst, (char *)src};
  const int64_t st[2] = {stride * es, 4};
  copy_table[dtype][VNC_FLOAT32](NULL, ptrs, st, n, 0);
}
