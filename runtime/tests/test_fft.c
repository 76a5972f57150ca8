/* FFT kernels (vnc/fft.h) against a direct O(n^2) DFT in long double: power-of-two,
 * mixed-radix and prime (Bluestein) lengths; c2c both directions with scaling; r2c one-sided
 * and full; c2r from a half spectrum; strided lines along a non-last dim; refusals. */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include "check.h"

static vnc_stream *S;

/* Max |a - b| / (max |b| + 1e-30) over n complex values. */
static double rel_err(const float *a, const long double _Complex *b, int64_t n) {
  double num = 0, den = 1e-30;
  for (int64_t i = 0; i < n; i++) {
    const double dr = a[2 * i] - (double)creall(b[i]), di = a[2 * i + 1] - (double)cimagl(b[i]);
    num = fmax(num, hypot(dr, di));
    den = fmax(den, (double)cabsl(b[i]));
  }
  return num / den;
}

static void dft(const float *x, int complex_in, int64_t n, int sign, long double _Complex *X) {
  for (int64_t k = 0; k < n; k++) {
    long double _Complex acc = 0;
    for (int64_t j = 0; j < n; j++) {
      const long double a = 2.0L * 3.14159265358979323846264338327950288L * (long double)((j * k) % n) / (long double)n;
      const long double _Complex v = complex_in ? x[2 * j] + x[2 * j + 1] * I : x[j];
      acc += v * (cosl(a) + sign * sinl(a) * I);
    }
    X[k] = acc;
  }
}

int main(void) {
  CHECK_OK(vnc_stream_get(0, 0, &S));
  const int64_t lengths[] = {1, 2, 3, 8, 12, 16, 30, 49, 64, 97, 125, 210, 257, 1000, 1024, 1031};
  for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
    const int64_t n = lengths[li], B = 3;
    float *x = malloc(sizeof(float) * 2 * n * B), *y = malloc(sizeof(float) * 2 * n * B);
    long double _Complex *X = malloc(sizeof(long double _Complex) * n);
    for (int64_t i = 0; i < 2 * n * B; i++) x[i] = (float)sin(0.37 * (double)i + 0.1 * (double)li) + (i % 7 == 0);
    /* c2c forward and inverse (scaled by 1/n), batch of 3 lines along dim 1 */
    vnc_tensor xt = vnc_tensor_contiguous(x, VNC_COMPLEX64, 2, (int64_t[]){B, n});
    vnc_tensor yt = vnc_tensor_contiguous(y, VNC_COMPLEX64, 2, (int64_t[]){B, n});
    for (int sign = -1; sign <= 1; sign += 2) {
      const double scale = sign < 0 ? 1.0 : 1.0 / (double)n;
      CHECK_OK(vnc_fft_c2c(S, "fft_c2c", &xt, &yt, 1, sign, scale));
      CHECK_OK(vnc_stream_synchronize(S));
      for (int64_t b = 0; b < B; b++) {
        dft(x + 2 * n * b, 1, n, sign, X);
        for (int64_t k = 0; k < n; k++) X[k] *= scale;
        const double e = rel_err(y + 2 * n * b, X, n);
        if (e > 2e-6) fprintf(stderr, "c2c n=%lld sign=%d line %lld: rel err %g\n", (long long)n, sign, (long long)b, e);
        CHECK(e <= 2e-6);
      }
    }
    /* r2c: real lines along dim 0 of an (n, B) tensor (strided), one-sided output (h, B) */
    const int64_t h = n / 2 + 1;
    vnc_tensor rx = vnc_tensor_contiguous(x, VNC_FLOAT32, 2, (int64_t[]){n, B});
    vnc_tensor ry = vnc_tensor_contiguous(y, VNC_COMPLEX64, 2, (int64_t[]){h, B});
    CHECK_OK(vnc_fft_r2c(S, "fft_r2c", &rx, &ry, 0, 1.0));
    CHECK_OK(vnc_stream_synchronize(S));
    for (int64_t b = 0; b < B; b++) {
      float *line = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * 2 * h);
      for (int64_t j = 0; j < n; j++) line[j] = x[j * B + b];
      for (int64_t k = 0; k < h; k++) got[2 * k] = y[2 * (k * B + b)], got[2 * k + 1] = y[2 * (k * B + b) + 1];
      dft(line, 0, n, -1, X);
      const double e = rel_err(got, X, h);
      if (e > 2e-6) fprintf(stderr, "r2c n=%lld line %lld: rel err %g\n", (long long)n, (long long)b, e);
      CHECK(e <= 2e-6);
      /* c2r of that half spectrum gives n * line back */
      vnc_tensor cx = vnc_tensor_contiguous(got, VNC_COMPLEX64, 1, (int64_t[]){h});
      float *back = malloc(sizeof(float) * n);
      vnc_tensor cy = vnc_tensor_contiguous(back, VNC_FLOAT32, 1, (int64_t[]){n});
      CHECK_OK(vnc_fft_c2r(S, "fft_c2r", &cx, &cy, 0, 1.0 / (double)n));
      CHECK_OK(vnc_stream_synchronize(S));
      double worst = 0, mag = 1e-30;
      for (int64_t j = 0; j < n; j++) worst = fmax(worst, fabs(back[j] - line[j])), mag = fmax(mag, fabs(line[j]));
      CHECK(worst / mag <= 4e-6);
      free(line), free(got), free(back);
    }
    free(x), free(y), free(X);
  }
  /* full (two-sided) r2c output is Hermitian */
  {
    float x[5] = {1, 2, 3, 4, 5}, y[10];
    vnc_tensor a = vnc_tensor_contiguous(x, VNC_FLOAT32, 1, (int64_t[]){5}), b = vnc_tensor_contiguous(y, VNC_COMPLEX64, 1, (int64_t[]){5});
    CHECK_OK(vnc_fft_r2c(S, "fft_r2c", &a, &b, 0, 1.0));
    CHECK_OK(vnc_stream_synchronize(S));
    CHECK(fabsf(y[2] - y[8]) < 1e-5f && fabsf(y[3] + y[9]) < 1e-5f && fabsf(y[0] - 15.0f) < 1e-5f);
  }
  /* a constant of power-of-two length: roots on the axes are exact, so the other bins are 0 */
  for (int64_t n = 2; n <= 64; n *= 2) {
    float x[64], y[128];
    for (int i = 0; i < 64; i++) x[i] = 1.0f;
    vnc_tensor a = vnc_tensor_contiguous(x, VNC_FLOAT32, 1, (int64_t[]){n}), b = vnc_tensor_contiguous(y, VNC_COMPLEX64, 1, (int64_t[]){n});
    CHECK_OK(vnc_fft_r2c(S, "fft_r2c", &a, &b, 0, 1.0));
    CHECK_OK(vnc_stream_synchronize(S));
    int exact = y[0] == (float)n && y[1] == 0.0f;
    for (int64_t k = 2; k < 2 * n; k++) exact &= y[k] == 0.0f;
    CHECK(exact);
  }
  /* refusals: wrong dtypes, mismatched lengths */
  {
    float x[8], y[8];
    vnc_tensor a = vnc_tensor_contiguous(x, VNC_FLOAT32, 1, (int64_t[]){8}), b = vnc_tensor_contiguous(y, VNC_COMPLEX64, 1, (int64_t[]){4});
    CHECK(vnc_fft_c2c(S, "fft_c2c", &a, &b, 0, -1, 1.0) == VNC_ERR_UNSUPPORTED);
    vnc_tensor c = vnc_tensor_contiguous(y, VNC_COMPLEX64, 1, (int64_t[]){3});
    CHECK(vnc_fft_r2c(S, "fft_r2c", &a, &c, 0, 1.0) == VNC_ERR_INVALID_ARGUMENT);
    CHECK(vnc_fft_c2c(S, "fft_c2c", &b, &b, 0, 2, 1.0) == VNC_ERR_INVALID_ARGUMENT);
  }
  CHECK_DONE();
}
