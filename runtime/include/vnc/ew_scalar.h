/* vnc/ew_scalar.h — scalar helpers called by the bodies of vnc/ew_table.h (C11 only: uses
 * <complex.h>). Formulas follow ATen's CPU kernels where noted. */
#ifndef VNC_EW_SCALAR_H
#define VNC_EW_SCALAR_H

#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "ew_table.h"

static inline int vnc_ew_fault(const vnc_ew_params *P) {
  if (P->fault) __atomic_store_n(P->fault, 1, __ATOMIC_RELAXED);
  return 0;
}

/* ---- branch-free float32 transcendentals ----
 * Written as straight-line C (selects instead of branches, bit casts through memcpy, no libm
 * calls) so that GCC vectorises loops over them on every x86-64 tier (SSE2, AVX2, AVX-512;
 * with -fno-math-errno -fno-trapping-math, which change no result) and any other target.
 * Only correctly rounded operations (+ - * / sqrt, conversions, and the fused multiply-add
 * vnc_fmaf) appear and the runtime is built with -ffp-contract=off, so a value is the same
 * bits on every tier, vector or scalar. */

static inline float vnc_bits_f(int32_t i) {
  float f;
  memcpy(&f, &i, sizeof f);
  return f;
}
static inline int32_t vnc_f_bits(float f) {
  int32_t i;
  memcpy(&i, &f, sizeof i);
  return i;
}

/* a * b + c with one rounding (IEEE 754 fusedMultiplyAdd). The hardware instruction where the
 * target has one (x86-64-v3 and up, arm64); elsewhere (baseline SSE2) an exact emulation: a * b
 * is exact in double (48 significant bits), the sum is rounded to double "to odd" (TwoSum's
 * error term says whether it was exact and on which side the exact value lies; an inexact
 * even result moves one double ulp that way), and double-to-float then rounds once correctly
 * (S. Boldo, G. Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms
 * using rounding to odd", IEEE Trans. Computers 57(4), 2008: odd rounding to p >= q + 2
 * bits followed by nearest rounding to q bits is nearest rounding to q bits). Either way the
 * result is the same bits, so the bodies below may use it freely: it halves the operations
 * of every polynomial and reduction step. */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA) || defined(__FP_FAST_FMAF)
#define VNC_HW_FMA 1
static inline float vnc_fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
#else
#define VNC_HW_FMA 0
static inline float vnc_fmaf(float a, float b, float c) {
  const double p = (double)a * (double)b, cd = (double)c, s = p + cd;
  const double bv = s - p, e = (p - (s - bv)) + (cd - bv); /* TwoSum: p + c == s + e exactly */
  uint64_t si, ei;
  memcpy(&si, &s, sizeof si);
  memcpy(&ei, &e, sizeof ei);
  /* Integer operations only, so that SSE2 vectorises it (it has no 64-bit compares): an
   * inexact sum (e != 0) with an even last bit moves one ulp away from zero when e has s's
   * sign, towards zero otherwise; an infinite or NaN s (e is then NaN) stays as it is. */
  const uint64_t t = ei << 1, inexact = (t | (0 - t)) >> 63;
  const uint64_t nonfinite = (((si >> 52) & 0x7ff) + 1) >> 11;
  const uint64_t fix = inexact & ~nonfinite & ~si & 1, opp = (si ^ ei) >> 63;
  si += (fix ^ (0 - opp)) + opp; /* fix, or -fix when the signs differ (mod 2^64) */
  double odd;
  memcpy(&odd, &si, sizeof odd);
  return (float)odd;
}
#endif

/* Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, and expm1(r) by the degree-6 polynomial
 * of Cephes' expf (S. L. Moshier, Cephes Math Library): exp(r) = 1 + r + r^2 P(r). n is
 * rounded to nearest with the 1.5 * 2^23 trick; x must already be clamped to [-104.5, 104.5]
 * (and not NaN: n is converted to an integer). */
static inline float vnc_exp_reduce(float xc, float *n_out) {
  const float n = vnc_fmaf(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float r = vnc_fmaf(n, -0.693359375f, xc); /* n * 0.693359375 is exact: 9 significant bits */
  r = vnc_fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = vnc_fmaf(p, r, 1.3981999507e-3f);
  p = vnc_fmaf(p, r, 8.3334519073e-3f);
  p = vnc_fmaf(p, r, 4.1665795894e-2f);
  p = vnc_fmaf(p, r, 1.6666665459e-1f);
  p = vnc_fmaf(p, r, 5.0000001201e-1f);
  *n_out = n;
  return vnc_fmaf(p, r * r, r);
}

/* y * 2^n for integer n in [-151, 151], in two factors 2^h and 2^(n - h), h = floor(n / 2),
 * both normal: y * 2^h is exact, so the one rounding (to a subnormal, or to inf) is the last
 * product's. */
static inline float vnc_ldexp2f(float y, int32_t ni) {
  const int32_t h = ni >> 1;
  return (y * vnc_bits_f((h + 127) << 23)) * vnc_bits_f((ni - h + 127) << 23);
}

/* exp(x): the reduction above, scaled by 2^n. Above, x is clamped to 104.5, where the result
 * overflows to inf on its own (2^75 * 2^76). Below -104 the result is 0 (exp(-104) is under
 * half the smallest subnormal): it is selected rather than computed, since a product that
 * underflows costs a microcode assist on x86 (masked scores at -inf in softmax and attention
 * would pay one each); such x are computed at -87 instead. NaN is selected too (no NaN to
 * int). About 1 ulp. */
static inline float vnc_expf(float x) {
  const float xa = fabsf(x) < 104.5f ? x : copysignf(104.5f, x); /* NaN -> +-104.5: no NaN to int */
  const int32_t keep = -(int32_t)(xa > -104.0f);                 /* all ones, or 0 below -104 */
  const float xc = xa > -104.0f ? xa : -87.0f;
  float n;
  const float e = vnc_exp_reduce(xc, &n) + 1.0f;
  const float y = vnc_bits_f(vnc_f_bits(vnc_ldexp2f(e, (int32_t)n)) & keep);
  return x != x ? x : y;
}

/* exp(x) for |x| <= 87 or NaN only (callers bound the argument): there 2^n is a normal
 * float, so one scale factor gives vnc_expf's bits (the product's one rounding, to a
 * subnormal near x = -87, is the same), without its clamp, NaN select and two-factor
 * scaling: half the operations. n comes from the bits of the rounding trick's sum (the
 * integer sits in the low mantissa bits of 1.5 * 2^23 + n), so no float-to-int conversion
 * sees a NaN. */
static inline float vnc_expf_bounded(float x) {
  const float nb = vnc_fmaf(x, 1.44269504088896341f, 12582912.0f);
  float n;
  const float e = vnc_exp_reduce(x, &n) + 1.0f;
  const uint32_t sc = ((uint32_t)vnc_f_bits(nb) - 0x4B400000u + 127u) << 23;
  return e * vnc_bits_f((int32_t)sc);
}

/* expm1(x) = 2^n expm1(r) + (2^n - 1) (both terms exact or nearly so for n <= 24, so small
 * results keep full relative precision); above, exp(x) - 1 (the -1 is below half an ulp).
 * About 2 ulp. */
static inline float vnc_expm1f(float x) {
  float xc = x > -30.0f ? x : -30.0f; /* NaN -> -30 */
  xc = xc < 88.8f ? xc : 88.8f;
  float n;
  const float em = vnc_exp_reduce(xc, &n);
  const int32_t ni = (int32_t)n, ns = ni > 24 ? 24 : ni;
  const float s = vnc_bits_f((ns + 127) << 23);
  const float small = vnc_fmaf(s, em, s - 1.0f);
  const float big = vnc_ldexp2f(em + 1.0f, ni) - 1.0f;
  float y = ni > 24 ? big : small;
  y = x == 0.0f ? x : y; /* keeps -0 */
  return x != x ? x : y;
}

/* log(x): Cephes' logf (S. L. Moshier): x = 2^e m with m in [sqrt(1/2), sqrt(2)),
 * log(m) = f - f^2/2 + f^3 P(f) with f = m - 1, plus e ln2 in two parts. Subnormals are
 * scaled by 2^23 first. About 1 ulp; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
 * vnc_log_core is the formula for xs = x * 2^-esub normal, positive and finite. */
/* f^3 P(f) for x = xs * 2^-esub = 2^ef (1 + f) (ef and f in *ef_out, *f_out). */
static inline float vnc_log_reduce(float xs, int32_t esub, float *ef_out, float *f_out) {
  const int32_t ix = vnc_f_bits(xs);
  const int32_t e = ((ix >> 23) & 0xff) - 126 - esub;
  const float m = vnc_bits_f((ix & 0x007fffff) | 0x3f000000); /* [0.5, 1) */
  const int lt = m < 0.70710678118654752440f;
  const float ef = (float)(lt ? e - 1 : e);
  const float f = lt ? (m + m) - 1.0f : m - 1.0f;
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = vnc_fmaf(p, f, -1.1514610310e-1f);
  p = vnc_fmaf(p, f, 1.1676998740e-1f);
  p = vnc_fmaf(p, f, -1.2420140846e-1f);
  p = vnc_fmaf(p, f, 1.4249322787e-1f);
  p = vnc_fmaf(p, f, -1.6668057665e-1f);
  p = vnc_fmaf(p, f, 2.0000714765e-1f);
  p = vnc_fmaf(p, f, -2.4999993993e-1f);
  p = vnc_fmaf(p, f, 3.3333331174e-1f);
  *ef_out = ef;
  *f_out = f;
  return (p * f) * z;
}
static inline float vnc_log_core(float xs, int32_t esub) {
  float ef, f;
  float y = vnc_log_reduce(xs, esub, &ef, &f);
  const float z = f * f;
  y = vnc_fmaf(ef, -2.12194440e-4f, y);
  y = vnc_fmaf(-0.5f, z, y);
  const float r = f + y;
  return vnc_fmaf(ef, 0.693359375f, r);
}

/* log(x) for x normal, positive and finite only (callers check): vnc_logf's bits there
 * without its subnormal scaling and special-value selects. */
static inline float vnc_logf_normal(float x) { return vnc_log_core(x, 0); }

/* r where x is positive and finite, else log's special values: inf, NaN below 0, -inf at 0. */
static inline float vnc_log_special(float x, float r) {
  r = x == INFINITY ? x : r;
  r = x < 0.0f ? NAN : r;
  r = x == 0.0f ? -INFINITY : r;
  return x != x ? x : r;
}
static inline float vnc_logf(float x) {
  const int sub = x < 1.17549435e-38f;
  return vnc_log_special(x, vnc_log_core(sub ? x * 8388608.0f : x, sub ? 23 : 0));
}

/* log1p(x) = log(u) + (x - (u - 1)) / u with u = 1 + x rounded: the second term restores
 * the rounding error of u to first order (D. Goldberg, "What every computer scientist should
 * know about floating-point arithmetic", 1991, theorem 4's idea). About 2 ulp. */
static inline float vnc_log1pf(float x) {
  const float u = 1.0f + x;
  float r = vnc_logf(u) + (x - (u - 1.0f)) / u;
  r = x == INFINITY ? x : r;
  r = x == -1.0f ? -INFINITY : r;
  r = x == 0.0f ? x : r; /* keeps -0 */
  return x != x ? x : r;
}

/* sin, cos and tan of float32 arguments up to VNC_TRIG_REDUCED_MAX in magnitude: |x| less the
 * nearest even multiple j of pi/4, r = |x| - j pi/4 in [-pi/4, pi/4], computed in double
 * (Cody-Waite: pi/4 as a 31-bit head, whose product with j < 2^22 is exact, and a double tail;
 * the subtraction is exact by Sterbenz's lemma), rounded to float, then Cephes' single-precision
 * polynomials for sin and cos on [-pi/4, pi/4] (S. L. Moshier, Cephes Math Library, sinf.c) and
 * the quadrant j / 2. Within 1.6 ulp of the exact values (tan: 3.5 ulp) over that range
 * (runtime/tests/test_tiers.c checks against double libm); libm's sinf/cosf/tanf beyond it,
 * and for inf and NaN. No FMA: every tier computes the same bits. */
#define VNC_TRIG_REDUCED_MAX 2097152.0f /* 2^21 */
static inline int vnc_trig_reduced_ok(float x) { return fabsf(x) <= VNC_TRIG_REDUCED_MAX; }
static inline float vnc_sin_poly(float r, float z) { /* z = r * r */
  return r + r * z * ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f);
}
static inline float vnc_cos_poly(float z) {
  return z * z * ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) - 0.5f * z + 1.0f;
}
/* r for |x| (returned) and the quadrant count j / 2 (in *q). */
static inline float vnc_trig_reduce(float x, int32_t *q) {
  const double xd = fabs((double)x);
  int32_t j = (int32_t)(xd * 0x1.45f306dc9c883p+0); /* 4 / pi */
  j += j & 1;
  const double yd = (double)j;
  *q = j >> 1;
  return (float)((xd - yd * 0x1.921fb54400000p-1) - yd * 0x1.0b4611a626331p-35);
}
/* sin(x), cos(x) or tan(x) for |x| <= VNC_TRIG_REDUCED_MAX (or no NaN/inf): which = 0, 1, 2. */
static inline float vnc_trig_reduced(float x, int which) {
  int32_t q;
  const float r = vnc_trig_reduce(x, &q), z = r * r, s = vnc_sin_poly(r, z), c = vnc_cos_poly(z);
  if (which == 2) { /* tan(r + q pi/2): s / c, or -c / s for odd q; odd in x */
    const float t = (q & 1) ? -c / s : s / c;
    return vnc_bits_f(vnc_f_bits(t) ^ (vnc_f_bits(x) & (int32_t)0x80000000));
  }
  q += which; /* cos(x) = sin(|x| + pi/2) */
  float v = (q & 1) ? c : s;
  v = (q & 2) ? -v : v;
  return which ? v : vnc_bits_f(vnc_f_bits(v) ^ (vnc_f_bits(x) & (int32_t)0x80000000)); /* sin is odd, -0 kept */
}
static inline float vnc_sinf_reduced(float x) { return vnc_trig_reduced(x, 0); }
static inline float vnc_cosf_reduced(float x) { return vnc_trig_reduced(x, 1); }
static inline float vnc_tanf_reduced(float x) { return vnc_trig_reduced(x, 2); }
static inline float vnc_sinf(float x) { return vnc_trig_reduced_ok(x) ? vnc_sinf_reduced(x) : sinf(x); }
static inline float vnc_cosf(float x) { return vnc_trig_reduced_ok(x) ? vnc_cosf_reduced(x) : cosf(x); }
static inline float vnc_tanf(float x) { return vnc_trig_reduced_ok(x) ? vnc_tanf_reduced(x) : tanf(x); }

/* tanh(x): Cephes' tanhf (S. L. Moshier): below |x| = 0.625 the odd polynomial
 * x + x^3 P(x^2), above 1 - 2 / (exp(2|x|) + 1) with the sign of x. About 2 ulp. From
 * |x| = 10 on, 2 / (exp(2|x|) + 1) < 4.2e-9 is under half an ulp below 1, so the result is
 * +-1 exactly: exp's argument is clamped there (NaN passes), within vnc_expf_bounded's range. */
static inline float vnc_tanhf(float x) {
  const float ax = fabsf(x), z = x * x, ac = ax > 10.0f ? 10.0f : ax;
  float p = -5.70498872745e-3f;
  p = vnc_fmaf(p, z, 2.06390887954e-2f);
  p = vnc_fmaf(p, z, -5.37397155531e-2f);
  p = vnc_fmaf(p, z, 1.33314422036e-1f);
  p = vnc_fmaf(p, z, -3.33332819422e-1f);
  const float small = vnc_fmaf(p * z, x, x);
  const float big = copysignf(1.0f - 2.0f / (vnc_expf_bounded(ac + ac) + 1.0f), x);
  const float r = ax < 0.625f ? small : big;
  return x == 0.0f ? x : r;
}

/* erf(x) given e = exp(-x^2): for |x| >= 0.5, Abramowitz & Stegun 7.1.26 (abs error <= 1.5e-7;
 * the constants of ATen's vectorised erf); below, the Maclaurin series 2/sqrt(pi) * (x - x^3/3
 * + x^5/10 - x^7/42 + x^9/216 - x^11/1320), relative error < 1e-7 there. GELU's gradient
 * passes the exp it needs for the normal density as well. */
static inline float vnc_erff_e(float x, float e) {
  const float ax = fabsf(x);
  const float t = 1.0f / vnc_fmaf(0.3275911f, ax, 1.0f);
  float p = 1.061405429f;
  p = vnc_fmaf(p, t, -1.453152027f);
  p = vnc_fmaf(p, t, 1.421413741f);
  p = vnc_fmaf(p, t, -0.284496736f);
  p = vnc_fmaf(p, t, 0.254829592f);
  const float big = copysignf(vnc_fmaf(-(p * t), e, 1.0f), x);
  const float x2 = x * x;
  float q = -1.0f / 1320.0f;
  q = vnc_fmaf(q, x2, 1.0f / 216.0f);
  q = vnc_fmaf(q, x2, -1.0f / 42.0f);
  q = vnc_fmaf(q, x2, 1.0f / 10.0f);
  q = vnc_fmaf(q, x2, -1.0f / 3.0f);
  q = vnc_fmaf(q, x2, 1.0f);
  const float small = 1.12837916709551257390f * x * q;
  return ax < 0.5f ? small : big;
}

/* Beyond |x| = 4 the result is +-1 (p t exp(-x^2) < 1.6e-8, below half an ulp of 1), and
 * exp(-16) gives the same bits: clamping there keeps exp from subnormal results (|x| > 9.3),
 * which cost a microcode assist per vector on x86. NaN passes through. */
static inline float vnc_erff(float x) {
  const float xc = fabsf(x) > 4.0f ? 4.0f : x;
  return vnc_erff_e(x, vnc_expf_bounded(-xc * xc));
}

/* ---- inverse trigonometric, hyperbolic, base-2 and base-10 functions ----
 * Branch-free as the functions above; plain + - * / and sqrt (no vnc_fmaf), so the SSE2 tier
 * has no emulated fused operations to pay for, and -ffp-contract=off keeps every tier's bits
 * the same. Results of the form k c + p (a multiple of pi/4 or pi/2 plus a polynomial) add
 * the constant's head and tail separately: k c_hi is exact, and the tail joins p first. */
#define VNC_PIO4_HI 0x1.921fb8p-1f        /* pi/4 to 22 bits: k * it is exact for k <= 4 */
#define VNC_PIO4_LO -8.14603424714733e-08f /* pi/4 - VNC_PIO4_HI */
#define VNC_PIO2_HI 1.57079637050628662f  /* pi/2 rounded to float */
#define VNC_PIO2_LO -4.37113882867379e-08f /* pi/2 - VNC_PIO2_HI */

/* atan(y / x) for y, x >= 0 (or NaN) as k pi/4 + p, k in {0, 1, 2}: the reduction of Cephes'
 * atanf (S. L. Moshier, Cephes Math Library, atanf.c) to |t| <= tan(pi/8), t = y / x, (y - x) /
 * (y + x) or -x / y, without forming y / x (which over- or underflows), then Cephes' polynomial.
 * The middle quotient is taken in double (its difference and sum are exact there), so t is
 * rounded once in every case. Both infinite gives k = 1, t = 0 (pi/4); both zero k = 0, t = 0.
 * Within 2.3 ulp, the polynomial's own error (test_tiers.c). */
static inline double vnc_sel_d(int64_t m, double a, double b) { /* m all ones: a, 0: b (bitwise) */
  uint64_t ia, ib;
  memcpy(&ia, &a, sizeof ia);
  memcpy(&ib, &b, sizeof ib);
  ia = (ia & (uint64_t)m) | (ib & ~(uint64_t)m);
  memcpy(&a, &ia, sizeof a);
  return a;
}
static inline float vnc_atan_octant(float ay, float ax, float *k) {
  /* in double, selecting by bit masks: GCC threads the jumps of repeated conditions on
   * double selects and then vectorises nothing */
  const double yd = (double)ay, xd = (double)ax; /* the bounds' products neither overflow nor round away */
  const int64_t k0 = -(int64_t)(yd <= 0.41421356237309505 * xd), k2 = -(int64_t)!(yd <= 2.41421356237309505 * xd); /* NaN: k2 */
  const int64_t fix = -(int64_t)(((yd == INFINITY) & (xd == INFINITY)) | ((yd == 0.0) & (xd == 0.0))); /* t = 0 */
  const double num = vnc_sel_d(fix, 0.0, vnc_sel_d(k0, yd, vnc_sel_d(k2, -xd, yd - xd)));
  const double den = vnc_sel_d(fix, 1.0, vnc_sel_d(k0, xd, vnc_sel_d(k2, yd, yd + xd)));
  /* k: 0, 2 or 1; both infinite (k0 holds) 1, both zero (k0) 0 */
  *k = (float)vnc_sel_d(k0 & ~(fix & -(int64_t)(yd != 0.0)), 0.0, vnc_sel_d(k2, 2.0, 1.0));
  const float t = (float)(num / den), z = t * t;
  return t + t * z * (((8.05374449538e-2f * z - 1.38776856032e-1f) * z + 1.99777106478e-1f) * z - 3.33329491539e-1f);
}
static inline float vnc_with_sign_of(float r, float s) { /* r >= 0 (or NaN) with the sign bit of s */
  return vnc_bits_f(vnc_f_bits(r) | (vnc_f_bits(s) & (int32_t)0x80000000));
}
static inline float vnc_atanf(float x) {
  float k;
  const float p = vnc_atan_octant(fabsf(x), 1.0f, &k);
  return vnc_with_sign_of(k * VNC_PIO4_HI + (k * VNC_PIO4_LO + p), x);
}
/* atan2 as C's atan2f, special cases included (C11 F.10.1.4: signed zeros give 0 or pi, the
 * sign of y; infinities pi/4, 3pi/4, pi/2, pi): a negative x (-0 too) takes pi less the
 * first-quadrant angle, k' = 4 - k; the result has y's sign. */
static inline float vnc_atan2f(float y, float x) {
  float k;
  const float p = vnc_atan_octant(fabsf(y), fabsf(x), &k);
  const int neg = vnc_f_bits(x) < 0;
  const float kk = neg ? 4.0f - k : k, s = neg ? -p : p;
  return vnc_with_sign_of(kk * VNC_PIO4_HI + (kk * VNC_PIO4_LO + s), y);
}

/* asin and acos: Cephes' asinf/acosf (S. L. Moshier, Cephes Math Library): asin(v) =
 * v + v z P(z) (z = v^2) for v = |x| <= 0.5, else asin(|x|) = pi/2 - 2 asin(v) with v =
 * sqrt(z), z = (1 - |x|) / 2 (exact). That v is taken in double and kept as vh + vl, so that its
 * rounding does not double into the result: for c = 1 or 2 and a multiple k of pi/2,
 * k pi/2 + s c asin(v) = (k pi/2_hi + s c vh) + (k pi/2_lo + s c (vl + vh z P(z))), where the
 * first sum is exact or rounds a result at least twice c vh. |x| > 1 (and inf) gives sqrt of a
 * negative number: NaN. About 1 ulp. */
static inline float vnc_asin_combine(float x, float kpos, float kneg, float spos, float sneg, float ssmall, float ksmall) {
  const float a = fabsf(x);
  const int big = a > 0.5f, neg = vnc_f_bits(x) < 0;
  const float zb = 0.5f * (1.0f - a), z = big ? zb : a * a;
  const double vd = sqrt((double)zb);
  const float vh = big ? (float)vd : a, vl = big ? (float)(vd - (double)(float)vd) : 0.0f;
  const float tail = vl + vh * z * ((((4.2163199048e-2f * z + 2.4181311049e-2f) * z + 4.5470025998e-2f) * z + 7.4953002686e-2f) * z + 1.6666752422e-1f);
  const float k = big ? (neg ? kneg : kpos) : ksmall;
  const float sc = big ? (neg ? sneg : spos) * 2.0f : ssmall * (neg ? -1.0f : 1.0f);
  return (k * VNC_PIO2_HI + sc * vh) + (k * VNC_PIO2_LO + sc * tail);
}
static inline float vnc_asinf(float x) { /* |x| <= 0.5: asin(|x|); above pi/2 - 2 asin(v); odd */
  return vnc_with_sign_of(vnc_asin_combine(fabsf(x), 1.0f, 1.0f, -1.0f, -1.0f, 1.0f, 0.0f), x);
}
static inline float vnc_acosf(float x) { /* pi/2 - asin(x); 2 asin(v) above 0.5, pi - 2 asin(v) below -0.5 */
  return vnc_asin_combine(x, 0.0f, 2.0f, 1.0f, -1.0f, -1.0f, 1.0f);
}

/* exp(a) / 2 for a >= 0 (or NaN): vnc_expf's reduction scaled by 2^(n-1), so that it stays
 * finite up to a = 89.4, where sinh and cosh overflow. a is clamped to 104 (NaN too; callers
 * select NaN), where the result is inf. */
static inline float vnc_exp_half(float a) {
  const float xc = a < 104.0f ? a : 104.0f;
  float n;
  const float e = vnc_exp_reduce(xc, &n) + 1.0f;
  return vnc_ldexp2f(e, (int32_t)n - 1);
}
/* cosh(x) = h + 1/(4h), h = exp(|x|) / 2. About 1 ulp. */
static inline float vnc_coshf(float x) {
  const float h = vnc_exp_half(fabsf(x));
  const float r = h + 0.25f / h;
  return x != x ? x : r;
}
/* sinh(x): Cephes' sinhf (S. L. Moshier): its odd polynomial up to |x| = 1, above h - 1/(4h)
 * with the sign of x. About 1.5 ulp. */
static inline float vnc_sinhf(float x) {
  const float a = fabsf(x), z = x * x, h = vnc_exp_half(a);
  const float small = x + x * z * ((2.03721912945e-4f * z + 8.33028376239e-3f) * z + 1.66667160211e-1f);
  const float r = a <= 1.0f ? small : vnc_with_sign_of(h - 0.25f / h, x);
  return x != x ? x : r;
}

/* 2^x: Cephes' exp2f (S. L. Moshier): x = n + f, n the nearest integer, |f| <= 1/2, 2^f by
 * its degree-6 polynomial, scaled by 2^n as vnc_expf (x clamped to [-151, 129], beyond which
 * the result is 0 or inf). Integer x gives 2^x exactly. About 1 ulp. */
static inline float vnc_exp2f(float x) {
  float xc = x > -151.0f ? x : -151.0f; /* NaN -> -151: no NaN to int */
  xc = xc < 129.0f ? xc : 129.0f;
  const float n = (xc + 12582912.0f) - 12582912.0f, f = xc - n; /* both exact */
  const float p = (((((1.535336188319500e-4f * f + 1.339887440266574e-3f) * f + 9.618437357674640e-3f) * f +
                     5.550332471162809e-2f) * f + 2.402264791363012e-1f) * f + 6.931472028550421e-1f) * f + 1.0f;
  const float y = vnc_ldexp2f(p, (int32_t)n);
  return x != x ? x : y;
}

/* log2(x) and log10(x): vnc_logf's reduction x = 2^e (1 + f) and log(1 + f) = f + y (Cephes'
 * logf polynomial, S. L. Moshier), then e log10(2) + (f + y) log10(e) (or e + (f + y) log2(e))
 * in double, rounded once: about 1 ulp (Cephes' float sums of split constants reach 2). Powers
 * of two give their exponent exactly in log2. Special values as vnc_logf. */
static inline double vnc_log_parts(float x, float *ef) { /* f + y in double; x > 0 finite, subnormals scaled */
  const int sub = x < 1.17549435e-38f;
  float f;
  const float y3 = vnc_log_reduce(sub ? x * 8388608.0f : x, sub ? 23 : 0, ef, &f);
  return (double)f + (double)(y3 - 0.5f * (f * f));
}
static inline float vnc_log2f(float x) {
  float ef;
  const double l = vnc_log_parts(x, &ef);
  return vnc_log_special(x, (float)((double)ef + l * 1.44269504088896340736));
}
static inline float vnc_log10f(float x) {
  float ef;
  const double l = vnc_log_parts(x, &ef);
  return vnc_log_special(x, (float)((double)ef * 0.30102999566398119521 + l * 0.43429448190325182765));
}

/* log(v) of a double v (v <= FLT_MAX; 0, inf, NaN and negative v as vnc_logf) to float: with
 * hi = v rounded to float and lo = v - hi, log(v) = log(hi) + lo / hi to first order, so the
 * bits the rounding dropped still count (vnc_log1pf's correction). */
static inline float vnc_logf_of_double(double v) {
  const float hi = (float)v, lo = (float)(v - (double)hi);
  return vnc_logf(hi) + (fabsf(lo) > 0.0f ? lo / hi : 0.0f); /* lo NaN (v inf) or 0: no term */
}
/* asinh, acosh, atanh: the textbook logarithms, log(|x| + sqrt(x^2 + 1)), log(x + sqrt(x^2 -
 * 1)) and log((1 + |x|) / (1 - |x|)) / 2, with the argument in double (x^2 and 1 +- |x| exact,
 * one rounding each for sqrt, sum and quotient), then vnc_logf_of_double: within 2 ulp (Cephes'
 * float forms lose up to 3 near |x| = 0.5). Above 2^60, log(2x) as log(x) + log(2); below
 * 2^-12 asinh(x) and atanh(x) round to x. */
#define VNC_LN2F 0.693147180559945309f
static inline float vnc_asinhf(float x) {
  const float a = fabsf(x);
  const double ad = (double)a;
  const int big = a > 0x1p60f;
  const float r = vnc_logf_of_double(big ? ad : ad + sqrt(ad * ad + 1.0)) + (big ? VNC_LN2F : 0.0f);
  return vnc_with_sign_of(a < 0x1p-12f ? a : r, x);
}
static inline float vnc_acoshf(float x) { /* NaN below 1 */
  const double xd = (double)x;
  const int big = x > 0x1p60f;
  const float r = vnc_logf_of_double(big ? xd : xd + sqrt(xd * xd - 1.0)) + (big ? VNC_LN2F : 0.0f);
  return x < 1.0f ? NAN : r;
}
static inline float vnc_atanhf(float x) { /* |x| = 1: log(inf); |x| > 1: log of a negative number */
  const float a = fabsf(x);
  const double ad = (double)a;
  const float r = 0.5f * vnc_logf_of_double((1.0 + ad) / (1.0 - ad));
  return vnc_with_sign_of(a < 0x1p-12f ? a : r, x);
}
/* hypot(a, b) as glibc's hypotf: sqrt(a^2 + b^2) in double (no overflow, no underflow) rounded
 * to float; inf if either is infinite, even with a NaN (C11 F.10.4.3). */
static inline float vnc_hypotf(float a, float b) {
  const double ad = (double)a, bd = (double)b;
  const float r = (float)sqrt(ad * ad + bd * bd);
  return (fabsf(a) == INFINITY || fabsf(b) == INFINITY) ? INFINITY : r;
}

/* x ** y as C's powf (IEEE 754 special cases: pow(-inf, 0.5) = inf, pow(-0, -0.5) = inf), the
 * std::pow of ATen's tensor-tensor kernel and of its tensor-scalar kernel for other than the
 * special exponents. Those (2, 3, 0.5, -0.5, -1, -2; pow_tensor_scalar_kernel) are the
 * launcher's rewrite of pow by a scalar exponent into its own rows (pow_sq, sqrt, ...). */
static inline float vnc_f_pow(float a, float b) { return powf(a, b); }

/* ---- helpers (float) ---- */
/* sigmoid and silu given e = exp(-a) (the tier kernels pass vnc_expf_bounded's where it applies) */
static inline float vnc_sigmoid_e(float e) { return 1.0f / (1.0f + e); }
static inline float vnc_silu_e(float a, float e) { return a / (1.0f + e); } /* ATen's CPU kernel: x / (1 + exp(-x)) */
static inline float vnc_f_sigmoid(float a) { return vnc_sigmoid_e(vnc_expf(-a)); }
static inline float vnc_f_silu(float a) { return vnc_silu_e(a, vnc_expf(-a)); }
static inline float vnc_f_gelu(float a) { return 0.5f * a * (1.0f + vnc_erff(a * 0.70710678118654752440f)); }
static inline float vnc_f_gelu_tanh(float a) {
  const float k = 0.79788456080286535588f; /* sqrt(2/pi) */
  return 0.5f * a * (1.0f + vnc_tanhf(k * (a + 0.044715f * a * a * a)));
}
/* cdf + a * pdf of the standard normal at a: with x = a / sqrt(2), pdf = exp(-x^2) / sqrt(2 pi),
 * the exp erf(x) takes too (one exp for both). */
static inline float vnc_gelu_grad_e(float g, float a, float e) { /* e = exp(-x^2), x = a / sqrt(2) */
  const float x = a * 0.70710678118654752440f;
  const float cdf = 0.5f * (1.0f + vnc_erff_e(x, e));
  const float pdf = e * 0.39894228040143267794f; /* 1/sqrt(2 pi) */
  return g * vnc_fmaf(a, pdf, cdf);
}
static inline float vnc_gelu_exp_arg(float a) { /* -x^2, x = a / sqrt(2) */
  const float x = a * 0.70710678118654752440f;
  return -x * x;
}
static inline float vnc_f_gelu_grad(float g, float a) { return vnc_gelu_grad_e(g, a, vnc_expf(vnc_gelu_exp_arg(a))); }
static inline float vnc_f_gelu_tanh_grad(float g, float a) {
  const float k = 0.79788456080286535588f, c = 0.044715f;
  const float inner = k * (a + c * a * a * a);
  const float t = vnc_tanhf(inner);
  const float left = 0.5f * a, right = 1.0f + t;
  const float dinner = k * (1.0f + 3.0f * c * a * a);
  return g * (0.5f * right + left * (1.0f - t * t) * dinner);
}
static inline float vnc_silu_grad_e(float g, float a, float e) { /* e = exp(-a) */
  const float s = vnc_sigmoid_e(e);
  return g * s * (1.0f + a * (1.0f - s));
}
static inline float vnc_f_silu_grad(float g, float a) { return vnc_silu_grad_e(g, a, vnc_expf(-a)); }

/* ---- fast forms on a domain ----
 * Rows of vnc/ew_table.h whose float32 body has a cheaper form on a domain covering almost
 * every input: X(op, nin, IN_DOMAIN, FAST), expressions of the row's inputs a, b (float).
 * FAST gives the body's bits wherever IN_DOMAIN holds (vnc_expf_bounded, vnc_logf_normal:
 * runtime/tests/test_tiers.c checks them against the general forms). The tier kernels
 * (tier_kernels.c) and generated loops (vnc/ew_inline.h's vnc_ew_<op>_F32_ok / _fast, used
 * by torch_neuronx/compiler/codegen.py, which reads the op names from this table) test a
 * block of inputs first and run FAST on it when all of them are in the domain. */
#define VNC_EXPF_BOUNDED_MAX 87.0f /* vnc_expf_bounded's domain: |v| <= this */
static inline int vnc_expf_bounded_ok(float v) { return fabsf(v) <= VNC_EXPF_BOUNDED_MAX; }
static inline int vnc_logf_normal_ok(float v) { return v >= 1.17549435e-38f && v <= 3.40282347e38f; }
/* clang-format off */
#define VNC_EW_FAST_TABLE(X) \
  X(exp, 1, vnc_expf_bounded_ok(a), vnc_expf_bounded(a)) \
  X(sigmoid, 1, vnc_expf_bounded_ok(-a), vnc_sigmoid_e(vnc_expf_bounded(-a))) \
  X(silu, 1, vnc_expf_bounded_ok(-a), vnc_silu_e(a, vnc_expf_bounded(-a))) \
  X(silu_backward, 2, vnc_expf_bounded_ok(-b), vnc_silu_grad_e(a, b, vnc_expf_bounded(-b))) \
  X(gelu_backward, 2, vnc_expf_bounded_ok(vnc_gelu_exp_arg(b)), vnc_gelu_grad_e(a, b, vnc_expf_bounded(vnc_gelu_exp_arg(b)))) \
  X(log, 1, vnc_logf_normal_ok(a), vnc_logf_normal(a)) \
  X(sin, 1, vnc_trig_reduced_ok(a), vnc_sinf_reduced(a)) \
  X(cos, 1, vnc_trig_reduced_ok(a), vnc_cosf_reduced(a)) \
  X(tan, 1, vnc_trig_reduced_ok(a), vnc_tanf_reduced(a)) \
  X(erfinv, 1, vnc_erfinv_central_ok(a), vnc_erfinv_central_f(a))
/* clang-format on */
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
/* Selects only, every parameter read unconditionally: GCC hoists the reads and vectorises the
 * loop (branches on them kept it scalar, ~30x slower). A NaN input stays NaN; a NaN bound
 * gives NaN. */
static inline float vnc_f_clamp(float a, const vnc_ew_params *P) {
  const float lo = (float)P->f[0], hi = (float)P->f[1];
  const int32_t has_lo = P->flags & 1, has_hi = P->flags & 2;
  float r = (has_lo && !(a >= lo)) ? lo : a;
  r = (has_hi && !(r <= hi)) ? hi : r;
  return isnan(a) ? a : r;
}
/* clamp with tensor bounds: vnc_f_min(vnc_f_max(a, lo), hi) (a NaN a stays NaN), NaN when a bound
 * is NaN (as ATen), written as plain selects: GCC (-fno-trapping-math) leaves the nested
 * NaN-propagating form scalar, ~20x slower. */
static inline float vnc_f_clamp_tensor(float a, float lo, float hi) {
  float r = a > lo ? a : lo;
  r = r < hi ? r : hi;
  r = isnan(a) ? a : r;
  return (isnan(lo) || isnan(hi)) ? NAN : r;
}
/* The float32 forms of ATen's vectorised CPU kernels (its scalar tails round in between
 * instead), which give most of CPU's elements: add/sub with alpha fma(b, +-alpha, a), addcmul
 * fma(value * t1, t2, self), addcdiv self + (value * t1) / t2, and lerp one fused multiply-add
 * from the nearer end (aten/src/ATen/native/cpu: BinaryOpsKernel, PointwiseOpsKernel,
 * LerpKernel; checked bit for bit against CPU PyTorch by tests/test_user_paths.py). */
static inline float vnc_f_lerp(float a, float b, float w) {
  return fabsf(w) < 0.5f ? vnc_fmaf(w, b - a, a) : vnc_fmaf(w - 1.0f, b - a, b);
}
/* erfinv(x): M. Giles' double-precision approximation ("Approximating the erfinv function",
 * GPU Computing Gems Jade Edition, 2011): with w = -log((1 - x)(1 + x)), erfinv(x) = x p(w),
 * p a polynomial in w - 3.125 below w = 6.25 and in sqrt(w) - 3.25 above (float |x| < 1 keeps
 * w below 16, where the paper's third range begins). Both are evaluated in double and the
 * bit mask selects; (1 - x)(1 + x) is exact in double and its logarithm is vnc_logf_of_double's
 * (its float-ulp error moves the result by about half as much, relatively). Within 1.1 ulp of
 * the exact value (test_tiers.c); |x| = 1 gives +-inf, |x| > 1 and NaN NaN. The two ranges'
 * polynomials are separate functions for the fast form below. */
static inline double vnc_erfinv_w(float x) { /* w = -log((1 - x)(1 + x)) */
  const double xd = (double)x;
  return -(double)vnc_logf_of_double((1.0 - xd) * (1.0 + xd));
}
/* p(x) by Horner's rule, c[0] the highest coefficient, n <= 32 terms: unrolled, so that the
 * loops calling it vectorise. */
static inline double vnc_horner_d(const double *c, int n, double x) {
  double p = c[0];
#if defined(__clang__)
#pragma unroll
#else
#pragma GCC unroll 32
#endif
  for (int i = 1; i < n; i++) p = p * x + c[i];
  return p;
}
static inline double vnc_erfinv_central(double w) { /* p(w), w < 6.25 */
  static const double c[23] = {
      -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
      1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
      6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
      2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
      1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
      4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
      0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
      0.24015818242558961693, 1.6536545626831027356,
  };
  return vnc_horner_d(c, 23, w - 3.125);
}
static inline double vnc_erfinv_tail(double w) { /* p(w), 6.25 <= w < 16 */
  static const double c[19] = {
      2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
      1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
      2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
      6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
      0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
      -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334,
      3.0838856104922207635,
  };
  return vnc_horner_d(c, 19, sqrt(w) - 3.25);
}
static inline float vnc_f_erfinv(float x) {
  const double w = vnc_erfinv_w(x);
  const double p = vnc_sel_d(-(int64_t)(w < 6.25), vnc_erfinv_central(w), vnc_erfinv_tail(w)); /* w NaN (|x| > 1): tail, NaN */
  const float r = (float)(p * (double)x);
  return fabsf(x) == 1.0f ? x * INFINITY : r;
}
/* The fast form: |x| <= 0.998 keeps w below 5.6, so the central polynomial alone gives
 * vnc_f_erfinv's bits. */
static inline int vnc_erfinv_central_ok(float x) { return fabsf(x) <= 0.998f; }
static inline float vnc_erfinv_central_f(float x) { return (float)(vnc_erfinv_central(vnc_erfinv_w(x)) * (double)x); }

/* d/dx [x tanh(softplus(x))], the expression of ATen's CPU kernel. */
static inline float vnc_f_mish_grad(float g, float x) {
  const float sig = 1.0f / (1.0f + vnc_expf(-x)), tsp = vnc_tanhf(vnc_log1pf(vnc_expf(x)));
  return g * (tsp + x * sig * (1.0f - tsp * tsp));
}
static inline float vnc_f_softplus(float a, float beta, float threshold) {
  return a * beta > threshold ? a : vnc_log1pf(vnc_expf(a * beta)) / beta;
}
static inline float vnc_f_softplus_grad(float g, float a, float beta, float threshold) {
  float z = vnc_expf(a * beta);
  return a * beta > threshold ? g : g * z / (z + 1.0f);
}
static inline float vnc_f_elu(float a, float alpha, float scale, float input_scale) {
  return a <= 0.0f ? vnc_expm1f(a * input_scale) * alpha * scale : a * scale;
}
/* elu_backward(grad, self_or_result, alpha, scale, input_scale, is_result) as ATen. */
static inline float vnc_f_elu_grad(float g, float x, const vnc_ew_params *P) {
  const float alpha = (float)P->f[0], scale = (float)P->f[1], input_scale = (float)P->f[2];
  if (P->flags & 1) return x <= 0.0f ? g * input_scale * (x + alpha * scale) : g * scale;
  return x <= 0.0f ? g * input_scale * alpha * scale * vnc_expf(x * input_scale) : g * scale;
}
static inline float vnc_f_mish(float a) { return a * vnc_tanhf(vnc_log1pf(vnc_expf(a))); }
/* min(max(x, 0), 6) as ATen's hardswish/hardsigmoid compute it: NaN propagates (fminf/fmaxf
 * would drop it, and stay library calls that keep the loop scalar). */
static inline float vnc_f_relu6(float x) {
  const float t = x < 0.0f ? 0.0f : x;
  return t > 6.0f ? 6.0f : t;
}
static inline float vnc_f_hardswish(float a) { return a * vnc_f_relu6(a + 3.0f) / 6.0f; }
static inline float vnc_f_hardswish_grad(float g, float a) {
  /* ATen's boundaries: x <= -3 gives 0, x >= 3 gives the gradient itself */
  return a <= -3.0f ? 0.0f : (a < 3.0f ? g * ((a / 3.0f) + 0.5f) : g);
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
/* clamp as ATen's min(max(a, lo), hi): with lo > hi every element is hi; P->flags bits 1 and 2
 * say which of the bounds P->i[0] (lo) and P->i[1] (hi) are present. */
#define VNC_I_CLAMP_LO(a) (((P->flags & 1) && (a) < P->i[0]) ? P->i[0] : (int64_t)(a))
#define VNC_I_CLAMP(T, a) \
  ((T)(((P->flags & 2) && VNC_I_CLAMP_LO(a) > P->i[1]) ? P->i[1] : VNC_I_CLAMP_LO(a)))
#define VNC_I_FMOD(T, a, b) ((b) == 0 ? (T)vnc_ew_fault(P) : (b) == -1 ? (T)0 : (T)((a) % (b)))

/* Integer power as c10's powi: negative exponents give 0 except for bases 1 and -1;
 * products wrap (computed in uint64, which truncates to T the same way). */
static inline int64_t vnc_i_pow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((-b) % 2 ? -1 : 1) : 0;
  uint64_t r = 1, base = (uint64_t)a;
  while (b) {
    if (b & 1) r *= base;
    b /= 2;
    base *= base;
  }
  return (int64_t)r;
}

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

#endif
