/* The row hooks of vnc/nn_fused.h: for softmax, log_softmax, their backward, layer norm and
 * its backward (float32, whose rows are read and written in place, and float16, whose rows go
 * through float32 buffers), the prologue writes every row of the row inputs exactly once,
 * before the kernel reads it (the inputs start as NaN), the epilogue sees every output row
 * exactly once, only after its bytes are final (it copies each row, and the copies must equal
 * the output once the call returns; layer norm's mean and rstd too), and the outputs equal the
 * plain kernels' bit for bit. Row counts span several hook blocks and several pool ranges. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "kernels/internal.h"
#include "vnc/nn_fused.h"

static vnc_stream *S;

/* The epilogue copies finished rows (row_bytes each) of out, and of two per-row statistics
 * when set, and counts each row; the prologue copies rows of src[k] into the kernel's row
 * inputs in[k] (nin of them), and counts each row. */
typedef struct copy_ctx {
  const char *out, *mean, *rstd;
  char *copy, *mean_copy, *rstd_copy;
  int64_t row_bytes, stat_bytes;
  int *seen;
  const char *src[2];
  char *in[2];
  int nin;
  int *made;
} copy_ctx;

static void make_rows(void *ctx, int64_t r0, int64_t r1) {
  copy_ctx *c = ctx;
  for (int64_t r = r0; r < r1; r++) {
    __atomic_fetch_add(&c->made[r], 1, __ATOMIC_RELAXED);
    for (int k = 0; k < c->nin; k++)
      memcpy(c->in[k] + r * c->row_bytes, c->src[k] + r * c->row_bytes, (size_t)c->row_bytes);
  }
}

static void copy_rows(void *ctx, int64_t r0, int64_t r1) {
  copy_ctx *c = ctx;
  for (int64_t r = r0; r < r1; r++) {
    __atomic_fetch_add(&c->seen[r], 1, __ATOMIC_RELAXED);
    memcpy(c->copy + r * c->row_bytes, c->out + r * c->row_bytes, (size_t)c->row_bytes);
    if (c->mean) {
      memcpy(c->mean_copy + r * c->stat_bytes, c->mean + r * c->stat_bytes, (size_t)c->stat_bytes);
      memcpy(c->rstd_copy + r * c->stat_bytes, c->rstd + r * c->stat_bytes, (size_t)c->stat_bytes);
    }
  }
}

enum { SOFTMAX, LOG_SOFTMAX, SOFTMAX_BWD, LOG_SOFTMAX_BWD, LAYER_NORM, LAYER_NORM_BWD, KINDS };

/* Runs kind on M rows of N elements of dtype, with both hooks (ctx non-NULL) or without,
 * writing out (and, for layer norm, mean and rstd). */
static void run(int kind, int64_t M, int64_t N, int32_t dt, void *const in[5], void *out, void *mean, void *rstd,
                copy_ctx *ctx) {
  vnc_range_fn pro = ctx ? make_rows : NULL, fn = ctx ? copy_rows : NULL;
  vnc_rows a = {in[0], dt, M, N, 1, N, 1, 1}, b = {in[1], dt, M, N, 1, N, 1, 1}, o = {out, dt, M, N, 1, N, 1, 1};
  switch (kind) {
  case SOFTMAX:
  case LOG_SOFTMAX:
    CHECK_OK(vnc_softmax_fused(S, "softmax", kind == LOG_SOFTMAX, &a, &o, pro, fn, ctx));
    break;
  case SOFTMAX_BWD:
  case LOG_SOFTMAX_BWD:
    CHECK_OK(vnc_softmax_backward_fused(S, "softmax_backward", kind == LOG_SOFTMAX_BWD, &a, &b, &o, pro, fn, ctx));
    break;
  case LAYER_NORM:
    CHECK_OK(vnc_layer_norm_fused(S, "layer_norm", M, N, dt, in[0], in[1], in[2], 1e-5, out, mean, rstd, VNC_FLOAT32,
                                  pro, fn, ctx));
    break;
  default: /* dx only, and dx with dweight and dbias */
    CHECK_OK(vnc_layer_norm_backward_fused(S, "layer_norm_backward", M, N, dt, in[0], in[1], in[2], in[3], VNC_FLOAT32,
                                           in[4], out, N % 2 ? NULL : mean, N % 2 ? NULL : rstd, pro, fn, ctx));
  }
  CHECK_OK(vnc_stream_synchronize(S));
}

static void fill(void *p, int32_t dt, int64_t n, unsigned seed, float lo, float span) {
  float *f = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    f[i] = lo + span * (float)((seed >> 8) & 0xFFFF) / 65536.0f;
  }
  vnc_from_f32(p, dt, 1, f, n);
  free(f);
}

static void *fresh(int64_t bytes) { /* NaN patterns until written */
  void *p = malloc((size_t)bytes);
  memset(p, 0xFF, (size_t)bytes);
  return p;
}

static void one(int kind, int64_t M, int64_t N, int32_t dt) {
  const int64_t es = (int64_t)vnc_dtype_size(dt), bytes = M * N * es;
  /* layer norm: a/b: mean and rstd [M] float32; layer norm backward: dweight and dbias [N] */
  const int64_t side = kind == LAYER_NORM ? 4 * M : N * es;
  void *in[5]; /* x or grad or dy; weight or y or x; bias or mean; rstd; weight */
  for (int k = 0; k < 5; k++) in[k] = malloc((size_t)bytes);
  fill(in[0], dt, M * N, 1u + (unsigned)kind, -2.0f, 4.0f);
  fill(in[1], dt, M * N, 7u, kind == SOFTMAX_BWD ? 0.0f : -1.0f, 1.0f); /* softmax's y lies in [0, 1] */
  if (kind == LAYER_NORM) fill(in[2], dt, N, 9u, -1.0f, 2.0f);           /* bias */
  if (kind == LAYER_NORM_BWD) {                                           /* mean and rstd */
    fill(in[2], VNC_FLOAT32, M, 3u, -0.5f, 1.0f);
    fill(in[3], VNC_FLOAT32, M, 5u, 0.5f, 1.0f);
    fill(in[4], dt, N, 11u, -1.0f, 2.0f);
  }
  char *want = fresh(bytes), *got = fresh(bytes), *copy = fresh(bytes);
  char *a_want = fresh(side), *b_want = fresh(side), *a_got = fresh(side), *b_got = fresh(side);
  char *a_copy = fresh(side), *b_copy = fresh(side);
  int *seen = calloc((size_t)M, sizeof(int)), *made = calloc((size_t)M, sizeof(int));
  run(kind, M, N, dt, in, want, a_want, b_want, NULL);
  /* the row inputs (x; grad and y; dy and x) are NaN until the prologue writes their rows */
  const int nin = kind == SOFTMAX_BWD || kind == LOG_SOFTMAX_BWD || kind == LAYER_NORM_BWD ? 2 : 1;
  void *src[2] = {in[0], in[1]}, *rows_in[5] = {fresh(bytes), nin == 2 ? fresh(bytes) : in[1], in[2], in[3], in[4]};
  const int stats = kind == LAYER_NORM; /* per-row statistics the epilogue may read */
  copy_ctx ctx = {got, stats ? a_got : NULL, b_got, copy, a_copy, b_copy, N * es, 4, seen,
                  {src[0], src[1]}, {rows_in[0], rows_in[1]}, nin, made};
  run(kind, M, N, dt, rows_in, got, a_got, b_got, &ctx);
  int once = 1;
  for (int64_t r = 0; r < M; r++) once &= seen[r] == 1 && made[r] == 1;
  CHECK(once);
  CHECK(memcmp(got, want, (size_t)bytes) == 0);
  CHECK(memcmp(copy, got, (size_t)bytes) == 0);
  if (kind == LAYER_NORM || (kind == LAYER_NORM_BWD && N % 2 == 0)) {
    CHECK(memcmp(a_got, a_want, (size_t)side) == 0);
    CHECK(memcmp(b_got, b_want, (size_t)side) == 0);
  }
  if (stats) {
    CHECK(memcmp(a_copy, a_got, (size_t)side) == 0);
    CHECK(memcmp(b_copy, b_got, (size_t)side) == 0);
  }
  for (int k = 0; k < nin; k++) free(rows_in[k]);
  for (int k = 0; k < 5; k++) free(in[k]);
  char *bufs[] = {want, got, copy, a_want, b_want, a_got, b_got, a_copy, b_copy};
  for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) free(bufs[k]);
  free(seen);
  free(made);
}

int main(void) {
  CHECK_OK(vnc_stream_get(0, 0, &S));
  for (int kind = 0; kind < KINDS; kind++) {
    one(kind, 1000, 96, VNC_FLOAT32);   /* 170 rows per epilogue block: several blocks per range */
    one(kind, 700, 33, VNC_FLOAT16);    /* rows through float32 buffers; odd N: no dweight/dbias */
    one(kind, 3, 20000, VNC_FLOAT32);   /* long rows: one row per block */
  }
  /* an epilogue without dx to read is refused, with the op named */
  float x[4] = {0}, m[1] = {0}, r[1] = {1};
  int seen[1] = {0};
  copy_ctx ctx = {.seen = seen};
  CHECK(vnc_layer_norm_backward_fused(S, "layer_norm_backward", 1, 4, VNC_FLOAT32, x, x, m, r, VNC_FLOAT32, NULL, NULL,
                                      NULL, NULL, NULL, copy_rows, &ctx) == VNC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(vnc_last_error(), "layer_norm_backward") != NULL);
  CHECK(seen[0] == 0);
  CHECK_DONE();
}
