/* Sort, topk, searchsorted, randperm, multinomial and scans: stability on duplicates, line
 * lengths around the insertion/radix switch, NaN and -0.0 order, strided lines, errors. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "check.h"

static vnc_stream *S;

/* Sorts n int32 values (few distinct) as one line and checks the stable order. */
static int sorted_ok(int64_t n, int descending) {
  int32_t *x = malloc(sizeof(int32_t) * (size_t)n), *v = malloc(sizeof(int32_t) * (size_t)n);
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) x[i] = (int32_t)((i * 2654435761u) % 7) - 3;
  vnc_tensor tx = vnc_tensor_contiguous(x, VNC_INT32, 1, &n), tv = vnc_tensor_contiguous(v, VNC_INT32, 1, &n);
  vnc_tensor ti = vnc_tensor_contiguous(idx, VNC_INT64, 1, &n);
  unsigned char *used = calloc((size_t)n, 1);
  int ok = vnc_sort(S, "sort", &tx, 0, descending, &tv, &ti) == VNC_OK && vnc_stream_synchronize(S) == VNC_OK;
  for (int64_t i = 0; ok && i < n; i++) {
    ok &= idx[i] >= 0 && idx[i] < n && !used[idx[i]]; /* the indices are a permutation */
    if (!ok) break;
    used[idx[i]] = 1;
    ok &= v[i] == x[idx[i]];
    if (i > 0) {
      ok &= descending ? v[i - 1] >= v[i] : v[i - 1] <= v[i];
      if (v[i - 1] == v[i]) ok &= idx[i - 1] < idx[i]; /* stable */
    }
  }
  free(used);
  free(x);
  free(v);
  free(idx);
  return ok;
}

int main(void) {
  CHECK_OK(vnc_stream_get(0, 0, &S));
  const int64_t lens[] = {1, 2, 31, 32, 33, 255, 256, 257, 4097, 1 << 20};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    CHECK(sorted_ok(lens[i], 0));
    CHECK(sorted_ok(lens[i], 1));
  }

  /* NaN last (first descending), -0.0 equal to 0.0 (original order kept), exact bits out. */
  float f[8] = {NAN, 1.0f, -0.0f, -INFINITY, 0.0f, NAN, INFINITY, -2.0f}, fv[8];
  int64_t fi[8], n8 = 8;
  vnc_tensor tf = vnc_tensor_contiguous(f, VNC_FLOAT32, 1, &n8), tfv = vnc_tensor_contiguous(fv, VNC_FLOAT32, 1, &n8);
  vnc_tensor tfi = vnc_tensor_contiguous(fi, VNC_INT64, 1, &n8);
  CHECK_OK(vnc_sort(S, "sort", &tf, -1, 0, &tfv, &tfi));
  CHECK_OK(vnc_stream_synchronize(S));
  const int64_t asc[8] = {3, 7, 2, 4, 1, 6, 0, 5};
  for (int i = 0; i < 8; i++) CHECK(fi[i] == asc[i]);
  CHECK(signbit(fv[2]) && !signbit(fv[3]));
  CHECK_OK(vnc_sort(S, "sort", &tf, -1, 1, &tfv, &tfi));
  CHECK_OK(vnc_stream_synchronize(S));
  const int64_t desc[8] = {0, 5, 6, 1, 2, 4, 7, 3};
  for (int i = 0; i < 8; i++) CHECK(fi[i] == desc[i]);

  /* Sort along dim 0 of a 3x4 matrix read transposed (strided lines), in place. */
  int64_t m[12], m0[12], sz[2] = {3, 4};
  for (int i = 0; i < 12; i++) m0[i] = m[i] = (i * 5) % 7;
  vnc_tensor tm = vnc_tensor_contiguous(m, VNC_INT64, 2, sz);
  CHECK_OK(vnc_sort(S, "sort", &tm, 0, 0, &tm, NULL));
  CHECK_OK(vnc_stream_synchronize(S));
  for (int c = 0; c < 4; c++) {
    CHECK(m[c] <= m[4 + c] && m[4 + c] <= m[8 + c]);
    /* the same values as the column had: each original value matched once */
    int matched[3] = {0, 0, 0};
    for (int r = 0; r < 3; r++)
      for (int q = 0; q < 3; q++)
        if (!matched[q] && m[4 * q + c] == m0[4 * r + c]) {
          matched[q] = 1;
          break;
        }
    CHECK(matched[0] && matched[1] && matched[2]);
  }

  /* topk: the 2 largest, ties in original order. */
  float tk[6] = {1, 5, 5, 2, 5, 0}, kv[2];
  int64_t ki[2], n6 = 6, k2 = 2;
  vnc_tensor ttk = vnc_tensor_contiguous(tk, VNC_FLOAT32, 1, &n6), tkv = vnc_tensor_contiguous(kv, VNC_FLOAT32, 1, &k2);
  vnc_tensor tki = vnc_tensor_contiguous(ki, VNC_INT64, 1, &k2);
  CHECK_OK(vnc_topk(S, "topk", &ttk, 0, 2, 1, &tkv, &tki));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(kv[0] == 5 && kv[1] == 5 && ki[0] == 1 && ki[1] == 2);

  /* searchsorted left/right, NaN to the end, through a sorter. */
  float bd[4] = {3, 1, 2, 2}, q[4] = {2, 0, 5, NAN};
  int64_t sorter[4] = {1, 2, 3, 0}, pos[4], n4 = 4;
  vnc_tensor tb = vnc_tensor_contiguous(bd, VNC_FLOAT32, 1, &n4), tq = vnc_tensor_contiguous(q, VNC_FLOAT32, 1, &n4);
  vnc_tensor ts = vnc_tensor_contiguous(sorter, VNC_INT64, 1, &n4), tp = vnc_tensor_contiguous(pos, VNC_INT64, 1, &n4);
  CHECK_OK(vnc_searchsorted(S, "searchsorted", &tb, &tq, &ts, 0, &tp));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(pos[0] == 1 && pos[1] == 0 && pos[2] == 4 && pos[3] == 4);
  CHECK_OK(vnc_searchsorted(S, "searchsorted", &tb, &tq, &ts, 1, &tp));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(pos[0] == 3 && pos[1] == 0 && pos[2] == 4 && pos[3] == 4);

  /* randperm is a permutation. */
  enum { P = 1000 };
  static int64_t perm[P];
  int64_t np = P;
  vnc_tensor tperm = vnc_tensor_contiguous(perm, VNC_INT64, 1, &np);
  CHECK_OK(vnc_randperm(S, "randperm", &tperm, 42, 0));
  CHECK_OK(vnc_stream_synchronize(S));
  static int seen[P];
  int perm_ok = 1;
  for (int i = 0; i < P; i++) perm_ok &= perm[i] >= 0 && perm[i] < P && !seen[perm[i]]++;
  CHECK(perm_ok);

  /* multinomial: zero-probability categories never drawn; without replacement no repeats;
   * a negative probability fails the task. */
  float pr[5] = {0, 1, 0, 3, 2};
  int64_t draws[400], n5 = 5, nd = 400, k3 = 3, nk[3];
  vnc_tensor tpr = vnc_tensor_contiguous(pr, VNC_FLOAT32, 1, &n5), tdr = vnc_tensor_contiguous(draws, VNC_INT64, 1, &nd);
  CHECK_OK(vnc_multinomial(S, "multinomial", &tpr, 400, 1, 0, &tdr, 1, 0));
  vnc_tensor tnk = vnc_tensor_contiguous(nk, VNC_INT64, 1, &k3);
  CHECK_OK(vnc_multinomial(S, "multinomial", &tpr, 3, 0, 1, &tnk, 1, 400));
  CHECK_OK(vnc_stream_synchronize(S));
  int draws_ok = 1;
  for (int i = 0; i < 400; i++) draws_ok &= draws[i] == 1 || draws[i] == 3 || draws[i] == 4;
  CHECK(draws_ok);
  CHECK(nk[0] != nk[1] && nk[1] != nk[2] && nk[0] != nk[2] && pr[nk[0]] > 0 && pr[nk[1]] > 0 && pr[nk[2]] > 0);
  pr[2] = -1;
  CHECK_OK(vnc_multinomial(S, "multinomial", &tpr, 3, 0, 1, &tnk, 1, 0));
  CHECK(vnc_stream_synchronize(S) == VNC_ERR_KERNEL);

  /* cumsum of int8 into int64 along dim 1 of a [2, 70] matrix (tiles of 64 lines: dim 0 scan). */
  enum { R = 2, C = 70 };
  int8_t a8[R * C];
  int64_t cs[R * C], sz2[2] = {R, C};
  for (int i = 0; i < R * C; i++) a8[i] = (int8_t)(100 + i);
  vnc_tensor ta8 = vnc_tensor_contiguous(a8, VNC_INT8, 2, sz2), tcs = vnc_tensor_contiguous(cs, VNC_INT64, 2, sz2);
  CHECK_OK(vnc_scan(S, "cumsum", VNC_SCAN_SUM, &ta8, 1, &tcs));
  CHECK_OK(vnc_stream_synchronize(S));
  int scan_ok = 1;
  for (int r = 0; r < R; r++) {
    int64_t acc = 0;
    for (int c = 0; c < C; c++) scan_ok &= cs[r * C + c] == (acc += a8[r * C + c]);
  }
  CHECK_OK(vnc_scan(S, "cumsum", VNC_SCAN_SUM, &ta8, 0, &tcs));
  CHECK_OK(vnc_stream_synchronize(S));
  for (int c = 0; c < C; c++) scan_ok &= cs[c] == a8[c] && cs[C + c] == a8[c] + a8[C + c];
  CHECK(scan_ok);

  /* logcumsumexp and logsumexp with infinities. */
  float lx[4] = {-INFINITY, 0.0f, 0.0f, INFINITY}, ly[4], lr;
  vnc_tensor tlx = vnc_tensor_contiguous(lx, VNC_FLOAT32, 1, &n4), tly = vnc_tensor_contiguous(ly, VNC_FLOAT32, 1, &n4);
  CHECK_OK(vnc_scan(S, "logcumsumexp", VNC_SCAN_LOGSUMEXP, &tlx, 0, &tly));
  int64_t one = 1, sz14[2] = {1, 3};
  vnc_tensor tl2 = vnc_tensor_contiguous(lx + 1, VNC_FLOAT32, 2, sz14), tlr = vnc_tensor_contiguous(&lr, VNC_FLOAT32, 1, &one);
  CHECK_OK(vnc_logsumexp(S, "logsumexp", &tl2, &tlr));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(ly[0] == -INFINITY && ly[1] == 0.0f && fabsf(ly[2] - logf(2.0f)) < 1e-6f && ly[3] == INFINITY);
  CHECK(lr == INFINITY);

  /* Refused: complex input. */
  vnc_tensor tc = tf;
  tc.dtype = VNC_COMPLEX64;
  CHECK(vnc_sort(S, "sort", &tc, 0, 0, &tc, NULL) == VNC_ERR_UNSUPPORTED);
  CHECK_DONE();
}
