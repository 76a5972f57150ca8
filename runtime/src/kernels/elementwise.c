/* Elementwise launcher: the contiguous typed loop per (op, type class) comes from the CPU
 * tier's table (tier_kernels.c, generated from vnc/ew_table.h); operands of other dtypes are
 * converted in small chunks, scalar operands read from the task, plans cached per geometry. */
/* Integer bodies are generic over signedness: `b == -1` is simply false for unsigned T. */
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "plan.h"
#include "tier.h"
#include "vnc/elementwise.h"
#include "vnc/ew_scalar.h"
#include "vnc/threadpool.h"

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

/* 1 if `name` has a body for class CLS (the VNC_NA placeholder otherwise). */
#define EW_DEF_HAS(CLS, TT, DT, COL, name, nin, res, F, I, B, C)                         \
  static int ew_has_##name##_##CLS(void) {                                                \
    typedef TT T;                                                                         \
    T a = 0, b = 0, c = 0;                                                                \
    const vnc_ew_params *P = NULL;                                                        \
    (void)a; (void)b; (void)c; (void)P;                                                   \
    return _Generic((EW_BODY_##COL(F, I, B, C)), vnc_ew_na: 0, default: 1);               \
  }
#define EW_DEF_OP(name, nin, res, F, I, B, C) EW_CLASSES(EW_DEF_HAS, name, nin, res, F, I, B, C)
VNC_EW_TABLE(EW_DEF_OP)

typedef struct op_info {
  const char *name;
  int nin;
  int bool_result;
  int (*has[EW_NCLS])(void);
} op_info;

#define EW_HAS_ENTRY(CLS, TT, DT, COL, name) ew_has_##name##_##CLS,
#define EW_INFO(name, nin, res, F, I, B, C)                                                   \
  {#name, nin, EW_IS_BOOL_##res, {EW_CLASSES(EW_HAS_ENTRY, name)}},
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
  int32_t op, cls;       /* the typed loop: vnc_tier()->ew[op][cls] (the tier may change) */
  int32_t compute_dtype; /* dtype of the class's C type */
  int32_t result_dtype;
  int32_t round_dtype;   /* nonzero: a 16-bit compute dtype the result is rounded to before an output of another dtype */
  int32_t in_dtype16;    /* nonzero: the 16-bit compute dtype inputs of round_in pass through */
  uint32_t direct;       /* bit k: operand k already has the type the kernel reads/writes */
  uint32_t round_in;     /* bit k: input k is cast to the 16-bit compute dtype first, as TensorIterator
                          * casts every input to the common dtype (a float32 0-dim tensor beside a
                          * bfloat16 one is rounded to bfloat16), then widened to the class type */
} ew_plan;

typedef struct ew_task {
  vnc_iter it;
  ew_plan plan;
  vnc_ew_params P;
  uint32_t scalar_mask;
  _Alignas(16) vnc_scalar_bytes scalars[VNC_ITER_MAX_OPERANDS]; /* read in place as any dtype */
  int fault;
} ew_task;

/* ATen's CPU mul and div kernels (true, trunc, floor) read a one-element second operand of a
 * 16-bit op unrounded, in float (iter.original_scalar_value<opmath_t>(2)); the other kernels
 * cast it to the 16-bit common dtype as every other input. */
static int keeps_scalar_divisor(vnc_ew_op op, const vnc_iter *it) {
  if (op != VNC_EW_mul && op != VNC_EW_div && op != VNC_EW_div_trunc && op != VNC_EW_div_floor) return 0;
  for (int d = 0; d < it->ndim; d++)
    if (it->strides[2][d] != 0 && it->shape[d] != 1) return 0;
  return 1;
}

/* m elements of input k (dtype dt, stride sst) into dst in the compute type. */
static void load_input(const ew_plan *pl, int k, int32_t dt, char *dst, char *src, int64_t sst, int64_t m) {
  const int64_t cs = (int64_t)vnc_dtype_size(pl->compute_dtype);
  if ((pl->round_in >> k) & 1) {
    _Alignas(64) unsigned char half[CHUNK * 2];
    char *a[2] = {(char *)half, src}, *b[2] = {dst, (char *)half};
    vnc_copy_loop(pl->in_dtype16, dt)(NULL, a, (const int64_t[]){2, sst}, m, 0);
    vnc_copy_loop(pl->compute_dtype, pl->in_dtype16)(NULL, b, (const int64_t[]){cs, 2}, m, 0);
    return;
  }
  char *ptrs[2] = {dst, src};
  vnc_copy_loop(pl->compute_dtype, dt)(NULL, ptrs, (const int64_t[]){cs, sst}, m, 0);
}

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
  const vnc_ew_kernel kernel = vnc_tier()->ew[pl->op][pl->cls];
  if (dense) {
    kernel(n, data[0], data + 1, &t->P);
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
    load_input(pl, k, t->it.dtypes[k], (char *)buf[k], data[k], 0, 1);
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
        load_input(pl, k, t->it.dtypes[k], (char *)buf[k], src, st[k], m);
        in[k - 1] = (char *)buf[k];
      }
    }
    char *dst = data[0] + off * st[0];
    int out_direct = ((pl->direct & 1) && st[0] == rs);
    kernel(m, out_direct ? dst : (char *)buf[0], in, &t->P);
    if (!out_direct) {
      int32_t from = pl->result_dtype;
      int64_t fs = rs;
      char *res = (char *)buf[0];
      _Alignas(64) unsigned char rounded[CHUNK * 2];
      if (pl->round_dtype) { /* PyTorch computes in the 16-bit dtype, then casts to the output's */
        char *r[2] = {(char *)rounded, res};
        fs = (int64_t)vnc_dtype_size(pl->round_dtype);
        vnc_copy_loop(pl->round_dtype, from)(NULL, r, (const int64_t[]){fs, rs}, m, 0);
        from = pl->round_dtype;
        res = (char *)rounded;
      }
      char *ptrs[2] = {dst, res};
      const int64_t strides[2] = {st[0], fs};
      vnc_copy_loop(t->it.dtypes[0], from)(NULL, ptrs, strides, m, 0);
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
  const vnc_status st = vnc_check_iter_computed(op_name, it);
  if (st != VNC_OK) return st;
  vnc_iter pow_it;
  if (op == VNC_EW_pow && ((scalar_mask >> 2) & 1) && class_of(compute_dtype) == EW_CLS_F32) {
    /* A scalar special exponent: its own row (ATen's pow_tensor_scalar_kernel formulas), so the
     * loop vectorises. float16 takes powf for 0.5 and -0.5, as ATen (sqrt differs at -0, -inf);
     * its 2, 3, -1, -2 rows give powf's values (a half's square is exact in float). */
    const float e = (float)vnc_load_f64[it->dtypes[2]]((const char *)scalars[2]);
    const int half = compute_dtype == VNC_FLOAT16;
    const vnc_ew_op special = e == 2.0f    ? VNC_EW_pow_sq
                              : e == 3.0f  ? VNC_EW_pow_cube
                              : e == 0.5f  ? (half ? VNC_EW_COUNT : VNC_EW_sqrt)
                              : e == -0.5f ? (half ? VNC_EW_COUNT : VNC_EW_rsqrt)
                              : e == -1.0f ? VNC_EW_reciprocal
                              : e == -2.0f ? VNC_EW_pow_inv_sq
                                          : VNC_EW_COUNT;
    if (special != VNC_EW_COUNT) {
      pow_it = *it;
      pow_it.nops = 2;
      it = &pow_it;
      op = special;
      info = &ops[op];
      scalar_mask &= 3u;
    }
  }
  ew_task t;
  unsigned char key[16 + 4 + VNC_ITER_MAX_OPERANDS * 4 + VNC_MAX_DIMS * 8 * (VNC_ITER_MAX_OPERANDS + 1)];
  size_t klen = plan_key(key, op, compute_dtype, it, scalar_mask);
  if (!vnc_plan_get(key, klen, &t.plan, sizeof t.plan)) {
    int cls = class_of(compute_dtype);
    if (cls < 0 || !info->has[cls]())
      return vnc_set_error(VNC_ERR_UNSUPPORTED, "\"%s\" not implemented for '%s'", op_name,
                           vnc_dtype_name(compute_dtype));
    memset(&t.plan, 0, sizeof t.plan);
    t.plan.op = (int32_t)op;
    t.plan.cls = cls;
    t.plan.compute_dtype = class_dtype[cls];
    t.plan.result_dtype = info->bool_result ? VNC_BOOL : class_dtype[cls];
    const int half = compute_dtype == VNC_FLOAT16 || compute_dtype == VNC_BFLOAT16;
    if (!info->bool_result && half && it->dtypes[0] != compute_dtype) t.plan.round_dtype = compute_dtype;
    for (int k = 1; k < it->nops && half; k++) { /* bool and 8-bit integers are exact in both; scalars come rounded */
      const int32_t d = it->dtypes[k];
      if (d != compute_dtype && d != VNC_BOOL && d != VNC_UINT8 && d != VNC_INT8 && !((scalar_mask >> k) & 1) &&
          !(k == 2 && keeps_scalar_divisor(op, it))) {
        t.plan.round_in |= 1u << k;
        t.plan.in_dtype16 = compute_dtype;
      }
    }
    for (int k = 0; k < it->nops; k++) {
      int32_t want = k == 0 ? t.plan.result_dtype : t.plan.compute_dtype;
      const int round = (t.plan.round_in >> k) & 1; /* through the conversion path */
      if (round && !vnc_copy_loop(compute_dtype, it->dtypes[k]))
        return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: operand %d has unsupported dtype %s", op_name, k,
                             vnc_dtype_name(it->dtypes[k]));
      if (!round && it->dtypes[k] == want && !((scalar_mask >> k) & 1) && !(k == 0 && t.plan.round_dtype)) t.plan.direct |= 1u << k;
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
  return (it->numel <= VNC_SMALL_TASK ? vnc_launch_small : vnc_launch)(s, op_name, ew_run, &t, sizeof t, NULL);
}
