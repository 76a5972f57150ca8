/* GEMM against a direct triple loop in double: layouts (row-major, transposed, strided),
 * batches, beta, mixed float16 path, integers; an installed sgemm provider (the column-major
 * translation of every tile, for each transpose pair); vnc_gemm_fused's row epilogue. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static vnc_stream *S;

static double ref(const float *A, int64_t ars, int64_t acs, const float *B, int64_t brs, int64_t bcs, int64_t i, int64_t j, int64_t K) {
  double s = 0;
  for (int64_t k = 0; k < K; k++) s += (double)A[i * ars + k * acs] * (double)B[k * brs + j * bcs];
  return s;
}

/* float16 bits to float, for normal numbers and zero (all this test uses). */
static float half_to_float(uint16_t h) {
  if ((h & 0x7FFF) == 0) return (h & 0x8000) ? -0.0f : 0.0f;
  const int e = (h >> 10) & 0x1F;
  const float m = 1.0f + (float)(h & 0x3FF) / 1024.0f;
  const float v = ldexpf(m, e - 15);
  return (h & 0x8000) ? -v : v;
}

/* OpenBLAS's own Fortran-interface sgemm, installed as a provider behind a counter. */
void scipy_sgemm_(const char *, const char *, const int *, const int *, const int *, const float *, const float *,
                  const int *, const float *, const int *, const float *, float *, const int *);
static int provider_calls, local_calls;
static void counting_sgemm(const char *ta, const char *tb, const int *m, const int *n, const int *k, const float *alpha,
                           const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c,
                           const int *ldc) {
  __atomic_fetch_add(&provider_calls, 1, __ATOMIC_RELAXED);
  scipy_sgemm_(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
static int counting_local(int n) {
  (void)n;
  __atomic_fetch_add(&local_calls, 1, __ATOMIC_RELAXED);
  return 1;
}

/* C = 1.5 op(A) op(B) + 0.5 C at 300 x 200 x 70 (several row and column tiles) through the
 * provider, for each transpose pair, against the direct sum. */
static void provider_products(void) {
  enum { PM = 300, PN = 200, PK = 70 };
  float *A = malloc(sizeof(float) * PM * PK), *B = malloc(sizeof(float) * PK * PN), *C = malloc(sizeof(float) * PM * PN);
  for (int i = 0; i < PM * PK; i++) A[i] = (float)((i * 5) % 13) / 8.0f - 0.75f;
  for (int i = 0; i < PK * PN; i++) B[i] = (float)((i * 3) % 7) / 4.0f - 0.5f;
  vnc_gemm_set_provider("counting", counting_sgemm, counting_local);
  CHECK(strcmp(vnc_gemm_provider(), "counting") == 0);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      /* the same logical A (PM x PK) and B (PK x PN), stored transposed when ta/tb */
      vnc_matrix a = ta ? (vnc_matrix){A, 0, 1, PM, VNC_FLOAT32} : (vnc_matrix){A, 0, PK, 1, VNC_FLOAT32};
      vnc_matrix b = tb ? (vnc_matrix){B, 0, 1, PK, VNC_FLOAT32} : (vnc_matrix){B, 0, PN, 1, VNC_FLOAT32};
      vnc_matrix c = {C, 0, PN, 1, VNC_FLOAT32};
      for (int i = 0; i < PM * PN; i++) C[i] = 2.0f;
      provider_calls = 0;
      CHECK_OK(vnc_gemm(S, "addmm", 1, PM, PN, PK, 1.5, &a, &b, 0.5, &c));
      CHECK_OK(vnc_stream_synchronize(S));
      int ok = 1;
      for (int i = 0; i < PM; i++)
        for (int j = 0; j < PN; j++) {
          const double want = 1.5 * ref(A, ta ? 1 : PK, ta ? PM : 1, B, tb ? 1 : PN, tb ? PK : 1, i, j, PK) + 1.0;
          ok &= fabs(C[i * PN + j] - want) < 1e-3;
        }
      if (!ok) fprintf(stderr, "provider: trans_a %d trans_b %d wrong\n", ta, tb);
      CHECK(ok);
      CHECK(provider_calls > 1); /* tiled */
    }
  CHECK(local_calls > 0);
  vnc_gemm_set_provider(NULL, NULL, NULL);
  CHECK(strcmp(vnc_gemm_provider(), "openblas") == 0);
  free(A);
  free(B);
  free(C);
}

/* An epilogue copying finished rows of C (N columns) to D, doubled, and counting each row. */
typedef struct rows_ctx {
  const float *C;
  float *D;
  int64_t N;
  int *seen;
} rows_ctx;
static void double_rows(void *ctx, int64_t r0, int64_t r1) {
  rows_ctx *c = ctx;
  for (int64_t r = r0; r < r1; r++) {
    __atomic_fetch_add(&c->seen[r], 1, __ATOMIC_RELAXED);
    for (int64_t j = 0; j < c->N; j++) c->D[r * c->N + j] = 2.0f * c->C[r * c->N + j];
  }
}

/* vnc_gemm_fused: a batch of 2 products of 300 x 200 x 70 (several tiles each); the epilogue
 * sees every row of both batches exactly once, after its values are final. */
static void fused_epilogue(void) {
  enum { FB = 2, FM = 300, FN = 200, FK = 70 };
  float *A = malloc(sizeof(float) * FB * FM * FK), *B = malloc(sizeof(float) * FK * FN);
  float *C = malloc(sizeof(float) * FB * FM * FN), *D = malloc(sizeof(float) * FB * FM * FN);
  int *seen = calloc(FB * FM, sizeof(int));
  for (int i = 0; i < FB * FM * FK; i++) A[i] = (float)((i * 11) % 9) / 4.0f - 1.0f;
  for (int i = 0; i < FK * FN; i++) B[i] = (float)((i * 3) % 5) / 2.0f - 1.0f;
  vnc_matrix a = {A, FM * FK, FK, 1, VNC_FLOAT32}, b = {B, 0, FN, 1, VNC_FLOAT32}, c = {C, FM * FN, FN, 1, VNC_FLOAT32};
  rows_ctx ctx = {C, D, FN, seen};
  CHECK_OK(vnc_gemm_fused(S, "bmm", FB, FM, FN, FK, 1.0, &a, &b, 0.0, &c, double_rows, &ctx));
  CHECK_OK(vnc_stream_synchronize(S));
  int once = 1, ok = 1;
  for (int r = 0; r < FB * FM; r++) once &= seen[r] == 1;
  for (int bt = 0; bt < FB; bt++)
    for (int i = 0; i < FM; i++)
      for (int j = 0; j < FN; j++)
        ok &= fabs(D[(bt * FM + i) * FN + j] - 2.0 * ref(A + bt * FM * FK, FK, 1, B, FN, 1, i, j, FK)) < 1e-3;
  CHECK(once);
  CHECK(ok);
  free(A);
  free(B);
  free(C);
  free(D);
  free(seen);
}

int main(void) {
  CHECK_OK(vnc_stream_get(0, 0, &S));
  enum { M = 37, N = 29, K = 53 };
  static float A[M * K], At[K * M], B[K * N], C[M * N], C2[M * N * 2];
  for (int i = 0; i < M * K; i++) A[i] = (float)((i * 13) % 17) / 8.0f - 1.0f;
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++) At[k * M + i] = A[i * K + k];
  for (int i = 0; i < K * N; i++) B[i] = (float)((i * 7) % 11) / 4.0f - 1.0f;
  vnc_matrix a = {A, 0, K, 1, VNC_FLOAT32}, at = {At, 0, 1, M, VNC_FLOAT32}, b = {B, 0, N, 1, VNC_FLOAT32};
  vnc_matrix c = {C, 0, N, 1, VNC_FLOAT32};
  CHECK_OK(vnc_gemm(S, "mm", 1, M, N, K, 1.0, &a, &b, 0.0, &c));
  CHECK_OK(vnc_stream_synchronize(S));
  int ok = 1;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) ok &= fabs(C[i * N + j] - ref(A, K, 1, B, N, 1, i, j, K)) < 1e-4;
  CHECK(ok);
  /* transposed A, a strided (every other column) output, alpha/beta */
  for (int i = 0; i < M * N * 2; i++) C2[i] = 1.0f;
  vnc_matrix c2 = {C2, 0, 2 * N, 2, VNC_FLOAT32};
  CHECK_OK(vnc_gemm(S, "addmm", 1, M, N, K, 2.0, &at, &b, 0.5, &c2));
  CHECK_OK(vnc_stream_synchronize(S));
  ok = 1;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      ok &= fabs(C2[i * 2 * N + 2 * j] - (2.0 * ref(A, K, 1, B, N, 1, i, j, K) + 0.5)) < 1e-4;
      ok &= C2[i * 2 * N + 2 * j + 1] == 1.0f;
    }
  CHECK(ok);
  /* batch of 3 with a broadcast (batch stride 0) B, float16 operands: every element of every
   * batch against a direct sum (the values are small dyadic numbers, exact in float16) */
  static uint16_t ha[3 * 4 * 5], hb[5 * 6], hc[3 * 4 * 6];
  for (int i = 0; i < 60; i++) ha[i] = (uint16_t)(0x3C00 + (i % 3) * 0x400);      /* 1, 2, 4 */
  for (int i = 0; i < 30; i++) hb[i] = (uint16_t)((i / 6 + i % 6) % 2 ? 0x3800 : 0x3C00); /* 0.5 or 1 by (k, j) */
  vnc_matrix fa = {ha, 20, 5, 1, VNC_FLOAT16}, fb = {hb, 0, 6, 1, VNC_FLOAT16}, fc = {hc, 24, 6, 1, VNC_FLOAT16};
  CHECK_OK(vnc_gemm(S, "bmm", 3, 4, 6, 5, 1.0, &fa, &fb, 0.0, &fc));
  CHECK_OK(vnc_stream_synchronize(S));
  int all_ok = 1;
  for (int bt = 0; bt < 3; bt++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 6; j++) {
        float want = 0;
        for (int k = 0; k < 5; k++) want += half_to_float(ha[bt * 20 + i * 5 + k]) * half_to_float(hb[k * 6 + j]);
        all_ok &= half_to_float(hc[bt * 24 + i * 6 + j]) == want;
      }
  CHECK(all_ok);
  /* integers exactly */
  int64_t ia[4] = {1, 2, 3, 4}, ib[4] = {5, 6, 7, 8}, ic[4];
  vnc_matrix ma = {ia, 0, 2, 1, VNC_INT64}, mb = {ib, 0, 2, 1, VNC_INT64}, mc = {ic, 0, 2, 1, VNC_INT64};
  CHECK_OK(vnc_gemm(S, "mm", 1, 2, 2, 2, 1.0, &ma, &mb, 0.0, &mc));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(ic[0] == 19 && ic[1] == 22 && ic[2] == 43 && ic[3] == 50);
  /* K = 0 with beta 0: zeros */
  float z[4] = {7, 7, 7, 7};
  vnc_matrix mz = {z, 0, 2, 1, VNC_FLOAT32};
  CHECK_OK(vnc_gemm(S, "mm", 1, 2, 2, 0, 1.0, &a, &b, 0.0, &mz));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(z[0] == 0.0f && z[3] == 0.0f);
  vnc_matrix bad = {B, 0, N, 1, VNC_FLOAT64};
  CHECK(vnc_gemm(S, "mm", 1, M, N, K, 1.0, &a, &bad, 0.0, &c) == VNC_ERR_INVALID_ARGUMENT);
  provider_products();
  fused_epilogue();
  CHECK_DONE();
}
