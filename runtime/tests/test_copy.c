/* Copy and fill: dtype conversions against IEEE reference encodings, strides, broadcast. */
#include <stdint.h>
#include "check.h"

static vnc_stream *S;

static void copy1(void *dst, int32_t ddt, const void *src, int32_t sdt, int64_t n) {
  vnc_tensor d = vnc_tensor_contiguous(dst, ddt, 1, &n);
  vnc_tensor s = vnc_tensor_contiguous((void *)src, sdt, 1, &n);
  CHECK_OK(vnc_copy(S, "test", &d, &s));
  CHECK_OK(vnc_stream_synchronize(S));
}

int main(void) {
  CHECK_OK(vnc_stream_get(0, 0, &S));

  /* float32 -> float16: IEEE 754 binary16 encodings (round to nearest even). */
  float f[] = {1.0f, -2.0f, 65504.0f, 65520.0f, 0x1.0p-24f, 0x1.0p-26f, 1.0f + 0x1.0p-11f,
               1.0f + 3 * 0x1.0p-11f, 1.0f / 0.0f};
  uint16_t want_h[] = {0x3C00, 0xC000, 0x7BFF, 0x7C00, 0x0001, 0x0000, 0x3C00, 0x3C02, 0x7C00};
  uint16_t h[9];
  copy1(h, VNC_FLOAT16, f, VNC_FLOAT32, 9);
  for (int i = 0; i < 9; i++) CHECK(h[i] == want_h[i]);
  float back[9];
  copy1(back, VNC_FLOAT32, h, VNC_FLOAT16, 9);
  CHECK(back[0] == 1.0f && back[2] == 65504.0f && back[4] == 0x1.0p-24f);

  /* float32 -> bfloat16: upper 16 bits, round to nearest even. */
  float g[] = {1.0f, 3.0f, 1.0f + 0x1.0p-8f, 1.0f + 3 * 0x1.0p-8f, -0.0f};
  uint16_t want_b[] = {0x3F80, 0x4040, 0x3F80, 0x3F82, 0x8000};
  uint16_t bf[5];
  copy1(bf, VNC_BFLOAT16, g, VNC_FLOAT32, 5);
  for (int i = 0; i < 5; i++) CHECK(bf[i] == want_b[i]);

  /* int64 -> float32 rounds once (2^24 + 1 -> 2^24); float -> uint8 wraps via int64. */
  int64_t big[] = {16777217, -3, 255};
  float fb[3];
  copy1(fb, VNC_FLOAT32, big, VNC_INT64, 3);
  CHECK(fb[0] == 16777216.0f && fb[1] == -3.0f && fb[2] == 255.0f);
  float neg[] = {-1.0f, 2.9f, 256.0f};
  uint8_t u8[3];
  copy1(u8, VNC_UINT8, neg, VNC_FLOAT32, 3);
  CHECK(u8[0] == 255 && u8[1] == 2 && u8[2] == 0);
  double nan_in[] = {0.0 / 0.0, 0.0, -0.5};
  _Bool bo[3];
  copy1(bo, VNC_BOOL, nan_in, VNC_FLOAT64, 3);
  CHECK(bo[0] == 1 && bo[1] == 0 && bo[2] == 1);
  /* complex64 -> float32 keeps the real part; float32 -> complex64 has zero imaginary. */
  float cplx[] = {1.5f, 9.0f, -2.0f, 7.0f};
  float re[2];
  copy1(re, VNC_FLOAT32, cplx, VNC_COMPLEX64, 2);
  CHECK(re[0] == 1.5f && re[1] == -2.0f);
  float c2[4];
  copy1(c2, VNC_COMPLEX64, re, VNC_FLOAT32, 2);
  CHECK(c2[0] == 1.5f && c2[1] == 0.0f && c2[2] == -2.0f && c2[3] == 0.0f);

  /* Transposed source (3x4 viewed as 4x3) into a contiguous destination. */
  float m[12], mt[12];
  for (int i = 0; i < 12; i++) m[i] = (float)i;
  vnc_tensor src = vnc_tensor_contiguous(m, VNC_FLOAT32, 2, (int64_t[]){4, 3});
  src.strides[0] = 1;
  src.strides[1] = 4;
  vnc_tensor dst = vnc_tensor_contiguous(mt, VNC_FLOAT32, 2, (int64_t[]){4, 3});
  CHECK_OK(vnc_copy(S, "t", &dst, &src));
  CHECK_OK(vnc_stream_synchronize(S));
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) CHECK(mt[i * 3 + j] == m[j * 4 + i]);

  /* Sliced with step and a storage offset; destination non-contiguous too. */
  double wide[40];
  for (int i = 0; i < 40; i++) wide[i] = i;
  int32_t out[20];
  for (int i = 0; i < 20; i++) out[i] = -1;
  vnc_tensor ws = vnc_tensor_contiguous(wide + 3, VNC_FLOAT64, 1, (int64_t[]){10});
  ws.strides[0] = 3;
  vnc_tensor od = vnc_tensor_contiguous(out, VNC_INT32, 1, (int64_t[]){10});
  od.strides[0] = 2;
  CHECK_OK(vnc_copy(S, "t", &od, &ws));
  CHECK_OK(vnc_stream_synchronize(S));
  for (int i = 0; i < 10; i++) CHECK(out[2 * i] == 3 + 3 * i && out[2 * i + 1] == -1);

  /* Broadcast [4] -> [3, 4] (expanded, stride 0); shape mismatch is an error. */
  float row[4] = {1, 2, 3, 4}, grid[12];
  vnc_tensor rs = vnc_tensor_contiguous(row, VNC_FLOAT32, 1, (int64_t[]){4});
  vnc_tensor gd = vnc_tensor_contiguous(grid, VNC_FLOAT32, 2, (int64_t[]){3, 4});
  CHECK_OK(vnc_copy(S, "t", &gd, &rs));
  CHECK_OK(vnc_stream_synchronize(S));
  for (int i = 0; i < 12; i++) CHECK(grid[i] == row[i % 4]);
  vnc_tensor bad = vnc_tensor_contiguous(row, VNC_FLOAT32, 1, (int64_t[]){3});
  CHECK(vnc_copy(S, "t", &gd, &bad) == VNC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(vnc_last_error(), "[3] cannot be broadcast to the output shape [3, 4]") != NULL);

  /* 0-dim and zero-size. */
  int64_t one = 42, got = 0;
  vnc_tensor s0 = vnc_tensor_contiguous(&one, VNC_INT64, 0, NULL);
  vnc_tensor d0 = vnc_tensor_contiguous(&got, VNC_INT64, 0, NULL);
  CHECK_OK(vnc_copy(S, "t", &d0, &s0));
  vnc_tensor empty = vnc_tensor_contiguous(NULL, VNC_FLOAT32, 2, (int64_t[]){0, 5});
  CHECK_OK(vnc_copy(S, "t", &empty, &empty));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(got == 42);

  /* Large copy across the thread pool, with a cast. */
  enum { N = 1 << 20 };
  static int32_t li[N];
  static double ld[N];
  for (int i = 0; i < N; i++) li[i] = i - N / 2;
  copy1(ld, VNC_FLOAT64, li, VNC_INT32, N);
  int all = 1;
  for (int i = 0; i < N; i++) all &= ld[i] == (double)(i - N / 2);
  CHECK(all);

  /* Fill, including a strided view. */
  int16_t buf[10] = {0};
  int16_t v = -7;
  vnc_tensor fv = vnc_tensor_contiguous(buf, VNC_INT16, 1, (int64_t[]){5});
  fv.strides[0] = 2;
  CHECK_OK(vnc_fill(S, "aten::fill_", &fv, &v));
  CHECK_OK(vnc_stream_synchronize(S));
  for (int i = 0; i < 10; i++) CHECK(buf[i] == (i % 2 ? 0 : -7));

  /* Stored-only dtypes: equal-dtype copies (strided) and fills move bytes; conversions are
   * refused before anything runs, and vnc_copy_supported says so. */
  uint64_t u64[4] = {UINT64_MAX, 1, 2, (uint64_t)1 << 63}, u64o[2] = {0};
  vnc_tensor us = vnc_tensor_contiguous(u64, VNC_UINT64, 1, (int64_t[]){2});
  us.strides[0] = 3;
  vnc_tensor ud = vnc_tensor_contiguous(u64o, VNC_UINT64, 1, (int64_t[]){2});
  CHECK_OK(vnc_copy(S, "t", &ud, &us));
  uint8_t f8[3] = {0x7e, 0x01, 0x80}, f8o[3] = {0};
  copy1(f8o, VNC_FLOAT8_E4M3FN, f8, VNC_FLOAT8_E4M3FN, 3);
  CHECK(u64o[0] == UINT64_MAX && u64o[1] == ((uint64_t)1 << 63));
  CHECK(f8o[0] == 0x7e && f8o[1] == 0x01 && f8o[2] == 0x80);
  uint16_t u16[3] = {0}, u16v = 65535;
  vnc_tensor u16t = vnc_tensor_contiguous(u16, VNC_UINT16, 1, (int64_t[]){3});
  CHECK_OK(vnc_fill(S, "aten::fill_", &u16t, &u16v));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(u16[0] == 65535 && u16[2] == 65535);
  CHECK(vnc_copy_supported(VNC_FLOAT32, VNC_INT64) && vnc_copy_supported(VNC_BITS8, VNC_BITS8));
  CHECK(!vnc_copy_supported(VNC_FLOAT32, VNC_FLOAT8_E4M3FN) && !vnc_copy_supported(VNC_UINT16, VNC_UINT32));
  CHECK(!vnc_copy_supported(99, 99));
  vnc_tensor f32 = vnc_tensor_contiguous(buf, VNC_FLOAT32, 1, (int64_t[]){2});
  vnc_tensor f8t = vnc_tensor_contiguous(f8, VNC_FLOAT8_E5M2, 1, (int64_t[]){2});
  CHECK(vnc_copy(S, "t", &f32, &f8t) == VNC_ERR_UNSUPPORTED);
  CHECK(strstr(vnc_last_error(), "copy from float8_e5m2 to float32 is not supported") != NULL);
  CHECK_DONE();
}
