/* The elementwise type classes and body selection shared by the launcher (elementwise.c)
 * and the per-tier typed loops (tier_kernels.c). Kernel-internal. */
#ifndef VNC_EW_CLASSES_H
#define VNC_EW_CLASSES_H

#include "dtype.h"
#include "vnc/ew_table.h"

/* Contiguous typed loop: out[i] = body(in0[i], in1[i], in2[i]). */
typedef void (*vnc_ew_kernel)(int64_t n, char *out, char *const *in, const vnc_ew_params *P);

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

/* Pick the body of a class: F, I, B or C column. */
#define EW_BODY_F(F, I, B, C) F
#define EW_BODY_I(F, I, B, C) I
#define EW_BODY_B(F, I, B, C) B
#define EW_BODY_C(F, I, B, C) C
#define EW_RES_S(T) T
#define EW_RES_B(T) _Bool

#endif
