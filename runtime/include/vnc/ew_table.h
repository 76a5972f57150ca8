/* vnc/ew_table.h — the elementwise instruction set of the virtual NeuronCore.
 *
 * One row per op: X(name, inputs, result, FLOAT, INT, BOOL, COMPLEX). `result` is S (same
 * type as the compute type) or B (bool). Each body is a C expression of the inputs a, b, c
 * (already converted to the compute type), the parameters P (const vnc_ew_params *) and,
 * for INT, the integer type T. VNC_NA marks a type class the op does not accept. FLOAT
 * bodies serve float32 and every type computed through it (bfloat16, float16 and, by the
 * device rule, float64). Sources of formulas: PyTorch's ATen CPU kernels (semantics: NaN
 * propagation, rounding modes, sign rules), noted per row where not obvious.
 *
 * The table is header-level so that the fusion and code-generation layers emit the same
 * expressions and reproduce eager results bit for bit. Build with -ffp-contract=off and
 * -fwrapv (integer arithmetic wraps, as in PyTorch).
 */
#ifndef VNC_EW_TABLE_H
#define VNC_EW_TABLE_H

#include <complex.h>
#include <math.h>
#include <stdint.h>

/* Scalar parameters of an op (alpha, bounds, slopes...): as float and as int64. */
typedef struct vnc_ew_params {
  double f[4];
  int64_t i[4];
  int32_t flags;  /* op-specific bits, e.g. which clamp bounds are present */
  int *fault;     /* set to 1 by a body that meets an invalid value (integer division by 0) */
} vnc_ew_params;

/* Placeholder body of a type class an op does not accept; detected with _Generic. */
typedef struct vnc_ew_na {
  int unused;
} vnc_ew_na;
#define VNC_NA ((vnc_ew_na){0})

static inline int vnc_ew_fault(const vnc_ew_params *P) {
  if (P->fault) __atomic_store_n(P->fault, 1, __ATOMIC_RELAXED);
  return 0;
}

/* ---- helpers (float) ---- */
static inline float vnc_f_sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }
static inline float vnc_f_gelu(float a) { return 0.5f * a * (1.0f + erff(a * 0.70710678118654752440f)); }
static inline float vnc_f_gelu_tanh(float a) {
  const float k = 0.79788456080286535588f; /* sqrt(2/pi) */
  return 0.5f * a * (1.0f + tanhf(k * (a + 0.044715f * a * a * a)));
}
static inline float vnc_f_gelu_grad(float g, float a) {
  const float cdf = 0.5f * (1.0f + erff(a * 0.70710678118654752440f));
  const float pdf = expf(-0.5f * a * a) * 0.39894228040143267794f; /* 1/sqrt(2 pi) */
  return g * (cdf + a * pdf);
}
static inline float vnc_f_gelu_tanh_grad(float g, float a) {
  const float k = 0.79788456080286535588f, c = 0.044715f;
  const float inner = k * (a + c * a * a * a);
  const float t = tanhf(inner);
  const float left = 0.5f * a, right = 1.0f + t;
  const float dinner = k * (1.0f + 3.0f * c * a * a);
  return g * (0.5f * right + left * (1.0f - t * t) * dinner);
}
static inline float vnc_f_silu_grad(float g, float a) {
  const float s = vnc_f_sigmoid(a);
  return g * s * (1.0f + a * (1.0f - s));
}
/* Python-style remainder: the result takes the divisor's sign (ATen remainder). */
static inline float vnc_f_remainder(float a, float b) {
  float m = fmodf(a, b);
  if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) m += b;
  return m;
}
/* floor division as ATen's div_floor_floating (fmod-based, exact for representable values). */
static inline float vnc_f_div_floor(float a, float b) {
  if (b == 0.0f) return a / b;
  float mod = fmodf(a, b);
  float div = (a - mod) / b;
  if (mod != 0.0f && ((b < 0.0f) != (mod < 0.0f))) div -= 1.0f;
  float floordiv;
  if (div != 0.0f) {
    floordiv = floorf(div);
    if (div - floordiv > 0.5f) floordiv += 1.0f;
  } else {
    floordiv = copysignf(0.0f, a / b);
  }
  return floordiv;
}
/* maximum/minimum propagate NaN from either side (ATen). */
static inline float vnc_f_max(float a, float b) { return (isnan(a) || a > b) ? a : b; }
static inline float vnc_f_min(float a, float b) { return (isnan(a) || a < b) ? a : b; }
static inline float vnc_f_clamp(float a, const vnc_ew_params *P) {
  if (isnan(a)) return a;
  float r = a;
  if ((P->flags & 1) && !(r >= (float)P->f[0])) r = (float)P->f[0];
  if ((P->flags & 2) && !(r <= (float)P->f[1])) r = (float)P->f[1];
  return r;
}
static inline float vnc_f_lerp(float a, float b, float w) {
  return fabsf(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}
static inline float vnc_f_softplus(float a, float beta, float threshold) {
  return a * beta > threshold ? a : log1pf(expf(a * beta)) / beta;
}
static inline float vnc_f_softplus_grad(float g, float a, float beta, float threshold) {
  float z = expf(a * beta);
  return a * beta > threshold ? g : g * z / (z + 1.0f);
}
static inline float vnc_f_elu(float a, float alpha, float scale, float input_scale) {
  return a <= 0.0f ? expm1f(a * input_scale) * alpha * scale : a * scale;
}
/* elu_backward(grad, self_or_result, alpha, scale, input_scale, is_result) as ATen. */
static inline float vnc_f_elu_grad(float g, float x, const vnc_ew_params *P) {
  const float alpha = (float)P->f[0], scale = (float)P->f[1], input_scale = (float)P->f[2];
  if (P->flags & 1) return x <= 0.0f ? g * input_scale * (x + alpha * scale) : g * scale;
  return x <= 0.0f ? g * input_scale * alpha * scale * expf(x * input_scale) : g * scale;
}
static inline float vnc_f_hardswish(float a) { return a * fminf(fmaxf(a + 3.0f, 0.0f), 6.0f) / 6.0f; }
static inline float vnc_f_hardswish_grad(float g, float a) {
  return a < -3.0f ? 0.0f : (a <= 3.0f ? g * ((a / 3.0f) + 0.5f) : g);
}
static inline float vnc_f_sign(float a) { return (float)((0.0f < a) - (a < 0.0f)); }

/* ---- helpers (integer; T is the integer type) ---- */
#define VNC_I_ABS(T, a) ((T)((a) < 0 ? -(a) : (a)))
#define VNC_I_SIGN(a) ((0 < (a)) - ((a) < 0))
/* Division helpers report b == 0 (ZeroDivisionError, as ATen) and avoid the INT_MIN / -1
 * trap by negating. */
#define VNC_I_DIV_TRUNC(T, a, b) \
  ((b) == 0 ? (T)vnc_ew_fault(P) : (b) == -1 ? (T)(-(a)) : (T)((a) / (b)))
#define VNC_I_DIV_FLOOR(T, a, b)                                                        \
  ((b) == 0 ? (T)vnc_ew_fault(P) : (b) == -1 ? (T)(-(a))                                \
   : (T)(((a) / (b)) - ((((a) % (b)) != 0) && (((a) < 0) != ((b) < 0)))))
#define VNC_I_REM(T, a, b)                                                              \
  ((b) == 0 ? (T)vnc_ew_fault(P) : (b) == -1 ? (T)0                                     \
   : (T)((((a) % (b)) != 0 && (((a) % (b)) < 0) != ((b) < 0)) ? ((a) % (b)) + (b) : ((a) % (b))))
#define VNC_I_FMOD(T, a, b) ((b) == 0 ? (T)vnc_ew_fault(P) : (b) == -1 ? (T)0 : (T)((a) % (b)))

/* ---- helpers (complex64) ---- */
static inline float _Complex vnc_c_mul(float _Complex x, float _Complex y) {
  float a = crealf(x), b = cimagf(x), c = crealf(y), d = cimagf(y);
  return CMPLXF(a * c - b * d, a * d + b * c);
}
/* Smith's algorithm, as c10::complex (after numpy). */
static inline float _Complex vnc_c_div(float _Complex x, float _Complex y) {
  float a = crealf(x), b = cimagf(x), c = crealf(y), d = cimagf(y);
  float ac = fabsf(c), ad = fabsf(d);
  if (ac >= ad) {
    if (ac == 0.0f && ad == 0.0f) return CMPLXF(a / ac, b / ad);
    float rat = d / c, scl = 1.0f / (c + d * rat);
    return CMPLXF((a + b * rat) * scl, (b - a * rat) * scl);
  }
  float rat = c / d, scl = 1.0f / (d + c * rat);
  return CMPLXF((a * rat + b) * scl, (b * rat - a) * scl);
}
static inline float _Complex vnc_c_scale(float _Complex x, double s) {
  return CMPLXF(crealf(x) * (float)s, cimagf(x) * (float)s);
}

/* clang-format off */
#define VNC_EW_TABLE(X) \
  /* arithmetic (P->f[0] / P->i[0] = alpha) */ \
  X(add, 2, S, a + (float)P->f[0] * b, (T)(a + (T)P->i[0] * b), a || b, a + vnc_c_scale(b, P->f[0])) \
  X(sub, 2, S, a - (float)P->f[0] * b, (T)(a - (T)P->i[0] * b), VNC_NA, a - vnc_c_scale(b, P->f[0])) \
  X(mul, 2, S, a * b, (T)(a * b), a && b, vnc_c_mul(a, b)) \
  X(div, 2, S, a / b, VNC_NA, VNC_NA, vnc_c_div(a, b)) \
  X(div_trunc, 2, S, truncf(a / b), VNC_I_DIV_TRUNC(T, a, b), VNC_NA, VNC_NA) \
  X(div_floor, 2, S, vnc_f_div_floor(a, b), VNC_I_DIV_FLOOR(T, a, b), VNC_NA, VNC_NA) \
  X(remainder, 2, S, vnc_f_remainder(a, b), VNC_I_REM(T, a, b), VNC_NA, VNC_NA) \
  X(fmod, 2, S, fmodf(a, b), VNC_I_FMOD(T, a, b), VNC_NA, VNC_NA) \
  X(pow, 2, S, powf(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(atan2, 2, S, atan2f(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(maximum, 2, S, vnc_f_max(a, b), (T)(a > b ? a : b), a || b, VNC_NA) \
  X(minimum, 2, S, vnc_f_min(a, b), (T)(a < b ? a : b), a && b, VNC_NA) \
  X(fmax, 2, S, fmaxf(a, b), (T)(a > b ? a : b), a || b, VNC_NA) \
  X(fmin, 2, S, fminf(a, b), (T)(a < b ? a : b), a && b, VNC_NA) \
  /* comparisons and logic (bool result) */ \
  X(eq, 2, B, a == b, a == b, a == b, a == b) \
  X(ne, 2, B, a != b, a != b, a != b, a != b) \
  X(lt, 2, B, a < b, a < b, a < b, VNC_NA) \
  X(le, 2, B, a <= b, a <= b, a <= b, VNC_NA) \
  X(gt, 2, B, a > b, a > b, a > b, VNC_NA) \
  X(ge, 2, B, a >= b, a >= b, a >= b, VNC_NA) \
  X(logical_and, 2, B, a != 0 && b != 0, a != 0 && b != 0, a && b, a != 0 && b != 0) \
  X(logical_or, 2, B, a != 0 || b != 0, a != 0 || b != 0, a || b, a != 0 || b != 0) \
  X(logical_xor, 2, B, (a != 0) != (b != 0), (a != 0) != (b != 0), a != b, (a != 0) != (b != 0)) \
  X(logical_not, 1, B, a == 0, a == 0, !a, a == 0) \
  X(bitwise_and, 2, S, VNC_NA, (T)(a & b), a && b, VNC_NA) \
  X(bitwise_or, 2, S, VNC_NA, (T)(a | b), a || b, VNC_NA) \
  X(bitwise_xor, 2, S, VNC_NA, (T)(a ^ b), a != b, VNC_NA) \
  X(bitwise_not, 1, S, VNC_NA, (T)(~a), !a, VNC_NA) \
  X(isnan, 1, B, isnan(a), 0, 0, VNC_NA) \
  /* unary math */ \
  X(neg, 1, S, -a, (T)(-a), VNC_NA, -a) \
  X(abs, 1, S, fabsf(a), VNC_I_ABS(T, a), a, VNC_NA) \
  X(sign, 1, S, vnc_f_sign(a), (T)VNC_I_SIGN(a), a, VNC_NA) \
  X(exp, 1, S, expf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(exp2, 1, S, exp2f(a), VNC_NA, VNC_NA, VNC_NA) \
  X(expm1, 1, S, expm1f(a), VNC_NA, VNC_NA, VNC_NA) \
  X(log, 1, S, logf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(log2, 1, S, log2f(a), VNC_NA, VNC_NA, VNC_NA) \
  X(log10, 1, S, log10f(a), VNC_NA, VNC_NA, VNC_NA) \
  X(log1p, 1, S, log1pf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(sqrt, 1, S, sqrtf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(rsqrt, 1, S, 1.0f / sqrtf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(reciprocal, 1, S, 1.0f / a, VNC_NA, VNC_NA, VNC_NA) \
  X(sin, 1, S, sinf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(cos, 1, S, cosf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(tan, 1, S, tanf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(asin, 1, S, asinf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(acos, 1, S, acosf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(atan, 1, S, atanf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(sinh, 1, S, sinhf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(cosh, 1, S, coshf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(tanh, 1, S, tanhf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(asinh, 1, S, asinhf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(acosh, 1, S, acoshf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(atanh, 1, S, atanhf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(erf, 1, S, erff(a), VNC_NA, VNC_NA, VNC_NA) \
  X(erfc, 1, S, erfcf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(sigmoid, 1, S, vnc_f_sigmoid(a), VNC_NA, VNC_NA, VNC_NA) \
  X(ceil, 1, S, ceilf(a), a, VNC_NA, VNC_NA) \
  X(floor, 1, S, floorf(a), a, VNC_NA, VNC_NA) \
  X(round, 1, S, nearbyintf(a), a, VNC_NA, VNC_NA) /* half to even */ \
  X(trunc, 1, S, truncf(a), a, VNC_NA, VNC_NA) \
  X(frac, 1, S, a - truncf(a), VNC_NA, VNC_NA, VNC_NA) \
  /* activations (P: see the glue for each op's parameters) */ \
  X(relu, 1, S, (a > 0.0f || isnan(a)) ? a : 0.0f, (T)(a > 0 ? a : 0), a, VNC_NA) \
  X(clamp, 1, S, vnc_f_clamp(a, P), (T)(((P->flags & 2) && a > P->i[1]) ? P->i[1] : ((P->flags & 1) && a < P->i[0]) ? P->i[0] : a), VNC_NA, VNC_NA) \
  X(gelu, 1, S, vnc_f_gelu(a), VNC_NA, VNC_NA, VNC_NA) \
  X(gelu_tanh, 1, S, vnc_f_gelu_tanh(a), VNC_NA, VNC_NA, VNC_NA) \
  X(silu, 1, S, a * vnc_f_sigmoid(a), VNC_NA, VNC_NA, VNC_NA) \
  X(softplus, 1, S, vnc_f_softplus(a, (float)P->f[0], (float)P->f[1]), VNC_NA, VNC_NA, VNC_NA) \
  X(leaky_relu, 1, S, a > 0.0f ? a : a * (float)P->f[0], VNC_NA, VNC_NA, VNC_NA) \
  X(elu, 1, S, vnc_f_elu(a, (float)P->f[0], (float)P->f[1], (float)P->f[2]), VNC_NA, VNC_NA, VNC_NA) \
  X(hardswish, 1, S, vnc_f_hardswish(a), VNC_NA, VNC_NA, VNC_NA) \
  X(hardsigmoid, 1, S, fminf(fmaxf(a + 3.0f, 0.0f), 6.0f) / 6.0f, VNC_NA, VNC_NA, VNC_NA) \
  /* backward of activations: a = grad_output, b = input (or result where noted) */ \
  X(threshold_backward, 2, S, b <= (float)P->f[0] ? 0.0f : a, (T)(b <= P->i[0] ? 0 : a), VNC_NA, VNC_NA) \
  X(gelu_backward, 2, S, vnc_f_gelu_grad(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(gelu_tanh_backward, 2, S, vnc_f_gelu_tanh_grad(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(silu_backward, 2, S, vnc_f_silu_grad(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(sigmoid_backward, 2, S, a * (1.0f - b) * b, VNC_NA, VNC_NA, VNC_NA) /* b = result */ \
  X(tanh_backward, 2, S, a * (1.0f - b * b), VNC_NA, VNC_NA, VNC_NA) /* b = result */ \
  X(softplus_backward, 2, S, vnc_f_softplus_grad(a, b, (float)P->f[0], (float)P->f[1]), VNC_NA, VNC_NA, VNC_NA) \
  X(leaky_relu_backward, 2, S, b > 0.0f ? a : a * (float)P->f[0], VNC_NA, VNC_NA, VNC_NA) \
  X(elu_backward, 2, S, vnc_f_elu_grad(a, b, P), VNC_NA, VNC_NA, VNC_NA) \
  X(hardswish_backward, 2, S, vnc_f_hardswish_grad(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(hardtanh_backward, 2, S, (b <= (float)P->f[0] || b >= (float)P->f[1]) ? 0.0f : a, VNC_NA, VNC_NA, VNC_NA) \
  /* ternary: a = self */ \
  X(where, 3, S, a != 0.0f ? b : c, (T)(a != 0 ? b : c), a ? b : c, a != 0 ? b : c) /* a = condition */ \
  X(lerp, 3, S, vnc_f_lerp(a, b, c), VNC_NA, VNC_NA, VNC_NA) \
  X(addcmul, 3, S, a + (float)P->f[0] * b * c, (T)(a + (T)P->i[0] * b * c), VNC_NA, VNC_NA) \
  X(addcdiv, 3, S, a + (float)P->f[0] * (b / c), VNC_NA, VNC_NA, VNC_NA)
/* clang-format on */

typedef enum vnc_ew_op {
#define VNC_EW_ENUM(name, nin, res, F, I, B, C) VNC_EW_##name,
  VNC_EW_TABLE(VNC_EW_ENUM)
#undef VNC_EW_ENUM
  VNC_EW_COUNT
} vnc_ew_op;

#endif
