/* Elementwise kernels: one contiguous typed loop per (op, type class), generated from
 * vnc/ew_table.h; a launcher that converts operands of other dtypes in small chunks, reads
 * scalar operands from the task, and caches per-geometry plans. */
/* Integer bodies are generic over signedness: `b == -1` is simply false for unsigned T. */
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "plan.h"
#include "vnc/elementwise.h"
#include "vnc/ew_scalar.h"
#include "vnc/threadpool.h"

/* Contiguous typed loop: out[i] = body(in0[i], in1[i], in2[i]). */
typedef void (*ew_kernel)(int64_t n, char *out, char *const *in, const vnc_ew_params *P);

/* Type classes: the C type each class computes in and the dtype of that type. */
#define EW_CLASSES(X, ...)                                                        \
  X(F32, float, VNC_FLOAT32, F, __VA_ARGS__) X(I64, int64_t, VNC_INT64, I, __VA_ARGS__) \
  X(I32, int32_t, VNC_INT32, I, __VA_ARGS__) X(I16, int16_t, VNC_INT16, I, __VA_ARGS__) \
  X(I8, int8_t, VNC_INT8, I, __VA_ARGS__) X(U8, uint8_t, VNC_UINT8, I, __VA_ARGS__)     \
  X(B, _Bool, VNC_BOOL, B, __VA_ARGS__) X(C64, vnc_c64, VNC_COMPLEX64, C, __VA_ARGS__)

enum {
#define EW_CLASS_ENUM(CLS, TT, DT, COL, ...) EW_CLS_##CLS,
  EW_CLASSES(EW_CLASS_ENUM, ~) EW_NCLS
#undef EW_CLASS_ENUM
};

static const int32_t class_dtype[EW_NCLS] = {
#define EW_CLASS_DT(CLS, TT, DT, COL, ...) DT,
    EW_CLASSES(EW_CLASS_DT, ~)
#undef EW_CLASS_DT
};

static int class_of(int32_t dtype) {
  switch (dtype) {
    case VNC_FLOAT32: case VNC_FLOAT16: case VNC_BFLOAT16: case VNC_FLOAT64: return EW_CLS_F32;
    case VNC_INT64: return EW_CLS_I64;
    case VNC_INT32: return EW_CLS_I32;
    case VNC_INT16: return EW_CLS_I16;
    case VNC_INT8: return EW_CLS_I8;
    case VNC_UINT8: return EW_CLS_U8;
    case VNC_BOOL: return EW_CLS_B;
    case VNC_COMPLEX32: case VNC_COMPLEX64: case VNC_COMPLEX128: return EW_CLS_C64;
    default: return -1;
  }
}

/* Pick the body of a class: F, I, B or C column. */
#define EW_BODY_F(F, I, B, C) F
#define EW_BODY_I(F, I, B, C) I
#define EW_BODY_B(F, I, B, C) B
#define EW_BODY_C(F, I, B, C) C
#define EW_RES_S(T) T
#define EW_RES_B(T) _Bool

/* Runtime CPU dispatch: GCC builds each loop for AVX-512, AVX2 and baseline x86-64 and
 * picks one at load time (ifunc), so one binary runs on any x86-64. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(VNC_NO_CLONES)
#define EW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define EW_CLONES
#endif

#define EW_DEF_KERNEL(CLS, TT, DT, COL, name, nin, res, F, I, B, C)                      \
  EW_CLONES static void ew_##name##_##CLS(int64_t n, char *out, char *const *in, const vnc_ew_params *P) { \
    typedef TT T;                                                                         \
    typedef EW_RES_##res(TT) R;                                                           \
    R *o = (R *)out;                                                                      \
    const T *x = (const T *)in[0];                                                        \
    const T *y = (nin) > 1 ? (const T *)in[1] : x;                                        \
    const T *z = (nin) > 2 ? (const T *)in[2] : x;                                        \
    (void)P;                                                                              \
    for (int64_t i = 0; i < n; i++) {                                                     \
      T a = x[i], b = y[i], c = z[i];                                                     \
      (void)a; (void)b; (void)c;                                                          \
      o[i] = _Generic((EW_BODY_##COL(F, I, B, C)), vnc_ew_na: (R)0,                       \
                      default: (EW_BODY_##COL(F, I, B, C)));                              \
    }                                                                                     \
  }                                                                                       \
  static int ew_has_##name##_##CLS(void) {                                                \
    typedef TT T;                                                                         \
    T a = 0, b = 0, c = 0;                                                                \
    const vnc_ew_params *P = NULL;                                                        \
    (void)a; (void)b; (void)c; (void)P;                                                   \
    return _Generic((EW_BODY_##COL(F, I, B, C)), vnc_ew_na: 0, default: 1);               \
  }
#define EW_DEF_OP(name, nin, res, F, I, B, C) EW_CLASSES(EW_DEF_KERNEL, name, nin, res, F, I, B, C)
VNC_EW_TABLE(EW_DEF_OP)

typedef struct op_info {
  const char *name;
  int nin;
  int bool_result;
  ew_kernel kernels[EW_NCLS];
  int (*has[EW_NCLS])(void);
} op_info;

#define EW_KERNEL_ENTRY(CLS, TT, DT, COL, name) ew_##name##_##CLS,
#define EW_HAS_ENTRY(CLS, TT, DT, COL, name) ew_has_##name##_##CLS,
#define EW_INFO(name, nin, res, F, I, B, C)                                                   \
  {#name, nin, EW_IS_BOOL_##res, {EW_CLASSES(EW_KERNEL_ENTRY, name)}, {EW_CLASSES(EW_HAS_ENTRY, name)}},
#define EW_IS_BOOL_S 0
#define EW_IS_BOOL_B 1
static op_info ops[VNC_EW_COUNT] = {VNC_EW_TABLE(EW_INFO)};

int vnc_elementwise_supports(vnc_ew_op op, int32_t compute_dtype) {
  int cls = class_of(compute_dtype);
  return op >= 0 && op < VNC_EW_COUNT && cls >= 0 && ops[op].has[cls]();
}

int vnc_elementwise_arity(vnc_ew_op op) { return op >= 0 && op < VNC_EW_COUNT ? ops[op].nin : 0; }
const char *vnc_elementwise_name(vnc_ew_op op) { return op >= 0 && op < VNC_EW_COUNT ? ops[op].name : "?"; }

/* ---------------------------------------------------------------- launch */

#define CHUNK 256 /* elements converted per step on the conversion path */

typedef struct ew_plan {
  ew_kernel kernel;
  int32_t compute_dtype; /* dtype of the class's C type */
  int32_t result_dtype;
  uint32_t direct;       /* bit k: operand k already has the type the kernel reads/writes */
} ew_plan;

typedef struct ew_task {
  vnc_iter it;
  ew_plan plan;
  vnc_ew_params P;
  uint32_t scalar_mask;
  _Alignas(16) vnc_scalar_bytes scalars[VNC_ITER_MAX_OPERANDS]; /* read in place as any dtype */
  int fault;
} ew_task;

static void ew_loop(void *ctx, char **data, const int64_t *st, int64_t n, int64_t index) {
  (void)index;
  const ew_task *t = ctx;
  const ew_plan *pl = &t->plan;
  const int nops = t->it.nops;
  int dense = 1;
  for (int k = 0; k < nops; k++) {
    int32_t want = k == 0 ? pl->result_dtype : pl->compute_dtype;
    dense &= ((pl->direct >> k) & 1) && st[k] == (int64_t)vnc_dtype_size(want);
  }
  if (dense) {
    pl->kernel(n, data[0], data + 1, &t->P);
    return;
  }
  /* Conversion path: inputs to the compute type, output from the result type. */
  _Alignas(64) unsigned char buf[VNC_ITER_MAX_OPERANDS][CHUNK * 16];
  const int64_t cs = (int64_t)vnc_dtype_size(pl->compute_dtype);
  const int64_t rs = (int64_t)vnc_dtype_size(pl->result_dtype);
  /* Inputs constant along the run (scalars, broadcast dims: stride 0) are converted once and
   * replicated over a whole chunk, so the typed loop runs dense. */
  uint32_t constant = 0;
  for (int k = 1; k < nops; k++) {
    if (st[k] != 0 || (((pl->direct >> k) & 1) && n == 1)) continue;
    char *ptrs[2] = {(char *)buf[k], data[k]};
    const int64_t strides[2] = {cs, 0};
    vnc_copy_loop(pl->compute_dtype, t->it.dtypes[k])(NULL, ptrs, strides, 1, 0);
    int64_t have = 1, want = n < CHUNK ? n : CHUNK;
    for (; have * 2 <= want; have *= 2) memcpy(buf[k] + have * cs, buf[k], (size_t)(have * cs));
    if (have < want) memcpy(buf[k] + have * cs, buf[k], (size_t)((want - have) * cs));
    constant |= 1u << k;
  }
  for (int64_t off = 0; off < n; off += CHUNK) {
    int64_t m = n - off < CHUNK ? n - off : CHUNK;
    char *in[VNC_ITER_MAX_OPERANDS];
    for (int k = 1; k < nops; k++) {
      char *src = data[k] + off * st[k];
      if ((constant >> k) & 1) {
        in[k - 1] = (char *)buf[k];
      } else if (((pl->direct >> k) & 1) && st[k] == cs) {
        in[k - 1] = src;
      } else {
        char *ptrs[2] = {(char *)buf[k], src};
        const int64_t strides[2] = {cs, st[k]};
        vnc_copy_loop(pl->compute_dtype, t->it.dtypes[k])(NULL, ptrs, strides, m, 0);
        in[k - 1] = (char *)buf[k];
      }
    }
    char *dst = data[0] + off * st[0];
    int out_direct = ((pl->direct & 1) && st[0] == rs);
    pl->kernel(m, out_direct ? dst : (char *)buf[0], in, &t->P);
    if (!out_direct) {
      char *ptrs[2] = {dst, (char *)buf[0]};
      const int64_t strides[2] = {st[0], rs};
      vnc_copy_loop(t->it.dtypes[0], pl->result_dtype)(NULL, ptrs, strides, m, 0);
    }
  }
}

static vnc_status ew_run(void *p) {
  ew_task *t = p;
  for (int k = 0; k < t->it.nops; k++) {
    if ((t->scalar_mask >> k) & 1) {
      t->it.data[k] = (char *)t->scalars[k];
      for (int d = 0; d < t->it.ndim; d++) t->it.strides[k][d] = 0;
    }
  }
  t->fault = 0;
  t->P.fault = &t->fault;
  vnc_iter_for_each(&t->it, ew_loop, t, VNC_ITER_GRAIN);
  if (__atomic_load_n(&t->fault, __ATOMIC_RELAXED))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "ZeroDivisionError");
  return VNC_OK;
}

/* Key: op, compute dtype, operand dtypes and scalar mask, geometry. Never parameter values. */
static size_t plan_key(unsigned char *key, vnc_ew_op op, int32_t cdt, const vnc_iter *it, uint32_t mask) {
  size_t k = 0;
#define PUT(v) do { memcpy(key + k, &(v), sizeof(v)); k += sizeof(v); } while (0)
  int32_t head[4] = {(int32_t)op, cdt, it->nops, it->ndim};
  PUT(head);
  PUT(mask);
  for (int i = 0; i < it->nops; i++) PUT(it->dtypes[i]);
  for (int d = 0; d < it->ndim; d++) PUT(it->shape[d]);
  for (int i = 0; i < it->nops; i++)
    for (int d = 0; d < it->ndim; d++) PUT(it->strides[i][d]);
#undef PUT
  return k;
}

vnc_status vnc_elementwise(vnc_stream *s, const char *op_name, vnc_ew_op op, const vnc_iter *it,
                           int32_t compute_dtype, const vnc_ew_params *params,
                           uint32_t scalar_mask, const vnc_scalar_bytes *scalars) {
  if (op < 0 || op >= VNC_EW_COUNT)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "unknown elementwise op %d", (int)op);
  const op_info *info = &ops[op];
  if (it->nops != info->nin + 1)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s takes %d inputs and one output, got %d operands",
                         op_name, info->nin, it->nops);
  ew_task t;
  unsigned char key[16 + 4 + VNC_ITER_MAX_OPERANDS * 4 + VNC_MAX_DIMS * 8 * (VNC_ITER_MAX_OPERANDS + 1)];
  size_t klen = plan_key(key, op, compute_dtype, it, scalar_mask);
  if (!vnc_plan_get(key, klen, &t.plan, sizeof t.plan)) {
    int cls = class_of(compute_dtype);
    if (cls < 0 || !info->has[cls]())
      return vnc_set_error(VNC_ERR_UNSUPPORTED, "\"%s\" not implemented for '%s'", op_name,
                           vnc_dtype_name(compute_dtype));
    memset(&t.plan, 0, sizeof t.plan);
    t.plan.kernel = info->kernels[cls];
    t.plan.compute_dtype = class_dtype[cls];
    t.plan.result_dtype = info->bool_result ? VNC_BOOL : class_dtype[cls];
    for (int k = 0; k < it->nops; k++) {
      int32_t want = k == 0 ? t.plan.result_dtype : t.plan.compute_dtype;
      if (it->dtypes[k] == want && !((scalar_mask >> k) & 1)) t.plan.direct |= 1u << k;
      if (!vnc_copy_loop(k == 0 ? it->dtypes[0] : want, k == 0 ? want : it->dtypes[k]))
        return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: operand %d has unsupported dtype %s", op_name, k,
                             vnc_dtype_name(it->dtypes[k]));
    }
    vnc_plan_put(key, klen, &t.plan, sizeof t.plan);
  }
  if (it->numel == 0) return VNC_OK;
  t.it = *it;
  t.P = *params;
  t.scalar_mask = scalar_mask;
  for (int k = 0; k < it->nops; k++)
    if ((scalar_mask >> k) & 1) memcpy(t.scalars[k], scalars[k], sizeof t.scalars[k]);
  /* Scalars are read in their own dtype through the conversion path. */
  return vnc_launch(s, op_name, ew_run, &t, sizeof t, NULL);
}
