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
 * expressions and reproduce eager results bit for bit. The helpers the bodies call are in
 * vnc/ew_scalar.h (C only). Build with -ffp-contract=off and -fwrapv (integer arithmetic
 * wraps, as in PyTorch). This header itself is valid C and C++ (the glue uses the enum).
 */
#ifndef VNC_EW_TABLE_H
#define VNC_EW_TABLE_H

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



/* clang-format off */
#define VNC_EW_TABLE(X) \
  /* arithmetic (P->f[0] / P->i[0] = alpha) */ \
  X(add, 2, S, vnc_fmaf(b, (float)P->f[0], a), (T)(a + (T)P->i[0] * b), a || (P->i[0] && b), a + vnc_c_scale(b, P->f[0])) \
  X(sub, 2, S, vnc_fmaf(b, -(float)P->f[0], a), (T)(a - (T)P->i[0] * b), VNC_NA, a - vnc_c_scale(b, P->f[0])) \
  X(mul, 2, S, a * b, (T)(a * b), a && b, vnc_c_mul(a, b)) \
  X(div, 2, S, a / b, VNC_NA, VNC_NA, vnc_c_div(a, b)) \
  X(div_trunc, 2, S, truncf(a / b), VNC_I_DIV_TRUNC(T, a, b), VNC_NA, VNC_NA) \
  X(div_floor, 2, S, vnc_f_div_floor(a, b), VNC_I_DIV_FLOOR(T, a, b), VNC_NA, VNC_NA) \
  X(remainder, 2, S, vnc_f_remainder(a, b), VNC_I_REM(T, a, b), VNC_NA, VNC_NA) \
  X(fmod, 2, S, fmodf(a, b), VNC_I_FMOD(T, a, b), VNC_NA, VNC_NA) \
  X(pow, 2, S, vnc_f_pow(a, b), (T)vnc_i_pow((int64_t)a, (int64_t)b), VNC_NA, VNC_NA) \
  X(atan2, 2, S, vnc_atan2f(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(hypot, 2, S, vnc_hypotf(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(xlogy, 2, S, isnan(b) ? NAN : (a == 0.0f ? 0.0f : a * vnc_logf(b)), VNC_NA, VNC_NA, VNC_NA) \
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
  X(isneginf, 1, B, isinf(a) && a < 0.0f, 0, 0, VNC_NA) \
  X(isposinf, 1, B, isinf(a) && a > 0.0f, 0, 0, VNC_NA) \
  /* unary math */ \
  X(neg, 1, S, -a, (T)(-a), VNC_NA, -a) \
  X(abs, 1, S, fabsf(a), VNC_I_ABS(T, a), a, VNC_NA) \
  X(sign, 1, S, vnc_f_sign(a), (T)VNC_I_SIGN(a), a, VNC_NA) \
  X(exp, 1, S, vnc_expf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(exp2, 1, S, vnc_exp2f(a), VNC_NA, VNC_NA, VNC_NA) \
  X(expm1, 1, S, vnc_expm1f(a), VNC_NA, VNC_NA, VNC_NA) \
  X(log, 1, S, vnc_logf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(log2, 1, S, vnc_log2f(a), VNC_NA, VNC_NA, VNC_NA) \
  X(log10, 1, S, vnc_log10f(a), VNC_NA, VNC_NA, VNC_NA) \
  X(log1p, 1, S, vnc_log1pf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(sqrt, 1, S, sqrtf(a), VNC_NA, VNC_NA, VNC_NA) \
  /* pow by a scalar special exponent: the launcher's rewrite of pow, ATen's formulas */ \
  X(pow_sq, 1, S, a * a, VNC_NA, VNC_NA, VNC_NA) \
  X(pow_cube, 1, S, (a * a) * a, VNC_NA, VNC_NA, VNC_NA) \
  X(pow_inv_sq, 1, S, 1.0f / (a * a), VNC_NA, VNC_NA, VNC_NA) \
  X(rsqrt, 1, S, 1.0f / sqrtf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(reciprocal, 1, S, 1.0f / a, VNC_NA, VNC_NA, VNC_NA) \
  X(sin, 1, S, vnc_sinf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(cos, 1, S, vnc_cosf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(tan, 1, S, vnc_tanf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(asin, 1, S, vnc_asinf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(acos, 1, S, vnc_acosf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(atan, 1, S, vnc_atanf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(sinh, 1, S, vnc_sinhf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(cosh, 1, S, vnc_coshf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(tanh, 1, S, vnc_tanhf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(asinh, 1, S, vnc_asinhf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(acosh, 1, S, vnc_acoshf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(atanh, 1, S, vnc_atanhf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(erf, 1, S, vnc_erff(a), VNC_NA, VNC_NA, VNC_NA) \
  X(erfc, 1, S, erfcf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(erfinv, 1, S, vnc_f_erfinv(a), VNC_NA, VNC_NA, VNC_NA) \
  X(sigmoid, 1, S, vnc_f_sigmoid(a), VNC_NA, VNC_NA, VNC_NA) \
  X(ceil, 1, S, ceilf(a), a, VNC_NA, VNC_NA) \
  X(floor, 1, S, floorf(a), a, VNC_NA, VNC_NA) \
  X(round, 1, S, nearbyintf(a), a, VNC_NA, VNC_NA) /* half to even */ \
  X(trunc, 1, S, truncf(a), a, VNC_NA, VNC_NA) \
  X(frac, 1, S, a - truncf(a), VNC_NA, VNC_NA, VNC_NA) \
  X(copysign, 2, S, copysignf(a, b), VNC_NA, VNC_NA, VNC_NA) /* integer inputs promote to float (ATen's meta) */ \
  /* shrinkage and thresholds (ATen's CPU kernels): P->f[0] = lambda, or threshold and P->f[1] = value */ \
  X(hardshrink, 1, S, (a >= -(float)P->f[0] && a <= (float)P->f[0]) ? 0.0f : a, VNC_NA, VNC_NA, VNC_NA) \
  X(softshrink, 1, S, a > (float)P->f[0] ? a - (float)P->f[0] : (a < -(float)P->f[0] ? a + (float)P->f[0] : a * 0.0f), VNC_NA, VNC_NA, VNC_NA) \
  X(shrink_backward, 2, S, (b >= -(float)P->f[0] && b <= (float)P->f[0]) ? 0.0f : a, VNC_NA, VNC_NA, VNC_NA) /* a: grad, b: input (hard and soft) */ \
  X(threshold, 2, S, a <= (float)P->f[0] ? (float)P->f[1] : b, (T)(a <= (T)P->i[0] ? (T)P->i[1] : b), VNC_NA, VNC_NA) /* a, b: self */ \
  /* activations (P: see the glue for each op's parameters) */ \
  X(relu, 1, S, a < 0.0f ? 0.0f : a, (T)(a > 0 ? a : 0), a, VNC_NA) \
  X(clamp, 1, S, vnc_f_clamp(a, P), VNC_I_CLAMP(T, a), VNC_NA, VNC_NA) \
  /* clamp with tensor bounds b (min) and c (max): NaN when a bound is NaN (as ATen) */ \
  X(clamp_tensor, 3, S, vnc_f_clamp_tensor(a, b, c), (T)((a < b ? b : a) > c ? c : (a < b ? b : a)), VNC_NA, VNC_NA) \
  X(gelu, 1, S, vnc_f_gelu(a), VNC_NA, VNC_NA, VNC_NA) \
  X(gelu_tanh, 1, S, vnc_f_gelu_tanh(a), VNC_NA, VNC_NA, VNC_NA) \
  X(silu, 1, S, vnc_f_silu(a), VNC_NA, VNC_NA, VNC_NA) \
  X(softplus, 1, S, vnc_f_softplus(a, (float)P->f[0], (float)P->f[1]), VNC_NA, VNC_NA, VNC_NA) \
  X(leaky_relu, 1, S, a > 0.0f ? a : a * (float)P->f[0], VNC_NA, VNC_NA, VNC_NA) \
  X(elu, 1, S, vnc_f_elu(a, (float)P->f[0], (float)P->f[1], (float)P->f[2]), VNC_NA, VNC_NA, VNC_NA) \
  X(hardswish, 1, S, vnc_f_hardswish(a), VNC_NA, VNC_NA, VNC_NA) \
  X(mish, 1, S, vnc_f_mish(a), VNC_NA, VNC_NA, VNC_NA) \
  X(mish_backward, 2, S, vnc_f_mish_grad(a, b), VNC_NA, VNC_NA, VNC_NA) /* a: grad, b: input */ \
  /* nan_to_num: P->f = {nan, posinf, neginf} replacements */ \
  X(nan_to_num, 1, S, isnan(a) ? (float)P->f[0] : a == INFINITY ? (float)P->f[1] : a == -INFINITY ? (float)P->f[2] : a, a, a, VNC_NA) \
  X(hardsigmoid, 1, S, vnc_f_relu6(a + 3.0f) / 6.0f, VNC_NA, VNC_NA, VNC_NA) \
  /* backward of activations: a = grad_output, b = input (or result where noted), except
   * where ATen's meta orders them (self, grad): threshold_backward, leaky_relu_backward */ \
  X(threshold_backward, 2, S, a <= (float)P->f[0] ? 0.0f : b, (T)(a <= P->i[0] ? 0 : b), VNC_NA, VNC_NA) \
  X(gelu_backward, 2, S, vnc_f_gelu_grad(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(gelu_tanh_backward, 2, S, vnc_f_gelu_tanh_grad(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(silu_backward, 2, S, vnc_f_silu_grad(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(sigmoid_backward, 2, S, a * (1.0f - b) * b, VNC_NA, VNC_NA, VNC_NA) /* b = result */ \
  X(tanh_backward, 2, S, a * (1.0f - b * b), VNC_NA, VNC_NA, VNC_NA) /* b = result */ \
  X(softplus_backward, 2, S, vnc_f_softplus_grad(a, b, (float)P->f[0], (float)P->f[1]), VNC_NA, VNC_NA, VNC_NA) \
  X(leaky_relu_backward, 2, S, a > 0.0f ? b : b * (float)P->f[0], VNC_NA, VNC_NA, VNC_NA) \
  X(elu_backward, 2, S, vnc_f_elu_grad(a, b, P), VNC_NA, VNC_NA, VNC_NA) \
  X(hardswish_backward, 2, S, vnc_f_hardswish_grad(a, b), VNC_NA, VNC_NA, VNC_NA) \
  X(hardtanh_backward, 2, S, (b <= (float)P->f[0] || b >= (float)P->f[1]) ? 0.0f : a, VNC_NA, VNC_NA, VNC_NA) \
  /* ternary: a = self */ \
  X(where, 3, S, a != 0.0f ? b : c, (T)(a != 0 ? b : c), a ? b : c, a != 0 ? b : c) /* a = condition */ \
  X(lerp, 3, S, vnc_f_lerp(a, b, c), VNC_NA, VNC_NA, VNC_NA) \
  X(addcmul, 3, S, vnc_fmaf((float)P->f[0] * b, c, a), (T)(a + (T)P->i[0] * b * c), VNC_NA, VNC_NA) \
  X(addcdiv, 3, S, a + ((float)P->f[0] * b) / c, VNC_NA, VNC_NA, VNC_NA)
/* clang-format on */

typedef enum vnc_ew_op {
#define VNC_EW_ENUM(name, nin, res, F, I, B, C) VNC_EW_##name,
  VNC_EW_TABLE(VNC_EW_ENUM)
#undef VNC_EW_ENUM
  VNC_EW_COUNT
} vnc_ew_op;

#endif
