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
