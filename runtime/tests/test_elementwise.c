/* Elementwise launcher: dense and conversion paths, broadcasting, scalars, bool results,
 * integer division by zero, unsupported types, plan cache. */
#include <math.h>
#include <stdint.h>
#include "check.h"
#include "vnc/vnc.h"

static vnc_stream *S;

static vnc_status launch(vnc_ew_op op, int32_t cdt, const vnc_tensor *out, const vnc_tensor *a,
                         const vnc_tensor *b, const vnc_ew_params *p, uint32_t mask,
                         const vnc_scalar_bytes *sc) {
  vnc_iter it;
  const vnc_tensor *ops[3] = {out, a, b};
  vnc_status st = vnc_iter_init(&it, b ? 3 : 2, ops, 0);
  if (st != VNC_OK) return st;
  return vnc_elementwise(S, "test", op, &it, cdt, p, mask, sc);
}

int main(void) {
  CHECK_OK(vnc_stream_get(0, 0, &S));
  enum { N = 100003 };
  static float a[N], b[N], o[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)i * 0.5f;
    b[i] = (float)(N - i);
  }
  int64_t n = N;
  vnc_tensor ta = vnc_tensor_contiguous(a, VNC_FLOAT32, 1, &n);
  vnc_tensor tb = vnc_tensor_contiguous(b, VNC_FLOAT32, 1, &n);
  vnc_tensor to = vnc_tensor_contiguous(o, VNC_FLOAT32, 1, &n);
  vnc_ew_params p = {.f = {2.0}, .i = {2}};
  CHECK_OK(launch(VNC_EW_add, VNC_FLOAT32, &to, &ta, &tb, &p, 0, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= o[i] == a[i] + 2.0f * b[i];
  CHECK(ok);

  /* Mixed dtypes (int32 + bfloat16 computed in float32, written to float16), broadcast. */
  int32_t ia[3][4];
  uint16_t bb[4], out16[3][4];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) ia[i][j] = i * 4 + j;
  float bvals[4] = {0.5f, -1.0f, 2.25f, 100.0f};
  for (int j = 0; j < 4; j++) {
    uint32_t w;
    memcpy(&w, &bvals[j], 4);
    bb[j] = (uint16_t)(w >> 16); /* exact: these values fit bfloat16 */
  }
  vnc_tensor tia = vnc_tensor_contiguous(ia, VNC_INT32, 2, (int64_t[]){3, 4});
  vnc_tensor tbb = vnc_tensor_contiguous(bb, VNC_BFLOAT16, 1, (int64_t[]){4});
  vnc_tensor to16 = vnc_tensor_contiguous(out16, VNC_FLOAT16, 2, (int64_t[]){3, 4});
  vnc_ew_params one = {.f = {1.0}, .i = {1}};
  CHECK_OK(launch(VNC_EW_mul, VNC_FLOAT32, &to16, &tia, &tbb, &one, 0, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  /* 11 * 100 = 1100 = 0x644C in binary16; 1 * -1 = -1 = 0xBC00; 2 * 2.25 = 4.5 = 0x4480 */
  CHECK(out16[2][3] == 0x644C && out16[0][1] == 0xBC00 && out16[0][2] == 0x4480);

  /* Scalar operand and bool result: a > 1000.0 */
  static _Bool gt[N];
  vnc_tensor tgt = vnc_tensor_contiguous(gt, VNC_BOOL, 1, &n);
  vnc_scalar_bytes sc[3];
  double thousand = 1000.0;
  memcpy(sc[2], &thousand, sizeof thousand);
  vnc_tensor scalar = vnc_tensor_contiguous(NULL, VNC_FLOAT64, 0, NULL);
  CHECK_OK(launch(VNC_EW_gt, VNC_FLOAT32, &tgt, &ta, &scalar, &one, 1u << 2, (const vnc_scalar_bytes *)sc));
  CHECK_OK(vnc_stream_synchronize(S));
  ok = 1;
  for (int i = 0; i < N; i++) ok &= gt[i] == (a[i] > 1000.0f);
  CHECK(ok);

  /* Integer floor division and remainder follow Python's sign rules. */
  int64_t x[4] = {-7, 7, -7, 7}, y[4] = {2, -2, -2, 2}, q[4], r[4];
  vnc_tensor tx = vnc_tensor_contiguous(x, VNC_INT64, 1, (int64_t[]){4});
  vnc_tensor ty = vnc_tensor_contiguous(y, VNC_INT64, 1, (int64_t[]){4});
  vnc_tensor tq = vnc_tensor_contiguous(q, VNC_INT64, 1, (int64_t[]){4});
  vnc_tensor tr = vnc_tensor_contiguous(r, VNC_INT64, 1, (int64_t[]){4});
  CHECK_OK(launch(VNC_EW_div_floor, VNC_INT64, &tq, &tx, &ty, &one, 0, NULL));
  CHECK_OK(launch(VNC_EW_remainder, VNC_INT64, &tr, &tx, &ty, &one, 0, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(q[0] == -4 && q[1] == -4 && q[2] == 3 && q[3] == 3);
  CHECK(r[0] == 1 && r[1] == -1 && r[2] == -1 && r[3] == 1);

  /* Division by zero: a sticky ZeroDivisionError, no trap. */
  y[1] = 0;
  CHECK_OK(launch(VNC_EW_div_trunc, VNC_INT64, &tq, &tx, &ty, &one, 0, NULL));
  CHECK(vnc_stream_synchronize(S) == VNC_ERR_KERNEL);
  CHECK(strstr(vnc_last_error(), "ZeroDivisionError") != NULL);
  int64_t imin[1] = {INT64_MIN}, mone[1] = {-1}, res[1];
  vnc_tensor tmin = vnc_tensor_contiguous(imin, VNC_INT64, 1, (int64_t[]){1});
  vnc_tensor tm1 = vnc_tensor_contiguous(mone, VNC_INT64, 1, (int64_t[]){1});
  vnc_tensor tres = vnc_tensor_contiguous(res, VNC_INT64, 1, (int64_t[]){1});
  CHECK_OK(launch(VNC_EW_div_trunc, VNC_INT64, &tres, &tmin, &tm1, &one, 0, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(res[0] == INT64_MIN); /* wraps, as PyTorch */

  /* Unsupported type class is refused before enqueueing. */
  CHECK(launch(VNC_EW_bitwise_and, VNC_FLOAT32, &to, &ta, &tb, &one, 0, NULL) == VNC_ERR_UNSUPPORTED);
  CHECK(strstr(vnc_last_error(), "not implemented for 'float32'") != NULL);
  CHECK(vnc_elementwise_supports(VNC_EW_exp, VNC_BFLOAT16));
  CHECK(!vnc_elementwise_supports(VNC_EW_exp, VNC_INT32));
  CHECK(vnc_elementwise_arity(VNC_EW_where) == 3);

  /* Unary on a transposed view with NaN propagation (maximum). */
  float m[6] = {1, NAN, 3, 4, 5, 6}, mo[6];
  vnc_tensor tm = vnc_tensor_contiguous(m, VNC_FLOAT32, 2, (int64_t[]){3, 2});
  tm.strides[0] = 1;
  tm.strides[1] = 3;
  vnc_tensor tmo = vnc_tensor_contiguous(mo, VNC_FLOAT32, 2, (int64_t[]){3, 2});
  CHECK_OK(launch(VNC_EW_neg, VNC_FLOAT32, &tmo, &tm, NULL, &one, 0, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(mo[0] == -1 && mo[1] == -4 && isnan(mo[2]) && mo[5] == -6);

  /* clamp of integers is ATen's min(max(x, lo), hi): with lo > hi every element is hi. */
  int64_t cx[4] = {-7, 0, 3, 9}, co[4];
  vnc_tensor tcx = vnc_tensor_contiguous(cx, VNC_INT64, 1, (int64_t[]){4});
  vnc_tensor tco = vnc_tensor_contiguous(co, VNC_INT64, 1, (int64_t[]){4});
  vnc_ew_params cp = {.i = {5, -3}, .flags = 3};
  CHECK_OK(launch(VNC_EW_clamp, VNC_INT64, &tco, &tcx, NULL, &cp, 0, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(co[0] == -3 && co[1] == -3 && co[2] == -3 && co[3] == -3);

  /* hardswish_backward at the kinks (ATen): x <= -3 gives 0, x >= 3 the gradient. */
  float hx[4] = {-3.0f, -2.9f, 2.9f, 3.0f}, hg[4] = {1, 1, 1, 1}, ho[4];
  vnc_tensor thx = vnc_tensor_contiguous(hx, VNC_FLOAT32, 1, (int64_t[]){4});
  vnc_tensor thg = vnc_tensor_contiguous(hg, VNC_FLOAT32, 1, (int64_t[]){4});
  vnc_tensor tho = vnc_tensor_contiguous(ho, VNC_FLOAT32, 1, (int64_t[]){4});
  CHECK_OK(launch(VNC_EW_hardswish_backward, VNC_FLOAT32, &tho, &thg, &thx, &one, 0, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(ho[0] == 0.0f && ho[3] == 1.0f && ho[1] == 1.0f * ((-2.9f / 3.0f) + 0.5f));

  /* pow is C's powf (IEEE 754 special cases), for tensor exponents and for a float16 scalar
   * exponent of 0.5; float32's scalar 0.5 is ATen's sqrt. */
  float pb[3] = {-INFINITY, -INFINITY, -0.0f}, pe[3] = {0.5f, -0.5f, -0.5f}, po[3];
  vnc_tensor tpb = vnc_tensor_contiguous(pb, VNC_FLOAT32, 1, (int64_t[]){3});
  vnc_tensor tpe = vnc_tensor_contiguous(pe, VNC_FLOAT32, 1, (int64_t[]){3});
  vnc_tensor tpo = vnc_tensor_contiguous(po, VNC_FLOAT32, 1, (int64_t[]){3});
  CHECK_OK(launch(VNC_EW_pow, VNC_FLOAT32, &tpo, &tpb, &tpe, &one, 0, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(po[0] == INFINITY && po[1] == 0.0f && !signbit(po[1]) && po[2] == INFINITY);
  uint16_t hb[2] = {0xFC00, 0x8000}, hpo[2]; /* float16 -inf, -0 */
  float fpo[2];
  double half_exp = 0.5;
  memcpy(sc[2], &half_exp, sizeof half_exp);
  vnc_tensor thb = vnc_tensor_contiguous(hb, VNC_FLOAT16, 1, (int64_t[]){2});
  vnc_tensor thpo = vnc_tensor_contiguous(hpo, VNC_FLOAT16, 1, (int64_t[]){2});
  CHECK_OK(launch(VNC_EW_pow, VNC_FLOAT16, &thpo, &thb, &scalar, &one, 1u << 2, (const vnc_scalar_bytes *)sc));
  float fpb[2] = {-INFINITY, -0.0f};
  vnc_tensor tfpb = vnc_tensor_contiguous(fpb, VNC_FLOAT32, 1, (int64_t[]){2});
  vnc_tensor tfpo = vnc_tensor_contiguous(fpo, VNC_FLOAT32, 1, (int64_t[]){2});
  CHECK_OK(launch(VNC_EW_pow, VNC_FLOAT32, &tfpo, &tfpb, &scalar, &one, 1u << 2, (const vnc_scalar_bytes *)sc));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(hpo[0] == 0x7C00 && hpo[1] == 0x0000); /* inf, +0 */
  CHECK(isnan(fpo[0]) && fpo[1] == 0.0f && signbit(fpo[1])); /* sqrt: nan, -0 */

  /* Plan cache: the same geometry hits; clearing empties it. */
  vnc_plan_cache_stats before, after;
  vnc_plan_cache_get_stats(&before);
  CHECK_OK(launch(VNC_EW_add, VNC_FLOAT32, &to, &ta, &tb, &p, 0, NULL));
  vnc_plan_cache_get_stats(&after);
  CHECK(after.hits == before.hits + 1 && after.entries > 0);
  vnc_plan_cache_clear();
  vnc_plan_cache_get_stats(&after);
  CHECK(after.entries == 0);
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK_DONE();
}
