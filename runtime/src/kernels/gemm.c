/* GEMM: float32 through BLAS sgemm, OpenBLAS or an installed provider (other floating dtypes
 * packed to float32), integers by an exact int64 loop. BLAS runs single-threaded on tiles of
 * the product spread over the runtime's pool, so the two never oversubscribe the cores. */
#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "vnc/device.h"
#include "vnc/gemm.h"

typedef struct gemm_task {
  int64_t batch, M, N, K;
  double alpha, beta;
  vnc_matrix A, B, C;
  vnc_range_fn epilogue; /* see vnc_gemm_fused */
  void *epilogue_ctx;
} gemm_task;

/* BLAS itself runs single-threaded: products are split into tiles run on the runtime's pool
 * (see vnc_sgemm), whose dynamic chunks keep every core busy when one thread is descheduled,
 * where BLAS's own threads (a static split, spinning while idle) stall and oversubscribe. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single(void) { scipy_openblas_set_num_threads(1); }

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* A float32 view of matrix (rows x cols) of batch b usable by BLAS: direct when the dtype
 * is float32 and one stride is 1, else packed row-major into tmp. */
static const float *operand(const vnc_matrix *m, int64_t b, int64_t rows, int64_t cols, float *tmp,
                            int *trans, blasint *ld) {
  const int64_t es = (int64_t)vnc_dtype_size(m->dtype);
  char *base = (char *)m->data + b * m->batch_stride * es;
  if (m->dtype == VNC_FLOAT32) {
    if ((m->col_stride == 1 || cols == 1) && (rows == 1 || m->row_stride >= max1(cols))) {
      *trans = 0;
      *ld = (blasint)(rows == 1 ? max1(cols) : m->row_stride);
      return (const float *)base;
    }
    if ((m->row_stride == 1 || rows == 1) && (cols == 1 || m->col_stride >= max1(rows))) {
      *trans = 1;
      *ld = (blasint)(cols == 1 ? max1(rows) : m->col_stride);
      return (const float *)base;
    }
  }
  vnc_loop_fn conv = vnc_copy_loop(VNC_FLOAT32, m->dtype);
  for (int64_t r = 0; r < rows; r++) {
    char *ptrs[2] = {(char *)(tmp + r * cols), base + r * m->row_stride * es};
    const int64_t st[2] = {4, m->col_stride * es};
    conv(NULL, ptrs, st, cols, 0);
  }
  *trans = 0;
  *ld = (blasint)max1(cols);
  return tmp;
}

static void run_float(gemm_task *t) {
  const int64_t M = t->M, N = t->N, K = t->K;
  float *ta = malloc(sizeof(float) * (size_t)max1(M * K));
  float *tb = malloc(sizeof(float) * (size_t)max1(K * N));
  float *tc = malloc(sizeof(float) * (size_t)max1(M * N));
  const int64_t es = (int64_t)vnc_dtype_size(t->C.dtype);
  for (int64_t b = 0; b < t->batch; b++) {
    int trans_a, trans_b;
    blasint lda, ldb;
    const float *a = operand(&t->A, b, M, K, ta, &trans_a, &lda);
    const float *bb = operand(&t->B, b, K, N, tb, &trans_b, &ldb);
    char *cbase = (char *)t->C.data + b * t->C.batch_stride * es;
    int direct = t->C.dtype == VNC_FLOAT32 && (t->C.col_stride == 1 || N == 1) &&
                 (M == 1 || t->C.row_stride >= max1(N));
    float *c = direct ? (float *)cbase : tc;
    blasint ldc = (blasint)(direct ? (M == 1 ? max1(N) : t->C.row_stride) : max1(N));
    if (!direct && t->beta != 0.0) { /* C's current values, as float32 */
      vnc_loop_fn in = vnc_copy_loop(VNC_FLOAT32, t->C.dtype);
      for (int64_t r = 0; r < M; r++) {
        char *ptrs[2] = {(char *)(tc + r * N), cbase + r * t->C.row_stride * es};
        const int64_t st[2] = {4, t->C.col_stride * es};
        in(NULL, ptrs, st, N, 0);
      }
    }
    if (direct) {
      vnc_sgemm_rows(trans_a, trans_b, M, N, K, (float)t->alpha, a, lda, bb, ldb, (float)t->beta, c, ldc, t->epilogue,
                     t->epilogue_ctx, b * M);
      continue;
    }
    vnc_sgemm(trans_a, trans_b, M, N, K, (float)t->alpha, a, lda, bb, ldb, (float)t->beta, c, ldc);
    vnc_loop_fn out = vnc_copy_loop(t->C.dtype, VNC_FLOAT32);
    for (int64_t r = 0; r < M; r++) {
      char *ptrs[2] = {cbase + r * t->C.row_stride * es, (char *)(tc + r * N)};
      const int64_t st[2] = {t->C.col_stride * es, 4};
      out(NULL, ptrs, st, N, 0);
    }
    if (t->epilogue) t->epilogue(t->epilogue_ctx, b * M, (b + 1) * M);
  }
  free(ta);
  free(tb);
  free(tc);
}

static void run_int(gemm_task *t) {
  const int64_t es = (int64_t)vnc_dtype_size(t->C.dtype);
  const int32_t dt = t->C.dtype;
  const int64_t alpha = (int64_t)t->alpha, beta = (int64_t)t->beta;
  for (int64_t b = 0; b < t->batch; b++) {
    const char *A = (const char *)t->A.data + b * t->A.batch_stride * es;
    const char *B = (const char *)t->B.data + b * t->B.batch_stride * es;
    char *C = (char *)t->C.data + b * t->C.batch_stride * es;
    for (int64_t i = 0; i < t->M; i++)
      for (int64_t j = 0; j < t->N; j++) {
        int64_t acc = 0, v;
        for (int64_t k = 0; k < t->K; k++) {
          int64_t x, y;
          vnc_copy_loop(VNC_INT64, dt)(NULL, (char *[]){(char *)&x, (char *)A + (i * t->A.row_stride + k * t->A.col_stride) * es},
                                       (const int64_t[]){8, es}, 1, 0);
          vnc_copy_loop(VNC_INT64, dt)(NULL, (char *[]){(char *)&y, (char *)B + (k * t->B.row_stride + j * t->B.col_stride) * es},
                                       (const int64_t[]){8, es}, 1, 0);
          acc += x * y;
        }
        char *c = C + (i * t->C.row_stride + j * t->C.col_stride) * es;
        int64_t old = 0;
        if (beta != 0) vnc_copy_loop(VNC_INT64, dt)(NULL, (char *[]){(char *)&old, c}, (const int64_t[]){8, es}, 1, 0);
        v = alpha * acc + beta * old;
        vnc_store_i64[dt](c, v);
      }
    if (t->epilogue) t->epilogue(t->epilogue_ctx, b * t->M, (b + 1) * t->M);
  }
}

static vnc_status gemm_run(void *p) {
  gemm_task *t = p;
  if (vnc_dtype_is_floating(t->C.dtype)) run_float(t);
  else run_int(t);
  return VNC_OK;
}

vnc_status vnc_gemm(vnc_stream *s, const char *op, int64_t batch, int64_t M, int64_t N, int64_t K,
                    double alpha, const vnc_matrix *A, const vnc_matrix *B, double beta,
                    const vnc_matrix *C) {
  return vnc_gemm_fused(s, op, batch, M, N, K, alpha, A, B, beta, C, NULL, NULL);
}

vnc_status vnc_gemm_fused(vnc_stream *s, const char *op, int64_t batch, int64_t M, int64_t N, int64_t K,
                          double alpha, const vnc_matrix *A, const vnc_matrix *B, double beta,
                          const vnc_matrix *C, vnc_range_fn epilogue, void *epilogue_ctx) {
  if (A->dtype != C->dtype || B->dtype != C->dtype)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: operands must share one dtype, got %s, %s and %s", op,
                         vnc_dtype_name(A->dtype), vnc_dtype_name(B->dtype), vnc_dtype_name(C->dtype));
  VNC_CHECK_COMPUTED(op, C->dtype);
  if (vnc_dtype_is_complex(C->dtype) || C->dtype == VNC_BOOL)
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "\"%s\" not implemented for '%s'", op, vnc_dtype_name(C->dtype));
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || M < 0 || N < 0 || K < 0 || batch < 0)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: matrix dims must lie in 0 to 2^31-1", op);
  if (batch == 0 || M == 0 || N == 0) return VNC_OK;
  gemm_task t = {batch, M, N, K, alpha, beta, *A, *B, *C, epilogue, epilogue_ctx};
  return vnc_launch(s, op, gemm_run, &t, sizeof t, NULL);
}

/* Tiles of C: rows in blocks of TILE_M; columns in blocks of TILE_N only when there are few
 * row blocks. The split depends on the shape alone (never on the thread count), and each
 * element is the same K-ordered product whichever tile computes it. */
#define TILE_M 128
#define TILE_N 128

typedef struct sgemm_args {
  int trans_a, trans_b;
  int64_t M, N, K, tm, tn, ntn;
  float alpha, beta;
  const float *A, *B;
  float *C;
  int64_t lda, ldb, ldc;
  vnc_range_fn epilogue; /* called on rows row0 + [i0, i0 + m) of each finished tile */
  void *epilogue_ctx;
  int64_t row0;
} sgemm_args;

/* The float32 GEMM provider: the built-in OpenBLAS unless vnc_gemm_set_provider installed
 * another (set before the first GEMM; read without a lock afterwards). */
static struct {
  const char *name;
  vnc_sgemm_fn sgemm;
  int (*set_local_threads)(int);
} provider = {"openblas", NULL, NULL};

void vnc_gemm_set_provider(const char *name, vnc_sgemm_fn sgemm, int (*set_local_threads)(int)) {
  provider.name = sgemm ? name : "openblas";
  provider.sgemm = sgemm;
  provider.set_local_threads = sgemm ? set_local_threads : NULL;
}

const char *vnc_gemm_provider(void) { return provider.name; }

/* One tile, m x n at (i0, j0) of C, by the installed provider or OpenBLAS. */
static void sgemm_tile(const sgemm_args *g, int64_t i0, int64_t j0, int64_t m, int64_t n) {
  const float *a = g->trans_a ? g->A + i0 : g->A + i0 * g->lda;
  const float *b = g->trans_b ? g->B + j0 * g->ldb : g->B + j0;
  float *c = g->C + i0 * g->ldc + j0;
  if (provider.sgemm) { /* column-major interface: C^T = op(B)^T op(A)^T */
    const int mi = (int)m, ni = (int)n, k = (int)g->K, lda = (int)g->lda, ldb = (int)g->ldb, ldc = (int)g->ldc;
    provider.sgemm(g->trans_b ? "T" : "N", g->trans_a ? "T" : "N", &ni, &mi, &k, &g->alpha, b, &ldb, a, &lda, &g->beta, c,
                   &ldc);
  } else {
    scipy_cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                      (blasint)m, (blasint)n, (blasint)g->K, g->alpha, a, (blasint)g->lda, b, (blasint)g->ldb, g->beta, c,
                      (blasint)g->ldc);
  }
}

static void sgemm_tiles(void *ctx, int64_t t0, int64_t t1) {
  const sgemm_args *g = ctx;
  /* a provider's BLAS runs on one thread here; the caller's own setting comes back afterwards
   * (a small product runs on the user's thread, whose later CPU products keep their threads) */
  const int prev = provider.set_local_threads ? provider.set_local_threads(1) : 0;
  for (int64_t t = t0; t < t1; t++) {
    const int64_t i0 = (t / g->ntn) * g->tm, j0 = (t % g->ntn) * g->tn;
    const int64_t m = g->M - i0 < g->tm ? g->M - i0 : g->tm, n = g->N - j0 < g->tn ? g->N - j0 : g->tn;
    sgemm_tile(g, i0, j0, m, n);
    if (g->epilogue) g->epilogue(g->epilogue_ctx, g->row0 + i0, g->row0 + i0 + m);
  }
  if (provider.set_local_threads) provider.set_local_threads(prev);
}

void vnc_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  vnc_sgemm_rows(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL, 0);
}

void vnc_sgemm_rows(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc, vnc_range_fn epilogue,
                    void *epilogue_ctx, int64_t row0) {
  pthread_once(&blas_once, blas_single);
  sgemm_args g = {trans_a, trans_b, M,  N,   K,   TILE_M, N,           1,           alpha, beta,
                  A,       B,       C,  lda, ldb, ldc,    epilogue,    epilogue_ctx, row0};
  if ((double)M * (double)N * (double)K > (double)(1 << 28)) g.tm = 2 * TILE_M; /* repack B less often */
  int64_t ntm = (M + g.tm - 1) / g.tm;
  if (ntm < 4 && N > TILE_N && !epilogue) { /* an epilogue needs whole rows */
    g.tn = TILE_N;
    g.ntn = (N + TILE_N - 1) / TILE_N;
  }
  if (ntm * g.ntn < 4 && 2 * M * N * K >= (int64_t)1 << 23) {
    /* few rows (a weight gradient's out x in): 4 row tiles of a multiple of 8 rows, so 2 or
     * 4 threads share the work evenly (3 tiles on 2 threads leave one idle a third of it) */
    const int64_t want = (4 + g.ntn - 1) / g.ntn;
    g.tm = ((M + want - 1) / want + 7) / 8 * 8;
    ntm = (M + g.tm - 1) / g.tm;
  }
  const int64_t tiles = ntm * g.ntn;
  /* Each tile must be worth a task: about 1 MFLOP. */
  if (tiles == 1 || 2 * M * N * K < (int64_t)1 << 21) sgemm_tiles(&g, 0, tiles);
  else vnc_parallel_for(tiles, 1, sgemm_tiles, &g);
}
