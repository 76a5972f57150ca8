/* Element types: storage, exact loads into a C compute type, and stores that follow C++
 * static_cast as c10 defines it. Header-level so fused and generated code reuse them. */
#ifndef VNC_KERNELS_DTYPE_H
#define VNC_KERNELS_DTYPE_H

#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "vnc/tensor.h"

typedef float _Complex vnc_c64;
typedef double _Complex vnc_c128;

static inline float vnc_f32_from_bits(uint32_t w) { float f; memcpy(&f, &w, 4); return f; }
static inline uint32_t vnc_f32_bits(float f) { uint32_t w; memcpy(&w, &f, 4); return w; }

/* bfloat16: the upper half of a float32; round to nearest even, NaN -> 0x7FC0 (as c10). */
static inline float vnc_bf16_to_f32(uint16_t h) { return vnc_f32_from_bits((uint32_t)h << 16); }
static inline uint16_t vnc_f32_to_bf16(float f) {
  if (isnan(f)) return 0x7FC0u;
  uint32_t w = vnc_f32_bits(f);
  return (uint16_t)((w + 0x7FFFu + ((w >> 16) & 1u)) >> 16);
}

/* IEEE binary16 <-> binary32 by exact float arithmetic (M. Dukhan's FP16 method, the one
 * c10::Half uses): exact widening; narrowing rounds to nearest even, NaN -> quiet 0x7E00. */
static inline float vnc_f16_to_f32(uint16_t h) {
  const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
  const float normalized = vnc_f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = vnc_f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t r = sign | (two_w < (1u << 27) ? vnc_f32_bits(denormalized) : vnc_f32_bits(normalized));
  return vnc_f32_from_bits(r);
}
static inline uint16_t vnc_f32_to_f16(float f) {
  float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = vnc_f32_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = vnc_f32_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t b = vnc_f32_bits(base);
  const uint32_t nonsign = ((b >> 13) & 0x00007C00u) + (b & 0x00000FFFu);
  return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

/* Per dtype: VNC_STORAGE_<D> (bytes in memory), VNC_COMPUTE_<D> (C type loads give),
 * VNC_LOAD_<D>(ptr) (exact) and VNC_STORE_<D>(ptr, value), which casts like c10::convert:
 * 16-bit floats through float32, uint8 through int64 (defined for negative inputs),
 * complex to real keeps the real part, to bool tests != 0. */
#define VNC_PLAIN_LOAD(T, p) (*(const T *)(p))
#define VNC_PLAIN_STORE(T, p, v) (*(T *)(p) = (T)(v))

#define VNC_STORAGE_UINT8 uint8_t
#define VNC_COMPUTE_UINT8 uint8_t
#define VNC_LOAD_UINT8(p) VNC_PLAIN_LOAD(uint8_t, p)
#define VNC_STORE_UINT8(p, v) (*(uint8_t *)(p) = (uint8_t)(int64_t)(v))
#define VNC_STORAGE_INT8 int8_t
#define VNC_COMPUTE_INT8 int8_t
#define VNC_LOAD_INT8(p) VNC_PLAIN_LOAD(int8_t, p)
#define VNC_STORE_INT8(p, v) VNC_PLAIN_STORE(int8_t, p, v)
#define VNC_STORAGE_INT16 int16_t
#define VNC_COMPUTE_INT16 int16_t
#define VNC_LOAD_INT16(p) VNC_PLAIN_LOAD(int16_t, p)
#define VNC_STORE_INT16(p, v) VNC_PLAIN_STORE(int16_t, p, v)
#define VNC_STORAGE_INT32 int32_t
#define VNC_COMPUTE_INT32 int32_t
#define VNC_LOAD_INT32(p) VNC_PLAIN_LOAD(int32_t, p)
#define VNC_STORE_INT32(p, v) VNC_PLAIN_STORE(int32_t, p, v)
#define VNC_STORAGE_INT64 int64_t
#define VNC_COMPUTE_INT64 int64_t
#define VNC_LOAD_INT64(p) VNC_PLAIN_LOAD(int64_t, p)
#define VNC_STORE_INT64(p, v) VNC_PLAIN_STORE(int64_t, p, v)
#define VNC_STORAGE_FLOAT16 uint16_t
#define VNC_COMPUTE_FLOAT16 float
#define VNC_LOAD_FLOAT16(p) vnc_f16_to_f32(*(const uint16_t *)(p))
#define VNC_STORE_FLOAT16(p, v) (*(uint16_t *)(p) = vnc_f32_to_f16((float)(v)))
#define VNC_STORAGE_FLOAT32 float
#define VNC_COMPUTE_FLOAT32 float
#define VNC_LOAD_FLOAT32(p) VNC_PLAIN_LOAD(float, p)
#define VNC_STORE_FLOAT32(p, v) VNC_PLAIN_STORE(float, p, v)
#define VNC_STORAGE_FLOAT64 double
#define VNC_COMPUTE_FLOAT64 double
#define VNC_LOAD_FLOAT64(p) VNC_PLAIN_LOAD(double, p)
#define VNC_STORE_FLOAT64(p, v) VNC_PLAIN_STORE(double, p, v)
#define VNC_STORAGE_COMPLEX64 vnc_c64
#define VNC_COMPUTE_COMPLEX64 vnc_c64
#define VNC_LOAD_COMPLEX64(p) VNC_PLAIN_LOAD(vnc_c64, p)
#define VNC_STORE_COMPLEX64(p, v) VNC_PLAIN_STORE(vnc_c64, p, v)
#define VNC_STORAGE_COMPLEX32 uint32_t
#define VNC_COMPUTE_COMPLEX32 vnc_c64
#define VNC_LOAD_COMPLEX32(p) \
  CMPLXF(vnc_f16_to_f32(((const uint16_t *)(p))[0]), vnc_f16_to_f32(((const uint16_t *)(p))[1]))
#define VNC_STORE_COMPLEX32(p, v)                                  \
  do {                                                             \
    vnc_c64 c32_ = (vnc_c64)(v);                                   \
    ((uint16_t *)(p))[0] = vnc_f32_to_f16(crealf(c32_));           \
    ((uint16_t *)(p))[1] = vnc_f32_to_f16(cimagf(c32_));           \
  } while (0)
#define VNC_STORAGE_COMPLEX128 vnc_c128
#define VNC_COMPUTE_COMPLEX128 vnc_c128
#define VNC_LOAD_COMPLEX128(p) VNC_PLAIN_LOAD(vnc_c128, p)
#define VNC_STORE_COMPLEX128(p, v) VNC_PLAIN_STORE(vnc_c128, p, v)
#define VNC_STORAGE_BOOL _Bool
#define VNC_COMPUTE_BOOL _Bool
#define VNC_LOAD_BOOL(p) VNC_PLAIN_LOAD(_Bool, p)
#define VNC_STORE_BOOL(p, v) VNC_PLAIN_STORE(_Bool, p, v)
#define VNC_STORAGE_BFLOAT16 uint16_t
#define VNC_COMPUTE_BFLOAT16 float
#define VNC_LOAD_BFLOAT16(p) vnc_bf16_to_f32(*(const uint16_t *)(p))
#define VNC_STORE_BFLOAT16(p, v) (*(uint16_t *)(p) = vnc_f32_to_bf16((float)(v)))

/* The dtype names, for X-macros: X(D) and, for pairs, XA(a, D) with an extra argument
 * (a macro cannot expand itself, so pair tables nest VNC_DTYPES inside VNC_DTYPES_A). */
#define VNC_DTYPES(X) X(UINT8) X(INT8) X(INT16) X(INT32) X(INT64) X(FLOAT16) X(FLOAT32) \
  X(FLOAT64) X(COMPLEX32) X(COMPLEX64) X(COMPLEX128) X(BOOL) X(BFLOAT16)
#define VNC_DTYPES_A(XA, a) XA(a, UINT8) XA(a, INT8) XA(a, INT16) XA(a, INT32) XA(a, INT64) \
  XA(a, FLOAT16) XA(a, FLOAT32) XA(a, FLOAT64) XA(a, COMPLEX32) XA(a, COMPLEX64) XA(a, COMPLEX128) \
  XA(a, BOOL) \
  XA(a, BFLOAT16)

/* Runtime-typed access for code that is not specialised per dtype (RNG, scalars). */
typedef void (*vnc_store_f64_fn)(void *p, double v);
typedef void (*vnc_store_i64_fn)(void *p, int64_t v);
typedef double (*vnc_load_f64_fn)(const void *p);
extern const vnc_store_f64_fn vnc_store_f64[VNC_DTYPE_END];
extern const vnc_store_i64_fn vnc_store_i64[VNC_DTYPE_END];
extern const vnc_load_f64_fn vnc_load_f64[VNC_DTYPE_END];

static inline int vnc_dtype_is_floating(int32_t dt) {
  return dt == VNC_FLOAT16 || dt == VNC_FLOAT32 || dt == VNC_FLOAT64 || dt == VNC_BFLOAT16;
}
static inline int vnc_dtype_is_complex(int32_t dt) {
  return dt == VNC_COMPLEX32 || dt == VNC_COMPLEX64 || dt == VNC_COMPLEX128;
}

#endif
