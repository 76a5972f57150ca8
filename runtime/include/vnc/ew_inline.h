/* vnc/ew_inline.h — every row of vnc/ew_table.h as a static inline function per type class,
 * for generated code (torch.compile graphs, eager fusion):
 *
 *     R vnc_ew_<op>_<CLS>(T a, T b, T c, const vnc_ew_params *P)
 *
 * CLS and T: F32 float (float16, bfloat16 and float64 compute through it), I64 int64_t,
 * I32 int32_t, I16 int16_t, I8 int8_t, U8 uint8_t, B _Bool, C64 float _Complex. R is T, or
 * _Bool for comparison rows. Unused inputs are ignored. A class the row has no body for
 * (VNC_NA) returns 0; callers check vnc_elementwise_supports first. The bodies are the
 * table's expressions verbatim; compiled with -ffp-contract=off -fwrapv like the runtime,
 * they give the eager kernels' bits. C11 only.
 */
#ifndef VNC_EW_INLINE_H
#define VNC_EW_INLINE_H

#include "ew_scalar.h"
#include "ew_table.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define VNC_EWI_CLASSES(X, ...)                                                       \
  X(F32, float, F, __VA_ARGS__) X(I64, int64_t, I, __VA_ARGS__)                        \
  X(I32, int32_t, I, __VA_ARGS__) X(I16, int16_t, I, __VA_ARGS__)                      \
  X(I8, int8_t, I, __VA_ARGS__) X(U8, uint8_t, I, __VA_ARGS__) X(B, _Bool, B, __VA_ARGS__) \
  X(C64, float _Complex, C, __VA_ARGS__)
#define VNC_EWI_BODY_F(F, I, B, C) F
#define VNC_EWI_BODY_I(F, I, B, C) I
#define VNC_EWI_BODY_B(F, I, B, C) B
#define VNC_EWI_BODY_C(F, I, B, C) C
#define VNC_EWI_RES_S(TT) TT
#define VNC_EWI_RES_B(TT) _Bool

#define VNC_EWI_DEF(CLS, TT, COL, name, nin, res, F, I, B, C)                                  \
  static inline VNC_EWI_RES_##res(TT) vnc_ew_##name##_##CLS(TT a, TT b, TT c, const vnc_ew_params *P) { \
    typedef TT T;                                                                              \
    typedef VNC_EWI_RES_##res(TT) R;                                                           \
    (void)a; (void)b; (void)c; (void)P;                                                        \
    return _Generic((VNC_EWI_BODY_##COL(F, I, B, C)), vnc_ew_na: (R)0,                         \
                    default: (VNC_EWI_BODY_##COL(F, I, B, C)));                                \
  }
#define VNC_EWI_ROW(name, nin, res, F, I, B, C) VNC_EWI_CLASSES(VNC_EWI_DEF, name, nin, res, F, I, B, C)
VNC_EW_TABLE(VNC_EWI_ROW)

/* The rows of VNC_EW_FAST_TABLE (vnc/ew_scalar.h) also as
 *
 *     int   vnc_ew_<op>_F32_ok(float a, float b, float c, const vnc_ew_params *P)    inputs in the domain?
 *     float vnc_ew_<op>_F32_fast(float a, float b, float c, const vnc_ew_params *P)  the fast form
 *
 * A generated loop tests its chunk with _ok and runs the _fast form on it when every element
 * passed (the same bits as vnc_ew_<op>_F32). */
#define VNC_EWI_FAST(name, nin, IN_DOMAIN, FAST)                                              \
  static inline int vnc_ew_##name##_F32_ok(float a, float b, float c, const vnc_ew_params *P) { \
    (void)a; (void)b; (void)c; (void)P;                                                      \
    return IN_DOMAIN;                                                                        \
  }                                                                                          \
  static inline float vnc_ew_##name##_F32_fast(float a, float b, float c, const vnc_ew_params *P) { \
    (void)a; (void)b; (void)c; (void)P;                                                      \
    return FAST;                                                                             \
  }
VNC_EW_FAST_TABLE(VNC_EWI_FAST)

#undef VNC_EWI_FAST
#undef VNC_EWI_ROW
#undef VNC_EWI_DEF
#pragma GCC diagnostic pop

#endif
