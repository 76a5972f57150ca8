/* Reductions: sums along inner and outer dims, argmax ties and NaN, empty reductions,
 * two-output max, var. */
#include <math.h>
#include <stdint.h>
#include "check.h"

static vnc_stream *S;

/* A fused producer: the squares of its input (the value a compiled graph would not store). */
static void squares(void *ctx, char *const *in, const int64_t *st, int64_t n, void *out) {
  (void)ctx;
  for (int64_t i = 0; i < n; i++) {
    float v = *(const float *)(in[0] + i * st[0]);
    ((float *)out)[i] = v * v;
  }
}


int main(void) {
  CHECK_OK(vnc_stream_get(0, 0, &S));
  enum { R = 300, C = 200 };
  static float m[R * C];
  for (int i = 0; i < R * C; i++) m[i] = (float)((i * 7) % 13) - 6.0f;
  float rows[R], cols[C];
  vnc_iter it = geometry(rows, VNC_FLOAT32, m, R, C, 1);
  CHECK_OK(vnc_reduce(S, "sum", VNC_RED_SUM, &it, 1, NULL));
  it = geometry(cols, VNC_FLOAT32, m, R, C, 0);
  CHECK_OK(vnc_reduce(S, "sum", VNC_RED_SUM, &it, 1, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1;
  for (int r = 0; r < R; r++) {
    double s = 0;
    for (int c = 0; c < C; c++) s += m[r * C + c];
    ok &= fabs(rows[r] - s) < 1e-3; /* small integers: exact in float too */
  }
  for (int c = 0; c < C; c++) {
    double s = 0;
    for (int r = 0; r < R; r++) s += m[r * C + c];
    ok &= fabs(cols[c] - s) < 1e-3;
  }
  CHECK(ok);

  /* argmax: first index on ties; the first NaN wins. */
  float v[6] = {1, 5, 5, 2, 5, 0};
  int64_t idx = -1;
  it = geometry(&idx, VNC_INT64, v, 1, 6, 1);
  CHECK_OK(vnc_reduce(S, "argmax", VNC_RED_ARGMAX, &it, 1, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(idx == 1);
  v[3] = NAN;
  v[5] = NAN;
  CHECK_OK(vnc_reduce(S, "argmax", VNC_RED_ARGMAX, &it, 1, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(idx == 3);

  /* max with indices: two outputs. */
  float w[4] = {3, 9, 9, 1}, best = 0;
  int64_t where = -1;
  vnc_iter two;
  memset(&two, 0, sizeof two);
  two.nops = 3;
  two.ndim = 1;
  two.shape[0] = 4;
  two.numel = 4;
  two.data[0] = (char *)&best;
  two.data[1] = (char *)&where;
  two.data[2] = (char *)w;
  two.dtypes[0] = VNC_FLOAT32;
  two.dtypes[1] = VNC_INT64;
  two.dtypes[2] = VNC_FLOAT32;
  two.strides[2][0] = 4;
  CHECK_OK(vnc_reduce(S, "max", VNC_RED_MAX_INDEX, &two, 2, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(best == 9.0f && where == 1);

  /* var with correction 1 of 1..4 = 5/3; std its root. */
  float q[4] = {1, 2, 3, 4}, var = 0;
  it = geometry(&var, VNC_FLOAT32, q, 1, 4, 1);
  vnc_reduce_params p = {.correction = 1.0};
  CHECK_OK(vnc_reduce(S, "var", VNC_RED_VAR, &it, 1, &p));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(fabsf(var - 5.0f / 3.0f) < 1e-6f);

  /* Empty reductions: identities, NaN for mean; max refused. */
  float e_sum = 7, e_mean = 7;
  it = geometry(&e_sum, VNC_FLOAT32, q, 1, 0, 1);
  it.numel = 0;
  CHECK_OK(vnc_reduce(S, "sum", VNC_RED_SUM, &it, 1, NULL));
  it.data[0] = (char *)&e_mean;
  CHECK_OK(vnc_reduce(S, "mean", VNC_RED_MEAN, &it, 1, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(e_sum == 0.0f && isnan(e_mean));
  CHECK(vnc_reduce(S, "amax", VNC_RED_AMAX, &it, 1, NULL) == VNC_ERR_INVALID_ARGUMENT);

  /* A long sum spanning several chunks matches the exact value closely. */
  enum { N = 3 * VNC_REDUCE_CHUNK + 123 };
  static float ones[N];
  for (int i = 0; i < N; i++) ones[i] = 0.1f;
  float total = 0;
  it = geometry(&total, VNC_FLOAT32, ones, 1, N, 1);
  CHECK_OK(vnc_reduce(S, "sum", VNC_RED_SUM, &it, 1, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(fabs(total - N * (double)0.1f) / (N * 0.1) < 1e-6);

  /* vnc_reduce_fused gives the bits of reducing the stored values (rows and columns). */
  static float sq[R * C];
  for (int i = 0; i < R * C; i++) sq[i] = (m[i] * 0.37f) * (m[i] * 0.37f);
  static float ms[R * C];
  for (int i = 0; i < R * C; i++) ms[i] = m[i] * 0.37f;
  for (int dim = 0; dim < 2; dim++) {
    float want[R > C ? R : C], got[R > C ? R : C];
    it = geometry(want, VNC_FLOAT32, sq, R, C, dim);
    CHECK_OK(vnc_reduce(S, "sum", VNC_RED_SUM, &it, 1, NULL));
    it = geometry(got, VNC_FLOAT32, ms, R, C, dim);
    CHECK_OK(vnc_reduce_fused(S, "sum", VNC_RED_SUM, &it, 1, NULL, VNC_FLOAT32, squares, NULL));
    CHECK_OK(vnc_stream_synchronize(S));
    CHECK(memcmp(want, got, sizeof(float) * (dim ? R : C)) == 0);
  }
  CHECK(vnc_reduce_fused(S, "sum", VNC_RED_SUM, &it, 1, NULL, VNC_FLOAT32, NULL, NULL) == VNC_ERR_INVALID_ARGUMENT);
  CHECK_DONE();
}
