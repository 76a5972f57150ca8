/* Philox known-answer vectors and the random fills built on it. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "check.h"
#include "kernels/philox.h"

static vnc_stream *S;

int main(void) {
  /* Known-answer tests from the Random123 distribution (kat_vectors, philox4x32_10). */
  uint32_t out[4];
  const uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
  vnc_philox4x32_10(c0, k0, out);
  CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu && out[3] == 0x9b00dbd8u);
  const uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, k1[2] = {0xffffffffu, 0xffffffffu};
  vnc_philox4x32_10(c1, k1, out);
  CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u && out[3] == 0x6d5451fdu);
  const uint32_t c2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, k2[2] = {0xa4093822u, 0x299f31d0u};
  vnc_philox4x32_10(c2, k2, out);
  CHECK(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u && out[3] == 0x24126ea1u);

  CHECK_OK(vnc_stream_get(0, 0, &S));
  enum { N = 100000 };
  static float a[N], b[N];
  int64_t n = N;
  vnc_tensor ta = vnc_tensor_contiguous(a, VNC_FLOAT32, 1, &n);
  vnc_tensor tb = vnc_tensor_contiguous(b, VNC_FLOAT32, 1, &n);

  /* Uniform: in range, mean about the middle; same (seed, offset) repeats exactly. */
  CHECK_OK(vnc_rng_uniform(S, &ta, -2.0, 3.0, 42, 0));
  CHECK_OK(vnc_rng_uniform(S, &tb, -2.0, 3.0, 42, 0));
  CHECK_OK(vnc_stream_synchronize(S));
  double sum = 0;
  int in_range = 1, same = 1;
  for (int i = 0; i < N; i++) {
    sum += a[i];
    in_range &= a[i] >= -2.0f && a[i] < 3.0f;
    same &= a[i] == b[i];
  }
  CHECK(in_range && same);
  CHECK(fabs(sum / N - 0.5) < 0.03);
  CHECK_OK(vnc_rng_uniform(S, &tb, -2.0, 3.0, 42, vnc_rng_offset_increment(N)));
  CHECK_OK(vnc_stream_synchronize(S));
  int differ = 0;
  for (int i = 0; i < N; i++) differ += a[i] != b[i];
  CHECK(differ > N * 9 / 10);

  /* Normal: mean and std. */
  CHECK_OK(vnc_rng_normal(S, &ta, 1.0, 2.0, 7, 0));
  CHECK_OK(vnc_stream_synchronize(S));
  double m = 0, v = 0;
  for (int i = 0; i < N; i++) m += a[i];
  m /= N;
  for (int i = 0; i < N; i++) v += (a[i] - m) * (a[i] - m);
  v = sqrt(v / (N - 1));
  CHECK(fabs(m - 1.0) < 0.05 && fabs(v - 2.0) < 0.05);

  /* A transposed view receives the same value per logical element as a contiguous one. */
  static float t1[600], t2[600];
  vnc_tensor tc = vnc_tensor_contiguous(t1, VNC_FLOAT32, 2, (int64_t[]){20, 30});
  vnc_tensor tt = vnc_tensor_contiguous(t2, VNC_FLOAT32, 2, (int64_t[]){20, 30});
  tt.strides[0] = 1;
  tt.strides[1] = 20;
  CHECK_OK(vnc_rng_normal(S, &tc, 0.0, 1.0, 3, 8));
  CHECK_OK(vnc_rng_normal(S, &tt, 0.0, 1.0, 3, 8));
  CHECK_OK(vnc_stream_synchronize(S));
  int match = 1;
  for (int i = 0; i < 20; i++)
    for (int j = 0; j < 30; j++) match &= t1[i * 30 + j] == t2[j * 20 + i];
  CHECK(match);

  /* random_ in [3, 10) on int64; bernoulli mean; exponential mean 1/lambda. */
  static int64_t r[N];
  vnc_tensor tr = vnc_tensor_contiguous(r, VNC_INT64, 1, &n);
  CHECK_OK(vnc_rng_random(S, &tr, 3, 7, 11, 0));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1, hit_lo = 0, hit_hi = 0;
  for (int i = 0; i < N; i++) {
    ok &= r[i] >= 3 && r[i] < 10;
    hit_lo |= r[i] == 3;
    hit_hi |= r[i] == 9;
  }
  CHECK(ok && hit_lo && hit_hi);
  CHECK_OK(vnc_rng_bernoulli(S, &ta, 0.3, NULL, 5, 0));
  CHECK_OK(vnc_stream_synchronize(S));
  sum = 0;
  for (int i = 0; i < N; i++) sum += a[i];
  CHECK(fabs(sum / N - 0.3) < 0.01);
  CHECK(vnc_rng_bernoulli(S, &ta, 1.5, NULL, 5, 0) == VNC_ERR_INVALID_ARGUMENT);
  CHECK_OK(vnc_rng_exponential(S, &ta, 4.0, 9, 0));
  CHECK_OK(vnc_stream_synchronize(S));
  sum = 0;
  for (int i = 0; i < N; i++) sum += a[i];
  CHECK(fabs(sum / N - 0.25) < 0.01);
  CHECK(vnc_rng_uniform(S, &tr, 0, 1, 1, 0) == VNC_ERR_UNSUPPORTED);

  /* vnc_rng_draw's newer distributions: cauchy's median, geometric's mean 1/p on int64 (all
   * >= 1), log_normal's log-mean; ATen's argument checks. */
  CHECK_OK(vnc_rng_draw(S, &ta, VNC_RNG_CAUCHY, 2.0, 0.5, 13, 0));
  CHECK_OK(vnc_stream_synchronize(S));
  int below = 0;
  for (int i = 0; i < N; i++) below += a[i] < 2.0f;
  CHECK(fabs((double)below / N - 0.5) < 0.01);
  CHECK_OK(vnc_rng_draw(S, &tr, VNC_RNG_GEOMETRIC, 0.25, 0.0, 13, 0));
  CHECK_OK(vnc_stream_synchronize(S));
  sum = 0;
  ok = 1;
  for (int i = 0; i < N; i++) {
    sum += (double)r[i];
    ok &= r[i] >= 1;
  }
  CHECK(ok && fabs(sum / N - 4.0) < 0.1);
  CHECK_OK(vnc_rng_draw(S, &ta, VNC_RNG_LOG_NORMAL, 0.5, 0.25, 13, 0));
  CHECK_OK(vnc_stream_synchronize(S));
  sum = 0;
  for (int i = 0; i < N; i++) sum += log(a[i]);
  CHECK(fabs(sum / N - 0.5) < 0.01);
  CHECK(vnc_rng_draw(S, &ta, VNC_RNG_GEOMETRIC, 1.0, 0.0, 1, 0) == VNC_ERR_INVALID_ARGUMENT);
  CHECK(vnc_rng_draw(S, &ta, VNC_RNG_CAUCHY, 0.0, 0.0, 1, 0) == VNC_ERR_INVALID_ARGUMENT);
  CHECK(vnc_rng_draw(S, &ta, VNC_RNG_LOG_NORMAL, 0.0, -1.0, 1, 0) == VNC_ERR_INVALID_ARGUMENT);
  CHECK(vnc_rng_draw(S, &tr, VNC_RNG_CAUCHY, 0.0, 1.0, 1, 0) == VNC_ERR_UNSUPPORTED);

  /* poisson: mean = rate for a small and a large rate; a negative rate fails the task. */
  static float rate[N];
  for (int i = 0; i < N; i++) rate[i] = i % 2 ? 3.0f : 50.0f;
  vnc_tensor trate = vnc_tensor_contiguous(rate, VNC_FLOAT32, 1, &n);
  CHECK_OK(vnc_rng_poisson(S, &ta, &trate, 17, 0));
  CHECK_OK(vnc_stream_synchronize(S));
  double s_small = 0, s_large = 0;
  for (int i = 0; i < N; i++) *(i % 2 ? &s_small : &s_large) += a[i];
  CHECK(fabs(s_small / (N / 2) - 3.0) < 0.05 && fabs(s_large / (N / 2) - 50.0) < 0.2);
  rate[7] = -1.0f;
  CHECK_OK(vnc_rng_poisson(S, &ta, &trate, 17, 0));
  CHECK(vnc_stream_synchronize(S) == VNC_ERR_KERNEL && strstr(vnc_last_error(), "invalid Poisson rate"));
  CHECK_DONE();
}
